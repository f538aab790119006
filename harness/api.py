"""The Python API: evaluations for notebooks and scripts, and what the command line calls.

    from harness import evaluate, attack, load_run
    r = evaluate("hamp", preset="quick", overrides={"audit.models": 8}, progress=print)
    r.leak("sample"), r.headline("sample"), r.attacks, r.roc("population", "lira")
    r = attack(r.path, overrides={"attack.params.rmia.gamma": 2})   # re-score, no retraining
    r = load_run("runs/hamp-quick-0123456789ab")
    p = plan("plans/digits", overrides={"audit.models": 16})      # for models trained elsewhere ...
    r = import_outputs(p.path, "outputs/")                         # ... audited from their outputs

Each call takes the run directory's lock (harness.run.runlock) for as long as it writes there, and
reports what it does through ``progress``: a callable that receives :class:`Progress` events
(``print`` shows them; the CLI turns them into rich bars and lines). Mistakes raise
:class:`~harness.core.errors.ConfigError` (one line) before anything is trained or written; a
defense's own failure raises :class:`~harness.run.plugin_errors.PluginFailure`.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from harness.audit.results import Figure, Ratio, Results
from harness.core.config import ExperimentConfig, apply_overrides, validate_config
from harness.defense_config import build_config, with_absolute_paths
from harness.core.errors import ConfigError

__all__ = ["Progress", "Results", "Figure", "Ratio", "evaluate", "attack", "load_run", "report", "compare",
           "audit_one_run", "audit_dp_one_run", "configure", "plan", "import_outputs", "tune", "tuned_overrides"]


@dataclass(frozen=True)
class Progress:
    """One progress event.

    ``kind``: ``status`` (a step begins: ``message``), ``info`` (a line worth showing), ``note``
    and ``repaired`` (lines worth attention), ``waiting`` (for another process's lock), ``train``
    (``done`` of ``total`` models of ``level`` trained, fractions of running models included;
    ``finished``: the models whose signals are saved, without those fractions)."""

    kind: str
    message: str = ""
    level: str | None = None
    done: float = 0.0
    total: int = 0
    finished: int = 0

    def __str__(self) -> str:
        if self.kind == "train":
            return f"train {self.level}: {self.done:.1f}/{self.total}"
        return f"{self.kind}: {self.message}" if self.kind not in ("info", "status") else self.message


ProgressFn = Callable[[Progress], None]


def _emitter(progress: ProgressFn | None) -> Callable[..., None]:
    def emit(kind: str, message: str = "", **kw: Any) -> None:
        if progress is not None:
            progress(Progress(kind, message, **kw))

    return emit


#: settings that never change the models: the only ones `evaluate(run_dir=RUN)` without a defense may change
#: (``data.path``: where the run's dataset is now, checked against its data fingerprint: runner.load_run_data)
RESUME_KEYS = {"run.workers", "run.device", "run.save_models", "run.executor", "run.group_size", "data.path"}


def configure(defense: str | None = None, preset: str | None = None, overrides: dict[str, Any] | None = None,
              run_dir: Path | str | None = None) -> ExperimentConfig:
    """The resolved configuration: ``preset`` (default quick) for ``defense`` with ``overrides``
    (dotted keys: ``{"audit.models": 8, "train.lr": 0.05}``); or, without a defense, the saved
    config of ``run_dir`` (only :data:`RESUME_KEYS` may then change). Either way its paths are
    absolute (:func:`harness.defense_config.with_absolute_paths`; a run saved with a relative
    ``data.path`` resolves it against the current folder)."""
    overrides = dict(overrides or {})
    for key, use in (("defense", "the DEFENSE argument (the API's defense=)"), ("preset", "--preset (preset=)")):
        if key in overrides:
            raise ConfigError(f"--set {key}=... is not a config override; use {use}")
    if defense is not None:
        return build_config(preset or "quick", {**overrides, "defense": defense})
    if run_dir is None:
        raise ConfigError("name a DEFENSE (see `harness list`), or give --run-dir RUN (run_dir=) to resume that run")
    if preset is not None:
        raise ConfigError(f"--preset {preset} (preset=): without DEFENSE, --run-dir (run_dir=) resumes the run with "
                          "its own preset")
    from harness.run.runstore import RunDir

    changing = sorted(k for k in overrides if k not in RESUME_KEYS and not k.startswith(("run.slurm.", "run.ray.")))
    if changing:
        raise ConfigError(f"`harness evaluate --run-dir {run_dir}` without DEFENSE resumes the run as it was saved; "
                          f"{', '.join(changing)} would change it: give DEFENSE and the run's options to change it "
                          "(a run with other settings goes in another directory)")
    cfg = RunDir(run_dir).load_config()
    if "data.path" in overrides and cfg.data.name == "digits":
        raise ConfigError("--data-dir (data.path): this run's dataset is digits (scikit-learn's bundled copy), which "
                          "reads no data folder")
    cfg = validate_config(apply_overrides(cfg.model_dump(mode="json"), overrides)) if overrides else cfg
    return with_absolute_paths(cfg)


@contextmanager
def _locked(path: Path, wait: bool, emit: Callable[..., None], shared: bool = False) -> Iterator[Any]:
    """The run directory's lock (harness.run.runlock): exclusive for a writer, ``shared`` for a
    reader (which also works where the directory is read-only); yields the RunLock."""
    from harness.run.runlock import RunLock

    def waiting(holder: Any) -> None:
        who = holder.describe() if holder is not None else "another process"
        emit("waiting", f"waiting for {who} to finish with {path}")

    with RunLock(path, wait=wait, on_wait=waiting, shared=shared) as lock:
        if lock.took_over is not None:
            emit("note", f"took over the lock of {lock.took_over.describe()}, which ended without releasing it")
        yield lock


def _local_pool_likely(overrides: dict[str, Any]) -> bool:
    return overrides.get("run.executor", "local") == "local" and overrides.get("run.workers") != 1 and \
        (os.cpu_count() or 1) > 1


def evaluate(defense: str | None = None, preset: str | None = None, overrides: dict[str, Any] | None = None, *,
             run_dir: Path | str | None = None, wait: bool = False, progress: ProgressFn | None = None) -> Results:
    """Train the S models of each level (resuming finished ones), run the attacks, write the run's
    reports and return its :class:`Results`: ``harness evaluate`` as a function.

    ``defense``: a name (``harness list``) or ``path/to/file.py:ClassName``; ``preset``: quick,
    cifar10, paper, fast or a YAML file; ``overrides``: dotted config keys; ``run_dir``: exactly this
    run directory (without a defense: resume it as saved); ``wait``: wait for another process using
    the run directory instead of raising; ``progress``: receives :class:`Progress` events (before
    training, a ``note`` when the design has too few non-member guesses for a reported FPR:
    :mod:`harness.audit.resolution`).
    """
    from harness.audit.resolution import plan_note
    from harness.core.data import check_data_path
    from harness.core.install_check import check_torch_builds
    from harness.run.executors import check_engine, start_worker_server

    emit = _emitter(progress)
    overrides = dict(overrides or {})
    run_path = Path(run_dir) if run_dir is not None else None
    # the configuration first: a mistake in it is refused before torch is imported (seconds)
    cfg = configure(defense, preset, overrides, run_path)
    if defense is not None:  # a saved run resumed whose data moved gets its own line (plan_run: "data moved")
        check_data_path(cfg.data)
    check_torch_builds()
    if _local_pool_likely(overrides):  # its workers' server imports torch while the data and design are built
        start_worker_server()
    from harness.run.runner import open_run, plan_run  # imports torch

    check_engine(cfg.run.executor, cfg.run)  # installed and answering, before anything is written
    t0 = time.perf_counter()
    emit("status", "loading data and building the audit design")
    plan = plan_run(cfg, run_path)  # every check; nothing written yet
    if note := plan_note(cfg, plan.designs, len(plan.data.y_train), plan.data.num_classes):
        emit("note", note)  # the FPRs the design cannot resolve, and the S that would
    with _locked(plan.path, wait, emit):
        prep = open_run(plan)
        _train(prep, time.perf_counter() - t0, emit)
        return _attack_phase(prep.run.path, None, emit, prep.cfg)


def _train(prep: Any, t_prep: float, emit: Callable[..., None]) -> None:
    """Train the run's pending models (progress as ``train`` events), then record the timings."""
    from harness.run.executors import make_executor
    from harness.run.runner import group_size, heal_signals, pending_jobs, resolve_device, train_all, trains_in_groups

    run, cfg, defense = prep.run, prep.cfg, prep.defense
    emit("info", f"Run directory: {run.path} (fingerprint {prep.fingerprint[:12]})")
    for note in [*run.healed, *heal_signals(prep)]:
        emit("repaired", note)
    if defense.reuses_undefended:
        sources = run.load_manifest().get("undefended_runs", {})
        for lv in prep.levels:
            src = sources.get(lv)
            emit("info", f"Undefended models for {lv}: " + (
                f"{src['saved_models']} of {cfg.audit.models} reused from {src['run']}" if src else
                "trained here (no matching undefended run with --save-models found)"))
    executor = make_executor(cfg.run.executor, cfg.run.workers, resolve_device(cfg.run.device), cfg.run, run.path)
    jobs = pending_jobs(prep)
    total = cfg.audit.models * len(prep.levels)
    if len(jobs) < total:
        emit("info", f"Resuming: {total - len(jobs)} of {total} models already trained.")
        if cfg.run.save_models:
            unsaved = total - len(jobs) - sum(len(run.saved_models(lv, cfg.audit.models)) for lv in prep.levels)
            if unsaved > 0:
                emit("note", f"{unsaved} finished models were trained without --save-models and stay unsaved "
                             "(delete the run directory to retrain them with it).")
    t1 = time.perf_counter()
    if not jobs:
        return
    _fixed_features(prep, emit)
    g = group_size(cfg, defense)
    stacked = " (stacked: one batched loop per group)" if trains_in_groups(defense, cfg.train) else ""
    emit("info", f"Training {len(jobs)} models{f' in groups of {g}{stacked}' if g > 1 else ''} with "
                 f"{executor.description}.")
    done = {lv: cfg.audit.models - sum(j.level == lv for j in jobs) for lv in prep.levels}

    def show_progress() -> None:  # finished models + the fraction reported by running ones
        for lv in prep.levels:
            emit("train", level=lv, done=done[lv] + sum(run.read_progress(lv).values()), total=cfg.audit.models,
                 finished=done[lv])

    def on_done(job: Any, meta: Any) -> None:
        done[job.level] += 1

    show_progress()
    with _every(1.0, show_progress):
        train_all(prep, executor, on_done=on_done)
    show_progress()
    manifest = run.load_manifest()  # timings accumulate over resumed invocations
    tm = manifest.get("timings", {})
    manifest["timings"] = {
        "prepare_seconds": tm.get("prepare_seconds", 0.0) + t_prep,
        "train_wall_seconds": tm.get("train_wall_seconds", 0.0) + time.perf_counter() - t1,
        "invocations": tm.get("invocations", 0) + 1,
        "executor": executor.description,
    }
    run.save_manifest(manifest)


def _fixed_features(prep: Any, emit: Callable[..., None]) -> None:
    """Networks on a fixed feature map: compute the features the cache lacks before training
    (:mod:`harness.run.feature_prep`), with a status line at most every 10 s."""
    from harness.run.feature_prep import precompute_features, uses_fixed_features
    from harness.run.runner import resolve_device

    if not uses_fixed_features(prep.cfg):
        return
    last = [0.0]

    def report(done: int, total: int) -> None:
        if time.monotonic() - last[0] >= 10 or done == total:
            last[0] = time.monotonic()
            emit("status", f"computing the fixed features (once per machine): {done} of {total} new images")

    emit("status", "checking the fixed-feature cache")
    n, seconds = precompute_features(prep, resolve_device(prep.cfg.run.device), report)
    if n:
        emit("info", f"Fixed features of {n} new images computed in {seconds:.0f} s ({n / max(seconds, 1e-9):.0f} "
                     "images/s) and cached for every later run on this machine.")


@contextmanager
def _every(seconds: float, fn: Callable[[], None]) -> Iterator[None]:
    """Call ``fn`` every ``seconds`` in a daemon thread while the block runs (a failing progress
    report never stops the run)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(seconds):
            try:
                fn()
            except Exception:
                pass

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _attack_phase(run_path: Path, overrides: dict[str, Any] | None, emit: Callable[..., None],
                  cfg: ExperimentConfig | None = None) -> Results:
    """Score the saved signals and replace the run's reports and saved attack settings as one
    change (harness.audit.report.write_outputs). ``cfg``: the config to attack with (``evaluate``'s,
    whose attack settings config.json receives only in that commit); default the run's config.json.
    The caller holds the run's lock."""
    from harness.audit.attack_phase import evaluate_run
    from harness.audit.report import write_outputs
    from harness.run.runstore import RunDir

    emit("status", "running attacks on saved signals")
    results, curves = evaluate_run(RunDir(run_path), attack_overrides=overrides, cfg=cfg)
    write_outputs(run_path, results, curves)
    return Results(run_path, results, curves)


def attack(run_dir: Path | str, overrides: dict[str, Any] | None = None, *, wait: bool = False,
           progress: ProgressFn | None = None) -> Results:
    """Re-run the attacks on a run's saved signals (no retraining) and rewrite its reports:
    ``harness attack``. ``overrides`` (``attack.*`` keys) change the run's saved attack settings,
    saved with the new results in one commit (an interrupted call changes neither)."""
    from harness.run.runstore import RunDir

    emit = _emitter(progress)
    run_path = Path(run_dir)
    run = RunDir(run_path)
    run.require()  # before the lock, which would create the folder
    with _locked(run_path, wait, emit):
        if note := run.recover():
            emit("repaired", note)
        if overrides:
            listed = ", ".join(f"{k}={v}" for k, v in overrides.items())
            emit("info", f"Changing the run's saved attack settings: {listed}; they are saved in "
                         f"{run_path / 'config.json'} together with the new results when the attacks finish (an "
                         "interrupted run changes neither).")
        res = _attack_phase(run_path, overrides, emit)
        if overrides:
            emit("info", f"Saved the new attack settings in {run_path / 'config.json'}.")
        return res


def tune(defense: str, preset: str | None = None, overrides: dict[str, Any] | None = None, *,
         min_accuracy: float | None = None, grid: dict[str, list[Any]] | None = None,
         private: dict[str, str] | None = None, models_per_point: int = 4, max_models_per_point: int = 12,
         out: Path | str | None = None, wait: bool = False, progress: ProgressFn | None = None) -> Any:
    """``harness tune``: search the defense's privacy knobs (``Defense.privacy_knobs``; ``grid``
    replaces their values or adds config keys, ``private`` gives an added key's more private
    direction) for the most private setting whose validation accuracy meets ``min_accuracy`` (a
    fraction), or without it the most accurate setting; returns a
    :class:`harness.tuning.search.TuneResult` and writes ``out/tune.json`` (default
    ``runs/tune-<defense>-<preset>``, which also holds the settings' run directories: evaluating the
    choice with ``--out`` there resumes its run). docs/tuning.md."""
    from harness.tuning.search import make_spec, run_tune

    spec = make_spec(defense, preset, dict(overrides or {}), min_accuracy, dict(grid or {}), dict(private or {}),
                     models_per_point, max_models_per_point, out)
    return run_tune(spec, _emitter(progress), wait)


def tuned_overrides(tune_json: Path | str) -> tuple[str, str, dict[str, Any]]:
    """(defense, preset, overrides) that evaluate the setting a tune.json chose, in its folder:
    ``harness evaluate --from-tune FILE``. ConfigError where the file is unreadable or chose nothing."""
    from harness.core import jsonio

    path = Path(tune_json)
    try:
        data = jsonio.loads(path.read_text())
        choice, defense, preset = data["choice"], data["defense"], data["preset"]
        overrides = dict(data["overrides"])
    except FileNotFoundError:
        raise ConfigError(f"--from-tune {path}: no such file (harness tune writes OUT/tune.json)") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"--from-tune {path}: not a tune.json ({type(e).__name__}: {e})") from None
    if choice is None:
        raise ConfigError(f"--from-tune {path}: that tune chose no setting ({data.get('why', 'no reason recorded')})")
    return defense, preset, {**overrides, **choice["params"], "run.out": str(path.parent)}


