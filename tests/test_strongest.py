"""Headlines that cannot understate a leak: beside the pre-declared headline, the strongest figure
over every attack and variant that ran (cross-fitted, so that the many variants do not inflate it),
the headline test that flags a headline some variant beats (Hansen's SPA, family-wise over every
variant, FPR and level), the leaderboard's ranking, and the sample/population ratio with a
bootstrap CI or not at all."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.defense_config import build_config
from harness.audit.attack_phase import _metrics_json
from harness.audit.headline import PRE_DEFENSE, Candidate, LevelFamily, headline_test, select_best, strongest_figure
from harness.core.metrics import bootstrap_selected_tpr_ci, evaluate_scores, ratio_interval
from harness.core import jsonio

runner = CliRunner()

#: RandomLogits (no signal) and ThresholdOnly (undefended, declaring only the threshold attack)
PLUGINS = Path(__file__).resolve().parents[1] / "benchmarks" / "headline_plugins.py"
SMALL = ["--models", "8", "--epochs", "10", "--level", "sample", "--set", "attack.bootstrap=200", "--set",
         "attack.fprs=[0.01]", "--workers", "1"]


def _cfg(**extra):
    return build_config("quick", {"attack.bootstrap": 300, "attack.fprs": [0.05], **extra})


def _candidates(cfg, n_models=16, n=80, seed=0):
    """Synthetic variants: one strong (members score higher), several of pure noise."""
    rng = np.random.default_rng(seed)
    mem = np.zeros((n_models, n), bool)
    for j in range(n):
        mem[rng.permutation(n_models)[: n_models // 2], j] = True
    strong = mem * 2.0 + rng.normal(0, 1, mem.shape)
    out = []
    for i, scores in enumerate([rng.normal(0, 1, mem.shape), strong, rng.normal(0, 1, mem.shape)]):
        m = evaluate_scores(scores, mem, np.ones(n, bool), cfg.attack.fprs, bootstrap=cfg.attack.bootstrap,
                            confidence=cfg.attack.confidence, seed=cfg.seed)
        entry = {"name": f"a{i}", "variant": "v", "access": "black-box", **_metrics_json(m)}
        out.append(Candidate(f"sample-x/a{i}:v", entry, scores, mem, m.samples))
    return out


def test_strongest_is_the_cross_fitted_best_of_the_pool_and_the_test_flags_the_gap():
    cfg = _cfg()
    cands = _candidates(cfg)
    headline, _ = select_best(cands[:1], cfg)  # the defense declared only the first (noise)
    st = strongest_figure(cands, cfg, {"lira-raw": PRE_DEFENSE})
    assert st["source"] == "sample-x/a1:v" and st["estimator"] == "cross-fitted"
    assert st["chosen"] == {"sample-x/a1:v": 1.0}  # the strong variant wins every fold's choice
    assert st["tpr_at_fpr"]["0.05"] > headline["tpr_at_fpr"]["0.05"]
    assert st["excluded_attacks"] == {"lira-raw": PRE_DEFENSE}
    # the optimistic maximum's CI, from the variants' stored replicates, equals the one recomputed from their scores
    direct = bootstrap_selected_tpr_ci([(c.scores, c.membership) for c in cands], [0.0, 0.05], select_at=0.05,
                                       replicates=cfg.attack.bootstrap, confidence=cfg.attack.confidence, seed=cfg.seed)
    assert st["optimistic_max"]["tpr_ci"] == {"0.0": list(direct[0.0]), "0.05": list(direct[0.05])}
    test = headline_test({"sample": LevelFamily(cands[:1], cands)}, cfg)
    assert test["levels"]["sample"]["flagged"] and test["levels"]["sample"]["top"]["candidate"] == "sample-x/a1:v"
    # a headline that is the strongest variant itself: nothing beats it, no flag
    best = [cands[1]]
    assert not headline_test({"sample": LevelFamily(best, cands)}, cfg)["levels"]["sample"]["flagged"]


def test_a_tie_keeps_the_headline_and_stored_replicates_change_no_headline_number():
    cfg = _cfg()
    a = _candidates(cfg)[1]
    twin = Candidate("sample-x/twin:v", {**a.entry, "name": "twin"}, a.scores, a.membership, a.samples)
    st = strongest_figure([a, twin], cfg, {})
    assert st["source"] == a.label and st["chosen"] == {a.label: 1.0}
    assert not headline_test({"sample": LevelFamily([a], [a, twin])}, cfg)["levels"]["sample"]["flagged"]
    without = select_best([Candidate(c.label, c.entry, c.scores, c.membership) for c in _candidates(cfg)], cfg)[0]
    assert select_best(_candidates(cfg), cfg)[0] == without  # reusing the replicates is exact


def test_ratio_interval_handles_zero_populations_and_pairs_replicates():
    lo, hi, used = ratio_interval(np.array([0.5, 0.6, 0.7, 0.4]), np.array([0.1, 0.0, 0.1, 0.0]), 0.5)
    assert used == 4 and hi == np.inf and lo == pytest.approx(5.0)
    assert ratio_interval(np.array([0.0, 0.5]), np.array([0.0, 0.1]), 0.9)[2] == 1  # 0 / 0 left out
    assert np.isnan(ratio_interval(np.array([0.0]), np.array([0.0]), 0.9)[0])


def _plugin_run(tmp: Path, cls: str, *args: str) -> tuple[Path, str]:
    """Evaluate one of PLUGINS' classes (the quick preset unless ``args`` say otherwise): (its run
    directory, the command's output)."""
    res = runner.invoke(app, ["evaluate", f"{PLUGINS}:{cls}", "--out", str(tmp / "runs"), *args],
                        env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    (run_dir,) = (tmp / "runs").iterdir()
    return run_dir, res.output


@pytest.fixture(scope="module")
def threshold_run(tmp_path_factory) -> tuple[Path, str]:
    """Undefended training at the quick preset, declaring only the threshold attack."""
    return _plugin_run(tmp_path_factory.mktemp("threshold"), "ThresholdOnly")


@pytest.mark.slow
def test_a_defense_declaring_only_the_weak_threshold_attack_is_flagged_at_the_quick_preset(threshold_run):
    """Power, through `harness evaluate`: the headline test finds what LiRA and RMIA find above the
    declared threshold attack, and the report, results.json, table.csv and the HTML page say so."""
    run_dir, output = threshold_run
    r = json.loads((run_dir / "results.json").read_text())
    best, st, test = r["sample"]["best"], r["sample"]["strongest"], r["headline_test"]
    assert best["name"] == "threshold" and st["name"] in ("lira", "rmia") and st["estimator"] == "cross-fitted"
    assert st["beats_headline"] and test["levels"]["sample"]["flagged"]
    assert test["levels"]["sample"]["p_value"] <= test["alpha"] == 0.05 and st["test_p_value"] == test["levels"]["sample"]["p_value"]
    assert test["levels"]["sample"]["top"]["name"] in ("lira", "rmia") and test["hypotheses"] > 20
    text = " ".join(output.split())
    assert "warning: sample level:" in text and "understates the leak" in text and "Hansen's SPA, p = " in text
    assert re.search(r"headline test p \(SPA\)\s+[\d.]+(?: !)?\s+[\d.]+ !", output)
    assert r["warnings"] and any(w.startswith("sample level:") for w in r["warnings"])
    import pandas as pd

    row = pd.read_csv(run_dir / "table.csv").set_index("level").loc["sample"]
    assert row["strongest_attack"] == f"{st['name']}:{st['variant']}" and bool(row["strongest_beats_headline"])
    assert row["strongest_tpr@0.001"] == pytest.approx(st["tpr_at_fpr"]["0.001"])
    assert row["headline_test_p"] == pytest.approx(test["levels"]["sample"]["p_value"])
    html = runner.invoke(app, ["report", str(run_dir), "--html"])
    page = (run_dir / "report.html").read_text()
    assert html.exit_code == 0 and "Headline and strongest attack" in page and "understates the leak" in page
    assert "optimistic max" in page and "test p = " in page


@pytest.mark.slow
def test_a_no_signal_plugin_stays_quiet_and_its_strongest_figure_is_not_inflated(tmp_path):
    """Seeded noise logits, no training, the quick preset: nothing beats anything, so no warning,
    and the cross-fitted strongest figure reads near the FPR (chance) where the plain maximum over
    the variants reads above it (benchmarks/bench_headline_test.py counts warnings over seeds)."""
    run_dir, output = _plugin_run(tmp_path, "RandomLogits")
    r = json.loads((run_dir / "results.json").read_text())
    assert "warnings" not in r and "understates the leak" not in output
    for lv in ("population", "sample"):
        assert not r[lv]["strongest"]["beats_headline"] and r["headline_test"]["levels"][lv]["p_value"] > 0.05
        st = r[lv]["strongest"]
        assert st["tpr_at_fpr"]["0.01"] < 0.02 and st["tpr_at_fpr"]["0.01"] <= st["optimistic_max"]["tpr_at_fpr"]["0.01"]


def test_leaderboard_ranks_by_the_headline_unless_the_test_finds_it_beaten(threshold_run, tmp_path):
    from leaderboard.build import collect, rank_value

    base = json.loads((threshold_run[0] / "results.json").read_text())
    k = "0.001"

    def entry(name: str, headline: float, strongest: float, flagged: bool, fp: str) -> dict:
        r = copy.deepcopy(base)
        r["defense"], r["fingerprint"] = name, fp * 64
        r["sample"]["best"]["tpr_at_fpr"][k], r["sample"]["strongest"]["tpr_at_fpr"][k] = headline, strongest
        r["sample"]["strongest"]["beats_headline"] = flagged
        return r

    folder = tmp_path / "in"
    rows_in = [("declares-weak", 0.01, 0.50, True), ("honest", 0.10, 0.12, False), ("noisy-max", 0.05, 0.20, False)]
    for i, (name, h, s, f) in enumerate(rows_in):
        (folder / name).mkdir(parents=True)
        (folder / name / "results.json").write_text(json.dumps(entry(name, h, s, f, str(i))))
    rows = collect([folder])
    # flagged: the larger figure (50%); not flagged: the headline, whatever the strongest reads
    assert [r["defense"] for r in rows] == ["noisy-max", "honest", "declares-weak"]
    assert rows[2]["rank TPR"] == 0.5 and rows[2]["sample TPR"] == 0.01 and rows[0]["rank TPR"] == 0.05
    assert rank_value("unresolved", 0.3, False) == "unresolved" and rank_value("unresolved", 0.3, True) == 0.3
    res = runner.invoke(app, ["leaderboard", "build", str(folder), "--out", str(tmp_path / "site")])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "site" / "index.html").read_text()
    assert page.index(">honest<") < page.index(">declares-weak<")
    assert 'data-col="strongest sample TPR"' in page and "headline test" in page
    strongest = [(row.split("</a>")[0].rsplit(">", 1)[1], cell) for row in page.split("<tr>")[2:]
                 for cell in row.split("<td") if 'data-col="strongest sample TPR"' in cell]
    flagged = [name for name, cell in strongest if 'class="flag" href="#fn-flag"' in cell]  # the mark, one footnote
    assert len(strongest) == 3 and flagged == ["declares-weak"] and page.count('id="fn-flag"') == 1
    md = (tmp_path / "site" / "leaderboard.md").read_text()
    assert "| strongest sample TPR |" in md.splitlines()[0] and "50.0%" in md


