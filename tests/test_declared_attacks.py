"""A defense's declared attacks are checked before anything is trained or written: an empty or
malformed ``adaptive_attacks``, or an adaptive attack that cannot run on the defense's outputs."""

from __future__ import annotations

import textwrap

import pytest
from typer.testing import CliRunner

from harness.cli import app

runner = CliRunner()

PLUGINS = textwrap.dedent('''
    from defenses.base import Defense, TorchClassifier
    from defenses.training import init_network, train_classifier


    class Base(Defense):
        name = "base"
        description = "undefended training"

        def fit(self, train, ctx):
            return TorchClassifier(train_classifier(init_network(train, ctx), train, ctx), train.mean, train.std,
                                   ctx.device)


    class NoAdaptive(Base):
        adaptive_attacks = ()


    class BareString(Base):
        adaptive_attacks = "lira"


    class WhiteBoxWithoutFeatures(Base):
        adaptive_attacks = ("lira", "contrastive")


    class RawWithoutRawQuery(Base):
        adaptive_attacks = ("lira-raw",)


    class NeighbourWithoutSplitAI(Base):
        default_canary = "near-duplicates"
        adaptive_attacks = ("lira", "lira-neighbour")


    class BothAdaptiveAndAblation(Base):
        adaptive_attacks = ("lira",)
        ablation_attacks = ("lira",)


    class Unknown(Base):
        adaptive_attacks = ("lira", "lria")


    class RmiaHeadline(Base):
        adaptive_attacks = ("rmia",)


    class NoneAdaptive(Base):
        adaptive_attacks = None


    class NoneAblation(Base):
        ablation_attacks = None
''')


@pytest.mark.parametrize("cls, extra, message", [
    ("NoAdaptive", [], "declares no adaptive attacks (adaptive_attacks = ())"),
    ("BareString", [], "adaptive_attacks must be a tuple of attack names, e.g. (\"lira\",), got 'lira'"),
    ("WhiteBoxWithoutFeatures", [], "adaptive attack 'contrastive' (declared by defense"),
    ("RawWithoutRawQuery", [], "declare provides = frozenset({'raw_query'})"),
    ("NeighbourWithoutSplitAI", [], "declare provides = frozenset({'splitai_query'})"),
    ("BothAdaptiveAndAblation", [], "lira both adaptive (a headline attack) and an ablation"),
    ("Unknown", [], "unknown attack 'lria'"),
    ("NoneAdaptive", [], "adaptive_attacks must be a tuple of attack names, e.g. (\"lira\",), got None"),
    ("NoneAblation", [], "ablation_attacks must be a tuple of attack names, e.g. (\"lira\",), got None"),
    ("RmiaHeadline", ["--set", "audit.population_samples=0"], "adaptive attack 'rmia' (declared by defense"),
])
def test_bad_declarations_are_refused_before_any_run_directory(tmp_path, cls, extra, message):
    f = tmp_path / "declared.py"
    f.write_text(PLUGINS)
    out = tmp_path / "runs"
    res = runner.invoke(app, ["evaluate", f"{f}:{cls}", "--out", str(out), "--models", "6", *extra])
    assert res.exit_code == 2, res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and message in " ".join(res.output.split()), res.output
    assert "--set attack.names" not in res.output  # an adaptive attack cannot be left out that way
    assert not out.exists()


ATTACKS = textwrap.dedent('''
    import numpy as np
    from attacks.base import Attack
    from attacks.lira import LiRA


    class NoisyLiRA(Attack):
        """An ablation: LiRA's scores with noise, named like the built-in."""
        name = "lira"
        description = "noisy copies of LiRA"

        def score(self, inp):
            return {"noisy": np.zeros((inp.num_models, inp.signals["logits"].shape[1]))}


    class FreshName(NoisyLiRA):
        name = "noisy-lira"


    class SameFreshName(NoisyLiRA):
        name = "noisy-lira"


    class LiRASubclass(LiRA):
        pass
''')


def _attack_file(tmp_path):
    f = tmp_path / "my_attacks.py"
    f.write_text(ATTACKS)
    return f


def _defense_file(tmp_path, ablation):
    f = tmp_path / "ablating.py"
    f.write_text(PLUGINS + textwrap.dedent(f'''

        class Ablating(Base):
            adaptive_attacks = ("lira",)
            ablation_attacks = ({ablation!r},)
    '''))
    return f


