"""Before training, a run with too few non-member guesses for a reported FPR says so, which S would
resolve it and the FPR the level figures are read at instead (one rule: 3 expected false
positives); what it says agrees with what the attack phase then reports."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from harness.audit.headline import fpr_key
from harness.audit.resolution import negatives, plan_note, run_needs
from harness.cli import app
from harness.core.figure import MIN_FALSE_POSITIVES
from harness.core.metrics import resolvable
from harness.defense_config import build_config
from harness.run.runner import plan_run

from conftest import TINY_ARGS, tiny_overrides


def _plan(**overrides):
    cfg = build_config("quick", {"defense": "undefended", **overrides})
    plan = plan_run(cfg)
    return cfg, plan, len(plan.data.y_train), plan.data.num_classes


def test_the_models_named_are_the_smallest_that_resolve():
    cfg, _, _, _ = _plan(**{"audit.models": 8})  # N_neg = 8 x 100 = 800: 0.8 expected false positives at 0.1%
    at_01, at_1 = run_needs(cfg, 200)
    assert at_1.resolved and at_1.models is None
    assert at_01.negatives == 800 and not at_01.resolved
    c, t, s = 200, 0.001, at_01.models
    assert t * negatives(s, c) >= MIN_FALSE_POSITIVES > t * negatives(s - 2, c) and s == 30
    assert resolvable(t, negatives(s, c)) and not resolvable(t, negatives(s - 2, c))


def test_a_design_that_resolves_every_reported_fpr_says_nothing():
    cfg, plan, pool, k = _plan()  # the quick preset: 32 models x 100 non-members
    assert plan_note(cfg, plan.designs, pool, k) is None


def test_the_note_comes_before_training_and_agrees_with_the_results(tmp_path):
    from harness import evaluate

    events = []
    r = evaluate("undefended", overrides=tiny_overrides(**{"run.out": str(tmp_path), "run.level": "population"}),
                 progress=events.append)
    notes = [i for i, e in enumerate(events) if e.kind == "note" and e.message.startswith("S = 6 models")]
    assert len(notes) == 1 and notes[0] < min(i for i, e in enumerate(events) if e.kind == "train")
    note = events[notes[0]].message
    assert "N_neg = 180" in note and "at 0.1% FPR every TPR is unresolved" in note and "--models 100)" in note
    assert "at 1% FPR every TPR is unresolved" in note and "--models 10)" in note
    assert "the level figures (leak, declared headline, test) are read at 2% FPR instead" in note

    cfg, plan, _, _ = _plan(**tiny_overrides(**{"run.out": str(tmp_path), "run.level": "population"}))
    fewest = min(int(ld.canaries.evaluated.sum()) for ld in plan.designs)
    needs = run_needs(cfg, fewest)
    res = json.loads((r.path / "results.json").read_text())
    level = res["population"]
    assert level["figure"]["fpr"] == 0.02 and level["figure"]["expected_false_positives"] == pytest.approx(3.6)
    for n in needs:
        assert level["best"]["resolved"][fpr_key(n.fpr)] == n.resolved == False  # noqa: E712
    assert res["headline_test"]["levels"]["population"]["fpr"] == 0.02


@pytest.mark.parametrize("fprs, says", [("[0.001,0.01]", True), ("[0.1]", False)])
def test_the_cli_prints_the_note_before_training(tmp_path, fprs, says):
    """TINY_ARGS: 6 models x 10 non-members = 60 guesses, too few at 0.1% and 1% FPR, enough at 10%."""
    res = CliRunner().invoke(app, ["evaluate", "undefended", *TINY_ARGS, "--epochs", "1",
                                   "--set", f"attack.fprs={fprs}", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    notes = [i for i, line in enumerate(lines) if line.startswith("note: S = 6 models")]
    training = next(i for i, line in enumerate(lines) if line.startswith("Training "))
    assert (len(notes) == 1 and notes[0] < training) if says else not notes
