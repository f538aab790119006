"""``harness tune``: train a few models at each setting of a grid, read their validation accuracy,
and pick a setting (:mod:`harness.tuning.rule`).

Each setting is a run of ``harness evaluate`` with the setting's overrides, of which the tuner
trains only the first models of the first sample-level experiment (the audited models: canaries
inserted, membership drawn as the evaluation draws it): the run directories are the evaluation's,
in ``out``, so that evaluating the chosen setting with the same ``--out`` resumes its run and trains
only the models the tuner did not. Models are trained in rounds, every setting that wants more
models in one pool of jobs; an interrupted tune keeps every finished model and the same command
resumes it. Accuracy is read on the validation split held out of the training pool
(``data.validation_size``), never on the test images.
"""

from __future__ import annotations

import math
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from harness.core import jsonio
from harness.core.accuracy import unpack_correct
from harness.defense_config import build_config
from harness.core.errors import ConfigError
from harness.tuning.grid import Knob, grid_points, resolve_knobs
from harness.tuning.rule import Choice, Setting, choose, meets_confidence, stop_reason

#: the fewest models a setting gets (the accuracy's t interval covers from 4: harness.core.accuracy)
MIN_MODELS = 4


@dataclass(frozen=True)
class TuneSpec:
    """What to tune: the defense and preset, the user's fixed overrides, the target and the knobs."""

    defense: str
    preset: str
    overrides: dict[str, Any]
    min_accuracy: float | None
    knobs: list[Knob]
    models_per_round: int
    max_models: int
    out: Path


@dataclass(frozen=True)
class TuneResult:
    """What ``harness tune`` found: the settings with their models' validation accuracy, the choice,
    and ``path``, the tune.json written."""

    spec: TuneSpec
    settings: list[Setting]
    choice: Choice
    path: Path
    data: dict[str, Any]


def default_out(defense: str, preset: str) -> Path:
    from harness.run.runner import defense_slug

    return Path("runs") / f"tune-{defense_slug(defense)}-{Path(preset).stem}"


def make_spec(defense: str, preset: str | None, overrides: dict[str, Any], min_accuracy: float | None,
              grid: dict[str, list[Any]], private: dict[str, str], models_per_round: int, max_models: int,
              out: str | Path | None) -> TuneSpec:
    """Check the request before anything trains (ConfigError, one line)."""
    import defenses

    preset = preset or "quick"
    if min_accuracy is not None and not 0 < min_accuracy < 1:
        raise ConfigError(f"--min-accuracy is a fraction in (0, 1) (0.55 for 55%), got {min_accuracy}")
    if models_per_round < MIN_MODELS:
        raise ConfigError(f"--models-per-point must be at least {MIN_MODELS} (the accuracy's interval needs them: "
                          f"harness/core/accuracy.py), got {models_per_round}")
    if max_models < models_per_round:
        raise ConfigError(f"--max-models-per-point ({max_models}) is below --models-per-point ({models_per_round})")
    for key in ("run.out", "run.level", "defense", "preset"):
        if key in overrides:
            raise ConfigError(f"--set {key}=...: harness tune sets it (--out for the folder)")
    if isinstance(overrides.get("data.path"), str):  # tune.json and its command work from any folder
        from harness.core.config import absolute_path

        overrides = {**overrides, "data.path": absolute_path(overrides["data.path"])}
    knobs = resolve_knobs(defense, defenses.resolve(defense), grid, private, min_accuracy is not None)
    clash = sorted(set(overrides) & {k.key for k in knobs})
    if clash:
        raise ConfigError(f"{clash[0]} is searched (a knob): give its values with --grid, not --set")
    from harness.core.data import check_data_path

    # the base configuration and the data's place, before torch is imported: a mistake is refused in seconds
    check_data_path(build_config(preset, {**overrides, "defense": defense}).data)
    return TuneSpec(defense, preset, dict(overrides), min_accuracy, knobs, models_per_round, max_models,
                    Path(out) if out is not None else default_out(defense, preset))


def _point_overrides(spec: TuneSpec, params: dict[str, Any]) -> dict[str, Any]:
    return {**spec.overrides, **params, "run.out": str(spec.out), "run.level": "sample"}


def _validation_table(run: Any, level: str, count: int, images: int) -> np.ndarray:
    rows = []
    for i in range(count):
        meta = run.read_signals_meta(level, i)
        if meta is None or not isinstance(meta.get("validation_correct"), str):
            raise ConfigError(f"{run.path}: {level} model {i} has no validation answers (trained by an older "
                              "version?): delete that run directory and tune again")
        rows.append(unpack_correct(meta["validation_correct"], images))
    return np.stack(rows)


