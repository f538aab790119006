"""Prepare a run and train its S models per level, each in its own seeded job.

Data flow: config -> data + audit design + canaries (saved in the run directory) -> one job per group of
models of a level (:func:`group_size`) through an :class:`~harness.run.executors.Executor` -> each model trains on
``all non-audit samples + the audit samples it is a member of + the canaries' extra samples``,
queries the served model on the audit samples under every query augmentation, and writes its
signals atomically. Finished models are skipped when the same command runs again.
"""

from __future__ import annotations

import os
import platform
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from canaries.base import CanaryContext
from defenses.base import Defense, FitContext, LabeledImages, ServedModel
from harness.core.accuracy import pack_correct
from harness.core.version import MODELS_VERSION, __version__
from harness.run import plugin_errors
from harness.core.config import ConfigError, ExperimentConfig
from harness.core.data import AugmentSpec, DataError, ImageDataset, load_dataset
from harness.core.design import AuditDesign, design_from_tree, make_design, paper_rng_tree
from harness.run.executors import Executor
from harness.plugins import make_defense, resolve  # noqa: F401 (make_defense: imported from here too)
from harness.run.fingerprint import fingerprint_of, plumbing_params, run_fingerprint, trained_config  # noqa: F401
from harness.run.runstore import LevelDesign, RunDir


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"run.device={device} (--device) asked for, but torch sees no CUDA device")
        index = device.partition(":")[2]
        if index and int(index) >= torch.cuda.device_count():
            raise ConfigError(f"run.device={device} (--device) asked for, but torch sees {torch.cuda.device_count()} "
                              "CUDA device(s)")
    if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigError("run.device=mps (--device) asked for, but torch sees no MPS device (Apple GPU)")
    return device


def configure_determinism(device: str, deterministic: bool) -> None:
    """On CUDA, the paper's setting (``base.setup_seeds``): ``CUBLAS_WORKSPACE_CONFIG=:4096:8``,
    ``torch.use_deterministic_algorithms(True)``, cuDNN benchmark off and deterministic on; with
    ``deterministic`` False, the fast nondeterministic kernels. On CPU nothing is changed: the CPU
    kernels used here are deterministic for a fixed thread count. Call before the first CUDA op of
    the process (the cuBLAS workspace setting is read when cuBLAS starts)."""
    if not device.startswith("cuda"):
        return
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.benchmark = not deterministic
    torch.backends.cudnn.deterministic = deterministic


def global_rng_seed(seed: int) -> int:
    """The seed of the global RNGs while model ``seed`` trains: derived from it, so that the global
    stream is not the one ``init_network`` draws the initialization from (``torch.manual_seed(seed)``)."""
    return int(np.random.SeedSequence([seed, 0x6106A1]).generate_state(1)[0])


def seed_global_rngs(seed: int) -> None:
    """Seed torch's global RNG (every device), numpy's legacy global RNG and Python's ``random`` from
    a model's seed (:func:`global_rng_seed`), right before the defense's ``fit``: a plugin that draws
    from global state (``torch.randn``, an ``nn.Linear`` built outside ``init_network``,
    ``np.random.rand``) trains the same model whatever ran before it in the process, on every run and
    resume, with any number of workers. The built-in defenses draw from their own seeded generators
    and are unaffected."""
    g = global_rng_seed(seed)
    torch.manual_seed(g)
    np.random.seed(g)
    random.seed(g)


def check_defense_config(defense: Defense, cfg: ExperimentConfig) -> None:
    """The defense's own check of the resolved config (``Defense.check_config``), as a ConfigError."""
    try:
        defense.check_config(cfg)
    except ValueError as e:
        raise ConfigError(f"{cfg.defense}: {e}") from None


def sample_canaries(cfg: ExperimentConfig, defense: Defense) -> list[str]:
    """The sample-level canaries: ``audit.canary`` if set, else the defense's default(s)."""
    chosen = cfg.audit.canary if cfg.audit.canary is not None else defense.default_canary
    names = [chosen] if isinstance(chosen, str) else list(chosen)
    if "none" in names:
        raise ConfigError("the sample level needs a canary other than 'none' (that is the population level)")
    return list(dict.fromkeys(names))


def experiments(cfg: ExperimentConfig, defense: Defense) -> list[tuple[str, str]]:
    """(experiment name, canary) pairs to run: ``population`` audits the samples as they are;
    each sample-level canary is its own experiment ``sample-<canary>`` with the same design."""
    out = []
    if cfg.run.level in ("population", "both"):
        out.append(("population", "none"))
    if cfg.run.level in ("sample", "both"):
        out += [(f"sample-{c}", c) for c in sample_canaries(cfg, defense)]
    return out


