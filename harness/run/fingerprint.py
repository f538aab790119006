"""The run fingerprint: the hash of everything that determines a run's models (docs/architecture.md,
Run directory). Its own module so that the run store can check a config.json against it without
importing the runner."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from harness.core.config import ExperimentConfig
from harness.core.data import ImageDataset
from harness.core.registry import source_fingerprint
from harness.core.version import MODELS_VERSION, PLUGIN_TRAINING
from harness.plugins import resolve


def sha256_json(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def plumbing_params(cfg: ExperimentConfig) -> list[str]:
    """The defense's ``plumbing_params`` (e.g. DFKD's ``teacher_run``): parameters that locate inputs
    whose identity is checked separately (:mod:`harness.run.teachers`), left out of the fingerprint."""
    return list(getattr(resolve("defenses", cfg.defense), "plumbing_params", ()))


def trained_config(cfg: ExperimentConfig, plumbing: list[str] | None = None) -> dict[str, Any]:
    """The part of the config the run fingerprint hashes: :meth:`ExperimentConfig.model_determining`
    without the ``plumbing`` parameters (default: the defense's, :func:`plumbing_params`). The
    manifest records it (``trained_config``), so that a hand-edited config.json is found on every
    read (:meth:`harness.run.runstore.RunDir.load_config`)."""
    config = cfg.model_determining()
    for name in plumbing_params(cfg) if plumbing is None else plumbing:
        config["defense_params"].pop(name, None)
    return config


def fingerprint_of(cfg: ExperimentConfig, data_fingerprint: str) -> str:
    """:func:`run_fingerprint` from the dataset's fingerprint (a manifest's ``data_fingerprint``)."""
    return hash_trained(trained_config(cfg), data_fingerprint, source_fingerprint(cfg.defense))


def hash_trained(config: dict[str, Any], data_fingerprint: str, source: str) -> str:
    """The fingerprint's hash of a :func:`trained_config`, the data's fingerprint and a file plugin's
    source digest ('' for a built-in); for a file plugin also how plugins train (PLUGIN_TRAINING;
    built-ins' fingerprints are unchanged by it)."""
    record = {
        "config": config,
        "data": data_fingerprint,
        "harness_version": MODELS_VERSION,  # the key runs have always hashed; the models version
        "defense_source": source,
    }
    if source:
        record["plugin_training"] = PLUGIN_TRAINING
    return sha256_json(record)


def run_fingerprint(cfg: ExperimentConfig, data: ImageDataset) -> str:
    """Hash of everything that determines the models, apart from the per-level design and canaries:
    :func:`trained_config` (the defense's ``plumbing_params`` left out), the data, the models
    version and a file plugin's source."""
    return fingerprint_of(cfg, data.fingerprint())
