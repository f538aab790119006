"""The package version and the models version: a release that changes only attacks or reports keeps
every run's fingerprint (runs resume and re-attack); one that trains other models does not."""

from __future__ import annotations

from harness.core.version import MODELS_VERSION, models_version_of
from harness.defense_config import build_config
from harness.core.data import load_dataset
from harness.run.runner import build_level, run_fingerprint
from harness.run.teachers import training_fingerprints


def test_the_run_fingerprint_follows_the_models_version_not_the_package_version(monkeypatch):
    import harness.run.fingerprint as fingerprint
    import harness.run.runner as runner

    cfg = build_config("quick", {"audit.models": 6})
    data = load_dataset(cfg.data, cfg.seed)
    fp = run_fingerprint(cfg, data)
    monkeypatch.setattr(runner, "__version__", "9.9.9")
    assert run_fingerprint(cfg, data) == fp
    monkeypatch.setattr(fingerprint, "MODELS_VERSION", "9.9.9")
    assert run_fingerprint(cfg, data) != fp


def test_a_teacher_run_of_another_models_version_is_told_apart():
    from harness.run.teachers import _differences

    cfg = build_config("quick", {"audit.models": 6})
    data = load_dataset(cfg.data, cfg.seed)
    ld = build_level(cfg, data, "population", "none")
    mine = training_fingerprints(cfg, data.fingerprint(), ld)
    assert _differences(mine, training_fingerprints(cfg, data.fingerprint(), ld, MODELS_VERSION)) == []
    assert _differences(mine, training_fingerprints(cfg, data.fingerprint(), ld, "0.1.0"))[0].startswith(
        "harness version")


def test_manifests_from_before_the_field_read_their_harness_version():
    assert models_version_of({"harness_version": "0.2.0"}) == "0.2.0"
    assert models_version_of({"harness_version": "0.3.0", "models_version": "0.2.1"}) == "0.2.1"
