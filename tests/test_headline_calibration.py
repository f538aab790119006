"""The headline statistics are calibrated where the truth is known (harness.audit.calibration):
the headline test stays quiet on pure noise and on equally strong variants (family-wise error at
most alpha over ~20 variants and two FPRs), fires on a planted stronger variant, and the
cross-fitted best-of figure's CI covers the true best TPR where the plain maximum's does not."""

from __future__ import annotations

import numpy as np
import pytest

from harness.audit.calibration import coverage, flag_rate, synthetic_candidates, true_tpr
from harness.audit.headline import LevelFamily, headline_test
from harness.core.spa import recentring_threshold, spa_test
from harness.defense_config import build_config


def _cfg(**extra):
    return build_config("quick", {"attack.bootstrap": 200, "attack.fprs": [0.001, 0.01], **extra})


@pytest.mark.slow
def test_no_signal_and_twenty_variants_the_flag_fires_in_at_most_seven_percent_of_200_simulations():
    cfg = _cfg()
    r = flag_rate(cfg, 200, variants=20, models=20, samples=100, mu=0.0)
    assert r.simulations == 200 and r.rate <= 0.07, r.rate
    # not a test that cannot fire: its p-values spread over (0, 1], some small
    assert r.p_values.min() < 0.3 and r.p_values.max() == 1.0


@pytest.mark.slow
def test_equally_strong_variants_are_the_least_favourable_null_and_stay_within_alpha():
    """At the quick preset's size (32 models x 200 samples): 20 variants as strong as the headline.
    (With 20 models the bootstrap over victims is too short-tailed and the rate reads about 8%:
    docs/protocol.md quotes benchmarks/bench_headline_test.py.)"""
    r = flag_rate(_cfg(), 100, variants=20, models=32, samples=200, mu=1.5, seed=1000)
    assert r.rate <= 0.10, r.rate  # 100 simulations: 5% nominal, about 2.2 points of binomial noise


def test_a_planted_stronger_variant_is_flagged():
    cfg = _cfg()
    flagged = 0
    for i in range(10):
        cfg_i = cfg.model_copy(update={"seed": i})
        cands = synthetic_candidates(cfg_i, [0.5] + [0.5] * 18 + [2.0], np.random.default_rng([7, i]), models=20,
                                     samples=100, folds=False)
        test = headline_test({"sample": LevelFamily(cands[:1], cands)}, cfg_i)
        flagged += test["levels"]["sample"]["flagged"]
        if test["levels"]["sample"]["flagged"]:
            assert test["levels"]["sample"]["top"]["candidate"] == cands[-1].label  # the planted one
    assert flagged >= 9, flagged


@pytest.mark.slow
def test_the_cross_fitted_figure_covers_the_truth_where_the_plain_maximum_does_not():
    """K = 8 equally strong variants: the true best TPR at 1% FPR is every variant's. The plain
    maximum reads far above it and its interval misses it more often than 5%; the cross-fitted
    figure's covers it. (Measured, 100 simulations: truth 29.5%, cross-fitted 31.6% covering 99%,
    maximum 33.7% covering 83%; one variant alone reads 30.6%: pooling 20 victims with per-model
    offsets reads a little above the many-victim truth, and a read on 10 of them a little more.)"""
    c = coverage(_cfg(**{"attack.bootstrap": 100}), 100, variants=8, mu=2.0, fpr=0.01, models=20, samples=100)
    assert c.crossfit_coverage >= 0.90, c
    assert abs(c.crossfit_mean - c.truth) < 0.03, c
    assert c.max_mean > c.truth + 0.03 and c.max_coverage < c.crossfit_coverage, c


def test_true_tpr_is_the_binormal_roc():
    assert true_tpr(0.0, 0.01, 0.5) == pytest.approx(0.01)
    assert true_tpr(2.0, 0.01, 0.0) == pytest.approx(0.3721, abs=1e-4)


def test_spa_p_value_by_hand():
    """Two hypotheses, 4 replicates: T_k = d_k / sd(d*_k); the null re-centres d* at d for hypotheses
    above Hansen's threshold and keeps the others' mean; p = P*(max(0, max_k Z*_k) >= T)."""
    d = np.array([0.2, -1.0])
    reps = np.array([[0.1, 0.3, 0.2, 0.2], [-1.0, -1.2, -0.8, -1.0]])
    res = spa_test(d, reps, num_units=16)
    w = reps.std(axis=1)
    assert res.statistic == pytest.approx(0.2 / w[0])
    assert recentring_threshold(16) == pytest.approx(-np.sqrt(2 * np.log(np.log(16))))
    assert -1.0 / w[1] < recentring_threshold(16)  # the second keeps its negative mean
    z = np.stack([(reps[0] - 0.2) / w[0], reps[1] / w[1]])
    null = np.maximum(0, z.max(axis=0))
    assert res.p_value == pytest.approx(np.mean(null >= 0.2 / w[0]))
    # no positive difference: nothing to reject
    assert spa_test(np.array([-0.1]), np.array([[-0.1, 0.0, -0.2]]), 16).p_value == 1.0
    # a gap that every replicate shows alike (no spread) is rejected; no spread and no gap is dropped
    flat = spa_test(np.array([0.1, 0.0]), np.array([[0.1, 0.1], [0.0, 0.0]]), 16)
    assert flat.p_value == 0.0 and np.isnan(flat.t_stats[1])


def test_headline_test_looks_at_every_level_at_once_and_reports_each():
    """One level with a planted stronger variant, one without: the family is both levels; the
    flagged level names the planted variant, the quiet one stays quiet, and each level's p-value is
    the single-step adjusted one (never below the run's)."""
    cfg = _cfg()
    rng = np.random.default_rng(3)
    strong = synthetic_candidates(cfg, [0.3, 0.3, 2.5], rng, models=20, samples=100, folds=False)
    quiet = synthetic_candidates(cfg, [1.0, 1.0, 1.0], rng, models=20, samples=100, folds=False)
    test = headline_test({"population": LevelFamily(quiet[:1], quiet), "sample": LevelFamily(strong[:1], strong)}, cfg)
    lv = test["levels"]
    assert lv["sample"]["flagged"] and lv["sample"]["top"]["candidate"] == strong[2].label
    assert not lv["population"]["flagged"]
    # 20 models x 50 non-members = 1000 negatives: 0.1% FPR is one false positive, below the 3 the test
    # needs (an extreme order statistic the bootstrap does not reproduce); 1% is tested
    assert test["hypotheses"] == 2 * 2 * 1 and lv["sample"]["fprs"] == [0.01]
    assert min(lv["sample"]["p_value"], lv["population"]["p_value"]) == test["p_value"]
    three = build_config("quick", {"attack.bootstrap": 200, "attack.fprs": [0.0001, 0.003, 0.01]})
    small = synthetic_candidates(three, [0.3, 2.5], rng, models=20, samples=100, folds=False)
    assert headline_test({"sample": LevelFamily(small[:1], small)}, three)["levels"]["sample"]["fprs"] == [0.003, 0.01]
    # no bootstrap: no test, and it says why
    none = headline_test({"sample": LevelFamily(small[:1], small)}, build_config("quick", {"attack.bootstrap": 0}))
    assert none["p_value"] is None and "attack.bootstrap = 0" in none["reason"]
