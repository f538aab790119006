"""Headlines that cannot understate a leak: beside the pre-declared headline, the strongest figure
over every attack and variant that ran (selection-aware CI, a warning when it beats the headline
by more than its CI, the leaderboard ranking by the larger), and the sample/population ratio with a
bootstrap CI or not at all."""

from __future__ import annotations

import copy
import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.defense_config import build_config
from harness.audit.attack_phase import _metrics_json
from harness.audit.headline import PRE_DEFENSE, Candidate, select_best, strongest_figure
from harness.core.metrics import bootstrap_selected_tpr_ci, evaluate_scores, ratio_interval

runner = CliRunner()

NOISY = textwrap.dedent('''
    import numpy as np
    from defenses.base import TorchClassifier
    from defenses.undefended import Undefended


    class NoisyServed(TorchClassifier):
        """The trained classifier's logits plus fresh Gaussian noise on every query."""

        def __init__(self, inner, sigma, seed):
            super().__init__(inner.net, inner.mean, inner.std, inner.device)
            self.sigma, self.rng = sigma, np.random.default_rng(seed)

        def query(self, x):
            out = super().query(x)
            return (out + self.rng.normal(0, self.sigma, out.shape)).astype(np.float32)


    class NoisyLogits(Undefended):
        name = "noisy-logits"
        description = "undefended training; served logits plus Gaussian noise"
        param_defaults = {"sigma": 3.0}

        def fit(self, train, ctx):
            return NoisyServed(super().fit(train, ctx), self.params["sigma"], ctx.seed)


    class ThresholdOnly(Undefended):
        name = "threshold-only"
        description = "undefended training, declaring the weakest attack its only adaptive one"
        adaptive_attacks = ("threshold",)
''')
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


def test_strongest_is_the_best_of_the_pool_with_a_ci_that_re_makes_the_choice():
    cfg = _cfg()
    cands = _candidates(cfg)
    headline, _ = select_best(cands[:1], cfg)  # the defense declared only the first (noise)
    st = strongest_figure(cands, headline, cfg, {"lira-raw": PRE_DEFENSE})
    assert st["source"] == "sample-x/a1:v" and st["beats_headline"]
    assert st["tpr_at_fpr"]["0.05"] > headline["tpr_at_fpr"]["0.05"]
    assert st["excluded_attacks"] == {"lira-raw": PRE_DEFENSE}
    # the CI from the variants' stored replicates equals the one recomputed from their scores
    direct = bootstrap_selected_tpr_ci([(c.scores, c.membership) for c in cands], [0.0, 0.05], select_at=0.05,
                                       replicates=cfg.attack.bootstrap, confidence=cfg.attack.confidence, seed=cfg.seed)
    assert st["tpr_ci"] == {"0.0": list(direct[0.0]), "0.05": list(direct[0.05])}
    # a headline that is the strongest itself: same figure, no warning
    best, _ = select_best(cands, cfg)
    assert not strongest_figure(cands, best, cfg, {})["beats_headline"]


def test_a_tie_keeps_the_headline_and_stored_replicates_change_no_headline_number():
    cfg = _cfg()
    a = _candidates(cfg)[1]
    twin = Candidate("sample-x/twin:v", {**a.entry, "name": "twin"}, a.scores, a.membership, a.samples)
    headline, _ = select_best([a], cfg)
    st = strongest_figure([a, twin], headline, cfg, {})
    assert st["source"] == a.label and not st["beats_headline"]
    without = select_best([Candidate(c.label, c.entry, c.scores, c.membership) for c in _candidates(cfg)], cfg)[0]
    assert select_best(_candidates(cfg), cfg)[0] == without  # reusing the replicates is exact


def test_ratio_interval_handles_zero_populations_and_pairs_replicates():
    lo, hi, used = ratio_interval(np.array([0.5, 0.6, 0.7, 0.4]), np.array([0.1, 0.0, 0.1, 0.0]), 0.5)
    assert used == 4 and hi == np.inf and lo == pytest.approx(5.0)
    assert ratio_interval(np.array([0.0, 0.5]), np.array([0.0, 0.1]), 0.9)[2] == 1  # 0 / 0 left out
    assert np.isnan(ratio_interval(np.array([0.0]), np.array([0.0]), 0.9)[0])


