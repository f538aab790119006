"""Typed experiment configuration: YAML presets shipped with the package plus CLI overrides.

A configuration is loaded in three steps: the preset's YAML file is read, the user's overrides
(dotted paths such as ``audit.models=16``) are applied to the raw mapping, and the result is
validated into :class:`ExperimentConfig`. Unknown keys, wrong types and impossible values raise
:class:`ConfigError` with one readable line; the CLI turns that into exit code 2.
"""

from __future__ import annotations

import copy
import os
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.core.errors import ConfigError
from harness.core.overrides import apply_overrides, parse_set_options

__all__ = ["ConfigError", "apply_overrides", "parse_set_options", "validate_config"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


#: the data folder of a cifar10 dataset whose ``data.path`` is unset (relative to the folder the run starts in)
DEFAULT_DATA_DIR = "data"


def absolute_path(path: str) -> str:
    """``path`` with ``~`` expanded, made absolute against the current folder and normalized
    (``os.path.abspath``: ``..`` and ``.`` removed, symlinks kept)."""
    return os.path.abspath(os.path.expanduser(path))


class DataConfig(_Strict):
    """Which dataset to load. ``path`` is the data directory (cifar10) or the .npz file (npz); a
    config built from the user's input holds it absolute (:meth:`ExperimentConfig.with_absolute_paths`)."""

    name: Literal["digits", "cifar10", "npz"] = "digits"
    path: str | None = None
    test_size: int = Field(default=500, ge=1, description="digits only: held-out test images")
    download: bool = Field(default=True, description="cifar10 only: download CIFAR-10 when the folder holds no batch files, and the "
                          "paper's OOD canary file (ood canaries without a source) when the folder lacks it")
    scale: float | None = Field(
        default=None, gt=0, allow_inf_nan=False,
        description="npz only: pixel = value x scale, rounded, for images that are not uint8-range values "
        "(e.g. 255 for floats in [0, 1], 255/1023 for 10-bit integers); None = no conversion but the documented "
        "ones (harness/core/data.py, load_npz)")
    normalization: Literal["dataset", "imagenet"] = Field(
        default="dataset", description="the per-channel mean and std images are normalized with: the dataset's own "
        "(CIFAR-10's, or computed from the digits) or ImageNet's (Tramer and Boneh's before the scattering transform)")
    validation_size: int = Field(
        default=0, ge=0,
        description="images held out of the training pool (a seeded draw, never trained on, never audited, not "
        "test images): each model's validation accuracy is measured on them, and `harness tune` chooses settings "
        "by it (docs/tuning.md); 0 = none")


#: ``audit.repeat_queries``' default: answers averaged per query view where serving is random
DEFAULT_REPEAT_QUERIES = 8


class AuditConfig(_Strict):
    """Audit design of paper section 5.2: C audit samples, each a member of exactly S/2 models."""

    models: int = Field(default=32, description="S, the number of models (even)")
    size: int = Field(default=200, ge=1, description="C, the number of audit samples")
    canary: str | list[str] | None = Field(
        default=None, description="sample-level canary (or several); None = the defense's default"
    )
    canary_params: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="per-canary parameters: {canary name: {param: value}}"
    )
    rng: Literal["harness", "paper"] = Field(
        default="harness", description="RNG tree of the design and canaries: ours, or the paper code's (harness/core/design.py)"
    )
    population_samples: int = Field(
        default=1000, ge=0, description="test images every model is also queried on (RMIA's population samples z)"
    )
    signal_dtype: Literal["float32", "float16"] = Field(
        default="float32",
        description="storage of each model's saved signals: float16 halves the disk and the attack phase's memory "
        "(relative rounding 2^-11; docs/protocol.md, Signals)",
    )

    repeat_queries: int = Field(
        default=DEFAULT_REPEAT_QUERIES, ge=1,
        description="R: where a model's serving is random (the same images answered differently when asked twice), "
        "each query view of the audit samples is asked R times and the mean log-probabilities saved as "
        "logits_averaged, which lira-averaged reads; 1 = never (docs/protocol.md, Random serving)",
    )

    @field_validator("canary_params", mode="before")
    @classmethod
    def _keyed_by_canary(cls, v: Any) -> Any:
        if isinstance(v, dict):
            flat = sorted(k for k, p in v.items() if not isinstance(p, dict))
            if flat:
                raise ValueError(
                    f"canary_params is keyed by canary name ({', '.join(map(str, flat))} is not a mapping): use "
                    "audit.canary_params.<canary>.<param>=VALUE, e.g. --set audit.canary_params.ood.source=PATH"
                )
        return v

    @field_validator("models")
    @classmethod
    def _even_models(cls, v: int) -> int:
        if v < 6 or v % 2:
            raise ValueError(
                f"must be an even number >= 6 (each audit sample is in exactly S/2 models, and leave-one-out "
                f"LiRA needs >= 2 IN and >= 2 OUT shadow models per victim), got {v}"
            )
        return v


