"""``harness tune`` (harness/tuning): the choice on known accuracy curves, the stopping rule, the
knobs a defense or a plugin declares, refusals before training, and real tunes on digits whose
choice never reads a test image."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.core.errors import ConfigError
from harness.tuning.grid import Knob, grid_points, more_private, resolve_knobs
from harness.tuning.rule import SURE, Setting, choose, stop_reason

PLUGIN = textwrap.dedent('''
    import numpy as np
    from defenses.base import Defense, LabeledImages, PrivacyKnob, TorchClassifier
    from defenses.training import init_network, train_classifier

    class LabelNoise(Defense):
        """Trains on labels of which a fraction ``flip`` is replaced by uniform draws (seeded per model)."""
        name, description = "label-noise", "trains on partly random labels"
        param_defaults = {"flip": 0.0}
        privacy_knobs = (PrivacyKnob("flip", (0.0, 0.5, 0.8, 0.95), "higher"),)

        def fit(self, train, ctx):
            rng = np.random.default_rng(ctx.seed)
            y = train.y.copy()
            m = rng.random(len(y)) < self.params["flip"]
            y[m] = rng.integers(0, train.num_classes, int(m.sum()))
            t = LabeledImages(train.x, y, train.num_classes, train.mean, train.std, train.augment)
            net = train_classifier(init_network(t, ctx), t, ctx)
            return TorchClassifier(net, t.mean, t.std, ctx.device)
''')

#: a digits tune of a few seconds: 6-model designs (4 models a setting trained), 20 audit samples, 10 epochs
FAST = {"data.validation_size": 200, "audit.models": 6, "audit.size": 20, "train.epochs": 10, "train.width": 64,
        "attack.bootstrap": 20}


def _table(rng: np.random.Generator, acc: float, models: int, images: int = 400, model_sd: float = 0.01) -> np.ndarray:
    """Right answers of ``models`` models at expected accuracy ``acc``: images of varying difficulty
    (each image's chance Beta(3 acc, 3 (1 - acc)), mean ``acc``), each model's logit shifted by
    N(0, model_sd)."""
    p_image = np.clip(rng.beta(3 * acc, 3 * (1 - acc), images), 1e-6, 1 - 1e-6)
    logit = np.log(p_image / (1 - p_image))
    return np.stack([rng.random(images) < 1 / (1 + np.exp(-(logit + rng.normal(0, model_sd))))
                     for _ in range(models)])


NOISE = Knob("defense_params.noise", (0.1, 0.5, 1.0, 2.0, 4.0), "higher")


def _curve(rng: np.random.Generator, accs: dict[float, float], models: int = 8) -> list[Setting]:
    return [Setting({NOISE.key: v}, _table(rng, accs[v], models)) for v in NOISE.values]


def test_choice_is_the_most_private_setting_that_meets_the_target():
    """A toy knob with a known decreasing accuracy curve: the choice is the noisiest setting whose
    estimate meets A, with its confidence; the next noisier one is named with its own."""
    rng = np.random.default_rng(0)
    accs = {0.1: 0.9, 0.5: 0.85, 1.0: 0.75, 2.0: 0.55, 4.0: 0.3}
    settings = _curve(rng, accs)
    c = choose(settings, 0.7, [NOISE])
    assert c.chosen.params == {NOISE.key: 1.0} and [s.params for s in c.pareto] == [{NOISE.key: 1.0}]
    assert "confidence it meets the target" in c.why and "noise=2.0" in c.why
    assert choose(settings, 0.84, [NOISE]).chosen.params == {NOISE.key: 0.5}


def test_unreachable_target_names_the_closest_setting():
    rng = np.random.default_rng(1)
    c = choose(_curve(rng, {0.1: 0.9, 0.5: 0.85, 1.0: 0.75, 2.0: 0.55, 4.0: 0.3}), 0.97, [NOISE])
    assert c.chosen is None and c.closest.params == {NOISE.key: 0.1}
    assert c.why.startswith("no setting reaches 97.0%") and "noise=0.1" in c.why


def test_most_accurate_setting_without_a_target():
    rng = np.random.default_rng(2)
    lr = Knob("train.lr", (0.001, 0.01, 0.1))
    settings = [Setting({"train.lr": v}, _table(rng, a, 8)) for v, a in zip(lr.values, (0.7, 0.9, 0.6))]
    c = choose(settings, None, [lr])
    assert c.chosen.params == {"train.lr": 0.01} and "above the runner-up (train.lr=0.001" in c.why


def test_two_knobs_pareto_set_and_priority():
    """Two knobs: the settings that meet A with none more private in both form the Pareto set; the
    first knob's priority picks one."""
    a = Knob("defense_params.a", (1, 2, 3), "higher")
    b = Knob("defense_params.b", (1, 2), "lower")
    rng = np.random.default_rng(3)
    acc = {(1, 1): 0.9, (1, 2): 0.92, (2, 1): 0.75, (2, 2): 0.9, (3, 1): 0.6, (3, 2): 0.9}
    settings = [Setting(p, _table(rng, acc[(p[a.key], p[b.key])], 8)) for p in grid_points([a, b])]
    c = choose(settings, 0.85, [a, b])
    assert {(s.params[a.key], s.params[b.key]) for s in c.pareto} == {(1, 1), (3, 2)}  # neither dominates
    assert c.chosen.params == {a.key: 3, b.key: 2} and "2 settings meet it" in c.why  # a is the first knob
    c = choose(settings, 0.7, [a, b])
    assert {(s.params[a.key], s.params[b.key]) for s in c.pareto} == {(2, 1), (3, 2)}  # (2, 1) beats (1, 1)
    assert c.chosen.params == {a.key: 3, b.key: 2}
    assert more_private({a.key: 3, b.key: 1}, {a.key: 2, b.key: 2}, [a, b])


def test_stopping_rule():
    """A setting far from the target stops at once; one near it whose models disagree wants more; one
    whose SE the validation images dominate stops (more models cannot settle it); max models stops."""
    rng = np.random.default_rng(4)
    far = Setting({}, _table(rng, 0.95, 4))
    assert stop_reason(far, 0.7, None, 12).startswith("meets the target")
    spread = Setting({}, _table(rng, 0.72, 4, images=4000, model_sd=0.5))
    assert stop_reason(spread, 0.71, None, 12) is None
    assert stop_reason(spread, 0.71, None, 4).startswith("4 models")
    tight = Setting({}, _table(rng, 0.72, 4, images=300, model_sd=0.0))
    assert stop_reason(tight, 0.715, None, 12).startswith("limited by the validation split")
    assert SURE == 0.95


def test_knobs_declared_added_and_refused():
    import defenses

    dp = defenses.resolve("dpsgd")
    (k,) = resolve_knobs("dpsgd", dp, {}, {}, True)
    assert k.key == "defense_params.noise_multiplier" and k.more_private == "higher"
    (k,) = resolve_knobs("dpsgd", dp, {"noise_multiplier": [1, 2]}, {}, True)
    assert k.values == (1, 2)
    ks = resolve_knobs("dpsgd", dp, {"train.lr": [1, 2]}, {"train.lr": "lower"}, True)
    assert [x.key for x in ks] == ["defense_params.noise_multiplier", "train.lr"]
    und = defenses.resolve("undefended")
    with pytest.raises(ConfigError, match="declares no privacy knob"):
        resolve_knobs("undefended", und, {}, {}, False)
    with pytest.raises(ConfigError, match="has no more private direction"):
        resolve_knobs("undefended", und, {"train.lr": [0.1, 0.2]}, {}, True)
    assert resolve_knobs("undefended", und, {"train.lr": [0.1, 0.2]}, {}, False)[0].more_private is None
    with pytest.raises(ConfigError, match="say higher or lower"):
        resolve_knobs("undefended", und, {"train.lr": [0.1]}, {"train.lr": "up"}, True)
    with pytest.raises(ConfigError, match="no knob of that name"):
        resolve_knobs("dpsgd", dp, {}, {"train.lr": "lower"}, True)
    with pytest.raises(ConfigError, match="the values repeat"):
        resolve_knobs("dpsgd", dp, {"noise_multiplier": [1, 1]}, {}, True)
    for name in ("hamp", "relaxloss", "alibi", "agibi", "dpsgd-medium"):
        assert defenses.resolve(name).privacy_knobs  # each defense the paper tunes declares its knobs


def test_refusals_before_any_training(tmp_path):
    from harness.api import tune

    with pytest.raises(ConfigError, match="holds none: set one with --set data.validation_size"):
        tune("relaxloss", "quick", {}, min_accuracy=0.9, out=tmp_path / "a")
    with pytest.raises(ConfigError, match="fraction in"):
        tune("relaxloss", "quick", FAST, min_accuracy=90, out=tmp_path / "b")
    with pytest.raises(ConfigError, match="is searched"):
        tune("relaxloss", "quick", {**FAST, "defense_params.target_loss": 1.0}, min_accuracy=0.9, out=tmp_path / "c")
    with pytest.raises(ConfigError, match="at least 4"):
        tune("relaxloss", "quick", FAST, min_accuracy=0.9, models_per_point=2, out=tmp_path / "d")
    with pytest.raises(ConfigError, match="train.nope"):
        tune("relaxloss", "quick", FAST, min_accuracy=0.9, grid={"train.nope": [1, 2]}, private={"train.nope": "higher"},
             out=tmp_path / "e")
    assert not any(p.exists() for p in tmp_path.iterdir() if p.name in "abcde" and any(p.glob("*/signals")))
    res = CliRunner().invoke(app, ["tune", "relaxloss", "--min-accuracy", "90", "--out", str(tmp_path / "f")])
    assert res.exit_code == 2 and "55%" in res.output


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("plugin") / "label_noise.py"
    path.write_text(PLUGIN)
    return f"{path}:LabelNoise"


@pytest.mark.slow
def test_a_plugins_declared_knob_is_tuned_and_the_choice_evaluates_on_test_within_its_se(plugin, tmp_path):
    """A plugin declares its own knob; the tune picks the noisiest setting that meets A on the
    validation split; `harness evaluate --from-tune` resumes that setting's run (the tune's models
    reused) and its test accuracy meets A within two of its SEs."""
    from harness.api import tune

    out = tmp_path / "tune"
    res = tune(plugin, "quick", FAST, min_accuracy=0.8, out=out)
    data = json.loads((out / "tune.json").read_text())
    by = {s["params"]["defense_params.flip"]: s for s in data["settings"]}
    assert by[0.0]["validation_accuracy"]["mean"] > by[0.95]["validation_accuracy"]["mean"] + 0.2
    chosen = data["choice"]["params"]["defense_params.flip"]
    assert by[chosen]["validation_accuracy"]["mean"] >= 0.8
    noisier = [v for v in by if v > chosen]
    assert all(by[v]["validation_accuracy"]["mean"] < 0.8 for v in noisier)
    assert res.choice.chosen.params == data["choice"]["params"]
    cli = CliRunner().invoke(app, ["evaluate", "--from-tune", str(out / "tune.json"), "--level", "sample",
                                   "--workers", "1"])
    assert cli.exit_code == 0, cli.output
    assert f"Resuming: {by[chosen]['models']} of 6 models already trained" in cli.output
    run = Path(data["choice"]["run_dir"])
    results = json.loads((run / "results.json").read_text())
    test = results["sample"]["test_accuracy"]
    assert test["mean"] >= 0.8 - 2 * test["se"]
    assert results["sample"]["validation_accuracy"]["mean"] >= 0.8 - 2 * results["sample"]["validation_accuracy"]["se"]


@pytest.mark.slow
def test_no_test_image_is_used_to_choose(tmp_path):
    """The same tune on data whose test labels are shuffled (and on another test set) finds the same
    validation accuracies and the same choice: the test set never enters the decision."""
    from harness.api import tune
    from harness.core.data import load_digits

    d = load_digits(497, 0)
    rng = np.random.default_rng(0)
    kw = dict(x_train=d.x_train[:, 0, :, :, None], y_train=d.y_train)
    np.savez(tmp_path / "a.npz", x_test=d.x_test[:, 0, :, :, None], y_test=d.y_test, **kw)
    np.savez(tmp_path / "b.npz", x_test=d.x_test[::-1, 0, :, :, None][:300], y_test=rng.permutation(d.y_test)[:300],
             **kw)
    grid = {"target_loss": [0.25, 1.0, 2.0]}
    runs = []
    for name in ("a", "b"):
        over = {**FAST, "data.name": "npz", "data.path": str(tmp_path / f"{name}.npz"), "audit.population_samples": 100}
        runs.append(tune("relaxloss", "quick", over, min_accuracy=0.7, grid=grid, out=tmp_path / f"t{name}").data)
    a, b = runs
    assert [s["validation_accuracy"] for s in a["settings"]] == [s["validation_accuracy"] for s in b["settings"]]
    assert a["choice"]["params"] == b["choice"]["params"]


def test_cli_prints_the_settings_and_the_evaluate_command(tmp_path):
    out = tmp_path / "t"
    args = ["tune", "relaxloss", "--min-accuracy", "60%", "--grid", "target_loss=0.5,2.0", "--out", str(out),
            "--workers", "1"] + [a for k, v in FAST.items() for a in ("--set", f"{k}={v}")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "target 60.0%" in res.output and "Evaluate it: harness evaluate relaxloss --out" in res.output
    assert "--set defense_params.target_loss=" in res.output
    data = json.loads((out / "tune.json").read_text())
    assert data["min_accuracy"] == 0.6 and len(data["settings"]) == 2 and data["validation_images"] == 200
