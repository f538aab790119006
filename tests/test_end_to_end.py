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
    fig = r["sample"]["figure"]
    assert fig["fpr"] == 0.001 and fig["leak"]["tpr"] >= fig["declared"]["ci"][0] and fig["leak"]["lower"] > 0.5
    entries = build([tmp_path], tmp_path / "site")
    assert entries[0]["rank TPR"] == entries[0]["leak TPR"] == fig["leak"]["tpr"]
    assert entries[0]["declared TPR"] == fig["declared"]["tpr"] and (tmp_path / "site" / "index.html").is_file()
    assert entries[0]["canary"] == "mislabeled" and entries[0]["DP ε"] is None
    # the run's one-run epsilon: pre-specified (the first configured attack's primary, LiRA, on the sample level's
    # first canary experiment), a 95% statement for it alone: no family correction, so it certifies at 32 models
    one = r["one_run_epsilon"]
    lira = next(a for a in r["sample"]["attacks"] if a["name"] == "lira" and a["primary"])
    assert r["attack_roles"]["prespecified"] == "lira" and one["variant"].endswith("/lira:" + lira["variant"])
    assert one["certifiable"] and one["epsilon"] == lira["eps_lower_one_run"]["epsilon"] > 1.0
    assert one["confidence"] == 0.95 and entries[0]["empirical ε ≥"] == one["epsilon"]
    md = (tmp_path / "site" / "leaderboard.md").read_text()
    assert "| mislabeled |" in md and "empirical ε ≥" in md and "nominal" not in md
