"""The embedded default end to end: the paper's central finding must show on real training."""

import json

import pytest
from typer.testing import CliRunner

from harness.cli import app
from leaderboard.build import build

REQUIRED_TOP = {"defense", "preset", "dataset", "num_models", "audit_size", "seed", "harness_version", "config"}
REQUIRED_LEVEL = {"canary", "test_accuracy", "attacks", "best"}


@pytest.mark.slow
def test_quick_preset_sample_level_is_far_above_population_level(tmp_path):
    """`harness evaluate undefended` with the shipped quick preset (32 MLPs on digits, 200 audit samples)."""
    res = CliRunner().invoke(app, ["evaluate", "undefended", "--out", str(tmp_path), "--workers", "2"])
    assert res.exit_code == 0, res.output
    (run_dir,) = tmp_path.iterdir()
    r = json.loads((run_dir / "results.json").read_text())
    assert REQUIRED_TOP <= set(r) and REQUIRED_LEVEL <= set(r["population"]) and REQUIRED_LEVEL <= set(r["sample"])
    assert (r["num_models"], r["audit_size"], r["population"]["canary"], r["sample"]["canary"]) == (
        32, 200, "none", "mislabeled")
    for level in ("population", "sample"):
        for e in r[level]["attacks"]:
            assert set(e["tpr_at_fpr"]) == set(e["tpr_ci"]) == {"0.0", "0.001", "0.01"}
            assert 0.0 <= e["tpr_at_fpr"]["0.0"] <= e["tpr_at_fpr"]["0.001"] <= e["tpr_at_fpr"]["0.01"] <= 1.0
        best = r[level]["best"]
        assert best["tpr_at_fpr"]["0.001"] == max(e["tpr_at_fpr"]["0.001"] for e in r[level]["attacks"])
    pop = r["population"]["best"]["tpr_at_fpr"]["0.001"]
    smp = r["sample"]["best"]["tpr_at_fpr"]["0.001"]
    assert 0.005 < pop < 0.2, pop
    assert smp >= 5 * pop, (pop, smp)
    assert r["population"]["test_accuracy"]["mean"] > 0.9
    entries = build([tmp_path], tmp_path / "site")
    assert entries[0]["sample TPR"] == smp and (tmp_path / "site" / "index.html").is_file()
    assert entries[0]["canary"] == "mislabeled" and entries[0]["DP ε"] is None
    eps_lo = max(a["eps_lower"]["epsilon"] for lv in ("population", "sample") for a in r[lv]["attacks"]
                 if a["name"] in r[lv]["headline_attacks"])
    assert entries[0]["empirical ε ≥"] == eps_lo > 2.0  # 99% TPR at 0.1% FPR is strong evidence
    md = (tmp_path / "site" / "leaderboard.md").read_text()
    assert "| mislabeled |" in md and "empirical ε ≥" in md
