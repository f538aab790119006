"""Audit models trained anywhere: the audit plan an outside trainer reads, and the import of its outputs.

``harness plan PLAN`` (:func:`build_plan`, :func:`write_plan`) writes everything an outside trainer
needs, for a preset, dataset, canary choice and S (docs/external-models.md; plan.json's schema:
docs/plan.schema.json)::

    PLAN/plan.json                      format and version, fingerprint, the config, the views, the recipe,
                                        each model's seed, the shapes expected back, SHA-256 of every file
    PLAN/data.npz                       the dataset as the harness holds it (x_train, y_train, x_test, y_test)
    PLAN/<experiment>/train.npz         x, y: the training pool with the canaries applied (+ extra samples);
                                        model i trains on x[train_indices[train_offsets[i]:train_offsets[i+1]]]
    PLAN/<experiment>/query.npz         x, y: the query set (audit samples, then population samples, then the
                                        canaries' near-duplicates where they have them); views (Q, A, C, H, W):
                                        every query image under the A fixed views (harness.views)
    PLAN/<experiment>/design.npz        the harness's own design file (audit indices, membership, canaries)

A plan whose attacks include the white-box ``contrastive`` attack also holds
``PLAN/<experiment>/ssl_views.npz``: ``v1``, ``v2`` (R, A, C, channels, H, W), two SSL-augmented
copies of every audit sample under every view for R repetitions (the harness's own draws,
harness.run.signals.ssl_view_pairs).

The trainer writes ``OUTPUTS/<experiment>/model_0007.npz`` per model: ``logits`` (Q, A, K) float16
or float32 over the query views, ``plan_fingerprint`` (plan.json's), ``experiment``, ``test_logits``
(T, K), optionally ``test_accuracy``, ``train_seconds`` and ``run_id`` (the training run that wrote
it), and ``features`` (2, R, A, C, D), the model's features (e.g. its penultimate activations) on
``v1`` and ``v2``, where the plan has SSL views: the import turns them into the white-box
``contrastive_features`` signal (the Fisher-transformed cosine similarity of each pair).

``harness import PLAN --outputs OUTPUTS`` (:func:`check_import`) checks every file before anything
is written, the cheap checks across every file first (harness.run.output_checks: its table says what
each check catches and what it cannot), then the plan's hashes and fingerprint, then the outputs and
the models together; ``--partial`` audits the models present where the design stays balanced
enough. Then (:func:`write_import`) it builds a normal run directory of the ``external`` defense
(defenses/external.py) in a temp folder beside its destination, which the API attacks and then
renames into place: a failure at any step leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import io
import os
import platform
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.core import jsonio
from harness.core.accuracy import pack_correct
from harness.core.config import ExperimentConfig, apply_overrides, validate_config
from harness.core.data import ImageDataset, load_dataset
from harness.core.errors import ConfigError
from harness.core.labels import bidi_controls
from harness.core.signals import CONTRASTIVE_REPETITIONS
from harness.core.version import MODELS_VERSION, __version__
from harness.run.fingerprint import run_fingerprint, sha256_json, trained_config
from harness.run.output_checks import OUTPUT_ARRAYS, PROBABILITY_FLOOR, ModelOutputs, RowLabels, check_models, \
    check_output_file, check_run_ids, output_name, read_header
from harness.run.output_checks import scan_outputs as _scan
from harness.run.runstore import LevelDesign, RunDir, atomic_write_bytes, sha256_arrays

PLAN_FORMAT = "privacy-harness audit plan"
#: the plan format's version: a change that an outside trainer or an older import would misread bumps it
#: (2: every output file names its experiment and holds the model's outputs on the test set)
PLAN_VERSION = 2
PLAN_FILE = "plan.json"
DEFENSE = "external"
#: the white-box signal an outside model's features on the plan's SSL views provide
FEATURE_SIGNAL = "contrastive_features"
#: the signals an outside model's outputs provide, by the part of the query set they are read from
PART_SIGNALS = {"audit": "logits", "population": "population_logits", "neighbours": "neighbour_logits"}
#: per audit sample, members and non-members a partial import keeps at least (leave-one-out LiRA needs
#: 2 IN and 2 OUT shadows per victim once the victim and the balancing drop, attacks/loo.py, are left out)
MIN_PER_GROUP = 3
DEVICE = "outside the harness"


def _npz_bytes(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# --- the plan --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanBuild:
    """A plan in memory (:func:`build_plan`): plan.json's content and every file's bytes."""

    meta: dict[str, Any]
    files: dict[str, bytes]
    #: the experiments' designs in memory, and the training pool's size: what the note of the FPRs the plan's
    #: design cannot resolve reads (harness.audit.resolution.plan_note, harness.api.plan)
    designs: tuple[Any, ...] = ()
    pool_size: int = 0

    @property
    def fingerprint(self) -> str:
        return str(self.meta["fingerprint"])


def _query_parts(ld: LevelDesign) -> list[dict[str, Any]]:
    """The query set's parts in order: audit samples, population samples, the canaries' neighbours."""
    c, z = len(ld.canaries.y), len(ld.population_indices)
    parts = [{"name": "audit", "start": 0, "stop": c}]
    if z:
        parts.append({"name": "population", "start": c, "stop": c + z})
    if ld.canaries.has_neighbours:
        parts.append({"name": "neighbours", "start": c + z, "stop": 2 * c + z})
    return parts


def _query_arrays(data: ImageDataset, ld: LevelDesign) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of the query set: the audit samples (canaries, with their labels), the population
    samples (test images) and, where the canaries have them, their near-duplicates (scored with the
    canaries' labels, as the neighbour attacks do)."""
    xs, ys = [ld.canaries.x], [ld.canaries.y]
    if len(ld.population_indices):
        xs.append(data.x_test[ld.population_indices])
        ys.append(data.y_test[ld.population_indices])
    if ld.canaries.has_neighbours:
        xs.append(ld.canaries.neighbour_x)
        ys.append(ld.canaries.y)
    return np.ascontiguousarray(np.concatenate(xs)), np.concatenate(ys).astype(np.int64)


