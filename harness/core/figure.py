"""A level's figures: one quantity, read at one FPR, with intervals whose coverage is simulated.

**Estimand.** For one attack variant at one level, its **expected read** at FPR t: the read below
(the S-victim pooled ROC at the plotting position) averaged over runs of the design, S victim
models trained as the run trains them (the same defense, recipe and audit design, each attacked
with the other S - 1 models as shadows), **conditional on the run's audit samples**: the inference
resamples victim models, not audit samples. One read is unbiased for it by definition; it differs
from the TPR of the ROC pooled over many victims by the S-victim read's own finite-S gap, which
``python benchmarks/bench_headline_test.py`` reports. A figure over a set of candidates
(:func:`best_of`) estimates the largest expected read of the set; the headline test
(:mod:`harness.audit.headline`) has the same estimand.

**Reading.** A TPR at FPR t is read at the plotting position with ties broken at random
(:func:`harness.core.metrics.weighted_tpr_plotting`), at an expected FPR of t, not the paper's
``tpr[fpr <= t][-1]`` (expected FPR (floor(tN) + 1)/(N + 1)); only where the level holds at least
:data:`MIN_FALSE_POSITIVES` expected false positives (t N >= 3).

**One variant's interval** (:func:`interval`): ``TPR +- f q_S(1 - alpha/2) sd``, with ``sd`` the
larger of the victim bootstrap's SD (the run's draws, shared by every variant of both levels) and
the delete-one-victim jackknife's SD, ``q_S(p) = sqrt(S / (S - 1)) t_{S-1}^-1(p)`` (Hesterberg's
small-sample expansion, "What teachers should know about the bootstrap", The American
Statistician 69(4), 2015, sec. 4.3) and ``f = sqrt(1 + 1/k)`` at k expected false positives
(:func:`threshold_factor`). Where a few victims hold the threshold's false positives the victim
bootstrap is skewed and narrow; the jackknife's SD, and the symmetric interval, are not.

**A best of K candidates** (:func:`best_of`) is the **plain maximum** of their reads: no adjustment
for the selection. Its bias is upward (the expected maximum of K noisy reads is at least the
largest expected read): it can overstate a leak, never hide one, and adding a candidate can only
raise it (the selection bias: the figure's only bias against its estimand). Its
interval is the one-variant interval of every candidate at Bonferroni's share of the error,
``alpha / (2K)`` per side: ``[max_j (TPR_j - h_j), max_j (TPR_j + h_j)]`` with
``h_j = f q_S(1 - alpha / (2K)) sd_j``; if every candidate's interval holds its truth, the largest
truth lies in it, so it holds the largest expected read with probability at least ``1 - alpha``, whatever
the candidates' dependence. The one-sided lower bound is the same rule with all of a candidate's
share on one side: ``max_j (TPR_j - f q_S(1 - alpha w_j) sd_j)``, w_j its share (1/K, or the
weighted split of :func:`harness.audit.headline.leak_shares`).
``python benchmarks/bench_headline_test.py`` measures its bias and coverage (docs/protocol.md).
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


def expanded_quantile(num_models: int, p: float) -> float:
    """Hesterberg's expanded quantile ``q_S(p) = sqrt(S / (S - 1)) t_{S-1}^-1(p)`` for S =
    ``num_models`` resampled units (the normal quantile for S < 2)."""
    if num_models < 2:
        return float(norm.ppf(p))
    return float(np.sqrt(num_models / (num_models - 1)) * student_t.ppf(p, num_models - 1))


def expanded_z(num_models: int, confidence: float) -> float:
    """The two-sided multiplier of a ``confidence`` interval: ``q_S(1 - (1 - confidence) / 2)``."""
    return expanded_quantile(num_models, 1 - (1 - confidence) / 2)


def threshold_factor(false_positives: float | None) -> float:
    """sqrt(1 + 1/k): how much wider an interval of a TPR read with k expected false positives is
    made for its threshold's own order-statistic noise (the FPR of a threshold among the k largest
    non-member scores has a relative variance of about 1/k, which the victim bootstrap reproduces in
    part); 1 without k."""
    return 1.0 if not false_positives else float(np.sqrt(1 + 1 / max(float(false_positives), 1.0)))


def jackknife_sd(reads: np.ndarray | None) -> float:
    """The delete-one jackknife's SD from the S reads with each victim left out in turn:
    ``sqrt((S - 1) / S sum (read_s - mean)^2)`` over the finite reads; 0 with fewer than 3 (or None)."""
    if reads is None:
        return 0.0
    j = np.asarray(reads, np.float64).ravel()
    j = j[np.isfinite(j)]
    if len(j) < 3:
        return 0.0
    return float(np.sqrt((len(j) - 1) / len(j) * np.sum((j - j.mean()) ** 2)))


def read_sd(samples: np.ndarray | None, jackknife: np.ndarray | None = None) -> float:
    """A read's standard error: the larger of its bootstrap replicates' SD (finite ones) and the
    delete-one-victim jackknife's SD (:func:`jackknife_sd`); NaN without two finite replicates."""
    s = np.asarray(samples if samples is not None else [], np.float64).ravel()
    s = s[np.isfinite(s)]
    if len(s) < 2:
        return float("nan")
    return max(float(np.std(s, ddof=1)), jackknife_sd(jackknife))


