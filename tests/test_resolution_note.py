"""Before training, a run with too few non-member guesses for a reported FPR says so, and which S
would resolve it (issue 36, item 8); what it says agrees with what the attack phase then reports."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from harness.audit.headline import TEST_MIN_FALSE_POSITIVES, fpr_key
from harness.audit.resolution import fewest_read_negatives, level_needs, negatives, plan_note, run_needs
from harness.cli import app
from harness.core.design import make_design
from harness.core.metrics import resolvable
from harness.defense_config import build_config
from harness.run.runner import plan_run

from conftest import TINY_ARGS, tiny_overrides


def _plan(**overrides):
    cfg = build_config("quick", {"defense": "undefended", **overrides})
    plan = plan_run(cfg)
    return cfg, plan, len(plan.data.y_train), plan.data.num_classes


def test_the_models_named_are_the_smallest_that_resolve():
    cfg, plan, pool, k = _plan(**{"audit.models": 8})  # N_neg = 8 x 100 = 800 < 1000
    ld = plan.designs[0]
    (at_01, at_1) = level_needs(cfg, ld.design.membership, ld.canaries.evaluated, pool, k)
    assert at_1.resolved and at_1.best_of and at_1.tested and at_1.models_resolved is None
    assert at_01.negatives == 800 and not (at_01.resolved or at_01.best_of or at_01.tested)
    c, t = 200, 0.001
    s = at_01.models_resolved
    assert resolvable(t, negatives(s, c)) and not resolvable(t, negatives(s - 2, c)) and s == 10
    s = at_01.models_tested
    assert t * negatives(s, c) >= TEST_MIN_FALSE_POSITIVES > t * negatives(s - 2, c) and s == 30

    def fewest(models: int) -> int:  # the reads of the design `--models S` draws, under the run's partitions
        return fewest_read_negatives(cfg, make_design(pool, c, models, cfg.seed).membership)

    s = at_01.models_best_of  # more than the 2/t = 2000 guesses (S = 20): the folds' counts differ
    assert resolvable(t, fewest(s)) and not resolvable(t, fewest(s - 2)) and s > 20


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
    assert "N_neg = 180" in note and "at 0.1% FPR: TPR unresolved" in note and "--models 34" in note
    assert "at 1% FPR: cross-fitted best-of figures unresolved" in note and "--models 10)" in note

    cfg, plan, pool, k = _plan(**tiny_overrides(**{"run.out": str(tmp_path), "run.level": "population"}))
    needs = run_needs(cfg, plan.designs, pool, k)
    res = json.loads((r.path / "results.json").read_text())
    level = res["population"]
    assert level["strongest"]["estimator"] == "cross-fitted" and level["best"]["estimator"] == "single"
    for n in needs:
        assert level["best"]["resolved"][fpr_key(n.fpr)] == n.resolved
        assert level["strongest"]["resolved"][fpr_key(n.fpr)] == n.best_of
    assert res["headline_test"]["levels"]["population"]["fprs"] == [n.fpr for n in needs if n.tested]
    assert [n.resolved for n in needs] == [False, True] and [n.best_of for n in needs] == [False, False]


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