#: the architectures :func:`defenses.models.build_model` builds, by name (here, without torch)
MODEL_KINDS = ("mlp", "mlp-bn", "cnn", "wrn16-4", "cnn-gn", "wrn16-4-gn", "airbench", "scatter-linear",
               "scatter-linear-bn", "scatter-cnn")
#: the kinds with BatchNorm layers (batch statistics: refused by DP-SGD, needed by DFKD's teacher)
BATCHNORM_KINDS = ("mlp-bn", "cnn", "wrn16-4", "airbench", "scatter-linear-bn")


class TrainConfig(_Strict):
    """The training recipe shared by the supervised defenses (paper section 4.1 for ``paper``)."""

    model: Literal[MODEL_KINDS] = "mlp"  # type: ignore[valid-type]
    width: int = Field(default=256, ge=1, description="hidden width (mlp) or base channels (cnn)")
    epochs: int = Field(default=60, ge=1)
    batch_size: int = Field(default=64, ge=1)
    lr: float = Field(default=0.1, gt=0)
    momentum: float = Field(default=0.9, ge=0, lt=1)
    weight_decay: float = Field(default=5e-4, ge=0)
    schedule: Literal["constant", "cosine", "step"] = "cosine"
    milestones: list[float] = Field(
        default_factory=lambda: [0.3, 0.6, 0.8], description="step schedule: fractions of training"
    )
    gamma: float = Field(default=0.2, gt=0, le=1)
    warmup_epochs: int = Field(default=0, ge=0)
    augment: bool = True

    @model_validator(mode="after")
    def _fixed_features_without_augmentation(self) -> "TrainConfig":
        if self.model.startswith("scatter-") and self.augment:
            raise ValueError(f"{self.model} trains without augmentation (its features are computed once per image "
                             "and cached): set train.augment=false")
        return self

    @field_validator("milestones")
    @classmethod
    def _fractions(cls, v: list[float]) -> list[float]:
        if any(not 0 < m < 1 for m in v) or v != sorted(v):
            raise ValueError(f"milestones must be increasing fractions in (0, 1), got {v}")
        return v