def _train_arrays(data: ImageDataset, ld: LevelDesign) -> dict[str, np.ndarray]:
    """The training pool with the canaries applied (extra samples appended) and each model's
    training set as indices into it, in the order the harness's own jobs train on
    (harness.run.runner.training_set: non-audit samples, member audit samples, extras)."""
    n = len(data.y_train)
    audit = ld.design.audit_indices
    x = data.x_train.copy()
    y = data.y_train.copy()
    x[audit] = ld.canaries.x
    y[audit] = ld.canaries.y
    extra = len(ld.canaries.extra_y)
    if extra:
        x = np.concatenate([x, ld.canaries.extra_x])
        y = np.concatenate([y, ld.canaries.extra_y])
    keep = ld.design.non_audit_indices(n)
    sets = [np.concatenate([keep, audit[ld.design.membership[i]], n + np.arange(extra)]).astype(np.int64)
            for i in range(ld.design.num_models)]
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sets])]).astype(np.int64)
    return {"x": np.ascontiguousarray(x), "y": y.astype(np.int64), "train_indices": np.concatenate(sets),
            "train_offsets": offsets, "membership": ld.design.membership, "audit_positions": audit.astype(np.int64),
            "mean": np.asarray(data.mean, np.float64), "std": np.asarray(data.std, np.float64)}


def plan_fingerprint(cfg: ExperimentConfig, data_fingerprint: str, arrays: dict[str, dict[str, str]]) -> str:
    """The plan's fingerprint: its format version, the config that determines the models
    (:func:`harness.run.fingerprint.trained_config`), the dataset and the hash of every array of
    every file (file bytes are not hashed here: an npz records when it was written)."""
    return sha256_json({"format": PLAN_FORMAT, "version": PLAN_VERSION, "config": trained_config(cfg),
                        "data": data_fingerprint, "arrays": arrays})


def _array_hashes(files: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, str]]:
    return {rel: {k: sha256_arrays(a) for k, a in sorted(arrays.items())} for rel, arrays in sorted(files.items())}


def check_plannable(cfg: ExperimentConfig) -> None:
    """Refuse, before anything is written, a plan whose attacks read signals an outside model's
    outputs on the query views cannot give (pre-defense outputs, SSL views, Split-AI)."""
    from harness.run.runner import make_defense, run_signals

    if cfg.defense != DEFENSE:
        raise ConfigError(f"a plan is for models trained outside the harness (defense {DEFENSE!r}), not "
                          f"{cfg.defense!r}")
    from harness.run.attack_set import attack_names, load_attacks

    defense = make_defense(cfg)
    _, table = run_signals(cfg, defense)
    attacks = load_attacks(attack_names(cfg, defense), cfg.attack.params)
    for a in attacks:
        for n in sorted(a.needs):
            if n not in (*PART_SIGNALS.values(), FEATURE_SIGNAL):
                raise ConfigError(f"attack {a.name!r} reads signal {n!r} ({table[n].description}), which a model "
                                  "trained outside the harness cannot give through a plan (its outputs cover the "
                                  f"query views, and features on SSL views: {', '.join(PART_SIGNALS.values())}, "
                                  f"{FEATURE_SIGNAL}); leave it out (--set attack.names=[...])")
            if n == "population_logits" and cfg.audit.population_samples == 0:
                raise ConfigError(f"attack {a.name!r} needs population samples: set audit.population_samples > 0, "
                                  "or leave it out (--set attack.names=[...])")