def level_of(experiment: str) -> str:
    """``population`` or ``sample`` for an experiment name."""
    return "population" if experiment == "population" else "sample"


def model_seed(seed: int, index: int, rng: str = "harness", num_models: int = 0) -> int:
    """Seed of model ``index``, the same in every experiment (population and each sample level), so
    that population vs sample level is a paired comparison, as in the paper (seed s + 1 for shadow
    model s in every experiment). ``harness``: ``SeedSequence([seed, index])``; ``paper``: the
    paper code's ``get_setting_seed(g, i, M) = g (M + 1) + i + 1``."""
    if rng == "paper":
        return seed * (num_models + 1) + index + 1
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def defense_slug(defense: str) -> str:
    """The defense's name in file names: a built-in's name, a file plugin's class name."""
    return Path(defense.rpartition(":")[2] or defense).name


def default_run_dir(cfg: ExperimentConfig, fingerprint: str) -> Path:
    return Path(cfg.run.out) / f"{defense_slug(cfg.defense)}-{cfg.preset}-{fingerprint[:12]}"


def population_indices(cfg: ExperimentConfig, data: ImageDataset) -> np.ndarray:
    """The ``audit.population_samples`` test images every model is also queried on (RMIA's z):
    a prefix of a seeded permutation of the test set. No model trains on a test image."""
    z = cfg.audit.population_samples
    if z > len(data.y_test):
        raise ConfigError(f"audit.population_samples {z} is larger than the test set ({len(data.y_test)} images)")
    order = np.random.default_rng(np.random.SeedSequence([cfg.seed, 0x707])).permutation(len(data.y_test))
    return np.sort(order[:z]).astype(np.int64)


def build_level(cfg: ExperimentConfig, data: ImageDataset, level: str, canary: str,
                base_dir: str | None = None) -> LevelDesign:
    """The audit design (shared by every level) and this level's canaries, all from ``cfg.seed``
    (with ``audit.rng: paper``, from the paper code's RNG tree, canary draws included). ``base_dir``:
    the folder relative paths in canary parameters are read from (:func:`creation_folder`; default
    the current one)."""
    pool = len(data.y_train)
    paper = None
    if cfg.audit.rng == "paper":
        if not 0 < cfg.audit.size <= pool:
            raise ConfigError(f"audit size {cfg.audit.size} must be between 1 and the training pool size {pool}")
        if cfg.audit.models % 2:
            raise ConfigError(f"the number of models must be even, got {cfg.audit.models}")
        tree = paper_rng_tree(cfg.seed, pool, cfg.audit.models, data.num_classes)
        design: AuditDesign = design_from_tree(tree, cfg.audit.size)
        paper = tree.draws(design.audit_indices)
    else:
        design = make_design(pool, cfg.audit.size, cfg.audit.models, cfg.seed)
    params = cfg.audit.canary_params.get(canary, {}) if level_of(level) == "sample" else {}
    canaries, info = make_canaries(cfg, data, canary, params, design.audit_indices, paper, base_dir)
    return LevelDesign(level=level, canary=canary, design=design, canaries=canaries,
                       population_indices=population_indices(cfg, data), canary_info=info)


def make_canaries(cfg: ExperimentConfig, data: ImageDataset, canary: str, params: dict[str, Any], idx: np.ndarray,
                  paper: Any = None, base_dir: str | None = None) -> tuple[Any, dict[str, Any]]:
    """The ``canary`` generator's rewrite of the pool samples ``idx`` with ``params``, from its own
    seeded stream (``SeedSequence([seed, 0xCA, name])``), and what it records (``describe()``, with
    the parameters); a generator's refusal is a ConfigError."""
    from harness.run.runstore import ArrayCache

    gen_cls = resolve("canaries", canary)
    ctx = CanaryContext(
        num_classes=data.num_classes,
        rng=np.random.default_rng(np.random.SeedSequence([cfg.seed, 0xCA, *canary.encode()])),
        pool_indices=idx,
        data_dir=cfg.data.path if cfg.data.name != "digits" else None,
        paper=paper,
        pool_x=data.x_train,
        pool_y=data.y_train,
        data_fingerprint=data.fingerprint(),
        device=resolve_device(cfg.run.device),
        store=ArrayCache(Path(cfg.run.out) / ".cache"),
        download=cfg.data.download and cfg.data.name == "cifar10",
        base_dir=base_dir or os.getcwd(),
    )
    try:
        gen = gen_cls(**params)
        canaries = gen.apply(data.x_train[idx], data.y_train[idx], ctx)
        info = gen.describe()
    except (TypeError, ValueError) as e:
        raise ConfigError(f"canary {canary!r}: {e}") from None
    if params:
        info = {"params": dict(params), **info}
    return canaries, info