class AttackConfig(_Strict):
    """Which attacks score the saved signals, and how the metrics are computed."""

    names: list[str] = Field(default_factory=lambda: ["lira", "rmia"], description="attacks beside the defense's own")
    params: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="per-attack parameters: {attack name: {param: value}}"
    )
    fprs: list[float] = Field(
        default_factory=lambda: [0.001, 0.01], description="target FPRs in (0, 1); FPR = 0 is always reported"
    )
    bootstrap: int = Field(default=1000, ge=0, description="bootstrap replicates over victim models for CIs")
    confidence: float = Field(default=0.95, gt=0, lt=1)
    alpha: float = Field(default=0.05, gt=0, lt=1, description=(
        "family-wise error rate of the headline test (does any attack variant beat the headline?)"))

    @model_validator(mode="before")
    @classmethod
    def _no_cross_fitting(cls, data: Any) -> Any:
        """``crossfit_folds`` / ``crossfit_splits`` (0.3.x: the cross-fitted best-of figures) are gone:
        a config.json of an older run that holds their defaults (2, 8) reads as before; any other value
        is refused, since nothing reads it any more (docs/protocol.md, Headlines)."""
        if isinstance(data, dict) and ("crossfit_folds" in data or "crossfit_splits" in data):
            data = dict(data)
            folds, splits = data.pop("crossfit_folds", 2), data.pop("crossfit_splits", 8)
            if (folds, splits) != (2, 8):
                raise ValueError("attack.crossfit_folds and attack.crossfit_splits were removed in 0.4: best-of "
                                 "figures are no longer cross-fitted: the leak is the plain maximum of a fixed set "
                                 "of primary reads on all victims (docs/protocol.md, Headlines); drop the setting")
        return data

    @field_validator("fprs")
    @classmethod
    def _fprs_in_range(cls, v: list[float]) -> list[float]:
        bad = [f for f in v if not 0 < f < 1]
        if bad:
            raise ValueError(f"every FPR must lie in (0, 1) (FPR = 0 is always reported), got {bad}")
        return sorted(set(v))


class SlurmConfig(_Strict):
    """``--executor slurm`` (submitit): one Slurm array task per ``models_per_job`` training jobs (each a
    group of ``run.group_size`` models)."""

    cluster: Literal["slurm", "local", "debug"] = Field(
        default="slurm", description="slurm; or submitit's local (subprocesses) / debug (in-process) modes for tests")
    partition: str | None = None
    time_min: int = Field(default=240, ge=1, description="time limit of one array task, minutes")
    gpus_per_job: int = Field(default=0, ge=0)
    cpus_per_task: int = Field(default=2, ge=1, description="also the torch threads of each job")
    mem_gb: float = Field(default=16.0, gt=0)
    array_parallelism: int = Field(default=64, ge=1, description="array tasks running at once")
    models_per_job: int = Field(default=1, ge=1, description="training jobs (groups of run.group_size models) run one after the other in one task")
    sbatch: dict[str, Any] = Field(default_factory=dict, description="extra sbatch options, e.g. {account: x}")
    folder: str | None = Field(default=None, description="submitit's logs; default <run dir>/slurm_logs")


class RayConfig(_Strict):
    """``--executor ray``: one Ray task per model."""

    address: str | None = Field(default=None, description="a Ray cluster (ray://host:10001 or auto); None = local Ray")
    num_cpus: float = Field(default=1.0, gt=0, description="CPUs per task (its torch threads: at least 1)")
    num_gpus: float = Field(default=0.0, ge=0, description="GPUs per task; fractions let small models share a GPU")


class RunConfig(_Strict):
    """Where and how jobs run. None of these fields changes a trained model's membership design."""

    workers: int = Field(default=0, ge=0, description="parallel training jobs; 0 = one per CPU core")
    device: str = "cpu"
    executor: Literal["local", "slurm", "ray"] = "local"
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    ray: RayConfig = Field(default_factory=RayConfig)
    group_size: int = Field(
        default=0, ge=0,
        description="models per training job, trained stacked where the defense supports it (undefended, hamp, "
        "relaxloss on mlp, cnn, airbench; dpsgd on mlp, cnn-gn); 0 = auto (cnn, airbench: 16 on a GPU, 1 on the "
        "CPU; other stacked recipes 4; else 1; docs/executors.md)",
    )
    out: str = "runs"
    level: Literal["population", "sample", "both"] = "both"
    deterministic: bool = Field(
        default=True, description="CUDA: deterministic algorithms + CUBLAS_WORKSPACE_CONFIG (the paper's setting)"
    )
    save_models: bool = Field(
        default=False, description="save each served model's torch state next to its signals (--save-models)"
    )

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if v not in ("cpu", "cuda", "mps", "auto") and not v.startswith("cuda:"):
            raise ValueError(f"must be cpu, cuda, cuda:N, mps or auto, got {v!r}")
        return v