def load_run(run_dir: Path | str) -> Results:
    """A finished run's :class:`Results`, read from its results.json (nothing is written)."""
    return Results.load(run_dir)


def run_page(results: dict[str, Any]) -> str:
    """A run's self-contained HTML page (the leaderboard's entry page: ROC figures, attack table,
    config, provenance), as ``harness report --html`` writes it; ConfigError where results.json lacks
    what the page needs."""
    from leaderboard.site import entry_html

    try:
        return entry_html(results, {"source": "run"}, results_href="results.json", index_href=None)
    except (KeyError, TypeError, IndexError, StopIteration) as e:
        raise ConfigError(f"results.json lacks what the page needs ({type(e).__name__}: {e}); `harness attack` "
                          "rewrites it") from None


def report(run_dir: Path | str, *, html: bool | Callable[[dict[str, Any]], str] = False, wait: bool = False,
           progress: ProgressFn | None = None) -> Results:
    """Re-export a run's table.csv and attacks.csv from its results.json (``harness report``);
    ``html=True`` also writes report.html (the run's page, :func:`run_page`, as ``--html`` does), in
    the same commit; a callable (results -> page) writes the page it returns instead.

    A run directory this process cannot write (an archived or shared run) is read as it is, under
    a shared lock: its Results are returned and a ``note`` says the CSVs were not re-exported
    (``html`` there is a ConfigError: the page has nowhere to go)."""
    if html is True:
        html = run_page
    elif html is False or html is None:
        html = None
    elif not callable(html):
        raise ConfigError(f"html= takes True, False or a function results -> page (str), not {type(html).__name__}")
    from harness.audit.report import csv_files
    from harness.run.runlock import ReadOnlyRunError
    from harness.run.runstore import COMMIT_JOURNAL, RunDir

    emit = _emitter(progress)
    Results.load(run_dir)  # a missing or damaged results.json: one line, before the lock
    try:
        with _locked(Path(run_dir), wait, emit):
            run = RunDir(run_dir)
            run.recover()
            res = Results.load(run_dir)
            files = csv_files(res.data)
            if html is not None:
                files["report.html"] = html(res.data).encode()
            run.commit(files)
        return res
    except ReadOnlyRunError as e:
        if html is not None:
            raise ConfigError(f"--html (html=) writes report.html into {run_dir}, which is read-only here; copy the "
                              "run directory to a writable folder for the page (without --html the report is "
                              "printed)") from e
    with _locked(Path(run_dir), wait, emit, shared=True):
        if (Path(run_dir) / COMMIT_JOURNAL).is_file():
            emit("note", f"an interrupted attack phase left new results uncommitted in {run_dir} ({COMMIT_JOURNAL}), "
                         "which is read-only here: these are the results from before it")
        res = Results.load(run_dir)
    emit("note", f"{run_dir} is read-only here: the report is read from its results.json; table.csv and attacks.csv "
                 "were not re-exported (they are as the attack phase wrote them)")
    return res


