"""A level's figures: one quantity, read at one FPR, with intervals whose coverage is simulated.

**Estimand.** For one attack variant at one level, TPR(t): the true-positive rate at false-positive
rate t of the ROC of its guesses pooled over victim models, in the limit of many victims trained as
the run trains them (the same defense, recipe and audit design, each attacked with the other S - 1
models as shadows), **conditional on the run's audit samples** (its canaries, or its population
targets): the inference resamples victim models, not audit samples. The figure of a level is the
largest TPR(t) over a set of variants (:func:`best_of`): the *leak* over every variant the harness
ran on what the deployed model serves, the *declared headline* over the primary variants of the
defense's adaptive attacks.

**Reading.** TPR(t) is read at the plotting position with ties broken at random
(:func:`harness.core.metrics.weighted_tpr_plotting`), at an expected FPR of t, not the paper's
``tpr[fpr <= t][-1]`` (expected FPR (floor(tN) + 1)/(N + 1)); only where the level holds at least
:data:`MIN_FALSE_POSITIVES` expected false positives (t N >= 3).

**Intervals.** Bootstrap over victim models (the run's draws, shared by every variant of both
levels), expanded for small S (Hesterberg, "What teachers should know about the bootstrap", The
American Statistician 69(4), 2015, sec. 4.3): ``Phi^-1(alpha') = sqrt(S / (S - 1)) t_{S-1}^-1(alpha)``
for a level ``alpha``, which widens for the bootstrap's narrowness at small S (the variance factor
(S - 1)/S and the t tails). One variant's two-sided interval (:func:`interval`) is symmetric about
its TPR, with the larger of the bootstrap's and the delete-one-victim jackknife's SD; a one-sided
bound with one candidate is the expanded percentile limit.

**A best of several** (:func:`best_of`) carries its selection: a simultaneous percentile level over
the candidates (the min-rank of each replicate across candidates, as in Romano and Wolf's max-T
step, Econometrica 73(4), 2005, taken over a first-step set of plausible maximizers as in Romano,
Shaikh and Wolf, "A practical two-step method for testing moment inequalities", Econometrica 82(5),
2014):

- the **plausible set** J: candidates whose simultaneous upper limit at level ``beta`` reaches the
  largest simultaneous lower limit (every candidate far below the best leaves the selection);
- the **lower bound** (one-sided, ``confidence``): with one plausible candidate, its own one-sided
  expanded-percentile limit; with |J| > 1, the largest over J of ``TPR_j - c sd_j`` (``sd_j`` its
  bootstrap standard deviation, ``c = sqrt(S / (S - 1)) t_{S-1}^-1(1 - a / |J|)``, ``a = 1 -
  confidence - beta``: Bonferroni over J). A simultaneous *percentile* level (the min-rank below)
  reads the bootstrap's extreme tails, which the victim bootstrap reproduces poorly at low FPR (a
  0.7% level missed in 2% of simulations), so the union over candidates was not held; the
  studentized Bonferroni limit was (benchmarks/bench_headline_test.py);
- the **point figure**: the same construction at 50% (median-adjusted for the selection): each
  candidate's TPR shifted by its bootstrap quantile at J's simultaneous 50% level minus its
  bootstrap median, the largest over J. It is the candidate's own TPR when J holds one candidate,
  and is never inflated by picking the largest of K noisy equals.

With one candidate the point is its TPR, the lower bound its own one-sided expanded-percentile
limit. A best of a set that must not read below the best of a subset (the leak and the declared
headline it contains) is :func:`floored` by that subset's own best. ``python benchmarks/bench_headline_test.py`` measures coverage and bias (docs/protocol.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

#: a read needs at least this many expected false positives (t N_neg): below, the threshold is among
#: the few largest non-member scores, an extreme order statistic the bootstrap does not reproduce
MIN_FALSE_POSITIVES = 3

#: the FPRs a figure may be read at: 1, 2, 5 x 10^k
FIGURE_GRID = tuple(sorted(round(m * 10.0 ** e, 12) for e in range(-6, 0) for m in (1, 2, 5)))

#: the first step's error (the plausible set J), taken from the lower bound's
PLAUSIBLE_BETA = 0.005


def resolves(fpr: float, num_neg: int) -> bool:
    """Whether a read at ``fpr`` holds at least :data:`MIN_FALSE_POSITIVES` expected false positives."""
    return fpr > 0 and fpr * num_neg >= MIN_FALSE_POSITIVES - 1e-9


def figure_fpr(target: float, num_neg: int) -> float | None:
    """The FPR a level's figure is read at: ``target`` (the headline FPR) where it resolves
    (:func:`resolves`), else the smallest FPR of :data:`FIGURE_GRID` above it that does; None where
    none up to 50% does."""
    if target > 0 and resolves(target, num_neg):
        return float(target)
    for g in FIGURE_GRID:
        if g >= target and resolves(g, num_neg):
            return float(g)
    return None


def expanded_level(alpha: np.ndarray | float, num_models: int) -> np.ndarray | float:
    """Hesterberg's expansion of a one-sided percentile level ``alpha`` for S = ``num_models``
    resampled units: ``Phi(-sqrt(S / (S - 1)) t_{S-1}^-1(1 - alpha))`` (a smaller level: a wider
    interval). Levels of 1/2 and above are returned as they are."""
    a = np.asarray(alpha, np.float64)
    if num_models < 2:
        return a
    z = np.sqrt(num_models / (num_models - 1)) * student_t.ppf(1 - np.minimum(a, 0.5), num_models - 1)
    out = np.where(a >= 0.5, a, norm.sf(z))
    return float(out) if np.ndim(out) == 0 else out


def _finite_rows(samples: np.ndarray) -> np.ndarray:
    """(K, B) replicates without the replicates (columns) where any candidate is undefined."""
    s = np.asarray(samples, np.float64).reshape(len(samples), -1)
    return s[:, ~np.isnan(s).any(axis=0)]


def threshold_factor(false_positives: float | None) -> float:
    """sqrt(1 + 1/k): how much wider an interval of a TPR read with k expected false positives is
    made for its threshold's own order-statistic noise (the FPR of a threshold among the k largest
    non-member scores has a relative variance of about 1/k, which the victim bootstrap reproduces in
    part); 1 without k."""
    return 1.0 if not false_positives else float(np.sqrt(1 + 1 / max(float(false_positives), 1.0)))


def expanded_z(num_models: int, confidence: float) -> float:
    """The two-sided multiplier of a ``confidence`` interval with Hesterberg's expansion:
    ``sqrt(S / (S - 1)) t_{S-1}^-1(1 - (1 - confidence) / 2)`` (the normal quantile for S < 2)."""
    q = 1 - (1 - confidence) / 2
    if num_models < 2:
        return float(norm.ppf(q))
    return float(np.sqrt(num_models / (num_models - 1)) * student_t.ppf(q, num_models - 1))


def jackknife_sd(reads: np.ndarray) -> float:
    """The delete-one jackknife's SD from the S reads with each victim left out in turn:
    ``sqrt((S - 1) / S sum (read_s - mean)^2)`` over the finite reads; 0 with fewer than 3."""
    j = np.asarray(reads, np.float64).ravel()
    j = j[np.isfinite(j)]
    if len(j) < 3:
        return 0.0
    return float(np.sqrt((len(j) - 1) / len(j) * np.sum((j - j.mean()) ** 2)))


def interval(tpr: float, samples: np.ndarray, num_models: int, confidence: float,
             false_positives: float | None = None, jackknife: np.ndarray | None = None) -> tuple[float, float]:
    """Two-sided interval of one variant's TPR: ``tpr +- f z_S sd``, kept in [0, 1], with
    ``z_S = sqrt(S / (S - 1)) t_{S-1}^-1(1 - (1 - confidence) / 2)`` (Hesterberg's expansion, module
    docstring), ``f`` :func:`threshold_factor` and ``sd`` the larger of the victim bootstrap's standard
    deviation and the delete-one-victim jackknife's (``jackknife``: the S reads with each victim left
    out; ``sqrt((S - 1)/S sum (read_s - mean)^2)``). Where a few victims hold the threshold's false
    positives (victims that differ), the victim bootstrap's distribution is skewed to the right and
    5-15% narrower than the TPR's own spread, which is symmetric: its percentile interval then sits
    too high (the truth below it in 4.8-5.3% of runs at 6 400 non-member guesses); the jackknife's SD is
    closer on average but noisier, hence the larger of the two (benchmarks/bench_headline_test.py
    --parts rules; docs/protocol.md, Coverage). (nan, nan) without replicates."""
    s = _finite_rows(np.asarray(samples)[None])[0]
    if not len(s):
        return (float("nan"), float("nan"))
    sd = float(np.std(s, ddof=1)) if len(s) > 1 else 0.0
    if jackknife is not None:
        sd = max(sd, jackknife_sd(jackknife))
    half = threshold_factor(false_positives) * expanded_z(num_models, confidence) * sd
    return (float(max(0.0, tpr - half)), float(min(1.0, tpr + half)))


def _ranks(s: np.ndarray) -> np.ndarray:
    """Each replicate's mid-rank position in its own row's replicates, in (0, 1): (K, B)."""
    k, b = s.shape
    out = np.empty_like(s)
    for i in range(k):
        order = np.sort(s[i])
        below = np.searchsorted(order, s[i], side="left")
        upto = np.searchsorted(order, s[i], side="right")
        out[i] = (below + upto) / (2.0 * b)
    return out


def simultaneous_level(samples: np.ndarray, alpha: float, two_sided: bool = False) -> float:
    """The per-candidate percentile level that holds ``alpha`` jointly over the candidates (rows of
    ``samples``, paired replicates): the ``alpha`` quantile over replicates of the smallest
    mid-rank across candidates (two-sided: of the smallest distance to either end). One candidate:
    about ``alpha`` (``alpha / 2`` two-sided)."""
    u = _ranks(samples)
    m = np.minimum(u, 1 - u) if two_sided else u
    low = m.min(axis=0)
    return float(np.quantile(low, alpha))


@dataclass(frozen=True)
class BestOf:
    """A selection-aware best of K candidates at one FPR (:func:`best_of`): ``point``, the one-sided
    ``lower`` bound at ``confidence``, the index of the candidate that gives the point (``source``),
    the plausible set (``plausible``, indices), each candidate's shift from its TPR to its
    selection-adjusted point (``shifts``, 0 outside J), and the figure in every replicate
    (``replicates``: max over J of the replicate TPR plus the shift), paired with every other
    figure of the run by the shared draws; ``floor``: the named subset whose figure gave the point
    where :func:`floored` raised it (None: the candidates' own)."""

    point: float
    lower: float
    confidence: float
    source: int
    plausible: tuple[int, ...]
    shifts: np.ndarray
    replicates: np.ndarray
    floor: str | None = None


def best_of(tprs: np.ndarray, samples: np.ndarray, num_models: int, confidence: float,
            beta: float = PLAUSIBLE_BETA, false_positives: float | None = None) -> BestOf:
    """The selection-aware best of the candidates whose TPRs at one FPR are ``tprs`` (K,) and whose
    paired bootstrap replicates are ``samples`` (K, B) (module docstring), read with
    ``false_positives`` expected false positives (the lower bound's arm widened by
    :func:`threshold_factor`). Without replicates the point is the plain maximum and the lower
    bound NaN."""
    t = np.asarray(tprs, np.float64)
    k = len(t)
    if not k:
        raise ValueError("no candidates")
    raw = np.asarray(samples, np.float64).reshape(k, -1)
    s = _finite_rows(raw)
    if s.shape[1] < 2:
        j = int(np.argmax(t))
        return BestOf(float(t[j]), float("nan"), confidence, j, tuple(range(k)), np.zeros(k), np.full(raw.shape[1], np.nan))
    alpha = 1 - confidence
    if k > 1:
        b2 = expanded_level(simultaneous_level(s, beta, two_sided=True), num_models)
        lo_b, hi_b = np.quantile(s, b2, axis=1), np.quantile(s, 1 - b2, axis=1)
        plausible = np.flatnonzero(np.maximum(hi_b, t) >= np.minimum(lo_b, t).max())
        alpha = max(alpha - beta, alpha / 2)
    else:
        plausible = np.array([0])
    sj = s[plausible]
    med = np.quantile(sj, 0.5, axis=1)
    a50 = expanded_level(simultaneous_level(sj, 0.5), num_models) if len(plausible) > 1 else 0.5
    points = t[plausible] + np.minimum(np.quantile(sj, a50, axis=1) - med, 0.0)
    f = threshold_factor(false_positives)
    if len(plausible) == 1:  # the candidate's own one-sided expanded-percentile limit
        lowers = t[plausible] - f * np.maximum(t[plausible] - np.quantile(sj, expanded_level(alpha, num_models), axis=1), 0)
    else:  # Bonferroni over J, studentized, t tails with the small-S expansion
        c = np.sqrt(num_models / (num_models - 1)) * student_t.ppf(1 - alpha / len(plausible), num_models - 1)
        lowers = t[plausible] - f * c * sj.std(axis=1)
    lowers = np.clip(np.minimum(lowers, points), 0.0, 1.0)
    i = int(np.argmax(points))
    shifts = np.zeros(k)
    shifts[plausible] = points - t[plausible]
    reps = np.nanmax(raw[plausible] + shifts[plausible, None], axis=0) if raw.shape[1] else raw[0]
    return BestOf(point=float(points[i]), lower=float(lowers.max()), confidence=confidence,
                  source=int(plausible[i]), plausible=tuple(int(p) for p in plausible), shifts=shifts,
                  replicates=reps)


def floored(best: BestOf, subsets: dict[str, tuple[list[int], BestOf]]) -> BestOf:
    """The best of a set of candidates never read below the best of a subset of them: ``best`` (over
    all K) with its point raised to the largest point of ``subsets`` (name -> (the subset's indices
    among the K, its own :func:`best_of`)) where that is larger, the source moved to the subset's,
    and every replicate the larger of the two figures (the same rule applied to each replicate, so
    that ratios stay paired). The lower bound stays the full set's (its coverage is simulated).

    Why: the median-adjusted point of a best of many plausible near-equals is shifted down by the
    simultaneous 50% level over all of them, which falls as candidates are added; a superset's point
    could then read below the point of a subset it contains (its estimand, a larger maximum, cannot
    be below), and adding variants could lower it. With the floor, adding candidates to a set never
    lowers its point below any floored subset's."""
    point, source, floor, reps = best.point, best.source, best.floor, best.replicates
    for name, (idx, sub) in subsets.items():
        if len(sub.replicates) == len(reps):
            reps = np.fmax(reps, sub.replicates)
        if sub.point > point:
            point, source, floor = sub.point, int(idx[sub.source]), name
    return BestOf(point=point, lower=best.lower, confidence=best.confidence, source=source, plausible=best.plausible,
                  shifts=best.shifts, replicates=reps, floor=floor)


def ratio_interval(numerator: np.ndarray, denominator: np.ndarray, num_models: int, confidence: float,
                   point: float, jackknife: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[float, float]:
    """Two-sided interval of a ratio of two TPRs, symmetric on the log scale about ``point``:
    ``point * exp(+- z_S sd)``, ``z_S`` Hesterberg's expanded multiplier (:func:`interval`), ``sd``
    the larger of the SD of the paired replicates' log ratio (replicates with a zero or undefined
    numerator or denominator left out: the caller reports no ratio where the denominator can be near
    0) and the delete-one-victim jackknife's SD of the log ratio (``jackknife``: the two TPRs' reads
    with each victim left out). The expanded percentile interval of the replicates' ratios, which it
    replaced, covered 90.7% where both levels read at 1% FPR (docs/protocol.md, Coverage); (nan, nan)
    with fewer than 2 usable replicates or no positive point."""
    num, den = np.asarray(numerator, np.float64), np.asarray(denominator, np.float64)
    ok = ~np.isnan(num) & ~np.isnan(den) & (den > 0) & (num > 0)
    if ok.sum() < 2 or not point > 0:
        return (float("nan"), float("nan"))
    log_r = np.log(num[ok] / den[ok])
    sd = float(np.std(log_r, ddof=1))
    if jackknife is not None:
        jn, jd = (np.asarray(v, np.float64).ravel() for v in jackknife)
        use = np.isfinite(jn) & np.isfinite(jd) & (jn > 0) & (jd > 0)
        sd = max(sd, jackknife_sd(np.log(jn[use] / jd[use])))
    z = expanded_z(num_models, confidence)
    return (float(point * np.exp(-z * sd)), float(point * np.exp(z * sd)))


def fmt_fpr(fpr: float) -> str:
    """An FPR as a percentage without trailing zeros ("0.1%", "0.2%", "1%")."""
    return f"{100 * fpr:.4g}%"


def grid_index(fpr: float) -> int:
    """Position of ``fpr`` on :data:`FIGURE_GRID` (for tests and ordering)."""
    return min(range(len(FIGURE_GRID)), key=lambda i: abs(math.log(FIGURE_GRID[i]) - math.log(fpr)))
