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


def _largest_design_misses() -> dict[str, np.ndarray]:
    """One exact leave-one-out LiRA variant at the largest designs the benchmark simulates (6 400
    non-member guesses: 32 x 400 and 64 x 200 at 0.1% FPR; 32 x 200 at 1%), 4 draws of audit samples
    x 100 runs each: per run, (covers, truth below the interval) for the harness's interval and for
    the expanded percentile interval it replaced."""
    from harness.audit.calibration import ToyWorld, truth
    from harness.core.figure import expanded_level, interval, threshold_factor
    from harness.core.metrics import evaluate_scores

    out: dict[str, list[tuple[bool, bool]]] = {"harness": [], "percentile": []}
    for s, c, t in ((32, 400, 0.001), (64, 200, 0.001), (32, 200, 0.01)):
        k, a = t * s * c / 2, expanded_level(0.025, s)
        for w in range(4):
            world, variant = ToyWorld.draw(c, 1 + w), Variants((0.0,))
            true_tpr = truth(world, s, variant, [t], worlds=300)[t]
            for i in range(100):
                rng = np.random.default_rng([w, i, 2])
                x, mem = world.outputs(s, rng)
                m = evaluate_scores(variant.scores(x, mem, rng)[0], mem, np.ones(c, bool), [t], bootstrap=300,
                                    confidence=0.95, seed=i, reading_fprs=(t,))
                tpr, reps = m.reading[t], m.reading_samples[t]
                lo, hi = interval(tpr, reps, s, 0.95, k, jackknife=m.reading_jackknife[t])
                out["harness"].append((lo <= true_tpr <= hi, true_tpr < lo))
                q_lo, q_hi = np.quantile(reps, [a, 1 - a])
                f = threshold_factor(k)
                lo, hi = tpr - f * (tpr - q_lo), tpr + f * (q_hi - tpr)
                out["percentile"].append((lo <= true_tpr <= hi, true_tpr < lo))
    return {name: np.array(v) for name, v in out.items()}


@pytest.mark.slow
def test_the_declared_ci_covers_at_the_largest_designs_and_does_not_sit_too_high():
    """Where a few victims hold the threshold's false positives, the victim bootstrap's distribution
    is skewed right and narrower than the TPR's own (symmetric) spread: its percentile interval sat
    too high (the truth below it in 5.0% of these 1 200 runs, above it in 1.3%; 93.8% covered). The
    harness's interval, symmetric with the larger of the bootstrap's and the delete-one-victim
    jackknife's SD, covers 95.3% with the truth below it in 3.0% (measured): asserted at least 94%
    and at most 4% below, which the rule replaced fails."""
    got = _largest_design_misses()
    new, old = got["harness"], got["percentile"]
    assert new[:, 0].mean() >= 0.94 and new[:, 1].mean() <= 0.04, (new.mean(0), old.mean(0))
    assert old[:, 1].mean() > 0.045, old.mean(0)  # the rule replaced: too high in more than 4.5% of runs


def _ratio_at_one_percent() -> float:
    """The ratio's CI where both levels read at 1% FPR (32 x 200, 32 expected false positives), 6
    draws of audit samples x 50 runs (the benchmark's first six: docs/protocol.md, Coverage)."""
    cfg = build_config("quick", {"attack.bootstrap": 400, "attack.fprs": [0.01, 0.02, 0.05]})
    got = [ratio_coverage(cfg, 50, models=32, samples=200, seed=32 * 7 + 200 + 1000 * w) for w in range(6)]
    return float(np.average([g[0] for g in got], weights=[g[3] for g in got]))


@pytest.mark.slow
def test_the_ratios_ci_covers_where_both_levels_read_at_one_percent(monkeypatch):
    """The expanded percentile interval of the replicate ratios covered 91.7% of these 300 runs (90.7%
    over 600); symmetric on the log scale with the larger of the bootstrap's and the jackknife's SD,
    95.3% (measured): at least 93.5% asserted, and the rule replaced put back fails it."""
    assert _ratio_at_one_percent() >= 0.935
    import harness.audit.headline as headline
    from harness.core.figure import expanded_level

    def percentile(num, den, s, confidence, point, jackknife=None):
        ok = ~np.isnan(num) & ~np.isnan(den) & (den > 0)
        a = expanded_level((1 - confidence) / 2, s)
        return tuple(float(v) for v in np.quantile(num[ok] / den[ok], [a, 1 - a]))

    monkeypatch.setattr(headline, "ratio_interval", percentile)
    assert _ratio_at_one_percent() < 0.93