def compare(a: Path | str | Results, b: Path | str | Results, fpr: float | None = None) -> Any:
    """Two runs side by side (``harness compare``): a :class:`harness.audit.compare.Comparison` of
    their headlines and per-attack tables at ``fpr`` (default: A's headline FPR; else 0 or any FPR
    of both runs' ``attack.fprs``, a ConfigError otherwise), with the differences, whether the CIs
    overlap, unresolved TPRs marked as such, what only one run has and the runs' provable bounds."""
    from harness.audit.compare import compare_results

    return compare_results(a if isinstance(a, Results) else load_run(a), b if isinstance(b, Results) else load_run(b),
                           fpr)


def audit_one_run(defense: str, preset: str = "quick", overrides: dict[str, Any] | None = None, *, canaries: int = 100,
                  taus: list[float] | None = None, game: str = "weighted") -> tuple[dict[str, Any], Path]:
    """The label-flip memorization game on one trained model (``harness audit-one-run``): the
    result and the JSON file it was saved to (in ``run.out``). ``game`` names the headline:
    ``weighted`` (the paper's text, the default), ``paper`` (the authors' code's estimator) or
    ``clopper-pearson``; all three are played and saved (docs/bounds.md)."""
    from harness.audit.label_flip import GAMES, audit_one_run as play, check_one_run_overrides
    from harness.core.install_check import check_torch_builds
    from harness.run.runner import defense_slug
    from harness.run.runstore import atomic_write_json

    check_torch_builds()
    overrides = dict(overrides or {})
    check_one_run_overrides(overrides)
    cfg = configure(defense, preset, overrides)
    if taus and any(not 0.5 <= t <= 0.99 for t in taus):
        raise ConfigError(f"--tau values (taus=) must lie in [0.5, 0.99], got {taus}")
    if game not in GAMES:
        raise ConfigError(f"--game (game=) must be one of {', '.join(GAMES)}, got {game!r}")
    out_dir = Path(cfg.run.out)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"run.out (--out) {out_dir} is a file; it must be the folder for the JSON result")
    path = out_dir / f"audit-one-run-{defense_slug(cfg.defense)}-{cfg.preset}-seed{cfg.seed}-n{canaries}.json"
    try:  # the folder must take the result before the model trains, not after
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=out_dir, prefix=".write-check-", delete=True)
        probe.close()
    except OSError as e:
        raise ConfigError(f"run.out (--out) {out_dir} cannot take the JSON result ({e.strerror or type(e).__name__}); "
                          "nothing was trained") from None
    res = play(cfg, canaries, taus or None, game)
    atomic_write_json(path, res)
    return res, path