def _dp_record(run: Any, level: str, count: int) -> dict[str, Any]:
    """The largest epsilon (DP or label-DP) and the noise the models report, where they report one."""
    out: dict[str, Any] = {}
    for i in range(count):
        info = (run.read_signals_meta(level, i) or {}).get("defense_info") or {}
        for key in ("epsilon", "label_epsilon", "noise_multiplier"):
            v = info.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[key] = max(out.get(key, -math.inf), float(v))
    return out


def _locked(path: Path, wait: bool, emit: Callable[..., None]) -> Any:
    """The run directory's lock (harness.run.runlock), as ``harness evaluate`` takes it."""
    from harness.run.runlock import RunLock

    def waiting(holder: Any) -> None:
        emit("waiting", f"waiting for {holder.describe() if holder is not None else 'another process'} to finish "
                        f"with {path}")

    return RunLock(path, wait=wait, on_wait=waiting)


def _fixed_features(prep: Any, emit: Callable[..., None]) -> None:
    """A fixed feature map's features the cache lacks, computed before the round trains
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

    n, seconds = precompute_features(prep, resolve_device(prep.cfg.run.device), report)
    if n:
        emit("info", f"Fixed features of {n} new images computed in {seconds:.0f} s and cached for every later run.")


def _images_key(prep: Any) -> str:
    """A digest of the images a run's models train on and are queried on (its data and each level's
    canaries and population rows): settings with the same key need the same fixed features."""
    import hashlib

    h = hashlib.sha256(prep.data.fingerprint().encode())
    for level in prep.levels:
        ld = prep.run.load_level(level)
        c = ld.canaries
        for a in (c.x, c.extra_x, c.neighbour_x if c.has_neighbours else c.x[:0], ld.population_indices):
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def run_tune(spec: TuneSpec, emit: Callable[..., None], wait: bool = False) -> TuneResult:
    """Rounds of training until every setting is settled (:func:`harness.tuning.rule.stop_reason`),
    then the choice; writes ``spec.out / tune.json``."""
    from harness.core.install_check import check_torch_builds
    from harness.run.executors import check_engine, make_executor, start_worker_server
    from harness.run.runner import open_run, plan_run, resolve_device, train_group, training_groups

    check_torch_builds()
    t0 = time.perf_counter()
    points = grid_points(spec.knobs)
    emit("status", f"checking the {len(points)} settings")
    cfgs = [build_config(spec.preset, {**_point_overrides(spec, p), "defense": spec.defense}) for p in points]
    base = cfgs[0]
    if base.data.validation_size == 0:
        raise ConfigError(f"harness tune reads accuracy on a validation split held out of the training pool, and the "
                          f"{base.preset} preset holds none: set one with --set data.validation_size=N (the evaluation "
                          "then holds out the same images)")
    check_engine(base.run.executor, base.run)
    if base.run.executor == "local" and base.run.workers != 1:
        start_worker_server()
    settings = [Setting(dict(p)) for p in points]
    plans = {}
    for s, cfg in zip(settings, cfgs):
        plan = plan_run(cfg)
        plans[id(s)] = plan
        s.run_dir = str(plan.path)
    images = plans[id(settings[0])].data.validation_size
    executor = make_executor(base.run.executor, base.run.workers, resolve_device(base.run.device), base.run,
                             spec.out)
    # a setting gets at most its run's S models (the evaluation's design)
    cap = {id(s): min(spec.max_models, plans[id(s)].cfg.audit.models) for s in settings}
    want = {id(s): min(spec.models_per_round, cap[id(s)]) for s in settings}
    rounds = 0
    featured: set[str] = set()
    while True:
        active = [s for s in settings if s.stop is None and want[id(s)] > s.models]
        if not active:
            break
        rounds += 1
        with ExitStack() as stack:
            groups, preps = [], {}
            for s in active:
                plan = plans[id(s)]
                stack.enter_context(_locked(plan.path, wait, emit))
                prep = open_run(plan)
                preps[id(s)] = prep
                key = _images_key(prep)
                if key not in featured:  # settings that query the same images share one check of the cache
                    _fixed_features(prep, emit)
                    featured.add(key)
                groups += training_groups(prep, {prep.levels[0]: want[id(s)]})
            total = sum(len(g.indices) for g in groups)
            if total:
                emit("info", f"Round {rounds}: {total} models at {len(active)} settings with {executor.description}.")
            done = 0
            emit("train", level=f"round {rounds}", done=0, total=total, finished=0)
            for _, metas in executor.map(train_group, groups):
                done += len(metas)
                emit("train", level=f"round {rounds}", done=done, total=total, finished=done)
            for s in active:
                prep = preps[id(s)]
                level = prep.levels[0]
                s.table = _validation_table(prep.run, level, want[id(s)], images)
                s.extra = _dp_record(prep.run, level, want[id(s)])
        best = max((x for x in settings if x.models), key=lambda x: x.accuracy.mean)
        for s in settings:
            if s.models:
                s.stop = stop_reason(s, spec.min_accuracy, best, cap[id(s)])
                if s.stop is None:
                    want[id(s)] = min(s.models + spec.models_per_round, cap[id(s)])
    choice = choose(settings, spec.min_accuracy, spec.knobs)
    data = tune_json(spec, settings, choice, images, time.perf_counter() - t0, base)
    path = spec.out / "tune.json"
    from harness.run.runstore import atomic_write_json

    spec.out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, data)
    return TuneResult(spec, settings, choice, path, data)


def _params_json(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items()}


def evaluate_command(spec: TuneSpec, params: dict[str, Any], cfg: Any) -> str:
    """The ``harness evaluate`` command that audits ``params`` with the tune's fixed overrides, in the
    tune's folder (it resumes the setting's run)."""
    import shlex

    parts = ["harness", "evaluate", spec.defense]
    if spec.preset != "quick":
        parts += ["--preset", spec.preset]
    over = {k: v for k, v in spec.overrides.items()}
    if "data.path" in over:
        parts += ["--data-dir", str(over.pop("data.path"))]
    parts += ["--out", str(spec.out)]
    for k, v in {**over, **params}.items():
        parts += ["--set", f"{k}={jsonio.dumps(v) if not isinstance(v, str) else v}"]
    return " ".join(shlex.quote(p) for p in parts)


def tune_json(spec: TuneSpec, settings: list[Setting], choice: Choice, images: int, seconds: float,
              cfg: Any) -> dict[str, Any]:
    """tune.json (docs/tuning.md): the request, every setting with its models' validation accuracy,
    the Pareto set, the choice and why, and the command that evaluates it."""
    from harness.core.version import __version__
    from harness.tuning import rule

    def entry(s: Setting) -> dict[str, Any]:
        e: dict[str, Any] = {"params": _params_json(s.params), "run_dir": s.run_dir, "models": s.models,
                             "stopped": s.stop}
        if s.models:
            e["validation_accuracy"] = s.accuracy.json()
            if spec.min_accuracy is not None:
                e["confidence_meets_target"] = meets_confidence(s, spec.min_accuracy)
                e["meets_target"] = s.accuracy.mean >= spec.min_accuracy
        if s.extra:
            e["defense_info"] = s.extra
        return e

    chosen = choice.chosen
    return {
        "harness_version": __version__,
        "defense": spec.defense,
        "preset": spec.preset,
        "overrides": spec.overrides,
        "min_accuracy": spec.min_accuracy,
        "knobs": [{"key": k.key, "values": list(k.values), "more_private": k.more_private} for k in spec.knobs],
        "validation_images": images,
        "models_per_round": spec.models_per_round,
        "max_models_per_point": spec.max_models,
        "rule": {"sure": rule.SURE, "model_share": rule.MODEL_SHARE,
                 "text": "each setting's accuracy on the validation split (mean over models and images, SE over "
                         "both, Student t); more models while its side of the target is unsure and more models "
                         "can move it; the most private setting whose estimate meets the target (docs/tuning.md)"},
        "settings": [entry(s) for s in settings],
        "pareto": [_params_json(s.params) for s in choice.pareto],
        "choice": None if chosen is None else {
            "params": _params_json(chosen.params), "run_dir": chosen.run_dir,
            "validation_accuracy": chosen.accuracy.json(), "defense_info": chosen.extra,
            **({"confidence_meets_target": meets_confidence(chosen, spec.min_accuracy)}
               if spec.min_accuracy is not None else {}),
            "command": evaluate_command(spec, chosen.params, cfg)},
        "closest": None if choice.closest is None else {"params": _params_json(choice.closest.params),
                                                        "validation_accuracy": choice.closest.accuracy.json()},
        "why": choice.why,
        "seconds": seconds,
        "data_path": cfg.data.path,
    }
