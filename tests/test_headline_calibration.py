"""The level figures are calibrated where the truth is known (harness.audit.calibration: a
leave-one-out LiRA toy with victims that differ, through the harness's own figure and test code),
issue 53's done-when:

(a) the leak, the plain maximum of its candidates, never reads below its estimand (the largest
    expected read: harness.core.figure) beyond Monte Carlo error, overstates it by its selection
    bias only (at most 2 points at 32 models, 3 at 8 x 20: the issue's 1 point or 5% is not met
    where candidates are equal or weak ones are noisy, see the test), and its lower bound holds it
    in at least 95% less Monte Carlo error,
    on pools of one dominant variant with near-copies, all equal, one dominant with weak ones, and
    victims that differ in offset, noise scale and memorization with heavy-tailed noise, at S from 8
    and C from 20;
(b) the headline test holds its size (5% plus Monte Carlo error) in cells of S x C with exchangeable
    variants, tied scores, and victims more heterogeneous for one variant than the other (its noise
    tuned until the two expected reads are equal: the test's estimand), and finds a 3x gap.

docs/protocol.md quotes ``python benchmarks/bench_headline_test.py`` at more simulations and cells."""

from __future__ import annotations

import numpy as np
import pytest

from harness.audit.calibration import ToyWorld, Variants, coverage, flag_rate, tune_noise
from harness.audit.headline import level_fpr
from harness.defense_config import build_config

SIMS = 150


def _cfg(**extra):
    return build_config("quick", {"attack.bootstrap": 200, "attack.fprs": [0.001, 0.01], **extra})


def _se(p: float, n: int) -> float:
    return float(np.sqrt(p * (1 - p) / n))


#: (S, C) of the size check
SIZE_CELLS = [(8, 20), (16, 50), (32, 20), (32, 200), (64, 50), (64, 200)]
HET = dict(victim_scale=(0.0, 0.8), victim_offset=(0.0, 0.3))
#: a leak candidate whose victims differ strongly (where the studentized rule the test replaced read
#: d negatively correlated with its own SE)
STRONG = dict(victim_scale=(0.0, 1.5), victim_offset=(0.0, 0.8))