def interval(tpr: float, samples: np.ndarray, num_models: int, confidence: float,
             false_positives: float | None = None, jackknife: np.ndarray | None = None) -> tuple[float, float]:
    """Two-sided interval of one variant's TPR: ``tpr +- f q_S(1 - (1 - confidence)/2) sd``, kept in
    [0, 1] (module docstring; ``sd``: :func:`read_sd`). (nan, nan) without replicates."""
    b = best_of(np.array([tpr]), np.asarray(samples)[None], num_models, confidence, false_positives,
                None if jackknife is None else np.asarray(jackknife)[None])
    return b.ci


@dataclass(frozen=True)
class BestOf:
    """The best of K candidates at one FPR (:func:`best_of`): the plain maximum ``point`` and the
    candidate that gives it (``source``, the first of tied ones), the simultaneous two-sided ``ci``
    and one-sided ``lower`` bound at ``confidence`` (Bonferroni over the K candidates), and the
    figure in every bootstrap replicate (``replicates``: the largest candidate read in each, paired
    with every other figure of the run by the shared draws)."""

    point: float
    lower: float
    ci: tuple[float, float]
    confidence: float
    source: int
    candidates: int
    replicates: np.ndarray


def best_of(tprs: np.ndarray, samples: np.ndarray, num_models: int, confidence: float,
            false_positives: float | None = None, jackknife: np.ndarray | None = None,
            shares: np.ndarray | None = None) -> BestOf:
    """The best of the candidates whose reads at one FPR are ``tprs`` (K,), with paired bootstrap
    replicates ``samples`` (K, B) and, optionally, delete-one-victim reads ``jackknife`` (K, S): the
    plain maximum with a Bonferroni simultaneous interval (module docstring). ``shares``: each
    candidate's share of the error (weighted Bonferroni, summing to at most 1; default 1/K each):
    candidate j's limits are at ``alpha shares_j`` one-sided and ``alpha shares_j / 2`` per side.
    Without replicates the interval is NaN."""
    t = np.asarray(tprs, np.float64)
    k = len(t)
    if not k:
        raise ValueError("no candidates")
    reps = np.asarray(samples, np.float64).reshape(k, -1)
    j = int(np.argmax(t))
    figure_reps = np.full(reps.shape[1], np.nan)
    if reps.shape[1] and not np.isnan(reps).all():
        with np.errstate(invalid="ignore"):
            figure_reps = np.nanmax(reps, axis=0)
    sds = np.array([read_sd(reps[i], None if jackknife is None else jackknife[i]) for i in range(k)])
    if np.isnan(sds).any():
        return BestOf(float(t[j]), float("nan"), (float("nan"), float("nan")), confidence, j, k, figure_reps)
    f, alpha = threshold_factor(false_positives), 1 - confidence
    w = np.full(k, 1.0 / k) if shares is None else np.asarray(shares, np.float64)
    half = f * np.array([expanded_quantile(num_models, 1 - alpha * wj / 2) for wj in w]) * sds
    ci = (float(np.clip(np.max(t - half), 0.0, 1.0)), float(np.clip(np.max(t + half), 0.0, 1.0)))
    one = f * np.array([expanded_quantile(num_models, 1 - alpha * wj) for wj in w]) * sds
    lower = float(np.clip(np.max(t - one), 0.0, 1.0))
    return BestOf(float(t[j]), lower, ci, confidence, j, k, figure_reps)