class ExperimentConfig(_Strict):
    """The whole resolved configuration of one ``harness evaluate`` run."""

    preset: str
    defense: str = "undefended"
    seed: int = Field(default=0, ge=0)
    data: DataConfig = DataConfig()
    audit: AuditConfig = AuditConfig()
    train: TrainConfig = TrainConfig()
    defense_params: dict[str, Any] = Field(default_factory=dict)
    attack: AttackConfig = AttackConfig()
    run: RunConfig = RunConfig()

    @model_validator(mode="after")
    def _npz_needs_path(self) -> "ExperimentConfig":
        if self.data.name == "npz" and not self.data.path:
            raise ValueError("data.path must name the .npz file when data.name is npz")
        return self

    def model_determining(self) -> dict[str, Any]:
        """The part of the config that determines the trained models (goes into the run fingerprint).

        Attack settings and run plumbing (workers, device, output folder, levels) are excluded so
        that attacks can be re-run with other settings and an interrupted run can resume with more
        workers. The data *path* is excluded too: the data themselves are hashed instead.
        """
        d = self.model_dump(mode="json")
        d.pop("attack")
        d.pop("run")
        d.pop("preset")
        d["data"].pop("path")
        d["data"].pop("download")
        if d["data"]["scale"] is None:  # unset keeps the fingerprints runs had before the field
            d["data"].pop("scale")
        if d["data"]["validation_size"] == 0:  # the same for no validation split
            d["data"].pop("validation_size")
        if d["data"]["normalization"] == "dataset":  # and for the dataset's own normalization
            d["data"].pop("normalization")
        if d["audit"]["signal_dtype"] == "float32":  # the default keeps the fingerprints runs had before the field
            d["audit"].pop("signal_dtype")
        if d["audit"]["repeat_queries"] == DEFAULT_REPEAT_QUERIES:  # the same for the default R
            d["audit"].pop("repeat_queries")
        return d

    def with_absolute_paths(self, plumbing: tuple[str, ...] | frozenset[str] = ()) -> "ExperimentConfig":
        """This config with the fields that locate inputs and outputs made absolute against the
        current folder (:func:`absolute_path`): ``data.path`` (a cifar10 dataset's unset path is its
        default folder :data:`DEFAULT_DATA_DIR`), ``run.out`` and the defense parameters named in
        ``plumbing`` (``Defense.plumbing_params``, e.g. DFKD's ``teacher_run``) that hold a string.
        None of them enters the run fingerprint (:meth:`model_determining`,
        :func:`harness.run.runner.run_fingerprint`), so the fingerprint is the same; a run's
        config.json then resolves from any folder (docs/usage.md, Run directories)."""
        data, run = self.data, self.run
        path = data.path if data.path is not None or data.name != "cifar10" else DEFAULT_DATA_DIR
        data = data.model_copy(update={"path": absolute_path(path) if path else path})
        run = run.model_copy(update={"out": absolute_path(run.out)})
        params = {k: absolute_path(v) if k in plumbing and isinstance(v, str) and v else v
                  for k, v in self.defense_params.items()}
        return self.model_copy(update={"data": data, "run": run, "defense_params": params})


PRESETS = ("quick", "cifar10", "paper")


def preset_names() -> list[str]:
    """Names of the presets shipped in ``harness/presets``."""
    files = resources.files("harness") / "presets"
    return sorted(p.name[: -len(".yaml")] for p in files.iterdir() if p.name.endswith(".yaml"))


def load_preset_mapping(preset: str) -> dict[str, Any]:
    """Read a shipped preset (by name) or a user YAML file (by path) into a plain mapping."""
    path = Path(preset)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ConfigError(f"config file {preset!r} does not exist")
        text = path.read_text()
        name = path.stem
    else:
        names = preset_names()
        if preset not in names:
            raise ConfigError(f"unknown preset {preset!r}; choose one of {', '.join(names)} or a .yaml file")
        text = (resources.files("harness") / "presets" / f"{preset}.yaml").read_text()
        name = preset
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"cannot parse {preset}: {e}".replace("\n", " ")) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{preset}: the top level must be a mapping")
    raw.setdefault("preset", name)
    return raw