def audit_dp_one_run(defense: str, preset: str = "quick", overrides: dict[str, Any] | None = None, *,
                     canaries: int = 1000, canary: str = "mislabeled", shadows: int = 0, attack: str | None = None,
                     confidence: float = 0.95, gdp_correction: str = "bonferroni", wait: bool = False,
                     progress: ProgressFn | None = None) -> tuple[dict[str, Any], Path]:
    """The one-run DP audit (``harness audit-one-run`` on a DP-SGD defense, or ``--design membership``):
    ``canaries`` canaries of kind ``canary`` each in one target model's training set with probability
    1/2, guessed by the loss threshold or, with ``shadows`` K models, LiRA or RMIA (``attack``); returns
    the result (its ``bracket``: the accountant's and the PLD epsilon, the provable TPR curve, the
    one-run f-DP and Steinke et al. bounds and the GDP reading of the ROC) and the audit's folder, which
    also holds result.json and report.html (the bracket's figure and table). Every mistake is a
    ConfigError before anything trains; finished models are kept and reused (docs/bounds.md)."""
    from harness.audit.dp_one_run import OneRunSpec, audit, check_overrides, plan as plan_audit
    from harness.core.atomic import atomic_write_bytes
    from harness.core.install_check import check_torch_builds
    from leaderboard.one_run_page import one_run_page

    emit = _emitter(progress)
    check_torch_builds()
    overrides = dict(overrides or {})
    check_overrides(overrides)
    cfg = configure(defense, preset, overrides)
    spec = OneRunSpec(canaries=canaries, canary=canary, shadows=shadows, attack=attack, alpha=1 - confidence,
                      correction=gdp_correction)
    p = plan_audit(cfg, spec)
    from harness.run.runlock import ReadOnlyRunError

    try:
        with _locked(p.folder, wait, emit):
            res = audit(p, lambda kind, msg: emit(kind, msg))
            atomic_write_bytes(p.folder / "report.html", one_run_page(res).encode())
    except ReadOnlyRunError as e:
        raise ConfigError(f"run.out (--out): the audit folder {p.folder} cannot be written ({e}); nothing was "
                          "trained") from None
    return res, p.folder


