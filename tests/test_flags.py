"""Every CLI flag and ``--set`` key takes effect or is refused, for every built-in defense.

"Takes effect" is checked on real training: a tiny fit with the override must serve different
outputs than the same fit without it. "Refused" must be a ConfigError naming what the defense
reads instead.
"""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from defenses.base import FitContext, LabeledImages
from harness.cli import app
from harness.core.config import ConfigError
from harness.defense_config import build_config
from harness.core.data import load_digits
import defenses
from harness.run.runner import make_defense

# every built-in that trains here (``external`` stands for models trained outside the harness)
DEFENSES = sorted(d for d in defenses.KIND.builtins if not defenses.resolve(d).trained_outside)
# a value different from every preset's for each recipe field (quick preset, digits)
ALTERNATIVES = {"model": "cnn-gn", "width": 24, "epochs": 3, "batch_size": 30, "lr": 0.031, "momentum": 0.5,
                "weight_decay": 0.02, "schedule": "constant", "milestones": [0.2], "gamma": 0.5, "warmup_epochs": 2}
BASE = {"train.epochs": 2, "train.width": 16}  # small fits; both are read by every defense (epochs via aliases)


@pytest.fixture(scope="module")
def tiny():
    data = load_digits(497, 0)
    idx = np.random.default_rng(0).permutation(len(data.y_train))[:120]
    train = LabeledImages(data.x_train[idx], data.y_train[idx], data.num_classes, data.mean, data.std, data.augment)
    return train, data.x_test[:40]


def _overrides(defense: str, extra: dict) -> dict:
    o = {"defense": defense, **BASE, **extra}
    if defense == "subsample":
        o["defense_params.inner"] = "dpsgd-medium"  # the wrapper must route to its inner defense's settings
    if defense.startswith("ssl-"):  # SSL batches drop the last partial one: smaller than the 120 samples
        o = {"train.batch_size": 60, "defense_params.probe_epochs": 3, **o}
    if defense.startswith("pate-fm"):  # FixMatch on its own step schedule (no train.epochs); a few tiny steps
        if "train.epochs" not in extra:
            o.pop("train.epochs")
        o = {"defense_params.teacher_steps": 3, "defense_params.student_steps": 5, "defense_params.num_teachers": 4,
             "defense_params.queries": 20, **o}
    if defense == "dfkd":  # a few tiny rounds of synthesis and distillation
        o = {"defense_params.rounds": 3, "defense_params.warmup": 1, "defense_params.synth_batch": 24,
             "defense_params.student_batch_size": 32, **o}
    return o


def _served(defense: str, extra: dict, tiny) -> np.ndarray:
    cfg = build_config("quick", _overrides(defense, extra))
    d = make_defense(cfg)
    d.check_config(cfg)
    train, x = tiny
    return d.fit(train, FitContext(seed=3, device="cpu", train=cfg.train, params=d.params)).query(x)


@pytest.mark.slow
@pytest.mark.parametrize("defense", DEFENSES)
def test_every_recipe_field_takes_effect_or_is_refused(defense, tiny):
    base = _served(defense, {}, tiny)
    np.testing.assert_array_equal(base, _served(defense, {}, tiny))  # deterministic: a difference means an effect
    outcomes = {}
    for field, value in ALTERNATIVES.items():
        if field == "model" and defense == "dfkd":  # its teacher needs BatchNorm (cnn-gn is refused)
            value = "cnn"
        extra = {f"train.{field}": value}
        if field == "augment":
            continue
        try:
            out = _served(defense, extra, tiny)
        except ConfigError as e:
            assert "does not read" in str(e) or "applies to the step schedule only" in str(e), str(e)
            outcomes[field] = "refused"
            continue
        assert out.shape == base.shape and not np.array_equal(out, base), f"{defense}: train.{field} was ignored"
        outcomes[field] = "effect"
    # the augmentation switch, whichever way the preset sets it
    flip = not build_config("quick", _overrides(defense, {})).train.augment
    try:
        assert not np.array_equal(_served(defense, {"train.augment": flip}, tiny), base)
        outcomes["augment"] = "effect"
    except ConfigError:
        outcomes["augment"] = "refused"
    if defense.startswith("ssl-"):  # its own encoder, augmentation and per-epoch cosine schedule
        assert {f for f, o in outcomes.items() if o == "refused"} == {
            "model", "schedule", "milestones", "gamma", "warmup_epochs", "augment"}
    elif defense.startswith("pate-fm"):  # FixMatch's own recipe: only the architecture comes from train.*
        assert {f for f, o in outcomes.items() if o == "effect"} == {"model", "width"}
    elif defense.startswith("dpsgd") or defense == "subsample":  # DP-SGD: plain SGD, constant learning rate
        assert {f for f, o in outcomes.items() if o == "refused"} == {
            "momentum", "weight_decay", "schedule", "milestones", "gamma", "warmup_epochs"}
    elif build_config("quick", _overrides(defense, {})).train.schedule == "step":  # hamp, relaxloss
        assert not any(o == "refused" for o in outcomes.values())
    else:  # cosine schedule: milestones and gamma are refused, the rest takes effect
        assert {f for f, o in outcomes.items() if o == "refused"} == {"milestones", "gamma"}