@pytest.mark.slow
def test_the_headline_test_holds_its_size_with_ties_and_victims_that_differ():
    """24 cells x 150 simulations: pooled at most 5% + 2 SE (5.7%), every cell at most 5% + 3 SE
    (10.3%). Four nulls: exchangeable, tied scores, a leak candidate whose victims differ, the same
    strongly (benchmarks/bench_headline_test.py measures five nulls at 300 simulations a cell)."""
    cfg, rates = _cfg(), {}
    for s, c in SIZE_CELLS:
        world = ToyWorld.draw(c, s * 1000 + c)
        fpr = level_fpr(cfg, s * c // 2)
        het = tune_noise(world, s, Variants((1.0, 1.0), **HET), 1, fpr, runs=100, steps=9)
        strong = tune_noise(world, s, Variants((1.0, 1.0), **STRONG), 1, fpr, runs=100, steps=9)
        for null, v in (("exchangeable", Variants((1.0, 1.0))), ("ties", Variants((1.0, 1.0), ties=True)),
                        ("heterogeneous", het), ("strongly heterogeneous", strong)):
            rates[(s, c, null)] = flag_rate(cfg, SIMS, models=s, samples=c, variants=v, seed=s * 1000 + c,
                                            world=world).rate
    pooled = float(np.mean(list(rates.values())))
    assert pooled <= 0.05 + 2 * _se(0.05, SIMS * len(rates)), (pooled, rates)
    assert max(rates.values()) <= 0.05 + 3 * _se(0.05, SIMS), rates


def test_tune_noise_reaches_the_gap_it_is_asked_for():
    """A 3x gap at 16 models x 100 samples needs more noise than the bracket's first upper end (a
    reference of noise 0: 6): the tuned variant's expected read, drawn afresh, is a third of the
    reference's (a fixed upper end left it at half)."""
    from harness.audit.calibration import expected_reads

    world = ToyWorld.draw(100, 16_100)
    v = tune_noise(world, 16, Variants((1.0, 0.0)), 0, 0.005, runs=100, steps=9, ratio=3.0)
    reads = expected_reads(world, 16, v, 0.005, runs=300, seed=4)
    assert 2.6 < reads[1] / reads[0] < 3.5, reads
    with pytest.raises(ValueError, match="noise alone"):
        tune_noise(world, 16, Variants((1.0, 0.0)), 0, 0.005, runs=20, steps=2, ratio=1000.0)


@pytest.mark.slow
def test_the_headline_test_finds_a_three_fold_gap():
    """The declared variant's noise tuned so that the other's expected read is 3x its own, 64 models x
    100 samples: found in most runs (at least 60% asserted; benchmarks/bench_headline_test.py measures
    the power at 1.5x and 3x at 16, 32 and 64 models)."""
    cfg = _cfg()
    world = ToyWorld.draw(100, 64_100)
    v = tune_noise(world, 64, Variants((1.0, 0.0)), 0, level_fpr(cfg, 3200), runs=100, steps=9, ratio=3.0)
    assert flag_rate(cfg, 60, models=64, samples=100, variants=v, seed=5, world=world).rate >= 0.6


POOLS = {
    "dominant + near-copies": (Variants((0.3, 0.45, 0.5, 0.6)), {}),
    "all equal": (Variants((1.0, 1.0, 1.0)), {}),
    "dominant + weak": (Variants((0.3, 3.0, 4.0)), {}),
    "victims differ, t3 noise": (Variants((0.5, 0.7, 0.7), victim_scale=(0.0, 0.6, 0.3), victim_offset=(0.0, 0.3, 0.0),
                                          df=3.0), {"u_sd": 0.6, "scale_sd": 0.4, "mem_sd_victim": 0.5, "df": 3.0}),
}
#: (S, C) -> (simulations, runs for the expected reads): a read at 8 x 20 (15 true positives) has an
#: SD near 10 points, so its cell needs more of both to resolve a point of bias
COVER_CELLS = {(8, 20): (400, 600), (32, 100): (120, 150)}


@pytest.fixture(scope="module")
def covers():
    cfg = _cfg(**{"attack.fprs": [0.001, 0.002, 0.005, 0.01]})
    return {(name, s, c): coverage(cfg, sims, models=s, samples=c, variants=v, seed=s + c, worlds=worlds,
                                   world=ToyWorld.draw(c, s + c, **kw))
            for name, (v, kw) in POOLS.items() for (s, c), (sims, worlds) in COVER_CELLS.items()}


def _bias_se(cov, sims: int) -> float:
    """The Monte Carlo SE of a measured bias: the leak's mean over ``sims`` runs and the truth's."""
    return float(np.hypot(cov.rows["leak_sd"] / np.sqrt(sims), cov.rows["truth_se"]))


@pytest.mark.slow
def test_the_leak_overstates_by_its_selection_only(covers):
    """Against the largest expected read (the estimand), the plain maximum's bias is its selection:
    never below -2 Monte Carlo SEs in any pool or cell (a rule that reads low, as 0.4's median
    adjustment did by 8-12%, fails), and at most 2 points at 32 x 100 and 3 points at 8 x 20
    (measured +0.1 to +1.4 points at 32 x 100 with 120 runs; +0.6 to +2.3 at 8 x 20 with 400).
    Issue 53 asks for 1 point or 5%: met where one candidate dominates at 32 x 100, not with three
    equal candidates (+1.4 points, 8.5%) nor at 8 x 20 where weak candidates' reads are noisy enough
    to be the maximum (docs/protocol.md, Coverage)."""
    for (name, s, c), cov in covers.items():
        se = _bias_se(cov, COVER_CELLS[(s, c)][0])
        assert cov.leak_bias >= -2 * se, (name, s, c, cov.leak_mean, cov.truth, se)
        assert cov.leak_bias <= (0.02 if s == 32 else 0.03), (name, s, c, cov.leak_mean, cov.truth)


@pytest.mark.slow
def test_the_leaks_lower_bound_and_the_declared_ci_cover(covers):
    """The leak's one-sided 95% lower bound holds the largest expected read in at least 95% less 2 SEs
    (91%) in every pool and cell (measured 96.7-100%), and at least 95% pooled; the declared
    headline's two-sided CI (one variant) covers its expected read in at least 91% at 32 x 100
    (measured 94.2-95.8%; at 8 x 20 94.0-95.8%)."""
    lows = [cov.leak_lower_covers for cov in covers.values()]
    assert min(lows) >= 0.95 - 2 * _se(0.05, 120), {k: c.leak_lower_covers for k, c in covers.items()}
    assert np.mean(lows) >= 0.95
    decl = {k: c.declared_covers for k, c in covers.items() if k[1] == 32}
    assert min(decl.values()) >= 0.91, decl


@pytest.mark.slow
def test_the_rerun_verification_refuses_few_honest_entries():
    """Pairs of independent runs (other canaries, other models), 16 x 50: the leaderboard's rule
    (both runs' errors over victims and audit samples) refuses at most 5% of honest entries (measured
    0.7-2.0% at 16 x 50 and 32 x 200, 150 pairs), where the rule it replaced (each leak at or above the other's
    one-sided lower bound, conditional on its own canaries) refused over 10% (measured 14.0-19.3%)."""
    from harness.audit.calibration import rerun_verification

    v = rerun_verification(_cfg(), 80, models=16, samples=50, variants=Variants((1.0, 1.0)), shop=1)
    assert v.false_rejection <= 0.05 < 0.10 < v.old_false_rejection, v


@pytest.mark.slow
def test_each_variants_own_interval_covers_its_expected_read():
    """The interval printed beside each variant's paper-style TPR (attacks.csv, the details tables)
    covers that read's expected value at the design in at least 95% less 2.5 SEs of 300 runs (91.8%)
    at 32 x 200 and 64 x 50 (one variant) and 8 x 20 (heterogeneous victims, t3 noise), and in at least
    93.5% over the three (measured 96.0 / 94.2 / 97.5% at 400 runs, where the percentile bootstrap
    interval it replaced covered 88.5 / 89.2 / 92.0%: benchmarks/bench_headline_test.py --parts
    variant_ci)."""
    from harness.audit.calibration import variant_coverage

    cfg = _cfg()
    t3 = {"u_sd": 0.6, "scale_sd": 0.4, "mem_sd_victim": 0.5, "df": 3.0}
    got = {}
    for s, c, v, kw in ((32, 200, Variants((0.5,)), {}), (64, 50, Variants((0.5,)), {}),
                        (8, 20, Variants((0.5,), df=3.0), t3)):
        got[(s, c)] = variant_coverage(cfg, 300, models=s, samples=c, variants=v, fpr=level_fpr(cfg, s * c // 2),
                                       seed=s + c, worlds=300, world=ToyWorld.draw(c, s + c, **kw))
    covers = [v.covers for v in got.values()]
    assert min(covers) >= 0.95 - 2.5 * _se(0.05, 300), got
    assert np.mean(covers) >= 0.935, got