def _plugin_run(tmp: Path, cls: str) -> tuple[Path, str]:
    """Evaluate one of NOISY's classes at the SMALL scale: (its run directory, the command's output)."""
    plugin = tmp / "plugins.py"
    plugin.write_text(NOISY)
    res = runner.invoke(app, ["evaluate", f"{plugin}:{cls}", "--out", str(tmp / "runs"), *SMALL], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    (run_dir,) = (tmp / "runs").iterdir()
    return run_dir, res.output


@pytest.fixture(scope="module")
def noisy_run(tmp_path_factory) -> Path:
    return _plugin_run(tmp_path_factory.mktemp("noisy"), "NoisyLogits")[0]


def test_noisy_logit_plugin_report_shows_the_strongest_figure_beside_the_headline_with_the_warning(noisy_run):
    res = runner.invoke(app, ["report", str(noisy_run)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    r = json.loads((noisy_run / "results.json").read_text())
    best, st = r["sample"]["best"], r["sample"]["strongest"]
    assert st["beats_headline"] and st["tpr_ci"]["0.01"][0] > best["tpr_at_fpr"]["0.01"]
    assert len(st["candidates"]) > len(best["candidates"])  # every variant, not only the declared primary ones
    text = " ".join(res.output.split())
    assert f"strongest TPR@1% (any attack) {100 * st['tpr_at_fpr']['0.01']:.1f}%" in text
    assert "warning: sample level:" in text and "understates the leak" in text
    assert r["warnings"] and r["warnings"][0].startswith("sample level:")
    import pandas as pd

    row = pd.read_csv(noisy_run / "table.csv").iloc[0]
    assert row["strongest_attack"] == f"{st['name']}:{st['variant']}" and bool(row["strongest_beats_headline"])
    assert row["strongest_tpr@0.01"] == pytest.approx(st["tpr_at_fpr"]["0.01"])
    html = runner.invoke(app, ["report", str(noisy_run), "--html"])
    page = (noisy_run / "report.html").read_text()
    assert html.exit_code == 0 and "Headline and strongest attack" in page and "understates the leak" in page


def test_a_plugin_declaring_only_the_threshold_attack_is_flagged(tmp_path):
    run_dir, output = _plugin_run(tmp_path, "ThresholdOnly")
    r = json.loads((run_dir / "results.json").read_text())
    assert r["sample"]["best"]["name"] == "threshold" and r["sample"]["strongest"]["name"] in ("lira", "rmia")
    assert r["sample"]["strongest"]["beats_headline"] and "understates the leak" in " ".join(output.split())


def test_leaderboard_ranks_by_the_larger_of_headline_and_strongest(noisy_run, tmp_path):
    from leaderboard.build import collect

    base = json.loads((noisy_run / "results.json").read_text())
    k = "0.01"

    def entry(name: str, headline: float, strongest: float, fp: str) -> dict:
        r = copy.deepcopy(base)
        r["defense"], r["fingerprint"], r["headline_fpr"] = name, fp * 64, 0.01
        r["sample"]["best"]["tpr_at_fpr"][k], r["sample"]["strongest"]["tpr_at_fpr"][k] = headline, strongest
        return r

    folder = tmp_path / "in"
    for i, (name, h, s) in enumerate([("declares-weak", 0.01, 0.50), ("honest", 0.10, 0.10)]):
        (folder / name).mkdir(parents=True)
        (folder / name / "results.json").write_text(json.dumps(entry(name, h, s, str(i))))
    rows = collect([folder])
    assert [r["defense"] for r in rows] == ["honest", "declares-weak"]  # 10% < 50%, though 1% < 10%
    assert rows[1]["rank TPR"] == 0.5 and rows[1]["sample TPR"] == 0.01
    res = runner.invoke(app, ["leaderboard", "build", str(folder), "--out", str(tmp_path / "site")])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "site" / "index.html").read_text()
    assert page.index(">honest<") < page.index(">declares-weak<")
    assert "strongest sample TPR" in page and "above the headline" in page
    md = (tmp_path / "site" / "leaderboard.md").read_text()
    assert "| strongest sample TPR |" in md.splitlines()[0] and "50.0%" in md


def test_ratio_has_a_ci_or_is_not_shown(noisy_run, tmp_path):
    from harness.audit.report import ratio_line

    r = json.loads((noisy_run / "results.json").read_text())
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
    r = json.loads((run_dir / "results.json").read_text())
    ratio = r["sample_population_ratio"]
    p, s = r["population"]["best"]["tpr_at_fpr"]["0.01"], r["sample"]["best"]["tpr_at_fpr"]["0.01"]
    assert ratio["ratio"] == pytest.approx(s / p) and ratio["replicates_used"] > 0
    lo, hi = ratio["ci"]
    assert lo <= ratio["ratio"] <= hi
    assert f"x [{lo:.1f}, " in " ".join(res.output.split())


def test_an_unresolved_headline_fpr_does_not_hide_the_gap(noisy_run, tmp_path):
    """With 8 models (800 non-member guesses) 0.1% FPR is unresolved; the noisy plugin's global-variance
    LiRA still beats the headline at 1% FPR by far more than its CI: the flag, the warning (naming the
    FPR where it shows) and the report's strongest row at 1% must say so."""
    import shutil

    from harness.audit.headline import beats_at

    run = tmp_path / "run"
    shutil.copytree(noisy_run, run)
    res = runner.invoke(app, ["attack", str(run), "--set", "attack.fprs=[0.001,0.01]"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    r = json.loads((run / "results.json").read_text())
    best, st = r["sample"]["best"], r["sample"]["strongest"]
    assert not best["resolved"]["0.001"] and best["resolved"]["0.01"]
    assert st["beats_headline"] and beats_at(st, best, 0.001)[0] == 0.01
    text = " ".join(res.output.split())
    assert "at 1% FPR, above the headline's" in text and "cannot resolve the headline FPR, 0.1%" in text
    assert any(w.startswith("sample level:") and "at 1% FPR" in w for w in r["warnings"])
    assert re.search(r"strongest TPR@1% \(any attack\)\s+[\d.]+% \[[\d.]+, [\d.]+\] !", res.output)
    # where the headline FPR is resolved, the gap is judged there alone (unchanged)
    resolved = {**best, "resolved": {k: True for k in best["resolved"]}, "tpr_at_fpr": {**best["tpr_at_fpr"], "0.001": 1.0}}
    assert beats_at({**st, "resolved": {k: True for k in st["resolved"]}}, resolved, 0.001) == []