def build_plan(cfg: ExperimentConfig) -> PlanBuild:
    """Check ``cfg`` (the ``external`` defense's config) and build the plan in memory; nothing is written."""
    from harness.run.attack_set import check_declared_attacks
    from harness.run.runner import build_level, experiments, make_defense, model_seed, run_signals

    check_plannable(cfg)
    defense = make_defense(cfg)
    check_declared_attacks(defense, cfg.defense)
    data = load_dataset(cfg.data, cfg.seed)
    if cfg.audit.size > len(data.y_train):
        raise ConfigError(f"audit.size {cfg.audit.size} is larger than the training pool ({len(data.y_train)} samples)")
    designs = [build_level(cfg, data, name, canary) for name, canary in experiments(cfg, defense)]
    white_box = FEATURE_SIGNAL in run_signals(cfg, defense)[0]
    spec = data.augment
    offsets = spec.query_offsets()
    from harness.views import views

    arrays: dict[str, dict[str, np.ndarray]] = {}
    exps: dict[str, Any] = {}
    for ld in designs:
        qx, qy = _query_arrays(data, ld)
        parts = _query_parts(ld)
        arrays[f"{ld.level}/train.npz"] = _train_arrays(data, ld)
        arrays[f"{ld.level}/query.npz"] = {"x": qx, "y": qy, "views": views(qx, spec.flip, spec.shift),
                                           "view_offsets": np.array(offsets, np.int64).reshape(-1, 3)}
        arrays[f"{ld.level}/design.npz"] = _design_arrays(ld)
        files = {"train": f"{ld.level}/train.npz", "query": f"{ld.level}/query.npz", "design": f"{ld.level}/design.npz"}
        if white_box:
            arrays[f"{ld.level}/ssl_views.npz"] = _ssl_view_arrays(ld.canaries.x, spec, cfg.seed)
            files["ssl_views"] = f"{ld.level}/ssl_views.npz"
        sizes = arrays[f"{ld.level}/train.npz"]["train_offsets"]
        exps[ld.level] = {
            "canary": ld.canary,
            "canary_info": ld.canary_info,
            "num_models": ld.design.num_models,
            "audit_size": ld.design.audit_size,
            "num_evaluated": int(ld.canaries.evaluated.sum()),
            "pool_size": int(len(arrays[f"{ld.level}/train.npz"]["y"])),
            "train_sizes": np.diff(sizes).astype(int).tolist(),
            "query_size": int(len(qy)),
            "query_parts": parts,
            "files": files,
            "outputs": f"{ld.level}/model_{{index:04d}}.npz",
            "logits_shape": [int(len(qy)), len(offsets), data.num_classes],
            "test_logits_shape": [int(len(data.y_test)), data.num_classes],
        }
        if white_box:  # features of any width D on each SSL view pair
            exps[ld.level]["features_shape"] = [2, CONTRASTIVE_REPETITIONS, len(offsets), ld.design.audit_size]
    arrays["data.npz"] = _data_arrays(data)
    fp = plan_fingerprint(cfg, data.fingerprint(), _array_hashes(arrays))
    files = {rel: _npz_bytes(**a) for rel, a in arrays.items()}
    signals, _ = run_signals(cfg, defense)
    meta = {
        "format": PLAN_FORMAT,
        "format_version": PLAN_VERSION,
        "fingerprint": fp,
        "harness_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "preset": cfg.preset,
        "dataset": cfg.data.name,
        "seed": cfg.seed,
        "data_fingerprint": data.fingerprint(),
        "num_models": cfg.audit.models,
        "audit_size": cfg.audit.size,
        "population_samples": int(len(designs[0].population_indices)) if designs else 0,
        "num_classes": data.num_classes,
        "image_shape": list(data.image_shape),
        "test_size": int(len(data.y_test)),
        "normalization": {"mean": list(data.mean), "std": list(data.std)},
        "views": {"count": len(offsets), "flip": spec.flip, "shift": spec.shift,
                  "offsets": [[bool(f), int(dy), int(dx)] for f, dy, dx in offsets],
                  "reference": "harness.views.views(x, flip, shift)"},
        "recipe": {**cfg.train.model_dump(mode="json"), "augmentation": {"flip": spec.flip, "shift": spec.shift}},
        "models": [{"index": i, "seed": model_seed(cfg.seed, i, cfg.audit.rng, cfg.audit.models)}
                   for i in range(cfg.audit.models)],
        "experiments": exps,
        "signals": signals,
        "outputs": {
            "layout": "OUTPUTS/<experiment>/model_0007.npz: one file per model of each experiment (4-digit index)",
            "arrays": {k: {"required": req, "meaning": what} for k, (req, what) in OUTPUT_ARRAYS.items()},
            "dtypes": ["float16", "float32"],
        },
        "config": cfg.model_dump(mode="json"),
        "files": {rel: _sha256(b) for rel, b in sorted(files.items())},
    }
    return PlanBuild(meta=meta, files=files, designs=tuple(designs), pool_size=len(data.y_train))


def _ssl_view_arrays(x: np.ndarray, spec: Any, seed: int) -> dict[str, np.ndarray]:
    """``v1``, ``v2`` (R, A, C, channels, H, W): the two SSL-augmented copies of every audit sample
    under every query view that the harness's own contrastive signal compares (the same draws:
    harness.run.signals.ssl_view_pairs with the run's signal seed and the default SSL augmentation)."""
    from harness.run.signals import signal_seed, ssl_view_pairs

    a = len(spec.query_offsets())
    v = np.zeros((2, CONTRASTIVE_REPETITIONS, a, *x.shape), np.uint8)
    for r, view, rows, v1, v2 in ssl_view_pairs(x, spec, signal_seed(seed), CONTRASTIVE_REPETITIONS):
        v[0, r, view, rows] = v1
        v[1, r, view, rows] = v2
    return {"v1": v[0], "v2": v[1]}


