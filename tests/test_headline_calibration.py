"""The headline statistics are calibrated where the truth is known (harness.audit.calibration: a
leave-one-out LiRA toy with heterogeneous victims, through the harness's own figure and test code):
the headline test holds its size at every S the harness accepts (8 up) and C from 20 to 200, with
tied scores, and fires on a planted gap; the declared headline's CI, the leak's lower bound and the
ratio's CI cover the truth within 2 points of 95% at S = 16, 32, 64. Each tolerance fails the rule
this replaced (tests below put it back). docs/protocol.md quotes benchmarks/bench_headline_test.py
at more simulations."""

from __future__ import annotations

import numpy as np
import pytest

from harness.audit.calibration import Variants, coverage, flag_rate, ratio_coverage
from harness.defense_config import build_config

#: (S, C, ties) of the size check: every S from 8 up, few and many samples per victim, tied scores
SIZES = [(8, 20, False), (8, 200, True), (16, 20, True), (16, 200, False), (32, 20, False), (32, 200, True),
         (64, 20, True), (64, 200, False)]
SIMS = 250


def _cfg(**extra):
    return build_config("quick", {"attack.bootstrap": 200, "attack.fprs": [0.001, 0.01], **extra})


def _pooled(rule_patch=None) -> tuple[float, list[float]]:
    rates = [flag_rate(_cfg(), SIMS, models=s, samples=c, variants=Variants((1.0, 1.0), ties), seed=s * 1000 + c).rate
             for s, c, ties in SIZES]
    return float(np.mean(rates)), rates


@pytest.mark.slow
def test_the_headline_test_holds_its_size_at_every_design_size():
    """Least-favourable null (a variant exactly as strong as the declared headline, one comparison):
    2 000 simulations over 8 designs. Pooled at most 5% + 2 standard errors (6.0%): a test of true
    size 8% passes this in under 1% of runs; every design at most 5% + 3 standard errors (9.1%)."""
    pooled, rates = _pooled()
    assert pooled <= 0.060, (pooled, rates)
    assert max(rates) <= 0.091, rates


@pytest.mark.slow
def test_the_size_check_fails_with_hansens_own_centring(monkeypatch):
    """Put back the centring at the observed difference (Hansen's d_k): at a threshold read off the
    pooled guesses the bootstrap pulls d*_k towards 0, and the test fires too often: the same check
    fails (measured: 10-16% at 16 and 32 models x 20-50 samples)."""
    import harness.core.spa as spa

    real = spa.spa_test
    monkeypatch.setattr(spa, "spa_test", lambda *a, **k: real(*a, **{**k, "recentre": "observed"}))
    rates = [flag_rate(_cfg(), SIMS, models=s, samples=c, variants=Variants((1.0, 1.0)), seed=s * 1000 + c).rate
             for s, c in ((16, 50), (32, 20))]
    assert max(rates) > 0.091 or np.mean(rates) > 0.060, rates


@pytest.mark.slow
def test_the_headline_test_finds_a_planted_gap():
    """One variant without the declared headline's noise among 7 as noisy as it (its TPR 1.34x the
    headline's at 0.1% FPR, 1.5x at 1%: 16.8% vs 12.6%, 37.1% vs 24.7%), 64 models x 100 samples:
    found in 59 of 60 runs (measured); at least 80% asserted."""
    r = flag_rate(_cfg(), 60, models=64, samples=100, variants=Variants((2.0,) * 7 + (0.0,)), seed=5)
    assert r.rate >= 0.8, r.rate


#: (S, C) of the coverage checks
COVER = [(16, 200), (32, 100), (64, 100)]


@pytest.fixture(scope="module")
def covers():
    cfg = _cfg(**{"attack.bootstrap": 300, "attack.fprs": [0.001, 0.002, 0.005, 0.01]})
    return [coverage(cfg, 120, models=s, samples=c, variants=Variants((1.0,) * 4), seed=s + c, worlds=200)
            for s, c in COVER]


@pytest.mark.slow
def test_the_declared_headlines_ci_covers_within_two_points(covers):
    """Two-sided 95% CI of one variant at the figure FPR, pooled over 16, 32, 64 models (360 runs):
    within [93%, 97%]; the paper's reading with its percentile interval (the rule it replaced) falls
    below it (measured 86-91% per design)."""
    got = np.mean([c.declared_covers for c in covers])
    old = np.mean([c.old_covers for c in covers])
    assert 0.93 <= got <= 0.97, [(c.fpr, c.declared_covers) for c in covers]
    assert old < 0.93, [(c.fpr, c.old_covers) for c in covers]
    for c in covers:  # the point reads the truth: no selection, a little below it at most (Jensen)
        assert abs(c.declared_mean / c.rows["truth_declared"] - 1) < 0.1, (c.fpr, c.declared_mean, c.rows)


@pytest.mark.slow
def test_the_leaks_lower_bound_holds_and_its_point_is_not_inflated(covers):
    """Four equally strong variants: the leak's one-sided 95% lower bound stays below the truth in
    at least 93% of runs (pooled; it is conservative where the variants tie: measured 93-98.5%).
    Its point, selection-adjusted and floored by the declared headline (variant 0's own read),
    reads within 10% of the truth in each design and, pooled, less than half as far above it as the
    plain maximum of the four (measured at 16 x 200, 0.2% FPR: +8.2% floored, +5.2% without the
    floor, +12.4% for the plain maximum)."""
    assert np.mean([c.leak_lower_covers for c in covers]) >= 0.93, [(c.fpr, c.leak_lower_covers) for c in covers]
    for c in covers:
        assert abs(c.leak_mean / c.truth - 1) < 0.10, (c.fpr, c.leak_mean, c.truth)
    pull = np.mean([c.leak_mean / c.truth - 1 for c in covers])
    plain = np.mean([c.max_mean / c.truth - 1 for c in covers])
    assert plain > 0.04 and pull < plain / 2, (pull, plain)


@pytest.mark.slow
def test_the_ratios_ci_covers_within_two_points():
    cfg = _cfg(**{"attack.bootstrap": 300})
    got = [ratio_coverage(cfg, 100, models=s, samples=c, seed=s + c, worlds=200) for s, c in COVER]
    pooled = np.average([g[0] for g in got], weights=[g[3] for g in got])
    assert 0.93 <= pooled <= 0.975, got
    assert all(g[3] >= 70 for g in got), got  # a point ratio in most runs: the population leak is told from 0