def test_epochs_reaches_dpsgd_as_its_own_parameter_and_changes_the_fingerprint(tmp_path):
    from harness.core.data import load_dataset
    from harness.run.runner import run_fingerprint

    a = build_config("quick", {"defense": "dpsgd-medium"})
    b = build_config("quick", {"defense": "dpsgd-medium", "train.epochs": 5})
    assert b.defense_params["epochs"] == 5 and a.defense_params["epochs"] == 24 and a.train == b.train
    data = load_dataset(a.data, a.seed)
    assert run_fingerprint(a, data) != run_fingerprint(b, data)
    s = build_config("quick", {"defense": "subsample", "defense_params.inner": "dpsgd-high", "train.epochs": 2})
    assert s.defense_params["inner_params"]["epochs"] == 2
    with pytest.raises(ConfigError, match="does not read train.momentum.*plain SGD"):
        build_config("quick", {"defense": "dpsgd-high", "train.momentum": 0.9})


def test_dpsgd_epochs_flag_trains_that_many_epochs(tiny):
    cfg = build_config("quick", {"defense": "dpsgd-high", "train.epochs": 2, "defense_params.batch_size": 60})
    d = make_defense(cfg)
    info = d.fit(tiny[0], FitContext(seed=0, device="cpu", train=cfg.train, params=d.params)).info()
    assert info["epochs"] == 2 and info["steps"] == 2 * 2  # ceil(120 / 60) steps per epoch


@pytest.mark.parametrize("overrides, message", [
    ({"train.width": 8, "train.model": "wrn16-4"}, "does not apply to wrn16-4"),
    ({"train.milestones": [0.5]}, "step schedule only"),
    ({"data.path": "/tmp"}, "not read by the digits dataset.*data.name=npz"),
    ({"data.download": False}, "cifar10 only"),
    ({"attack.params.nosuch.x": 1}, "does not run 'nosuch'"),
])
def test_overrides_nothing_reads_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        build_config("quick", {"defense": "undefended", **overrides})


@pytest.mark.parametrize("args, message", [
    (["--data-dir", "/tmp"], "digits"),
    (["--set", "defense=hamp"], "DEFENSE argument"),
    (["--set", "preset=paper"], "--preset"),
    (["--inner", "hamp"], "subsample defense only"),
    (["--run-dir", "x", "--out", "y"], "give one of them"),
    (["--canary", ""], "canary names"),
    (["--level", "population", "--canary", "blank"], "run.level (--level) population runs none"),
    (["--device", "cuda"], "CUDA"),
    (["--set", "train.model=cnn"], None),  # accepted: undefended reads the model
])
def test_cli_flags_are_refused_before_anything_is_written(tmp_path, args, message):
    if message == "CUDA":
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
    if message is None:  # a flag that takes effect: the resolved config shows it
        assert build_config("quick", {"train.model": "cnn"}).train.model == "cnn"
        return
    res = CliRunner().invoke(app, ["evaluate", "undefended", *args] + ([] if "--out" in args else ["--out", str(tmp_path)]))
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split()), res.output
    assert not any(tmp_path.iterdir())


def test_dpsgd_refuses_batchnorm_models_before_training(tmp_path):
    res = CliRunner().invoke(app, ["evaluate", "dpsgd-medium", "--set", "train.model=cnn", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "without BatchNorm" in " ".join(res.output.split())
    assert not any(tmp_path.iterdir())


def test_audit_one_run_refuses_the_audit_design_settings(tmp_path):
    res = CliRunner().invoke(app, ["audit-one-run", "undefended", "--set", "audit.models=8", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "does not apply to audit-one-run" in " ".join(res.output.split())