def contrastive_from_features(features: np.ndarray) -> np.ndarray:
    """(C, A, R) Fisher-transformed cosine similarities of features (2, R, A, C, D) on the plan's SSL
    view pairs: the harness's own ``contrastive_features`` signal (harness.run.signals.contrastive_similarity)."""
    from harness.run.signals import _cosine, fisher

    _, r, a, c, _ = features.shape
    out = np.zeros((c, a, r), np.float32)
    for i in range(r):
        for j in range(a):
            out[:, j, i] = fisher(_cosine(features[0, i, j], features[1, i, j]))
    return out


def _design_arrays(ld: LevelDesign) -> dict[str, np.ndarray]:
    """The level's design.npz arrays, as harness.run.runstore.RunDir.save_level writes them."""
    c = ld.canaries
    return {"audit_indices": ld.design.audit_indices, "membership": ld.design.membership, "canary_x": c.x,
            "canary_y": c.y, "evaluated": c.evaluated, "extra_x": c.extra_x, "extra_y": c.extra_y,
            "canary": np.array(ld.canary), "population_indices": ld.population_indices,
            **({"neighbour_x": c.neighbour_x} if c.has_neighbours else {})}


def _data_arrays(data: ImageDataset) -> dict[str, np.ndarray]:
    buf = io.BytesIO()
    data.save(buf)  # type: ignore[arg-type]
    buf.seek(0)
    with np.load(buf) as z:
        return {k: z[k] for k in z.files}


