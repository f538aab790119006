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
