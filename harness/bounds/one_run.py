"""Epsilon lower bounds from one training run (Steinke, Nasr and Jagielski, "Privacy auditing with
one (1) training run", NeurIPS 2023), applied per victim model and combined over victims.

The setting of the theorem: m canaries, each included in the training set independently with
probability 1/2; one model is trained; the auditor makes r guesses ("member" / "non-member") and
abstains on the rest. If the training algorithm is (eps, delta)-DP, the number W of correct
guesses satisfies, for every v (their Theorem 3.3 with the delta term of Proposition 5.7),

    P[W >= v] <= P[Bin(r, q) >= v] + 2 m delta * max_{i = 1..v} P[v - i <= Bin(r, q) < v] / i,
    q = e^eps / (1 + e^eps),

with no independence assumption on the r guesses: they may all come from the same model. The
right-hand side is the p-value of observing v correct guesses under the null "the trainer is
(eps, delta)-DP"; the largest eps whose p-value is below beta is a 1 - beta lower bound.

How the harness uses it, for an attack's (S, C) scores and the (S, C) membership design:

- **Per victim.** For a fixed victim model t, the design puts each audit sample in t's training
  set with probability 1/2, independently across samples (each sample's S/2 member models are a
  uniformly random half, drawn independently per sample), so the theorem's setting holds with
  m = C. The auditor guesses "member" for the k highest scores of victim t (ties broken by audit
  position) and abstains elsewhere, for k in a fixed grid of fractions of the C audit samples.
- **Combined over victims, with a Bonferroni correction.** Guesses about different victims are
  dependent (the victims share the design, with exactly S/2 members per sample, and shadow
  models), so the S counts are not pooled. Each victim and each k gets level
  ``beta / (S * len(grid))``; the maximum over victims and k is then a valid 1 - beta lower bound
  under any dependence (union bound).

Stated assumption: the attack's scores for victim t are computed from t's outputs and from shadow
models whose membership is known; with the exactly-S/2 design the shadows' IN count for a sample
differs by one between a member and a non-member victim. The score functions used here (LiRA's
and RMIA's estimates, label-only's balanced weights) do not read that count; a score that did
could violate the theorem's premise.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import numpy as np

GUESS_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)


def p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """Probability of >= v correct out of r guesses on m canaries under (eps, delta)-DP (module
    docstring), capped at 1. The binomial tail and CDF are Boost's, as ``scipy.stats.binom``'s
    ``sf`` and ``cdf`` compute them (:func:`_binom_cdf`; the same values, tested), without importing
    scipy.stats."""
    from scipy.special import betainc

    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    if eps < 0 or not 0 <= delta <= 1:
        raise ValueError("need eps >= 0 and delta in [0, 1]")
    if v == 0:
        return 1.0
    q = 1.0 / (1.0 + math.exp(-eps))
    tail = float(betainc(v, r - v + 1, q))  # P[Bin(r, q) >= v] = I_q(v, r - v + 1), 1 <= v <= r
    if delta > 0:
        tail += 2 * m * delta * _max_window(v, r, q)
    return min(tail, 1.0)


#: windows i of :func:`_max_window` per block of its search
WINDOW_BLOCK = 128


def _max_window(v: int, r: int, q: float) -> float:
    """``max_{i = 1..v} P[v - i <= Bin(r, q) < v] / i``, the window term of :func:`p_value`, with the
    value of computing every window from the binomial CDF at j = -1..v-1 (``cdf(v - 1) - cdf(v - i -
    1)``, divided by i) and taking the maximum, at a few of those CDF values: a window grows with i
    and 1/i shrinks, so on a block of windows [i1, i2] every value is at most ``window(i2) / i1``;
    blocks are evaluated in the order of that bound (with a margin of 1e-9 for rounding) until it
    falls below the largest value found. The values compared are the same floating-point numbers,
    so the maximum is too."""
    cdf_top = float(_binom_cdf(np.array([v - 1], dtype=np.float64), r, q)[0])  # P[Bin <= v - 1]

    def cdf_at(j: np.ndarray) -> np.ndarray:  # P[Bin <= j], j >= -1 (0 at -1)
        out = np.zeros(len(j))
        ok = j >= 0
        out[ok] = _binom_cdf(j[ok].astype(np.float64), r, q)
        return out

    if v <= 4 * WINDOW_BLOCK:
        i = np.arange(1, v + 1)
        return float(np.max((cdf_top - cdf_at(v - i - 1)) / i))
    lo = np.arange(1, v + 1, WINDOW_BLOCK)
    hi = np.minimum(lo + WINDOW_BLOCK - 1, v)
    bound = (cdf_top - cdf_at(v - hi - 1)) / lo
    bound = bound + 1e-9 * np.abs(bound)
    best = -np.inf
    for b in np.argsort(-bound, kind="stable"):
        if bound[b] < best:
            break
        i = np.arange(lo[b], hi[b] + 1)
        best = max(best, float(np.max((cdf_top - cdf_at(v - i - 1)) / i)))
    return best


def _binom_cdf(k: np.ndarray, n: int, p: float) -> np.ndarray:
    """P[Bin(n, p) <= k] for 0 <= k < n: Boost's binomial CDF, the ufunc ``scipy.stats.binom.cdf``
    calls, taken from scipy.special's private ufuncs so that scipy.stats (about 0.5 s to import) is
    not needed; where a SciPy release lacks it, ``scipy.stats.binom.cdf`` itself (same values)."""
    try:
        from scipy.special._ufuncs import _binom_cdf as boost_cdf
    except ImportError:  # pragma: no cover - depends on the SciPy release
        from scipy.stats import binom

        return binom.cdf(k, n, p)
    return boost_cdf(k, n, p)


@lru_cache(maxsize=65536)
def epsilon_lower(m: int, r: int, v: int, beta: float, delta: float, tol: float = 1e-6) -> float:
    """The largest eps whose :func:`p_value` is below ``beta`` (0 if even eps = 0 is not rejected)."""
    if r == 0 or p_value(m, r, v, 0.0, delta) >= beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) < beta:
        lo, hi = hi, 2 * hi
        if hi > 1e4:
            return math.inf
    while hi - lo > tol * max(1.0, lo):
        mid = (lo + hi) / 2
        if p_value(m, r, v, mid, delta) < beta:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class OneRunBound:
    """The combined bound and the guess that achieves it.

    ``epsilon``: the valid 1 - alpha lower bound (maximum over victims and guess counts, each at
    alpha / (S * grid)); ``victim``, ``guesses`` (r), ``correct`` (v): where it is attained (None,
    0, 0 when no victim gives evidence, i.e. ``epsilon`` is 0);
    ``per_victim_median``: the median over victims of each victim's own bound at alpha / grid
    (descriptive: not a joint statement)."""

    epsilon: float
    victim: int | None
    guesses: int
    correct: int
    num_canaries: int
    num_victims: int
    grid: tuple[int, ...]
    alpha: float
    delta: float
    per_victim_median: float
    #: the smallest p-value any guess of the grid can reach (every guess right, eps = 0): where it is
    #: above the per-test level alpha / (S grid), no data can certify an epsilon above 0 at this design
    attainable_p: float = 0.0
    certifiable: bool = True
    #: the largest bound this design can give: every guess of the best guess count right
    #: (:func:`attainable_epsilon`); a bound near it says the audit saturated, not that epsilon is near it
    attainable_epsilon: float = math.inf

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["grid"] = list(self.grid)
        d["method"] = ("Steinke, Nasr, Jagielski 2023 per victim model (top-k guesses), Bonferroni over "
                       f"{self.num_victims} victims x {len(self.grid)} guess counts")
        return d


def guess_grid(num_canaries: int, fractions: tuple[float, ...] = GUESS_FRACTIONS) -> tuple[int, ...]:
    """Guess counts k = ceil(f C) for the fixed fractions, without repeats."""
    return tuple(sorted({max(1, math.ceil(f * num_canaries)) for f in fractions}))


def one_run_bound(scores: np.ndarray, membership: np.ndarray, *, delta: float, alpha: float = 0.05,
                  num_canaries: int | None = None, fractions: tuple[float, ...] = GUESS_FRACTIONS) -> OneRunBound:
    """The per-victim one-run epsilon lower bound, combined over victims (module docstring).

    ``scores`` and ``membership`` are (S, C_e) over the evaluated canaries; ``num_canaries`` is m,
    the number of randomized audit samples per model (default C_e).
    """
    scores = np.asarray(scores, dtype=np.float64)
    membership = np.asarray(membership, dtype=bool)
    s, c = scores.shape
    m = int(num_canaries or c)
    grid = guess_grid(c, fractions)
    beta_joint = alpha / (s * len(grid))
    beta_victim = alpha / len(grid)
    best: tuple[float, int | None, int, int] = (0.0, None, 0, 0)
    medians = []
    for t in range(s):
        order = np.argsort(-scores[t], kind="stable")
        hits = np.cumsum(membership[t, order])
        victim_best = 0.0
        for k in grid:
            v = int(hits[k - 1])
            if 2 * v <= k:  # no better than chance: no evidence at any level
                continue
            # a guess whose p-value at the largest epsilon found so far is not below the level cannot
            # certify a larger one (the p-value grows with epsilon): one p-value instead of a bisection
            if p_value(m, k, v, best[0], delta) < beta_joint:
                eps = epsilon_lower(m, k, v, beta_joint, delta)
                if eps > best[0]:
                    best = (eps, t, k, v)
            if p_value(m, k, v, victim_best, delta) < beta_victim:
                victim_best = max(victim_best, epsilon_lower(m, k, v, beta_victim, delta))
        medians.append(victim_best)
    floor = attainable_p_value(m, grid, delta)
    return OneRunBound(epsilon=best[0], victim=best[1], guesses=best[2], correct=best[3], num_canaries=m,
                       num_victims=s, grid=grid, alpha=alpha, delta=delta,
                       per_victim_median=float(np.median(medians)), attainable_p=floor,
                       certifiable=bool(floor < beta_joint),
                       attainable_epsilon=attainable_epsilon(m, grid, beta_joint, delta))


@lru_cache(maxsize=64)
def attainable_epsilon(m: int, grid: tuple[int, ...], beta: float, delta: float) -> float:
    """The largest bound any scores can give at this design: every one of k guesses right, the best
    over the grid's k, at level ``beta`` (:func:`epsilon_lower` with v = r = k). The one-run bound
    cannot exceed it whatever the model leaks (with m = 500 canaries and k <= 250 guesses it is a few
    units), so a bound at this maximum is a bound of the design, not of the defense."""
    return max((epsilon_lower(m, k, k, beta, delta) for k in grid if k <= m), default=0.0)


def attainable_p_value(m: int, grid: tuple[int, ...], delta: float) -> float:
    """The smallest p-value a victim's guesses on the ``grid`` can reach on m canaries: every one of
    k guesses right, tested at eps = 0 (:func:`p_value` grows with eps and falls with v), the least
    over k: ``2^-k`` plus the delta term, which does not vanish as k grows (2 m delta times a
    binomial window). No audit certifies an epsilon above 0 where this is above its level."""
    return min(p_value(m, k, k, 0.0, delta) for k in grid if k <= m)