def plan(folder: Path | str, preset: str | None = None, overrides: dict[str, Any] | None = None, *,
         progress: ProgressFn | None = None) -> Any:
    """Write an audit plan for models trained outside the harness (``harness plan``): for ``preset``
    (default quick) with ``overrides`` (the dataset, ``audit.canary``, ``audit.models``, ...), the
    folder ``folder`` receives the dataset with the canaries applied and each model's training set,
    the query set and its views, the recipe, every model's seed and the shapes expected back
    (docs/external-models.md), written as one change. Returns the
    :class:`harness.run.external.Plan` (``path``, ``fingerprint``, ``meta``: plan.json). A folder
    that already holds this very plan is left as it is (a ``note`` says so); any other non-empty
    folder is a ConfigError."""
    from harness.run.external import DEFENSE, build_plan, check_plan_folder, read_plan, write_plan

    emit = _emitter(progress)
    cfg = configure(DEFENSE, preset, overrides)
    check_plan_folder(Path(folder))  # a file, or a folder holding something else: refused before the plan is built
    emit("status", "building the audit plan (data, canaries, training sets, query views)")
    build = build_plan(cfg)
    if not write_plan(build, Path(folder)):
        emit("note", f"{folder} already holds this plan (fingerprint {build.fingerprint[:12]}): nothing was written")
    from harness.audit.resolution import plan_note

    note = plan_note(cfg, build.designs, build.pool_size, int(build.meta["num_classes"]))
    if note:  # before anything is trained: the FPRs the plan's design cannot resolve, and the S that would
        emit("note", note)
    return read_plan(Path(folder), check_files=False)