def test_ratio_has_a_ci_or_is_not_shown(threshold_run, tmp_path):
    from harness.audit.report import ratio_line

    r = json.loads((threshold_run[0] / "results.json").read_text())
    k = "0.01"
    two = copy.deepcopy(r)
    two["population"] = copy.deepcopy(r["sample"])  # stand-in population level at half the sample figure
    two["population"]["best"]["tpr_at_fpr"][k] = r["sample"]["best"]["tpr_at_fpr"][k] / 2 or 0.01
    two["sample"]["best"]["tpr_at_fpr"][k] = two["population"]["best"]["tpr_at_fpr"][k] * 2
    two["sample_population_ratio"] = {"ratio": 2.0, "ci": [1.2, float("inf")]}
    assert "is 2.0x [1.2, ∞] the population-level figure" in ratio_line(two)
    two["sample_population_ratio"] = {"ratio": 2.0, "ci": None}  # no bootstrap: no ratio
    line = ratio_line(two)
    assert "x [" not in line and "no CI for their ratio: not shown" in line
    del two["sample_population_ratio"]  # a results.json from before the CI
    assert "not shown" in ratio_line(two)


def test_a_real_two_level_run_records_the_ratio_with_its_ci(tmp_path):
    res = runner.invoke(app, ["evaluate", "undefended", "--out", str(tmp_path), "--models", "8", "--epochs", "6",
                              "--set", "attack.bootstrap=100", "--set", "attack.fprs=[0.01]", "--workers", "1"])
    assert res.exit_code == 0, res.output
    (run_dir,) = tmp_path.iterdir()
    r = jsonio.loads((run_dir / "results.json").read_text())  # an infinite CI end is the string "Infinity"
    ratio = r["sample_population_ratio"]
    p, s = r["population"]["best"]["tpr_at_fpr"]["0.01"], r["sample"]["best"]["tpr_at_fpr"]["0.01"]
    assert ratio["ratio"] == pytest.approx(s / p) and ratio["replicates_used"] > 0
    lo, hi = ratio["ci"]
    assert lo <= ratio["ratio"] <= hi
    assert f"x [{lo:.1f}, " in " ".join(res.output.split())


@pytest.mark.slow
def test_an_unresolved_headline_fpr_does_not_hide_the_gap(tmp_path):
    """With 8 models (800 non-member guesses) 0.1% FPR is unresolved: the test then looks at 1% FPR,
    where LiRA beats the declared threshold attack by far; the flag, the warning (naming that FPR)
    and the report's strongest row at 1% say so."""
    run, _ = _plugin_run(tmp_path, "ThresholdOnly", *SMALL)
    res = runner.invoke(app, ["attack", str(run), "--set", "attack.fprs=[0.001,0.01]"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    r = json.loads((run / "results.json").read_text())
    best, st, test = r["sample"]["best"], r["sample"]["strongest"], r["headline_test"]["levels"]["sample"]
    assert not best["resolved"]["0.001"] and best["resolved"]["0.01"]
    assert test["fprs"] == [0.01] and st["beats_headline"] and test["top"]["fpr"] == 0.01
    assert any(w.startswith("sample level:") and "at 1% FPR" in w for w in r["warnings"])
    assert re.search(r"strongest TPR@1% \(any attack\)\s+[\d.]+% \[[\d.]+, [\d.]+\] !", res.output)
