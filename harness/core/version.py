"""The package version and the models version (docs/architecture.md, Run directory)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("privacy-harness")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.4.0"

#: The version of the code that trains the models: part of every run fingerprint
#: (:func:`harness.run.runner.run_fingerprint`) and recorded in each run's manifest (``models_version``).
#: A release whose code trains different models for the same config (even by float rounding) bumps
#: it; a release that changes only attacks, metrics or reports keeps it, so its runs resume and are
#: re-attacked instead of retrained (0.3.0 trains exactly as 0.2.1 did; 0.4.0 trains HAMP, RelaxLoss and DP-SGD
#: stacked, convolutional networks channels-last on the CPU and stacked CNNs on GPUs: docs/executors.md).
MODELS_VERSION = "0.4.0"
#: how a file plugin's models train, hashed into a file plugin's run fingerprint only (built-ins keep
#: theirs): "cotrain-1" since a plugin's ``fit`` calls are co-trained, their ``train_classifier``
#: calls stacked (defenses/cotrain.py; issue 54), which rounds differently from the one-at-a-time
#: training before, so a plugin run from before starts afresh instead of resuming with mixed models
PLUGIN_TRAINING = "cotrain-1"


def models_version_of(manifest: dict) -> str | None:
    """The models version a run's manifest records (runs from before the field: its harness version,
    which then was the models version)."""
    return manifest.get("models_version", manifest.get("harness_version"))
