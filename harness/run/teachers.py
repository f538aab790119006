"""Reuse saved undefended models as the starting point of a defense (DFKD's teachers).

A defense that declares ``reuses_undefended`` (DFKD) begins by training the undefended model of
its training set with the preset's recipe, which dominates its cost. A run of
``harness evaluate undefended --save-models`` with the same data, audit design, canaries, recipe
and seed already holds that model, for every index and level. Before any training,
:func:`resolve_teachers` finds such a run, per level:

- ``defense_params.teacher_run=PATH`` names it: every training fingerprint must match and every
  model of the level must be saved, else a one-line error before anything is trained or written;
- otherwise every run directory under ``run.out`` is considered (an undefended run with saved
  models whose training fingerprints all match); none found: the defense trains its own.

The training fingerprints (:func:`training_fingerprints`) are what determines undefended model i
of a level: the harness version, the data arrays, the audit design (audit indices and the
membership matrix, so index i has the same training set in both runs), the level's canaries (the
rewritten audit samples and any extra samples), the recipe (``train.*``) and the seeds (``seed``,
``audit.rng`` and ``audit.models`` give model i's seed). The choice is recorded in the manifest
(``undefended_runs``); each job then reads its model with :func:`load_undefended`, which checks the
saved file against the level fingerprint recorded at that time and the model's seed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from defenses.base import SavedModel
from harness.core.version import MODELS_VERSION, models_version_of
from harness.core.config import ConfigError, ExperimentConfig
from harness.run.runstore import LevelDesign, RunDir, RunDirError, sha256_arrays, sha256_json

COMPONENTS = ("harness version", "data", "design", "canaries", "recipe", "seed")


def training_fingerprints(cfg: ExperimentConfig, data_fingerprint: str, ld: LevelDesign,
                          models_version: str | None = MODELS_VERSION) -> dict[str, Any]:
    """{component: fingerprint} of what determines the undefended models of one level (module doc);
    ``models_version``: of the code that trained them (a saved run's, from its manifest)."""
    d, c = ld.design, ld.canaries
    return {
        "harness version": models_version,
        "data": data_fingerprint,
        "design": sha256_arrays(d.audit_indices, d.membership),
        "canaries": sha256_json({"canary": ld.canary, "arrays": sha256_arrays(c.x, c.y, c.extra_x, c.extra_y)}),
        "recipe": cfg.train.model_dump(mode="json"),
        "seed": {"seed": cfg.seed, "audit.rng": cfg.audit.rng, "audit.models": cfg.audit.models},
    }


def _differences(mine: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """The differing components, with the differing values for the recipe and the seeds."""
    out = []
    for k in COMPONENTS:
        a, b = mine[k], theirs[k]
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            keys = sorted(f for f in set(a) | set(b) if a.get(f) != b.get(f))
            prefix = "train." if k == "recipe" else ""
            out.append(f"{k} (" + ", ".join(f"{prefix}{f} {b.get(f)!r} vs {a.get(f)!r}" for f in keys) + ")")
        else:
            out.append(k)
    return out


def _undefended_config(run: RunDir) -> tuple[ExperimentConfig, dict[str, Any]] | None:
    """(config, manifest) of an undefended run directory without defense parameters, else None."""
    try:
        cfg, manifest = run.load_config(), run.load_manifest()
    except (ConfigError, OSError, ValueError):
        return None
    if cfg.defense != "undefended" or cfg.defense_params:
        return None
    return cfg, manifest


def _match(run: RunDir, cfg: ExperimentConfig, data_fingerprint: str,
           ld: LevelDesign) -> tuple[str | None, dict[str, Any] | None]:
    """(why not, None) or (None, source record) for one candidate run and one level."""
    found = _undefended_config(run)
    if found is None:
        return "it is not a run of the undefended defense (without defense_params)", None
    their_cfg, manifest = found
    level = manifest.get("levels", {}).get(ld.level)
    if level is None:
        return f"it has no {ld.level} level", None
    try:
        their_ld = run.load_level(ld.level)
    except (RunDirError, OSError, ValueError, KeyError):
        return f"its {ld.level} design cannot be read", None
    diffs = _differences(training_fingerprints(cfg, data_fingerprint, ld),
                         training_fingerprints(their_cfg, str(manifest.get("data_fingerprint")), their_ld,
                                               models_version_of(manifest)))
    if diffs:
        return "; ".join(diffs) + " differ(s) (that run's vs this run's)", None
    saved = run.saved_models(ld.level, cfg.audit.models)
    return None, {"run": str(run.path.resolve()), "level_fingerprint": level["fingerprint"], "saved_models": len(saved)}


def check_teacher_run(path: str, cfg: ExperimentConfig, data_fingerprint: str,
                      designs: list[LevelDesign]) -> dict[str, dict[str, Any]]:
    """The explicitly named run (``defense_params.teacher_run``) for every level, or ConfigError."""
    run = RunDir(Path(path).expanduser())
    try:
        run.require()
    except RunDirError as e:
        raise ConfigError(f"defense_params.teacher_run: {e}") from None
    out = {}
    for ld in designs:
        why, rec = _match(run, cfg, data_fingerprint, ld)
        if rec is None:
            raise ConfigError(f"defense_params.teacher_run {path}: refused as the {ld.level} teachers: {why}")
        if rec["saved_models"] < cfg.audit.models:
            raise ConfigError(f"defense_params.teacher_run {path}: {rec['saved_models']} of {cfg.audit.models} "
                              f"{ld.level} models are saved; run `harness evaluate undefended ... --save-models` "
                              "into a fresh run directory (models finished without it are not re-saved)")
        out[ld.level] = {**rec, "required": True}
    return out


def find_teacher_runs(cfg: ExperimentConfig, data_fingerprint: str, designs: list[LevelDesign],
                      exclude: Path | None = None) -> dict[str, dict[str, Any]]:
    """For each level, the matching undefended run under ``run.out`` with the most saved models
    (levels without one are absent)."""
    root = Path(cfg.run.out)
    if not root.is_dir():
        return {}
    candidates = [RunDir(p) for p in sorted(root.iterdir()) if (p / "manifest.json").is_file()
                  and (exclude is None or p.resolve() != exclude.resolve())]
    candidates = [r for r in candidates if _undefended_config(r) is not None]
    out: dict[str, dict[str, Any]] = {}
    for ld in designs:
        for run in candidates:
            _, rec = _match(run, cfg, data_fingerprint, ld)
            if rec is not None and rec["saved_models"] and rec["saved_models"] > out.get(ld.level, {}).get("saved_models", 0):
                out[ld.level] = {**rec, "required": False}
    return out


def resolve_teachers(cfg: ExperimentConfig, data_fingerprint: str, designs: list[LevelDesign],
                     teacher_run: str | None, run_path: Path) -> dict[str, dict[str, Any]]:
    """{level: source record} of the saved undefended models a ``reuses_undefended`` defense uses."""
    if teacher_run:
        return check_teacher_run(teacher_run, cfg, data_fingerprint, designs)
    return find_teacher_runs(cfg, data_fingerprint, designs, exclude=run_path)


def load_undefended(source: dict[str, Any], level: str, index: int, seed: int, device: str) -> SavedModel | None:
    """Model ``index`` of ``level`` from a source recorded by :func:`resolve_teachers`, checked
    against the level fingerprint recorded then and the model's seed; None when it is not saved and
    the source is optional (the defense trains it)."""
    from defenses.models import rebuild_model

    run = RunDir(source["run"])
    state = run.read_model(level, index, source["level_fingerprint"])
    if state is None:
        if source.get("required"):
            raise ConfigError(f"teacher run {source['run']}: model {index} of {level} is missing or no longer "
                              "matches the run it was checked against")
        return None
    if state["meta"].get("seed") != seed:
        raise ConfigError(f"teacher run {source['run']}: model {index} of {level} has seed "
                          f"{state['meta'].get('seed')}, this run's model has {seed}")
    if state.get("arch") is None:
        raise ConfigError(f"teacher run {source['run']}: model {index} of {level} has no architecture record")
    net = rebuild_model(state["arch"], state["state_dict"]).to(device).eval()
    return SavedModel(net=net, source=str(run.model_path(level, index)))
