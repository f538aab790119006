import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.core.config import ConfigError, parse_set_options, preset_names
from harness.defense_config import build_config


def test_presets_load_and_validate():
    assert {"quick", "cifar10", "paper"} <= set(preset_names())
    paper = build_config("paper")
    assert (paper.audit.models, paper.audit.size, paper.train.model, paper.train.epochs) == (64, 500, "wrn16-4", 200)
    quick = build_config("quick")
    assert quick.data.name == "digits" and quick.audit.models == 32


def test_overrides_reach_their_fields():
    cfg = build_config("quick", {"audit.models": 8, "train.epochs": 3, **parse_set_options(["train.lr=0.05"])})
    assert (cfg.audit.models, cfg.train.epochs, cfg.train.lr) == (8, 3, 0.05)


@pytest.mark.parametrize(
    "overrides,needle",
    [
        ({"audit.models": 7}, "audit.models"),
        ({"audit.modles": 8}, "unknown key"),
        ({"bogus": 1}, "unknown key"),
        ({"audit.models": "many"}, "audit.models"),
        ({"attack.fprs": [0.001, 1.5]}, "attack.fprs"),
        ({"attack.fprs": [0.0]}, "attack.fprs"),
        ({"train.lr": -1.0}, "train.lr"),
        ({"run.device": "tpu"}, "run.device"),
    ],
)
def test_bad_values_raise_one_clear_config_error(overrides, needle):
    with pytest.raises(ConfigError) as e:
        build_config("quick", overrides)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg


def test_defense_preset_sections_scale_the_recipe_and_the_canaries(tmp_path):
    hamp = build_config("quick", {"defense": "hamp"})
    assert (hamp.train.epochs, hamp.train.lr, hamp.audit.canary) == (200, 0.5, ["mislabeled", "uniform"])
    undefended = build_config("quick")
    assert (undefended.train.epochs, undefended.audit.canary) == (40, None)  # other sections are dropped
    assert build_config("quick", {"defense": "hamp", "audit.canary": "mislabeled"}).audit.canary == "mislabeled"
    bad = tmp_path / "bad.yaml"
    bad.write_text("defense: hamp\ndefense_presets:\n  hamp: {audit: {models: 8}}\n")
    with pytest.raises(ConfigError, match="defense_presets.hamp.audit: unknown key"):
        build_config(str(bad))
    bad.write_text("defense: hamp\ndefense_presets:\n  hamp: {canary: uniform}\n")
    with pytest.raises(ConfigError, match="allowed: train, params, audit"):
        build_config(str(bad))


def test_unknown_preset():
    with pytest.raises(ConfigError, match="unknown preset"):
        build_config("nope")


runner = CliRunner()


@pytest.mark.parametrize(
    "args,needle",
    [
        (["evaluate", "undefended", "--models", "5"], "even"),
        (["evaluate", "undefended", "--audit-size", "5000"], "larger than the training pool"),
        (["evaluate", "undefended", "--set", "attack.fprs=[2.0]"], "attack.fprs"),
        (["evaluate", "undefended", "--set", "train.nonsense=1"], "unknown key"),
        (["evaluate", "no-such-defense"], "unknown defense"),
        (["evaluate", "undefended", "--canary", "no-such-canary"], "unknown canary"),
        (["evaluate", "undefended", "--preset", "cifar10", "--data-dir", "/nonexistent/x", "--set",
          "data.download=false"], "no CIFAR-10"),
        (["attack", "/nonexistent/run"], "does not exist"),
    ],
)
def test_cli_user_errors_exit_2_with_one_line(args, needle, tmp_path):
    res = runner.invoke(app, args + ([] if args[0] != "evaluate" else ["--out", str(tmp_path)]))
    assert res.exit_code == 2, res.output
    out = res.output.strip()
    assert needle in out and "Traceback" not in out
    assert out.startswith("error:") and len(out.splitlines()) <= 3  # one message (terminal may wrap it)


def test_exponent_floats_without_a_dot_are_numbers_in_overrides():
    """YAML 1.1 reads ``1e-9`` as a string; an override must read it as the number the user typed."""
    from harness.core.overrides import parse_set_options

    got = parse_set_options(["attack.fprs=[1e-3, 1E-2]", "data.scale=1e-300", "train.lr=-2e+3", "run.out=1e"])
    assert got == {"attack.fprs": [0.001, 0.01], "data.scale": 1e-300, "train.lr": -2000.0, "run.out": "1e"}
    cfg = build_config("quick", {"attack.fprs": got["attack.fprs"]})
    assert cfg.attack.fprs == [0.001, 0.01]
