"""The one-run epsilon lower bound (Steinke, Nasr, Jagielski 2023), per victim model."""

import math

import numpy as np
import pytest
from scipy.stats import binom

from harness.bounds.one_run import epsilon_lower, guess_grid, one_run_bound, p_value


def test_p_value_is_the_binomial_tail_for_pure_dp_and_grows_with_delta():
    q = 1 / (1 + math.exp(-1.0))
    assert p_value(1000, 100, 70, 1.0, 0.0) == pytest.approx(binom.sf(69, 100, q))
    assert p_value(1000, 100, 70, 1.0, 1e-5) > p_value(1000, 100, 70, 1.0, 0.0)
    assert p_value(10, 5, 0, 3.0, 0.0) == 1.0
    with pytest.raises(ValueError):
        p_value(10, 11, 3, 1.0, 0.0)


def test_all_correct_guesses_give_the_closed_form():
    # r correct out of r at eps-DP has probability q^r; the bound is the eps with q^r = beta
    r, beta = 100, 0.05
    q = beta ** (1 / r)
    assert epsilon_lower(500, r, r, beta, 0.0) == pytest.approx(math.log(q / (1 - q)), abs=1e-4)
    assert epsilon_lower(500, 100, 50, beta, 0.0) == 0.0  # chance level: no evidence


def test_the_bound_holds_for_randomized_response_with_known_epsilon():
    # each canary's inclusion is guessed right with probability e^eps / (1 + e^eps), the best any
    # attack can do against eps-DP randomized response; the 95% bound may exceed eps in <= 5% of runs
    eps, m = 1.0, 400
    rng = np.random.default_rng(0)
    over = 0
    for _ in range(200):
        right = rng.random(m) < 1 / (1 + math.exp(-eps))
        lb = epsilon_lower(m, m, int(right.sum()), 0.05, 0.0)
        over += lb > eps
    assert over <= 15  # 5% of 200 = 10, plus slack for the draw


def test_combined_bound_uses_top_k_guesses_per_victim_and_bonferroni():
    rng = np.random.default_rng(1)
    s, c = 8, 200
    mem = rng.random((s, c)) < 0.5
    perfect = mem.astype(float) + rng.normal(0, 0.01, (s, c))
    b = one_run_bound(perfect, mem, delta=0.0)
    assert b.grid == guess_grid(200) == (2, 4, 10, 20, 40, 100)
    assert b.correct == b.guesses == 100  # every top-100 guess is a member
    beta = 0.05 / (8 * 6)
    q = beta ** (1 / 100)
    assert b.epsilon == pytest.approx(math.log(q / (1 - q)), abs=1e-4)
    # the per-victim median is at level alpha / grid only, hence larger
    assert b.per_victim_median > b.epsilon
    noise = one_run_bound(rng.normal(size=(s, c)), mem, delta=1e-5)
    assert noise.epsilon < 0.5
    j = b.to_json()
    assert j["grid"] == list(b.grid) and "Bonferroni" in j["method"]


def test_p_value_equals_the_scipy_stats_binomial_formula_exactly():
    """p_value reads Boost's binomial tail and CDF through scipy.special (no scipy.stats import):
    the same bits as scipy.stats.binom's sf and cdf, with and without delta."""
    rng = np.random.default_rng(0)
    for i in range(300):
        r = int(rng.integers(1, 400))
        v, m = int(rng.integers(0, r + 1)), r + int(rng.integers(0, 50))
        eps, delta = float(rng.uniform(0, 4)), (0.0, 1e-5, 1e-3)[i % 3]
        want = 1.0
        if v:
            q = 1 / (1 + math.exp(-eps))
            want = float(binom.sf(v - 1, r, q))
            if delta:
                cdf = binom.cdf(np.arange(-1, v), r, q)
                want += 2 * m * delta * float(np.max((cdf[-1] - cdf[v - np.arange(1, v + 1)]) / np.arange(1, v + 1)))
        assert p_value(m, r, v, eps, delta) == min(want, 1.0)



@pytest.mark.parametrize("shift", [0.0, 0.4, 1.5, 6.0])
def test_the_bound_skips_only_guesses_that_cannot_beat_the_best(shift):
    """one_run_bound tries a guess count's bisection only where its p-value at the best epsilon so
    far is below the level; the result is that of bisecting every (victim, guess count)."""
    from harness.bounds.one_run import GUESS_FRACTIONS, epsilon_lower, guess_grid, one_run_bound

    rng = np.random.default_rng(int(shift * 10))
    s, c, delta, alpha = 8, 400, 1e-5, 0.05
    mem = rng.random((s, c)) < 0.5
    scores = rng.normal(size=(s, c)) + shift * mem * rng.random((s, 1))
    got = one_run_bound(scores, mem, delta=delta, alpha=alpha)
    grid = guess_grid(c, GUESS_FRACTIONS)
    best, medians = (0.0, None, 0, 0), []
    for t in range(s):
        hits = np.cumsum(mem[t, np.argsort(-scores[t], kind="stable")])
        per = [0.0]
        for k in grid:
            v = int(hits[k - 1])
            if 2 * v <= k:
                continue
            eps = epsilon_lower(c, k, v, alpha / (s * len(grid)), delta)
            if eps > best[0]:
                best = (eps, t, k, v)
            per.append(epsilon_lower(c, k, v, alpha / len(grid), delta))
        medians.append(max(per))
    assert (got.epsilon, got.victim, got.guesses, got.correct) == best
    assert got.per_victim_median == float(np.median(medians))
    if shift >= 1.5:
        assert got.epsilon > 0


def test_the_attainable_maximum_caps_every_bound_and_perfect_guesses_reach_it():
    """attainable_epsilon: the bound of every guess right at the best guess count; no scores exceed it,
    and scores that rank every member first reach it."""
    from harness.bounds.one_run import attainable_epsilon, epsilon_lower, guess_grid, one_run_bound

    rng = np.random.default_rng(3)
    s, c = 8, 200
    member = np.zeros((s, c), bool)
    for j in range(c):
        member[rng.permutation(s)[: s // 2], j] = True
    perfect = one_run_bound(member.astype(float) + rng.random((s, c)) * 0.1, member, delta=1e-5)
    noisy = one_run_bound(member + rng.normal(0, 2.0, (s, c)), member, delta=1e-5)
    grid = guess_grid(c)
    cap = attainable_epsilon(c, grid, 0.05 / (s * len(grid)), 1e-5)
    assert cap == max(epsilon_lower(c, k, k, 0.05 / (s * len(grid)), 1e-5) for k in grid)
    assert perfect.attainable_epsilon == noisy.attainable_epsilon == cap
    assert perfect.epsilon == pytest.approx(cap) and noisy.epsilon < cap