def import_outputs(plan: Path | str, outputs: Path | str, *, run_dir: Path | str | None = None, partial: bool = False,
                   name: str | None = None, overrides: dict[str, Any] | None = None, wait: bool = False,
                   force: bool = False, probabilities: bool = False, progress: ProgressFn | None = None) -> Results:
    """Audit models trained outside the harness from their outputs (``harness import``): check the
    plan and every output file under ``outputs`` (``<experiment>/model_0007.npz``) before anything
    is written, build a normal run directory of the ``external`` defense (default
    ``<run.out>/external-<name>-<preset>-<fingerprint>``; ``run_dir`` names it), run the attack phase and
    return its :class:`Results`. ``partial``: audit the models present when some are missing and
    the design stays balanced enough (a ``note`` says how many); ``name``: a label for the models;
    ``overrides``: ``attack.*`` settings and ``run.out``; ``force``: import although the
    membership-consistency check fails (results.json and the leaderboard mark it forced);
    ``probabilities``: outputs that are probabilities are imported as their log (refused
    otherwise). The run directory appears only complete (built in a temp folder beside it, locked,
    attacked, then renamed; a temp folder that a killed import left is removed by the next one);
    importing the same outputs again re-runs its attack phase, and of two imports of the same
    outputs at once, the second to finish returns the first one's run."""
    import shutil

    from harness.run.external import check_import, publish, remove_stale_temps, write_import
    from harness.run.runstore import RunDir

    emit = _emitter(progress)
    emit("status", "checking the plan and every output file")
    job = check_import(Path(plan), Path(outputs), partial=partial, name=name, overrides=dict(overrides or {}),
                       run_dir=Path(run_dir) if run_dir is not None else None, force=force,
                       probabilities=probabilities)
    for line in job.notes:
        emit("note", line)
    path = job.path
    assert path is not None
    if RunDir(path).exists():  # check_import found these very outputs imported there (same fingerprint)
        emit("info", f"{path} already holds these outputs (run fingerprint {job.fingerprint[:12]}): re-running its "
                     "attack phase")
        with _locked(path, wait, emit):
            if note := RunDir(path).recover():
                emit("repaired", note)
            return _attack_phase(path, None, emit, job.cfg)
    parent = path.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    for stale in remove_stale_temps(path):
        emit("repaired", f"removed {stale}, the temp folder of an import that was killed")
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.import-", dir=parent))
    try:
        with _locked(tmp, False, emit):  # from the start: the next import sees it is in use, not left behind
            emit("status", "writing the run directory")
            write_import(job, tmp)
            _attack_phase(tmp, None, emit, job.cfg)
            try:
                publish(tmp, path)  # onto a missing or empty folder: the run appears complete or not at all
            except OSError:
                if not _same_run(path, job.fingerprint):
                    raise
                # another import of these very outputs finished first (same run fingerprint): keep its run
                shutil.rmtree(tmp, ignore_errors=True)
                emit("info", f"{path} was completed meanwhile by another import of these outputs (run fingerprint "
                             f"{job.fingerprint[:12]}); this import's copy was discarded")
                saved = Results.load(path)
                if saved.data.get("config") == job.cfg.model_dump(mode="json"):
                    return saved
                with _locked(path, True, emit):  # other attack settings: re-run its attack phase with these
                    return _attack_phase(path, None, emit, job.cfg)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    emit("info", f"Run directory: {path} (fingerprint {job.fingerprint[:12]}; trained outside the harness)")
    return Results.load(path)


def _same_run(path: Path, fingerprint: str) -> bool:
    """Whether ``path`` is a run directory of the run ``fingerprint`` with its results written."""
    from harness.run.runstore import RunDir

    run = RunDir(path)
    try:
        return run.exists() and run.load_manifest().get("fingerprint") == fingerprint and \
            (path / "results.json").is_file()
    except (OSError, ValueError):
        return False