def ratio_interval(numerator: np.ndarray, denominator: np.ndarray, num_models: int, confidence: float,
                   point: float, jackknife: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[float, float]:
    """Two-sided interval of a ratio of two TPRs, symmetric on the log scale about ``point``:
    ``point * exp(+- q_S sd)`` (:func:`expanded_z`), ``sd`` the larger of the SD of the paired
    replicates' log ratio (replicates with a zero or undefined numerator or denominator left out)
    and the delete-one-victim jackknife's SD of the log ratio (``jackknife``: the two TPRs' reads
    with each victim left out). (nan, nan) with fewer than 2 usable replicates or no positive point."""
    num, den = np.asarray(numerator, np.float64), np.asarray(denominator, np.float64)
    ok = ~np.isnan(num) & ~np.isnan(den) & (den > 0) & (num > 0)
    if ok.sum() < 2 or not point > 0:
        return (float("nan"), float("nan"))
    sd = float(np.std(np.log(num[ok] / den[ok]), ddof=1))
    if jackknife is not None:
        jn, jd = (np.asarray(v, np.float64).ravel() for v in jackknife)
        use = np.isfinite(jn) & np.isfinite(jd) & (jn > 0) & (jd > 0)
        sd = max(sd, jackknife_sd(np.log(jn[use] / jd[use])))
    z = expanded_z(num_models, confidence)
    return (float(point * np.exp(-z * sd)), float(point * np.exp(z * sd)))


#: the two-sided error of :func:`runs_agree` (the leaderboard's re-run verification): an honest entry
#: is refused about this often (benchmarks/bench_headline_test.py, part verification)
VERIFY_ALPHA = 0.01


def runs_agree(first: tuple[float, float, float], second: tuple[float, float, float],
               alpha: float = VERIFY_ALPHA) -> tuple[bool, float]:
    """Whether two runs of one defense and config with different seeds, hence other audit samples and
    other models, agree on a figure: (agree, z) with ``z = (t_2 - t_1) / sqrt(se_1^2 + sa_1^2 + se_2^2 +
    sa_2^2)``, each run given as (point, its standard error over victims, over audit samples): the
    redraw of the canaries moves a figure as much as the victims do, and a run's own interval,
    conditional on its canaries, omits it. They agree where |z| <= Phi^-1(1 - alpha/2)."""
    (t1, se1, sa1), (t2, se2, sa2) = first, second
    scale = math.sqrt(se1 ** 2 + sa1 ** 2 + se2 ** 2 + sa2 ** 2)
    z = (t2 - t1) / scale if scale > 0 else (0.0 if t1 == t2 else math.copysign(math.inf, t2 - t1))
    return bool(abs(z) <= norm.ppf(1 - alpha / 2)), float(z)


def fmt_fpr(fpr: float) -> str:
    """An FPR as a percentage without trailing zeros ("0.1%", "0.2%", "1%")."""
    return f"{100 * fpr:.4g}%"