def _saved_manifest(run_dir: Path | None) -> dict[str, Any]:
    """The manifest of an existing run directory, or {} (none, or unreadable: :meth:`RunDir.init` repairs it)."""
    if run_dir is None or not (run_dir / "manifest.json").is_file():
        return {}
    try:
        return RunDir(run_dir).load_manifest()
    except ConfigError:
        return {}


def creation_folder(saved: dict[str, Any]) -> str:
    """The folder a run was created in (its manifest's ``cwd``; the current folder for a new run, or
    for one made before the field): relative paths in its canary parameters (e.g.
    ``audit.canary_params.ood.source``) are read from there, wherever a later command runs. Those
    paths stay as typed in config.json, because the run fingerprint hashes them
    (docs/usage.md, Run directories)."""
    cwd = saved.get("cwd")
    return cwd if isinstance(cwd, str) and os.path.isabs(cwd) else os.getcwd()


def load_run_data(cfg: ExperimentConfig, saved: dict[str, Any]) -> ImageDataset:
    """The dataset of ``cfg``. For an existing run (``saved``: its manifest, with the data
    fingerprint) of a dataset read from a path (cifar10, npz): looked up without downloading, and
    checked against that fingerprint, so that a dataset that moved is one line naming the fix
    (``--data-dir``) rather than a download into the old place or a "different run" refusal."""
    recorded = saved.get("data_fingerprint")
    if not isinstance(recorded, str) or cfg.data.name == "digits":
        return load_dataset(cfg.data, cfg.seed)
    fix = (f"pass --data-dir (data.path) with its new location (checked against the run's data fingerprint "
           f"{recorded[:12]})")
    try:
        data = load_dataset(cfg.data.model_copy(update={"download": False}), cfg.seed)
    except DataError as e:
        raise DataError(f"data moved: this run's {cfg.data.name} dataset is no longer at {cfg.data.path} ({e}); "
                        f"{fix}") from None
    if data.fingerprint() != recorded:
        raise DataError(f"the {cfg.data.name} data at {cfg.data.path} are not this run's (data fingerprint "
                        f"{data.fingerprint()[:12]}): if the run's dataset moved, {fix}")
    return data


@dataclass(frozen=True)
class Prepared:
    run: RunDir
    cfg: ExperimentConfig
    data: ImageDataset
    levels: list[str]
    fingerprint: str
    defense: Defense


@dataclass(frozen=True)
class RunPlan:
    """A run checked and designed, nothing written yet (:func:`plan_run`): the directory it will
    use, its manifest and each experiment's design."""

    path: Path
    cfg: ExperimentConfig
    data: ImageDataset
    designs: list[LevelDesign]
    fingerprint: str
    defense: Defense
    manifest: dict[str, Any]