def _refused(tmp_path, args, message):
    out = tmp_path / "runs"
    res = runner.invoke(app, ["evaluate", *args, "--out", str(out), "--models", "6"])
    assert res.exit_code == 2, res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and message in " ".join(res.output.split()), res.output
    assert not out.exists()  # refused before anything is trained or written


def test_a_plugin_attack_named_like_a_builtin_is_refused_as_an_ablation(tmp_path):
    ref = f"{_attack_file(tmp_path)}:NoisyLiRA"
    defense = _defense_file(tmp_path, ref)
    _refused(tmp_path, [f"{defense}:Ablating"], f"attack '{ref}' is named 'lira', a built-in attack's name")


@pytest.mark.parametrize("cls", ["NoisyLiRA", "LiRASubclass"])
def test_a_plugin_attack_named_like_a_builtin_is_refused_in_attack_names(tmp_path, cls):
    ref = f"{_attack_file(tmp_path)}:{cls}"
    _refused(tmp_path, ["undefended", "--set", f'attack.names=[rmia, "{ref}"]'],
             f"attack '{ref}' is named 'lira', a built-in attack's name")


def test_two_plugin_attacks_may_not_share_a_name(tmp_path):
    f = _attack_file(tmp_path)
    _refused(tmp_path, ["undefended", "--set", f'attack.names=[lira, "{f}:FreshName", "{f}:SameFreshName"]'],
             f"attacks '{f}:FreshName' and '{f}:SameFreshName' are both named 'noisy-lira'")


def test_a_plugin_attack_may_not_take_another_run_attacks_reference_as_its_name(tmp_path):
    from harness.core.errors import ConfigError
    from harness.run.attack_set import check_attack_names
    from harness.plugins import resolve

    ref = f"{_attack_file(tmp_path)}:FreshName"
    cls = resolve("attacks", ref)
    with pytest.raises(ConfigError, match="the name of the run's attack 'noisy-lira'"):
        check_attack_names(["noisy-lira", ref], [cls, cls])


def test_a_plugin_attack_with_a_fresh_name_is_accepted_before_training(tmp_path):
    from harness.defense_config import build_config
    from harness.run.attack_set import attack_names, load_attacks
    from harness.run.runner import plan_run

    ref = f"{_attack_file(tmp_path)}:FreshName"
    defense = _defense_file(tmp_path, ref)
    cfg = build_config("quick", {"defense": f"{defense}:Ablating", "run.out": str(tmp_path / "runs"),
                                 "audit.models": 6})
    plan = plan_run(cfg)  # every check made before training passes
    names = [a.name for a in load_attacks(attack_names(cfg, plan.defense))]
    assert names[0] == "lira" and names[-1] == "noisy-lira" and names.count("lira") == 1
    assert not (tmp_path / "runs").exists()


def test_is_builtin_attack_tells_builtins_by_class():
    import attacks
    from harness.plugins import resolve
    from harness.run.attack_set import is_builtin_attack

    for name in attacks.KIND.builtins:
        cls = resolve("attacks", name)
        assert is_builtin_attack(cls) and is_builtin_attack(cls())


def test_is_builtin_attack_is_false_for_plugins_named_like_builtins(tmp_path):
    from harness.plugins import resolve
    from harness.run.attack_set import is_builtin_attack

    f = _attack_file(tmp_path)
    for cls in ("NoisyLiRA", "LiRASubclass", "FreshName"):
        assert not is_builtin_attack(resolve("attacks", f"{f}:{cls}"))


@pytest.mark.parametrize("name", ["LiRA", "lira ", "RMIA", "Label_Only"])
def test_a_plugin_attack_named_like_a_builtin_up_to_case_and_spaces_is_refused(name):
    """Names are compared case folded, without spaces, underscores and hyphens: "LiRA" and "lira "
    would read as LiRA in every table."""
    from attacks.base import Attack
    from harness.core.errors import ConfigError
    from harness.run.attack_set import check_attack_names

    cls = type("Renamed", (Attack,), {"name": name})
    with pytest.raises(ConfigError, match="a built-in attack's name"):
        check_attack_names(["my.py:Renamed"], [cls])
    fresh = type("Fresh", (Attack,), {"name": "mine"})
    twin = type("Twin", (Attack,), {"name": "MINE "})
    with pytest.raises(ConfigError, match="both named"):
        check_attack_names(["a.py:Fresh", "b.py:Twin"], [fresh, twin])
