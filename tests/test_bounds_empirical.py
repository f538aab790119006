"""Empirical epsilon lower bounds (DP auditing) and the label-flip memorization game."""

import math

import numpy as np
import pytest
from scipy.stats import binomtest

from harness.bounds import empirical


def exact_ci(k: int, n: int) -> tuple[float, float]:
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return ci.low, ci.high


@pytest.mark.parametrize("k,n", [(0, 10), (10, 10), (3, 17), (500, 1000), (1, 2000)])
def test_clopper_pearson_matches_scipy_exact_interval(k, n):
    lo, hi = empirical.clopper_pearson(k, n)
    want_lo, want_hi = exact_ci(k, n)
    assert lo == pytest.approx(want_lo, rel=1e-9, abs=1e-12)
    assert hi == pytest.approx(want_hi, rel=1e-9, abs=1e-12)


def test_clopper_pearson_closed_forms_and_vectorisation():
    lo, hi = empirical.clopper_pearson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 10), rel=1e-12)
    lo, hi = empirical.clopper_pearson(np.array([0, 5, 10]), 10)
    assert lo.shape == (3,) and hi[2] == 1.0 and lo[0] == 0.0
    with pytest.raises(ValueError):
        empirical.clopper_pearson(11, 10)


def test_epsilon_from_counts_by_hand():
    res = empirical.epsilon_lower_bound_from_counts(900, 10, 1000, 1000)
    tpr_lo, _ = exact_ci(900, 1000)
    _, fpr_hi = exact_ci(10, 1000)
    assert res.epsilon == pytest.approx(math.log(tpr_lo / fpr_hi), rel=1e-9)
    assert res.direction == "tpr/fpr" and res.tp == 900 and res.fp == 10
    assert res.tpr == 0.9 and res.fpr == 0.01
    # delta lowers the bound
    res_d = empirical.epsilon_lower_bound_from_counts(900, 10, 1000, 1000, delta=0.1)
    assert res_d.epsilon == pytest.approx(math.log((tpr_lo - 0.1) / fpr_hi), rel=1e-9)


def test_symmetric_direction_uses_tnr_over_fnr():
    # almost every member flagged, most non-members too: the evidence is in the few missed members
    res = empirical.epsilon_lower_bound_from_counts(995, 600, 1000, 1000)
    tpr_lo, _ = exact_ci(995, 1000)
    _, fpr_hi = exact_ci(600, 1000)
    assert res.direction == "tnr/fnr"
    assert res.epsilon == pytest.approx(math.log((1 - fpr_hi) / (1 - tpr_lo)), rel=1e-9)
    assert res.epsilon > math.log(tpr_lo / fpr_hi)


def test_no_evidence_gives_zero():
    res = empirical.epsilon_lower_bound_from_counts(5, 5, 10, 10)
    assert res.epsilon == 0.0


def brute_force(scores: np.ndarray, member: np.ndarray, delta: float = 0.0) -> float:
    best = 0.0
    npos, nneg = int(member.sum()), int((~member).sum())
    for t in np.unique(scores):
        tp = int((scores[member] >= t).sum())
        fp = int((scores[~member] >= t).sum())
        tpr_lo = exact_ci(tp, npos)[0]
        fpr_hi = exact_ci(fp, nneg)[1]
        if tpr_lo - delta > 0:
            best = max(best, math.log((tpr_lo - delta) / fpr_hi))
        if 1 - fpr_hi - delta > 0 and tpr_lo < 1:
            best = max(best, math.log((1 - fpr_hi - delta) / (1 - tpr_lo)))
    return best


def test_roc_maximisation_matches_brute_force():
    rng = np.random.default_rng(3)
    member = rng.random(300) < 0.5
    scores = np.round(rng.normal(size=300) + 1.5 * member, 1)  # ties included
    res = empirical.epsilon_lower_bound_roc(scores, member)
    assert res.epsilon == pytest.approx(brute_force(scores, member), rel=1e-9)
    # the reported operating point reproduces the reported epsilon
    assert res.threshold is not None
    assert res.tp == int((scores[member] >= res.threshold).sum())
    assert res.fp == int((scores[~member] >= res.threshold).sum())
    again = empirical.epsilon_lower_bound_from_counts(res.tp, res.fp, res.num_pos, res.num_neg)
    assert again.epsilon == pytest.approx(res.epsilon, rel=1e-12)
    res_d = empirical.epsilon_lower_bound_roc(scores, member, delta=0.01)
    assert res_d.epsilon == pytest.approx(brute_force(scores, member, 0.01), rel=1e-9)
    assert res_d.epsilon < res.epsilon


def test_perfect_separation():
    member = np.r_[np.ones(1000, bool), np.zeros(1000, bool)]
    scores = np.r_[np.full(1000, 2.0), np.full(1000, 1.0)]
    res = empirical.epsilon_lower_bound_roc(scores, member)
    lo = 0.025 ** (1 / 1000)
    assert res.epsilon == pytest.approx(math.log(lo / (1 - lo)), rel=1e-9)
    assert res.threshold == 2.0 and res.tpr == 1.0 and res.fpr == 0.0


def test_bonferroni_is_more_conservative():
    rng = np.random.default_rng(0)
    member = rng.random(2000) < 0.5
    scores = rng.normal(size=2000) + member
    plain = empirical.epsilon_lower_bound_roc(scores, member)
    corrected = empirical.epsilon_lower_bound_roc(scores, member, bonferroni=True)
    assert 0 < corrected.epsilon < plain.epsilon