def check_plan_folder(folder: Path) -> Plan | None:
    """Where a plan may be written: a folder that does not exist, an empty one, or one holding an
    intact plan (returned, to be compared with the new one); a ConfigError for a file or any other
    folder, raised before the plan is built."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"the plan folder {folder} is a file; name a folder for the plan")
    if folder.is_dir() and any(folder.iterdir()):
        try:
            return read_plan(folder, check_files=True)
        except ConfigError:
            raise ConfigError(f"{folder} is not empty and holds no intact plan: choose a new folder for the plan (or "
                              "delete this one)") from None
    return None


def write_plan(build: PlanBuild, folder: Path) -> bool:
    """Write the plan into ``folder`` as one change: every file goes into a temp folder beside it,
    which is then renamed to ``folder`` (a failure or Ctrl-C leaves nothing). ``folder`` must not
    exist, or be empty, or already hold this very plan (then nothing is written: False)."""
    folder = Path(folder)
    old = check_plan_folder(folder)
    if old is not None:
        if old.fingerprint == build.fingerprint:
            return False
        raise ConfigError(f"{folder} holds another plan (fingerprint {old.fingerprint[:12]}, this one "
                          f"{build.fingerprint[:12]}): choose a new folder, or delete that plan")
    parent = folder.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.plan-", dir=parent))
    try:
        for rel, data in build.files.items():
            atomic_write_bytes(tmp / rel, data)
        atomic_write_bytes(tmp / PLAN_FILE, (jsonio.dumps(build.meta, indent=1) + "\n").encode())
        publish(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return True


#: how old a temp folder of an import without a lock file must be before another import removes it
STALE_UNLOCKED_SECONDS = 3600.0


def remove_stale_temps(dest: Path) -> list[Path]:
    """Remove the temp folders (``.<name>.import-*`` beside ``dest``) of imports of ``dest`` that
    died (``kill -9``, a crashed machine): each is locked by its import from its creation (the OS
    lock dies with the process, harness.run.runlock), so one whose lock this process can take is
    left over; one without a lock file is removed only when older than
    :data:`STALE_UNLOCKED_SECONDS` (an import between creating it and locking it is younger).
    Returns the folders removed."""
    from harness.run.runlock import LOCK_NAME, RunLock, RunLockedError

    removed = []
    for tmp in sorted(dest.absolute().parent.glob(f".{dest.name}.import-*")):
        if not tmp.is_dir():
            continue
        if not (tmp / LOCK_NAME).is_file():
            if time.time() - tmp.stat().st_mtime > STALE_UNLOCKED_SECONDS:
                shutil.rmtree(tmp, ignore_errors=True)
                removed.append(tmp)
            continue
        try:
            with RunLock(tmp, shared=False, wait=False):
                shutil.rmtree(tmp, ignore_errors=True)
        except RunLockedError:  # a live import: leave it
            continue
        except OSError:  # a folder this process cannot remove: not ours to clear
            continue
        removed.append(tmp)
    return removed


def publish(tmp: Path, dest: Path) -> None:
    """Rename the finished temp folder ``tmp`` (mkdtemp's, mode 0700) to ``dest``, a missing or empty
    folder, with the usual permissions: the folder appears complete or not at all."""
    from harness.core.atomic import _UMASK

    os.chmod(tmp, 0o777 & ~_UMASK)
    os.replace(tmp, dest)


@dataclass(frozen=True)
class Plan:
    """A plan folder read back and checked (:func:`read_plan`)."""

    path: Path
    meta: dict[str, Any]
    cfg: ExperimentConfig

    @property
    def fingerprint(self) -> str:
        return str(self.meta["fingerprint"])

    @property
    def experiments(self) -> list[str]:
        return list(self.meta["experiments"])

    @property
    def num_models(self) -> int:
        return int(self.meta["num_models"])

    def load_data(self) -> ImageDataset:
        return ImageDataset.load(self.path / "data.npz")

    def load_level(self, experiment: str) -> LevelDesign:
        e = self.meta["experiments"][experiment]
        return RunDir._read_level(self.path / e["files"]["design"], experiment, e.get("canary_info") or {})


def read_plan(folder: Path, check_files: bool = True) -> Plan:
    """plan.json and, with ``check_files``, every file it lists, checked against their hashes and the
    plan's fingerprint re-computed from their arrays; a ConfigError (one line) names what is wrong."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"plan folder {folder} does not exist (make one with `harness plan {folder}`)")
    path = folder / PLAN_FILE
    if not path.is_file():
        raise ConfigError(f"{folder} is not an audit plan: it has no {PLAN_FILE} (make one with `harness plan`)")
    try:
        meta = jsonio.loads(path.read_text())
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ConfigError(f"{path} is damaged ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                          "write the plan again with `harness plan`") from None
    if meta.get("format") != PLAN_FORMAT:
        raise ConfigError(f"{path} is not an audit plan of privacy-harness (no format {PLAN_FORMAT!r})")
    if meta.get("format_version") != PLAN_VERSION:
        raise ConfigError(f"{path} is a plan of format version {meta.get('format_version')!r}; this harness "
                          f"({__version__}) reads version {PLAN_VERSION}: make the plan again with this version")
    try:
        cfg = validate_config(meta["config"])
        files = dict(meta["files"])
        exps = dict(meta["experiments"])
        int(meta["num_models"])
        str(meta["fingerprint"])
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{path} is damaged ({type(e).__name__}: {e}); write the plan again with "
                          "`harness plan`") from None
    plan = Plan(path=folder, meta=meta, cfg=cfg)
    if not check_files:
        return plan
    arrays: dict[str, dict[str, str]] = {}
    for rel, digest in sorted(files.items()):
        f = folder / rel
        if not f.is_file():
            raise ConfigError(f"{f} is missing from the plan; write the plan again with `harness plan`")
        if _sha256_file(f) != digest:
            raise ConfigError(f"{f} differs from the file the plan lists (SHA-256 mismatch): the plan was changed "
                              "after `harness plan` wrote it; write it again")
        try:
            with np.load(f) as z:
                arrays[rel] = {k: sha256_arrays(z[k]) for k in sorted(z.files)}
        except Exception as e:  # listed with the right hash, so only a plan written wrongly gets here
            raise ConfigError(f"{f} cannot be read ({type(e).__name__}); write the plan again") from None
    needed = {"data.npz", *(f"{name}/{k}.npz" for name in exps for k in ("train", "query", "design"))}
    if not needed <= set(files):
        raise ConfigError(f"{path} lists no {sorted(needed - set(files))[0]}; write the plan again with `harness plan`")
    if plan_fingerprint(cfg, str(meta.get("data_fingerprint")), arrays) != plan.fingerprint:
        raise ConfigError(f"{path}'s fingerprint does not match its files: plan.json was edited after `harness plan` "
                          "wrote it; write the plan again")
    return plan


# --- the outputs -----------------------------------------------------------------------------------


@dataclass
class ImportJob:
    """An import checked and ready to write (:func:`check_import`); nothing written yet."""

    plan: Plan
    outputs_dir: Path
    cfg: ExperimentConfig
    kept: list[int]  # plan model indices audited, in order (the run's model j is plan model kept[j])
    missing: dict[str, list[int]]  # experiment -> plan model indices without outputs
    models: dict[str, dict[int, ModelOutputs]]
    digest: str
    name: str
    notes: list[str] = field(default_factory=list)
    fingerprint: str = ""
    path: Path | None = None
    forced: list[str] = field(default_factory=list)  # checks that failed and were accepted with --force
    probabilities: bool = False  # the outputs were probabilities, converted (--probabilities)


def _ranges(indices: list[int]) -> str:
    """``0-3, 7`` for [0, 1, 2, 3, 7]."""
    out: list[str] = []
    for i in indices:
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ", ".join(out)


def _choose_models(plan: Plan, present: dict[str, set[int]], partial: bool, outputs_dir: Path
                   ) -> tuple[list[int], dict[str, list[int]], list[str]]:
    """(plan model indices to audit, missing per experiment, notes). Without ``partial`` every model
    must be there. With it, the models present in every experiment (so that population and sample
    level stay paired, model by model), an even number of them (the last dropped where odd), at
    least 6, with every audit sample a member of at least :data:`MIN_PER_GROUP` of them and a
    non-member of as many (:func:`_check_balance`)."""
    s = plan.num_models
    missing = {e: sorted(set(range(s)) - present[e]) for e in plan.experiments}
    total = sum(len(v) for v in missing.values())
    if not total:
        return list(range(s)), missing, []
    listing = "; ".join(f"{e}: {_ranges(v)}" for e, v in missing.items() if v)
    first_e = next(e for e, v in missing.items() if v)
    example = outputs_dir / first_e / output_name(missing[first_e][0])
    if not partial:
        raise ConfigError(f"{total} of {s * len(plan.experiments)} model outputs are missing ({listing}; e.g. "
                          f"{example}): train them and import again, or pass --partial to audit the models present")
    kept = sorted(set(range(s)).intersection(*present.values()))
    notes = []
    if len(kept) % 2:
        notes.append(f"model {kept[-1]} is left out too: the audit needs an even number of models")
        kept = kept[:-1]
    if len(kept) < 6:
        raise ConfigError(f"--partial: only {len(kept)} model(s) have outputs in every experiment ({listing} missing); "
                          "an audit needs at least 6: train the missing models")
    _check_balance(plan, kept, listing)
    return kept, missing, notes


def _check_balance(plan: Plan, kept: list[int], listing: str) -> None:
    """Every audit sample of every experiment a member of at least MIN_PER_GROUP of the kept models
    and a non-member of as many; a ConfigError naming the first sample that is not."""
    for e in plan.experiments:
        member = plan.load_level(e).design.membership[kept]
        n_in = member.sum(axis=0)
        n_out = len(kept) - n_in
        worst = int(np.argmin(np.minimum(n_in, n_out)))
        if min(n_in[worst], n_out[worst]) < MIN_PER_GROUP:
            raise ConfigError(f"--partial: the {len(kept)} models present in every experiment ({listing} missing) "
                              f"leave the design unbalanced: audit sample {worst} of {e} is a member of "
                              f"{int(n_in[worst])} and a non-member of {int(n_out[worst])} of them, and the "
                              f"leave-one-out attacks need at least {MIN_PER_GROUP} of each; train the missing models")


def _import_config(plan: Plan, kept: list[int], digest: str, name: str, overrides: dict[str, Any]) -> ExperimentConfig:
    """The imported run's config: the plan's, with the external defense's record (plan, outputs,
    name), S = the models audited, and the caller's ``attack.*`` / ``run.out`` overrides."""
    _check_override_keys(overrides)
    raw = plan.cfg.model_dump(mode="json")
    raw = apply_overrides(raw, {"defense_params.plan": plan.fingerprint, "defense_params.outputs": digest,
                                "defense_params.name": name, "audit.models": len(kept)})
    if overrides:
        from harness.core.overrides import run_attack_names, settle_attack_params
        from harness.plugins import resolve

        merged = apply_overrides(raw, overrides)
        raw = settle_attack_params(merged, overrides, run_attack_names(merged, resolve("defenses", DEFENSE)))
    from harness.defense_config import with_absolute_paths

    return with_absolute_paths(validate_config(raw))


def _check_override_keys(overrides: dict[str, Any]) -> None:
    bad = [k for k in overrides if not (k.startswith("attack.") or k == "run.out")]
    if bad:
        raise ConfigError(f"{bad[0]}: an import takes attack.* settings and run.out only (--set attack...); the "
                          "models' settings are the plan's")


def run_dir_name(cfg: ExperimentConfig, name: str, fingerprint: str) -> str:
    """The default run directory's name: ``external-<name>-<preset>-<fingerprint>``, the label
    (``--name``) reduced to letters, digits, ``.``, ``_`` and ``-`` (at most 40), left out where
    nothing of it remains."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-._")[:40].rstrip("-._")
    return "-".join(p for p in (DEFENSE, slug, cfg.preset, fingerprint[:12]) if p)


def precheck_import(plan_dir: Path, outputs_dir: Path, *, partial: bool = False, name: str | None = None,
                    overrides: dict[str, Any] | None = None
                    ) -> tuple[Plan, dict[str, dict[int, Path]], list[int], dict[str, list[int]], list[str], str | None]:
    """The cheap checks of an import, across every file, none of which loads a model's outputs: the
    label, the overrides' keys, plan.json, the outputs folder's names, each file's arrays, shapes,
    fingerprint, experiment and run_id (from the .npy headers), the model count, the files' run
    identity. Returns (plan, files found, plan model indices to audit, missing ones, notes, the run
    identity's warning or None); a ConfigError for the first problem. ``harness import`` runs it
    before it loads the API (scipy, torch), so that these mistakes are told in about a second."""
    if name is not None and (bidi := bidi_controls(name)):  # they reorder what follows them on every page
        raise ConfigError(f"--name holds bidirectional control characters ({', '.join(bidi)}), which reverse or "
                          f"reorder the text after them in terminals, titles and tooltips; give a plain label")
    if name is not None and (not name.strip() or len(name) > 100 or any(ch in name for ch in "\n\r\t")):
        raise ConfigError(f"--name must be a short one-line label for the models, got {name!r}")
    _check_override_keys(dict(overrides or {}))
    plan = read_plan(Path(plan_dir), check_files=False)
    outputs_dir = Path(outputs_dir)
    found = _scan(plan, outputs_dir)
    headers = [read_header(plan, e, i, f) for e, files in found.items() for i, f in sorted(files.items())]
    kept, missing, notes = _choose_models(plan, {e: set(v) for e, v in found.items()}, partial, outputs_dir)
    return plan, found, kept, missing, notes, check_run_ids(headers, outputs_dir)


def check_import(plan_dir: Path, outputs_dir: Path, *, partial: bool = False, name: str | None = None,
                 overrides: dict[str, Any] | None = None, run_dir: Path | None = None, force: bool = False,
                 probabilities: bool = False) -> ImportJob:
    """Check the plan and every output file and decide the run: nothing is written (module docstring).
    The cheap checks come first, across every file (names, the model count, each file's arrays,
    shapes, fingerprint, experiment and run_id, read from the .npy headers), then the plan's files
    against their hashes, then each file's outputs and the models together
    (harness.run.output_checks), and only then the run's config and attacks (which import torch).
    ``force``: import although the membership-consistency check fails (recorded as forced);
    ``probabilities``: outputs that are probabilities are turned into log-probabilities."""
    plan, found, kept, missing, notes, warning = precheck_import(plan_dir, outputs_dir, partial=partial, name=name,
                                                                 overrides=overrides)
    outputs_dir = Path(outputs_dir)
    plan = read_plan(plan.path)  # the plan's files against their hashes and its fingerprint
    data = plan.load_data()
    if data.fingerprint() != plan.meta.get("data_fingerprint"):
        raise ConfigError(f"{plan.path / 'data.npz'} does not match the plan's data fingerprint; write the plan again")
    labels = {e: RowLabels.of(e, plan.meta["experiments"][e], plan.load_level(e), data.x_train, data.y_train,
                              data.y_test) for e in plan.experiments}
    models: dict[str, dict[int, ModelOutputs]] = {e: {} for e in plan.experiments}
    for e, files in found.items():
        for i, f in sorted(files.items()):
            models[e][i] = check_output_file(plan, e, i, f, labels[e], probabilities)
    forced = check_models(plan, models, kept, labels, outputs_dir, force)
    if warning:
        notes.append(warning)
    if force:
        notes.append("--force: the membership-consistency check failed and the outputs are imported anyway; the "
                     "report, results.json and the leaderboard mark the run forced" if forced else
                     "--force: the membership-consistency check passed; nothing was forced")
    if probabilities:
        notes.append("--probabilities: every model's outputs were probabilities; the import took their log (clipped "
                     f"at {PROBABILITY_FLOOR:g}): what a float16 probability rounded away is lost")
    digest = sha256_json({f"{e}/{output_name(i)}": models[e][i].sha256 for e in plan.experiments for i in kept})
    label = (name or "").strip()
    cfg = _import_config(plan, kept, digest, label, dict(overrides or {}))
    from harness.run.attack_set import attack_names, check_declared_attacks, load_attacks
    from harness.run.runner import make_defense, run_signals

    defense = make_defense(cfg)
    check_declared_attacks(defense, cfg.defense)
    check_plannable(cfg)
    load_attacks(attack_names(cfg, defense), cfg.attack.params)
    if FEATURE_SIGNAL in run_signals(cfg, defense)[0] and \
            any("features_shape" not in e for e in plan.meta["experiments"].values()):
        raise ConfigError(f"a white-box attack (attack.names) reads {FEATURE_SIGNAL}, features on SSL views this plan "
                          "does not export: make a plan with that attack (harness plan --set attack.names=[...])")
    fp = run_fingerprint(cfg, data)
    if run_dir is not None and run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"the run directory (--run-dir) {run_dir} is a file, not a run directory")
    out = Path(cfg.run.out)
    if run_dir is None and out.exists() and not out.is_dir():
        raise ConfigError(f"run.out (--out) {out} is a file; it must be the folder that holds run directories")
    path = run_dir if run_dir is not None else out / run_dir_name(cfg, label, fp)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        existing = RunDir(path)
        theirs = existing.load_manifest().get("fingerprint") if existing.exists() else None
        if theirs != fp:
            raise ConfigError(f"{path} exists and holds {'another run' if theirs else 'something else'}; import into a "
                              "new folder (--run-dir, --out)")
    if kept != list(range(plan.num_models)):
        counts = [plan.load_level(e).design.membership[kept].sum(axis=0) for e in plan.experiments]
        lo, hi = min(int(c.min()) for c in counts), max(int(c.max()) for c in counts)
        listing = "; ".join(f"{e}: {_ranges(v)}" for e, v in missing.items() if v)
        notes.insert(0, f"--partial: auditing {len(kept)} of {plan.num_models} models (outputs missing: {listing}; a "
                        f"model missing in one experiment is left out of all, so that the levels stay paired); every "
                        f"audit sample is a member of {lo} to {hi} of them")
    return ImportJob(plan=plan, outputs_dir=outputs_dir, cfg=cfg, kept=kept, missing=missing, models=models,
                     digest=digest, name=label, notes=notes, fingerprint=fp, path=path, forced=forced,
                     probabilities=probabilities)


def _model_signals(job: ImportJob, ld: LevelDesign, level_fp: str, j: int, out: ModelOutputs,
              data: ImageDataset) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The signals and metadata of run model ``j`` (plan model ``kept[j]``) from its outputs."""
    e = job.plan.meta["experiments"][ld.level]
    parts = {p["name"]: (p["start"], p["stop"]) for p in e["query_parts"]}
    logits = out.logits.astype(np.float32)
    signals: dict[str, np.ndarray] = {}
    for part, (a, b) in parts.items():
        signals[PART_SIGNALS[part]] = np.ascontiguousarray(logits[a:b])
    if out.features is not None:
        signals[FEATURE_SIGNAL] = contrastive_from_features(out.features)
    from harness.run.signals import stored

    signals = stored(signals, job.cfg.audit.signal_dtype)
    member = ld.design.membership[j]
    acc = out.test_accuracy
    source = f"test_logits ({len(data.y_test)} test images, as they are)"
    meta = {
        "model_index": j,
        "level": ld.level,
        "level_fingerprint": level_fp,
        "seed": job.plan.meta["models"][job.kept[j]]["seed"],
        "plan_model_index": job.kept[j],
        "train_size": int(e["train_sizes"][job.kept[j]]),
        "test_accuracy": acc,
        "test_correct": pack_correct(out.test_logits.argmax(-1) == data.y_test),  # the accuracy's SE
        "test_accuracy_source": source,
        "test_accuracy_claimed": out.claimed_accuracy,
        "train_accuracy_audit_members": float((logits[:len(member)][member, 0].argmax(-1) ==
                                               ld.canaries.y[member]).mean()) if member.any() else None,
        "train_seconds": out.train_seconds if out.train_seconds is not None else 0.0,
        "train_seconds_reported": out.train_seconds is not None,
        "query_seconds": 0.0,
        "device": DEVICE,
        "host": platform.node(),
        "defense_info": {},
        "model_saved": False,
        "trained_outside": True,
        "outputs_file": f"{ld.level}/{output_name(job.kept[j])}",
        "outputs_sha256": out.sha256,
        "outputs_dtype": str(out.logits.dtype),
    }
    return signals, meta


def external_record(job: ImportJob) -> dict[str, Any]:
    """What the manifest (and results.json, ``external``) records of an imported run."""
    reported = [m.claimed_accuracy is not None for e in job.plan.experiments for i, m in job.models[e].items()
                if i in job.kept]
    return {
        "plan_fingerprint": job.plan.fingerprint,
        "plan_format_version": PLAN_VERSION,
        "outputs_sha256": job.digest,
        "name": job.name,
        "models_planned": job.plan.num_models,
        "models_audited": len(job.kept),
        "plan_model_indices": list(job.kept),
        "missing": {e: v for e, v in job.missing.items() if v},
        "test_accuracy": "test outputs",  # computed from each model's test_logits (a claim is checked against it)
        "test_accuracy_claimed": "all" if all(reported) else "none" if not any(reported) else "some",
        "forced_checks": list(job.forced),
        "probabilities_converted": job.probabilities,
    }


def write_import(job: ImportJob, folder: Path) -> None:
    """Build the run directory of ``job`` in ``folder`` (a fresh temp folder): config, manifest,
    data, each experiment's design and every model's signals (written atomically, as a trained
    run's). The caller attacks it and renames it into place."""
    data = job.plan.load_data()
    cfg = job.cfg
    manifest = {
        "harness_version": __version__,
        "models_version": MODELS_VERSION,
        "fingerprint": job.fingerprint,
        "defense": cfg.defense,
        "preset": cfg.preset,
        "data_fingerprint": data.fingerprint(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cwd": os.getcwd(),
        "trained_config": trained_config(cfg),
        "plumbing_params": [],
        "provenance": "external",
        "external": external_record(job),
        "timings": {"prepare_seconds": 0.0, "train_wall_seconds": 0.0, "invocations": 0, "executor": DEVICE},
    }
    run = RunDir(folder)
    run.init(cfg, job.fingerprint, manifest, data)
    for e in job.plan.experiments:
        ld = job.plan.load_level(e)
        if job.kept != list(range(job.plan.num_models)):
            from harness.core.design import AuditDesign

            ld = LevelDesign(level=ld.level, canary=ld.canary, canaries=ld.canaries,
                             design=AuditDesign(ld.design.audit_indices, ld.design.membership[job.kept].copy()),
                             population_indices=ld.population_indices, canary_info=ld.canary_info)
        level_fp = ld.fingerprint(job.fingerprint)
        run.save_level(ld, level_fp)
        for j, i in enumerate(job.kept):
            signals, meta = _model_signals(job, ld, level_fp, j, job.models[e][i], data)
            run.write_signals(e, j, signals, meta)