def plan_run(cfg: ExperimentConfig, run_dir: Path | None = None) -> RunPlan:
    """Check everything that can be checked before training (defense, its declared attacks, device,
    data sizes, canaries) and design each experiment; nothing is written. The run directory is
    ``run_dir`` or the default one (:func:`default_run_dir`)."""
    from harness.run.attack_set import attack_names, check_declared_attacks, load_attacks
    from harness.run.signals import check_signals

    if run_dir is not None and run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"the run directory (--run-dir, run_dir=) {run_dir} is a file, not a run directory")
    out = Path(cfg.run.out)
    if run_dir is None and out.exists() and not out.is_dir():
        raise ConfigError(f"run.out (--out) {out} is a file; it must be the folder that holds run directories")
    defense = make_defense(cfg)
    if defense.trained_outside:  # imported (harness import), never trained here
        from defenses.external import NOT_HERE

        raise ConfigError(NOT_HERE)
    check_declared_attacks(defense, cfg.defense)
    check_defense_config(defense, cfg)
    neighbours = any(resolve("canaries", c).provides_neighbours
                     for _, c in experiments(cfg, defense))
    check_signals(load_attacks(attack_names(cfg, defense), cfg.attack.params), defense.provides, cfg.defense,
                  cfg.audit.population_samples, adaptive=defense.adaptive_attacks, neighbours=neighbours)
    resolve_device(cfg.run.device)
    saved = _saved_manifest(run_dir)
    data = load_run_data(cfg, saved)
    base_dir = creation_folder(saved)
    if cfg.audit.size > len(data.y_train):
        raise ConfigError(
            f"audit.size {cfg.audit.size} is larger than the training pool ({len(data.y_train)} samples)"
        )
    designs = [build_level(cfg, data, name, canary, base_dir) for name, canary in experiments(cfg, defense)]
    try:
        defense.check_train_size(min(smallest_training_set(ld, len(data.y_train)) for ld in designs))
    except ValueError as e:
        raise ConfigError(f"{cfg.defense}: {e}") from None
    fp = run_fingerprint(cfg, data)
    path = run_dir or default_run_dir(cfg, fp)
    manifest = {
        "harness_version": __version__,
        "models_version": MODELS_VERSION,
        "fingerprint": fp,
        "defense": cfg.defense,
        "preset": cfg.preset,
        "data_fingerprint": data.fingerprint(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cwd": base_dir,  # relative canary paths resolve from here (creation_folder)
        # what config.json must keep describing (RunDir.load_config checks it on every read)
        "trained_config": trained_config(cfg),
        "plumbing_params": plumbing_params(cfg),
    }
    if defense.reuses_undefended:  # saved undefended models to start from (harness/run/teachers.py)
        from harness.run.teachers import resolve_teachers

        manifest["undefended_runs"] = resolve_teachers(cfg, data.fingerprint(), designs,
                                                       defense.params.get("teacher_run"), path)
    return RunPlan(path=path, cfg=cfg, data=data, designs=designs, fingerprint=fp, defense=defense, manifest=manifest)


def open_run(plan: RunPlan) -> Prepared:
    """Create the planned run directory, or re-open it (checking it holds the same run and
    repairing damaged files), and save each experiment's design. Hold the run's lock
    (:class:`harness.run.runlock.RunLock`) around this and everything that follows."""
    run = RunDir(plan.path)
    if note := run.recover():
        run.healed.append(note)
    run.init(plan.cfg, plan.fingerprint, plan.manifest, plan.data)
    levels = []
    for ld in plan.designs:
        run.save_level(ld, ld.fingerprint(plan.fingerprint))
        levels.append(ld.level)
    return Prepared(run=run, cfg=plan.cfg, data=plan.data, levels=levels, fingerprint=plan.fingerprint,
                    defense=plan.defense)


def prepare_run(cfg: ExperimentConfig, run_dir: Path | None = None) -> Prepared:
    """:func:`plan_run` then :func:`open_run`, without a lock (tests and scripts that own the
    directory); the CLI takes the run's lock between the two."""
    return open_run(plan_run(cfg, run_dir))


# --- one job ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainJob:
    """Train model ``index`` of ``level`` in the run at ``run_dir``: small and picklable."""

    run_dir: str
    level: str
    index: int


def smallest_training_set(ld: LevelDesign, pool_size: int) -> int:
    """The size of the smallest of the level's model training sets (:func:`training_set`)."""
    always = len(ld.design.non_audit_indices(pool_size)) + len(ld.canaries.extra_y)
    return always + int(ld.design.membership.sum(axis=1).min())


def training_set(data: ImageDataset, ld: LevelDesign, index: int) -> LabeledImages:
    """All non-audit samples, the (rewritten) audit samples model ``index`` is a member of, and extras."""
    keep = ld.design.non_audit_indices(len(data.y_train))
    member = ld.design.membership[index]
    parts_x = [data.x_train[keep], ld.canaries.x[member]]
    parts_y = [data.y_train[keep], ld.canaries.y[member]]
    if len(ld.canaries.extra_y):
        parts_x.append(ld.canaries.extra_x)
        parts_y.append(ld.canaries.extra_y)
    return LabeledImages(
        x=np.concatenate(parts_x),
        y=np.concatenate(parts_y),
        num_classes=data.num_classes,
        mean=data.mean,
        std=data.std,
        augment=data.augment,
    )


def run_signals(cfg: ExperimentConfig, defense: Defense) -> tuple[list[str], dict]:
    """(names, table) of the signals a run's models save: what its attacks need
    (:func:`harness.run.signals.needed_signals`)."""
    from harness.run.attack_set import attack_names, load_attacks
    from harness.run.signals import needed_signals, signal_table

    attacks = load_attacks(attack_names(cfg, defense), cfg.attack.params)
    return needed_signals(attacks), signal_table(attacks)


def collect_signals(served: ServedModel, cfg: ExperimentConfig, defense: Defense, x: np.ndarray, spec: AugmentSpec,
                    population_x: np.ndarray | None = None, neighbour_x: np.ndarray | None = None
                    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(signals, serving record) of one model: every signal the run's attacks need
    (:mod:`harness.run.signals`), on the audit samples ``x``, for population signals on
    ``population_x``, and for neighbour signals on the canaries' near-duplicates ``neighbour_x``;
    then the serving checks (:func:`harness.run.signals.check_serving`: the first audit images
    asked twice, and for a deterministic model copies of them further off, scale after scale), and where
    serving is random or input-keyed and ``audit.repeat_queries`` R > 1 every signal of repeated
    queries (``logits_averaged``: R answers per query view; for input-keyed serving each on fresh
    perturbed copies at the scale where the check saw the key change, drawn from the seed the record
    names). A deterministic model is asked nothing more than the checks' few images."""
    from harness.run.signals import (AVERAGED_COPIES, check_serving, compute_signals, perturbation_seed, signal_seed,
                                     stored)

    names, table = run_signals(cfg, defense)
    pop = population_x if population_x is not None else x[:0]
    single = [n for n in names if table[n].averages is None]
    seed = signal_seed(cfg.seed)
    signals = compute_signals(single, table, served, x, pop, spec, seed, neighbour_x)
    serving = check_serving(served, x, seed)
    repeats = cfg.audit.repeat_queries if serving["random"] or serving["keyed"] else 1
    serving["repeat_queries"] = repeats  # R of the saved averages; 1: none saved
    perturb = perturbation_seed(seed, AVERAGED_COPIES) if serving["keyed"] and repeats > 1 else None
    if perturb is not None:  # what anyone needs to draw the averaged answers' copies again
        serving["perturbation_seed"] = perturb
    if repeats > 1:
        averaged = sorted(n for n, sig in table.items() if sig.averages in single)
        signals.update(compute_signals(averaged, table, served, x, pop, spec, seed, neighbour_x, repeats, perturb,
                                       serving.get("keyed_scale") or 1))
    return stored(signals, cfg.audit.signal_dtype), serving


@dataclass(frozen=True)
class TrainGroup:
    """Train models ``indices`` of ``level`` in one job: stacked (one batched loop, :mod:`defenses.stacked`)
    where the defense supports it for the run's recipe, else one after the other. ``with_finished``:
    models of the same block already finished (a resumed run), trained again beside ``indices`` so
    that every model of the block trains in the group it trains in uninterrupted (a stacked model's
    weights depend on its group at float rounding), but not saved again."""

    run_dir: str
    level: str
    indices: tuple[int, ...]
    with_finished: tuple[int, ...] = ()


class _JobSetup:
    """What every model of a job reads from the run directory, loaded once per job."""

    def __init__(self, run_dir: str, level: str, index: int) -> None:
        self.run = RunDir(run_dir)
        self.level = level
        self.cfg = self.run.load_config()
        self.data = self.run.load_data()
        self.ld = self.run.load_level(level)
        self.defense = make_defense(self.cfg)
        device = resolve_device(self.cfg.run.device)
        configure_determinism(device, self.cfg.run.deterministic)
        if device == "cuda" and torch.cuda.device_count() > 1:  # spread jobs over the GPUs
            device = f"cuda:{index % torch.cuda.device_count()}"
        self.device = device

    def seed(self, index: int) -> int:
        return model_seed(self.cfg.seed, index, self.cfg.audit.rng, self.cfg.audit.models)

    def context(self, index: int) -> FitContext:
        run, last = self.run, [0.0]

        def progress(what: str, fraction: float) -> None:  # at most one progress write per second
            now = time.perf_counter()
            if now - last[0] >= 1.0:
                last[0] = now
                run.write_progress(self.level, index, fraction)

        undefended = None
        if self.defense.reuses_undefended:
            from harness.run.teachers import load_undefended

            source = run.load_manifest().get("undefended_runs", {}).get(self.level)
            if source is not None:
                undefended = load_undefended(source, self.level, index, self.seed(index), self.device)
        return FitContext(seed=self.seed(index), device=self.device, train=self.cfg.train,
                          params=self.defense.params, progress=progress, undefended=undefended)

    def where(self, indices: Sequence[int]) -> str:
        return f"{self.level} model {indices[0]}" if len(indices) == 1 else \
            f"{self.level} models {indices[0]}-{indices[-1]}"

    def fit(self, fit: Callable[[], Any], indices: Sequence[int]) -> Any:
        """Run the defense's ``fit`` (or ``fit_group``) with its errors reported as the plugin's, the
        global RNGs seeded first from the seed of the first model of ``indices`` (:func:`seed_global_rngs`)."""
        seed_global_rngs(self.seed(indices[0]))
        try:
            return fit()
        except (ConfigError, KeyboardInterrupt):
            raise
        except Exception as e:
            raise self.failure(e, indices) from None

    def failure(self, e: Exception, indices: Sequence[int]) -> Exception:
        """What the defense's failure ``e`` in ``fit`` on models ``indices`` is reported as: a ConfigError
        as it is, an operation without a deterministic CUDA kernel as a ConfigError naming the fix,
        anything else as the defense's own (:func:`harness.run.plugin_errors.wrap`: its own frames)."""
        if isinstance(e, ConfigError):
            return e
        if isinstance(e, RuntimeError) and "deterministic" in str(e) and self.cfg.run.deterministic:
            return ConfigError(f"{e.__class__.__name__}: {str(e).splitlines()[0]} -- this operation has no "
                               "deterministic CUDA kernel; run with --set run.deterministic=false")
        return plugin_errors.wrap(e, self.defense, self.cfg.defense, "fit", self.where(indices))

    def fit_together(self, indices: Sequence[int], trains: list[LabeledImages], ctxs: list[FitContext]) -> list[Any]:
        """The defense's own ``fit`` of each model of ``indices``, co-trained (:mod:`defenses.cotrain`:
        their ``train_classifier`` calls trained stacked), each with the global RNGs a ``fit`` alone
        gets (:func:`seed_global_rngs` of its own seed); a failure is reported as the failing model's."""
        from defenses.cotrain import FitFailed, fit_together

        if len(indices) == 1:
            return self.fit(lambda: [self.defense.fit(trains[0], ctxs[0])], indices)
        try:
            return fit_together(self.defense, trains, ctxs, lambda i: seed_global_rngs(self.seed(indices[i])))
        except FitFailed as f:
            failed = f
        except (ConfigError, KeyboardInterrupt):
            raise
        except Exception as e:
            raise self.failure(e, indices) from None
        error = failed.error
        if not isinstance(error, Exception):  # Ctrl-C, SystemExit: as they are
            raise error

        def again() -> None:  # raised here again: its traceback (--debug) goes from this call to the defense's frames
            raise error

        return self.fit(again, [indices[failed.index]])

    def finish(self, index: int, train: LabeledImages, served: ServedModel, train_seconds: float) -> dict:
        """Query model ``index``, save its signals (and state with --save-models); return its metadata."""
        from harness.core.machine import machine_record

        cfg, data, ld, run, defense = self.cfg, self.data, self.ld, self.run, self.defense
        where = self.where([index])
        checked = plugin_errors.check_served(served, ld.canaries.x, data.num_classes, cfg.defense, where)
        t1 = time.perf_counter()
        try:
            signals, serving = collect_signals(checked, cfg, defense, ld.canaries.x, data.augment,
                                               data.x_test[ld.population_indices], ld.canaries.neighbour_x)
            checked.during = "test accuracy on the test set"
            test_pred = checked.query(data.x_test).argmax(axis=1)
            if data.validation_size:
                checked.during = "validation accuracy on the validation split"
                val_right = checked.query(data.x_val).argmax(axis=1) == data.y_val
        except (ConfigError, KeyboardInterrupt):
            raise
        except Exception as e:
            err = plugin_errors.wrap(e, served, cfg.defense, "query", where)
            if not err.frames:  # no frame of the served model's own code: not the defense's failure
                raise
            raise err from None
        t2 = time.perf_counter()
        member = ld.design.membership[index]
        seed, device = self.seed(index), self.device
        meta = {
            "model_index": index,
            "level": self.level,
            "level_fingerprint": run.level_fingerprint(self.level),
            "seed": seed,
            "train_size": len(train),
            "test_accuracy": float((test_pred == data.y_test).mean()),
            "test_correct": pack_correct(test_pred == data.y_test),  # the accuracy's SE (harness.core.accuracy)
            "train_accuracy_audit_members": float(
                (signals["logits"][member, 0].argmax(-1) == ld.canaries.y[member]).mean()
            ) if member.any() else None,
            "train_seconds": train_seconds,
            "query_seconds": t2 - t1,
            "device": device if device == "cpu" else f"{device} ({torch.cuda.get_device_name()})",
            "torch_threads": torch.get_num_threads(),
            "machine": machine_record(torch.get_num_threads(), with_torch=True),  # what can change its floats
            "host": platform.node(),
            "defense_info": served.info(),
            "serving": serving,
            "model_saved": False,
        }
        if data.validation_size:
            meta["validation_accuracy"] = float(val_right.mean())
            meta["validation_correct"] = pack_correct(val_right)
        if cfg.run.save_models:  # before the signals: a finished model then always has its saved state
            state = served.model_state()
            if state is None:
                raise ConfigError(f"run.save_models (--save-models): {cfg.defense}'s served model "
                                  f"({type(served).__name__}) has no torch state to save; run without it")
            run.write_model(self.level, index, state,
                            {"level_fingerprint": meta["level_fingerprint"], "model_index": index, "seed": seed})
            meta["model_saved"] = True
        run.write_signals(self.level, index, signals, meta)
        run.clear_progress(self.level, index)
        return meta


def train_one(job: TrainJob) -> dict:
    """Train, query and save one model; return its metadata. Runs in a worker process. A model of
    a stackable recipe trains through the same stacked loop as in a group (bit-identical whatever
    the group's size), so a resumed run reproduces an uninterrupted one."""
    return train_group(TrainGroup(job.run_dir, job.level, (job.index,)))[0]


def _train_single(setup: _JobSetup, index: int) -> dict:
    train = training_set(setup.data, setup.ld, index)
    ctx = setup.context(index)
    t0 = time.perf_counter()
    served = setup.fit(lambda: setup.defense.fit(train, ctx), [index])
    return setup.finish(index, train, served, time.perf_counter() - t0)


def train_group(group: TrainGroup) -> list[dict]:
    """Train, query and save the models of ``group``; return their metadata in index order.

    Stacked when the defense can group the run's recipe (:meth:`~defenses.base.Defense.can_group`;
    its ``fit_group`` may still return None, as for a lone convolutional model), or through the
    defense's own ``fit`` co-trained (:meth:`~defenses.base.Defense.cotrains`, a plugin's: its
    ``train_classifier`` calls stacked, :mod:`defenses.cotrain`), with the block's finished models
    (``with_finished``) trained beside them again and not saved; every saved model's train_seconds
    is then the group's time / the models it trained.
    """
    setup = _JobSetup(group.run_dir, group.level, group.indices[0])
    own = setup.defense.can_group(setup.cfg.train)
    if own or trains_in_groups(setup.defense, setup.cfg.train):
        together = sorted((*group.indices, *group.with_finished))
        trains = [training_set(setup.data, setup.ld, i) for i in together]
        ctxs = [setup.context(i) for i in together]
        t0 = time.perf_counter()
        if own:
            served = setup.fit(lambda: setup.defense.fit_group(trains, ctxs), together)
        else:
            served = setup.fit_together(together, trains, ctxs)
        if served is not None:
            if len(served) != len(trains):
                raise plugin_errors.PluginFailure(f"{setup.cfg.defense} ({setup.where(together)}): fit_group "
                                                f"returned {len(served)} models for {len(trains)} training sets")
            per_model = (time.perf_counter() - t0) / len(trains)
            return [setup.finish(i, t, s, per_model) for i, t, s in zip(together, trains, served)
                    if i in group.indices]
    return [_train_single(setup, i) for i in group.indices]


def group_size(cfg: ExperimentConfig, defense: Defense) -> int:
    """Models per training job: ``run.group_size``, or for 0 (auto) the measured choice for the
    recipe and device (docs/executors.md): where the defense trains stacked models (its own
    ``fit_group``, or a plugin's ``fit`` co-trained: :func:`trains_in_groups`), for the grouped
    CNNs (``cnn``, ``airbench``) AUTO_GPU_GROUP_SIZE on a GPU and 1 on the CPU (a stacked CNN was
    measured slower there), else AUTO_GROUP_SIZE (the ``mlp`` recipes, DP-SGD's ``cnn-gn``); 1 where
    the defense trains one model at a time."""
    if cfg.run.group_size:
        return cfg.run.group_size
    from defenses.stacked import GROUPED_MODELS

    if not trains_in_groups(defense, cfg.train):
        return 1
    if cfg.train.model in GROUPED_MODELS:
        return AUTO_GPU_GROUP_SIZE if resolve_device(cfg.run.device).startswith("cuda") else 1
    return AUTO_GROUP_SIZE if defense.can_group(cfg.train) else AUTO_COTRAIN_GROUP_SIZE


def trains_in_groups(defense: Defense, train: Any) -> bool:
    """Whether the runner puts several of ``defense``'s models in one job for the recipe ``train``: the
    defense stacks them itself (:meth:`~defenses.base.Defense.can_group`), or its own ``fit`` is
    co-trained (:meth:`~defenses.base.Defense.cotrains`, a plugin's) on a network that trains stacked
    (:func:`defenses.stacked.stackable`)."""
    from defenses.stacked import stackable

    return defense.can_group(train) or (defense.cotrains(train) and stackable(train))



#: models per stacked job when run.group_size is 0, measured on this project's 2-core CPU
#: (benchmarks/bench_stacked.py and bench_speed.py --vs-set, docs/executors.md): 4 and 8 are the fastest
#: per model on one core, 4 the faster end to end with both cores training
AUTO_GROUP_SIZE = 4
#: a co-trained plugin's models per job on the ``mlp`` recipes when run.group_size is 0: a loss of the
#: plugin's own costs per step about what one call of it costs, whatever the group (one vmapped call,
#: defenses.stacked._ModelLosses), so larger groups share it among more models
#: (benchmarks/bench_plugin_speed.py, docs/executors.md)
AUTO_COTRAIN_GROUP_SIZE = 8
#: stacked CNNs (cnn, airbench) per job on a GPU when run.group_size is 0: not yet measured (the
#: G = 1..64 sweep of benchmarks/bench_stacked_cnn.py is pending on a lent GPU, docs/gpu.md)
AUTO_GPU_GROUP_SIZE = 16


def heal_signals(prep: Prepared) -> list[str]:
    """Move every damaged signals file aside so its model is retrained; one line per file."""
    notes = []
    for level in prep.levels:
        for err, moved in prep.run.quarantine_damaged(level, prep.cfg.audit.models):
            notes.append(f"{err.path.relative_to(prep.run.path)} was damaged ({err.reason}): moved aside to "
                         f"{moved.name}; that model is retrained")
    return notes


def pending_jobs(prep: Prepared, only: dict[str, int] | None = None) -> list[TrainJob]:
    """The models without finished signals; ``only``: of the levels it names, each level's first N
    models (``harness tune`` trains a few models of a run; :func:`train_all`)."""
    jobs = []
    for level in prep.levels:
        if only is not None and level not in only:
            continue
        prep.run.clean_temp_files(level)
        done = set(prep.run.finished_models(level, prep.cfg.audit.models))
        upto = prep.cfg.audit.models if only is None else min(only[level], prep.cfg.audit.models)
        jobs += [TrainJob(str(prep.run.path), level, s) for s in range(upto) if s not in done]
    return jobs


def make_groups(jobs: list[TrainJob], size: int, models: int | None = None) -> list[TrainGroup]:
    """The pending models in fixed blocks of ``size`` consecutive indices per level (block b holds
    models ``[b size, (b + 1) size)``), so that a resumed run groups its models as an uninterrupted
    one does. With ``models`` (the run's S), a block of which some models are finished trains them
    again beside the pending ones (``TrainGroup.with_finished``)."""
    groups: list[TrainGroup] = []
    for job in jobs:
        last = groups[-1] if groups else None
        if last is not None and last.level == job.level and last.indices[0] // size == job.index // size:
            groups[-1] = TrainGroup(last.run_dir, last.level, (*last.indices, job.index))
        else:
            groups.append(TrainGroup(job.run_dir, job.level, (job.index,)))
    if models is None or size == 1:
        return groups
    out = []
    for grp in groups:
        lo = grp.indices[0] // size * size
        block = range(lo, min(lo + size, models))
        out.append(TrainGroup(grp.run_dir, grp.level, grp.indices, tuple(i for i in block if i not in grp.indices)))
    return out


def training_groups(prep: Prepared, only: dict[str, int] | None = None) -> list[TrainGroup]:
    """The executor jobs of :func:`pending_jobs` (``only`` as there): groups of :func:`group_size`."""
    defense = make_defense(prep.cfg)
    size = group_size(prep.cfg, defense)
    return make_groups(pending_jobs(prep, only), size,
                       prep.cfg.audit.models if trains_in_groups(defense, prep.cfg.train) else None)


def train_all(
    prep: Prepared, executor: Executor, on_done: Callable[[TrainJob, dict], None] | None = None
) -> list[dict]:
    """Train every model that has no finished signals file yet, in groups of :func:`group_size`
    (one executor job per group); return their metadata."""
    out = []
    groups = training_groups(prep)
    for group, metas in executor.map(train_group, groups):
        for meta in metas:
            out.append(meta)
            if on_done is not None:
                on_done(TrainJob(group.run_dir, group.level, meta["model_index"]), meta)
    return out
