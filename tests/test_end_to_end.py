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
        primaries = [e for e in r[level]["attacks"] if e["primary"] and e["name"] in r[level]["headline_attacks"]]
        assert r[level]["headline_attacks"] == ["lira"] and len(primaries) == 1  # undefended: LiRA's primary
        assert (best["name"], best["variant"]) == (primaries[0]["name"], primaries[0]["variant"])
        # the quick preset trains without augmentation: the primary reads the plain query
        assert best["variant"] == "online-logit-noaug-persample" and not r[level]["trained_with_augmentation"]
    pop = r["population"]["best"]["tpr_at_fpr"]["0.001"]
    smp = r["sample"]["best"]["tpr_at_fpr"]["0.001"]
    assert 0.005 < pop < 0.2, pop
    assert smp >= 5 * pop, (pop, smp)
    assert r["population"]["test_accuracy"]["mean"] > 0.9
    # RMIA runs beside LiRA: at the population level within a factor 2 of LiRA's TPR@1% FPR, and
    # higher at the sample level than at the population level
    rmia = {lv: next(e for e in r[lv]["attacks"] if e["name"] == "rmia" and e["primary"]) for lv in ("population", "sample")}
    lira_pop = next(e for e in r["population"]["attacks"] if e["name"] == "lira" and e["primary"])
    assert lira_pop["tpr_at_fpr"]["0.01"] / 2 <= rmia["population"]["tpr_at_fpr"]["0.01"] <= 2 * lira_pop["tpr_at_fpr"]["0.01"]
    assert rmia["sample"]["tpr_at_fpr"]["0.001"] > rmia["population"]["tpr_at_fpr"]["0.001"]
    assert r["population"]["num_population_samples"] == 497 and r["population"]["attack_params"]["rmia"]["gamma"] == 1.0
    entries = build([tmp_path], tmp_path / "site")
    assert entries[0]["sample TPR"] == smp and (tmp_path / "site" / "index.html").is_file()
    assert entries[0]["canary"] == "mislabeled" and entries[0]["DP ε"] is None
    best_entries = [next(a for a in r[lv]["attacks"] if a["name"] == r[lv]["best"]["name"]
                         and a["variant"] == r[lv]["best"]["variant"]) for lv in ("population", "sample")]
    one_run = max(a["eps_lower_one_run"]["epsilon"] for a in best_entries)
    nominal = max(a["eps_lower"]["epsilon"] for a in best_entries)
    assert entries[0]["empirical ε ≥"] == one_run > 1.5  # 98% TPR at 0.1% FPR: strong evidence even per victim
    assert entries[0]["nominal ε ≥"] == nominal > one_run  # the pooled bound claims more than is valid
    md = (tmp_path / "site" / "leaderboard.md").read_text()
    assert "| mislabeled |" in md and "empirical ε ≥" in md and "nominal ε ≥" in md