def _format_error(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "config"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        parts.append(f"{loc}: {msg}")
    return "invalid config: " + "; ".join(parts)


def not_applicable(raw: dict[str, Any], defense: str) -> str | None:
    """Why ``defense`` does not apply to a preset (its ``not_applicable: {NAME: reason}`` section, a
    name covering its ``NAME-level`` variants), or None."""
    section = raw.get("not_applicable") or {}
    if not isinstance(section, dict) or not all(isinstance(v, str) for v in section.values()):
        raise ConfigError("not_applicable must map defense names to a one-line reason")
    for name, why in section.items():
        if defense == name or defense.startswith(name + "-"):
            return why
    return None


def apply_defense_preset(raw: dict[str, Any], defense: str, params_key: tuple[str, ...] = ()) -> dict[str, Any]:
    """Fold the preset's per-defense section into the base config.

    A preset may scale each defense to its size: ``defense_presets: {NAME: {train: {...}, params: {...},
    audit: {...}}}``. For the chosen defense, ``train`` entries replace the preset's training recipe,
    ``params`` become the defense's parameters and ``audit`` (``canary``, ``canary_params`` only)
    replaces the sample-level canaries the defense declares; the other defenses' sections are dropped, so the resolved
    config holds exactly the values used. User overrides are applied after this. A wrapper
    defense (``subsample``) takes its inner defense's section, with the params placed under
    ``params_key`` (e.g. ``("inner_params",)``) inside ``defense_params``.
    """
    out = copy.deepcopy(raw)
    reason = not_applicable(out, defense)
    if reason is not None:
        raise ConfigError(f"{defense} does not apply to the {out.get('preset', 'chosen')} preset: {reason}")
    out.pop("not_applicable", None)
    sections = out.pop("defense_presets", None) or {}
    if not isinstance(sections, dict):
        raise ConfigError("defense_presets must map defense names to {train: ..., params: ...}")
    entry = sections.get(defense, {}) or {}
    unknown = set(entry) - {"train", "params", "audit"}
    if unknown:
        raise ConfigError(f"defense_presets.{defense}: unknown key(s) {sorted(unknown)} (allowed: train, params, audit)")
    audit = entry.get("audit") or {}
    bad_audit = set(audit) - {"canary", "canary_params"}
    if bad_audit:
        raise ConfigError(f"defense_presets.{defense}.audit: unknown key(s) {sorted(bad_audit)} "
                          "(allowed: canary, canary_params)")
    if audit:
        base = dict(out.get("audit") or {})
        if "canary_params" in audit:  # per canary: the defense's parameters replace the preset's
            params = {k: dict(v) if isinstance(v, dict) else v for k, v in (base.get("canary_params") or {}).items()}
            for canary, p in (audit.get("canary_params") or {}).items():
                params[canary] = {**(params.get(canary) or {}), **(p or {})} if isinstance(p, dict) else p
            audit = {**audit, "canary_params": params}
        out["audit"] = {**base, **audit}
    if entry.get("train"):
        out["train"] = {**(out.get("train") or {}), **entry["train"]}
    if entry.get("params"):
        dp = dict(out.get("defense_params") or {})
        node = dp
        for k in params_key:
            node[k] = dict(node.get(k) or {})
            node = node[k]
        node.update({k: v for k, v in entry["params"].items() if k not in node})
        out["defense_params"] = dp
    return out


def validate_config(raw: dict[str, Any]) -> ExperimentConfig:
    """Validate a raw mapping (e.g. read back from a run directory) into an :class:`ExperimentConfig`."""
    try:
        return ExperimentConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(_format_error(e)) from None