def test_bound_is_valid_for_a_known_eps_dp_mechanism():
    """Randomized response with eps = 1: the audited lower bound stays below 1 (up to the 5% failure)."""
    eps, n = 1.0, 4000
    p_member = math.exp(eps) / (1 + math.exp(eps))
    over, estimates = 0, []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        member = np.r_[np.ones(n, bool), np.zeros(n, bool)]
        out = np.r_[rng.random(n) < p_member, rng.random(n) < 1 - p_member].astype(float)
        res = empirical.epsilon_lower_bound_roc(out, member)
        over += res.epsilon > eps
        estimates.append(res.epsilon)
    assert over <= 2
    assert np.mean(estimates) > 0.75  # and the audit is not vacuous


def test_counts_validation():
    with pytest.raises(ValueError):
        empirical.epsilon_lower_bound_from_counts(11, 0, 10, 10)
    with pytest.raises(ValueError):
        empirical.epsilon_lower_bound_from_counts([1, 2], [1], 10, 10)
    with pytest.raises(ValueError):
        empirical.epsilon_lower_bound_roc(np.array([1.0, 2.0]), np.array([True, True]))


def test_label_flip_game_by_hand():
    trained = np.array([0.9, 0.8, 0.3, 0.55, 0.2, 0.6, 0.45, 0.5])
    alt = np.array([0.05, 0.1, 0.6, 0.4, 0.1, 0.6, 0.4, 0.3])
    # tau = 0.5: guesses where max >= 0.5 and no tie -> canaries 0, 1, 2, 3, 7 (5 is a tie, 4 and 6 abstain)
    res = empirical.label_flip_game(trained, alt, tau=0.5)
    assert (res.num_canaries, res.num_guesses, res.num_correct) == (8, 5, 4)
    assert res.cgr == 0.8 and res.epsilon == pytest.approx(math.log(4.0), rel=1e-12)
    lo, hi = exact_ci(4, 5)
    assert res.cgr_lo == pytest.approx(lo) and res.cgr_hi == pytest.approx(hi)
    assert res.epsilon_lo == (math.log(lo / (1 - lo)) if lo > 0.5 else 0.0)
    # tau = 0.7: only canaries 0 and 1
    res = empirical.label_flip_game(trained, alt, tau=0.7)
    assert (res.num_guesses, res.num_correct, res.cgr) == (2, 2, 1.0)
    assert res.epsilon == math.inf and res.epsilon_hi == math.inf and res.epsilon_lo == 0.0
    res = empirical.label_flip_game(trained, alt, tau=0.99)
    assert res.num_guesses == 0 and math.isnan(res.cgr) and res.epsilon_lo == 0.0


def test_label_flip_game_on_randomized_response():
    """Labels trained through eps-randomized response: the model 'remembers' the trained label w.p. sigmoid(eps)."""
    eps, n = 2.0, 5000
    rng = np.random.default_rng(7)
    remembers = rng.random(n) < 1 / (1 + math.exp(-eps))
    conf = rng.uniform(0.6, 1.0, n)
    trained = np.where(remembers, conf, 1 - conf)
    res = empirical.label_flip_game(trained, 1 - trained, tau=0.5)
    assert res.epsilon_lo <= eps <= res.epsilon_hi
    assert abs(res.epsilon - eps) < 0.15


def test_label_flip_game_validation():
    with pytest.raises(ValueError):
        empirical.label_flip_game(np.array([0.9]), np.array([0.1]), tau=0.3)
    with pytest.raises(ValueError):
        empirical.label_flip_game(np.array([0.9]), np.array([0.1]), tau=0.995)
    with pytest.raises(ValueError):
        empirical.label_flip_game(np.array([0.9, 0.2]), np.array([0.1]))
    with pytest.raises(ValueError):
        empirical.label_flip_game(np.array([1.5]), np.array([0.1]))


def test_clopper_pearson_table_and_distinct_pairs_equal_scipy_stats_beta_ppf_exactly():
    """The limits come from scipy.special.betaincinv (cached per (n, alpha) for a ROC's many k, or
    once per distinct (k, n) pair): bit for bit what scipy.stats.beta.ppf gives."""
    from scipy.stats import beta

    rng = np.random.default_rng(0)

    def reference(k, n, alpha):
        with np.errstate(all="ignore"):
            return (np.where(k > 0, beta.ppf(alpha / 2, k, n - k + 1), 0.0),
                    np.where(k < n, beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0))

    for n, alpha in ((7, 0.05), (2000, 0.05), (2000, 0.05 / 3000)):
        k = np.sort(rng.integers(0, n + 1, size=3 * n))  # many k of one n: the cached table
        for got, want in zip(empirical.clopper_pearson(k, n, alpha), reference(k, n, alpha)):
            assert np.array_equal(got, want)
    k, n = rng.integers(0, 50, size=200), rng.integers(50, 60, size=200)  # several n: distinct pairs
    for got, want in zip(empirical.clopper_pearson(k, n), reference(k, n, 0.05)):
        assert np.array_equal(got, want)
    lo, _ = empirical.clopper_pearson(np.arange(8), 7)
    lo[:] = -1.0  # the caller's copy: the cached table is untouched
    assert empirical.clopper_pearson(np.arange(8), 7)[0][3] == reference(np.array(3), 7, 0.05)[0]
