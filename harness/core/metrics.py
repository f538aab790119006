"""Metrics over the pooled S x C membership guesses (paper section 5.2).

- ROC: every distinct score is a threshold ("member" iff score >= threshold); tied scores move
  together, so a tie between a member and a non-member can never be split.
- TPR at FPR t: the largest TPR over thresholds whose FPR is at most t (no interpolation), the
  paper's ``tpr[fpr <= t][-1]``. t = 0 gives the TPR before the first false positive.
- Resolution: a target t is read only where it holds at least 3 expected false positives
  (t N >= 3 with N negative guesses); below, it is flagged unresolved.
- AUC (trapezoid on the ROC, ties counted half) and balanced accuracy, the best
  ``(TPR + 1 - FPR) / 2`` over thresholds (Carlini et al. 2022).
- Confidence intervals: one rule for every printed interval, :func:`harness.core.figure.interval`
  (``TPR +- f q_S sd``). Guesses about the same victim are correlated, so the bootstrap resamples
  victim models (a replicate draws S victims with replacement and pools all their C guesses), and
  ``sd`` is the larger of its SD and the delete-one-victim jackknife's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.core.figure import interval
from harness.core.packed_sort import packed_ascending


@dataclass(frozen=True)
class Roc:
    """ROC points from (FPR, TPR) = (0, 0) to (1, 1) over decreasing thresholds."""

    fpr: np.ndarray
    tpr: np.ndarray
    thresholds: np.ndarray  # thresholds[0] = +inf
    num_pos: int
    num_neg: int


def descending_order(scores: np.ndarray) -> np.ndarray:
    """``np.argsort(-scores, kind="stable")`` of flat ``scores`` without NaN (descending, equal
    scores in index order): the same permutation, by :func:`_descending`."""
    return _descending(scores)[0]


def _descending(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`descending_order` and, along it, where each run of equal scores starts (bool).

    The ascending order of -score (-0.0 made 0.0, so equal scores are one bit pattern) by one sort of
    packed keys (:func:`harness.core.packed_sort.packed_ascending`): exact, equal scores in index
    order, except among different scores that share their keys' high bits (within about 2^-(52 - b)
    of each other, b the index bits); those runs are sorted again by (score, index). Where they
    hold more than a quarter of the scores, numpy's stable argsort."""
    neg = np.negative(np.asarray(scores, dtype=np.float64).ravel())
    neg += 0.0  # -0.0 -> 0.0
    packed = packed_ascending(neg)
    if packed is None:
        return _stable_descending(neg)
    order, same = packed
    s = neg[order]
    differ = s[1:] != s[:-1]
    collide = same & differ  # two different scores with the same high bits, maybe out of order
    if collide.any():
        run = np.cumsum(np.r_[True, ~same])
        impure = np.zeros(run[-1] + 1, dtype=bool)
        impure[run[1:][collide]] = True
        pos = np.flatnonzero(impure[run])
        if len(pos) > len(neg) // 4:
            return _stable_descending(neg)
        sub = np.lexsort((order[pos], s[pos]))
        order[pos] = order[pos][sub]
        s[pos] = s[pos][sub]
        differ = s[1:] != s[:-1]
    return order, np.r_[True, differ]


def _stable_descending(neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_descending` of the negated scores ``neg`` by numpy's stable argsort."""
    order = np.argsort(neg, kind="stable")
    s = neg[order]
    return order, np.r_[True, s[1:] != s[:-1]]


def sorted_groups(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Descending order of flat ``scores`` and the last index of each group of equal scores: the one
    sort that a variant's ROC, bootstrap and bounds share."""
    order, new = _descending(scores)
    return order, np.flatnonzero(np.r_[new[1:], True])




def roc_curve(scores: np.ndarray, is_member: np.ndarray, groups: tuple[np.ndarray, np.ndarray] | None = None) -> Roc:
    """ROC of flat ``scores`` against boolean ``is_member``; NaN scores are an error. ``groups``:
    :func:`sorted_groups` of the flat scores, when the caller has sorted them already."""
    scores = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(is_member, dtype=bool).ravel()
    if scores.shape != y.shape:
        raise ValueError("scores and membership must have the same number of entries")
    if np.isnan(scores).any():
        raise ValueError("attack scores contain NaN")
    npos, nneg = int(y.sum()), int((~y).sum())
    if npos == 0 or nneg == 0:
        raise ValueError("the ROC needs both member and non-member guesses")
    order, ends = groups if groups is not None else sorted_groups(scores)
    y_o = y[order]
    tp = np.cumsum(y_o)[ends]
    fp = np.cumsum(~y_o)[ends]
    del y_o
    return Roc(
        fpr=np.r_[0.0, fp / nneg],
        tpr=np.r_[0.0, tp / npos],
        thresholds=np.r_[np.inf, scores[order[ends]]],
        num_pos=npos,
        num_neg=nneg,
    )


def tpr_at_fpr(roc: Roc, target: float) -> float:
    """Largest TPR among ROC points with FPR <= ``target`` (no interpolation): the TPR of the last
    such point, both rates never falling along the curve (a bisection, not a pass over its points)."""
    return float(roc.tpr[int(np.searchsorted(roc.fpr, target + 1e-12, side="right")) - 1])


def auc(roc: Roc) -> float:
    return float(np.trapezoid(roc.tpr, roc.fpr)) if hasattr(np, "trapezoid") else float(np.trapz(roc.tpr, roc.fpr))


def balanced_accuracy(roc: Roc) -> float:
    return float(((roc.tpr + 1.0 - roc.fpr) / 2.0).max())


#: FPRs at which results.json records each attack's ROC (``roc_curve``): 0, then 10 points per
#: decade from 1e-5 to 1 (enough for a log-log plot; finer curves are in RUN_DIR/roc/: roc_file_curve)
ROC_GRID = (0.0, *(round(10 ** (k / 10), 10) for k in range(-50, 1)))


def roc_on_grid(roc: Roc, grid: tuple[float, ...] = ROC_GRID) -> dict[str, list[float]]:
    """The ROC as ``{"fpr": grid, "tpr": [TPR at FPR <= g for g in grid]}`` (:func:`tpr_at_fpr`'s
    rule: a staircase sampled at the grid, never interpolated)."""
    return {"fpr": [float(g) for g in grid], "tpr": [tpr_at_fpr(roc, g) for g in grid]}


def resolvable(target: float, num_neg: int) -> bool:
    """Whether a TPR at FPR ``target`` is read with at least three expected false positives among
    ``num_neg`` negative guesses (``harness.core.figure.MIN_FALSE_POSITIVES``, the one resolution
    rule of every figure; below, the threshold is one of the few largest non-member scores). FPR 0
    (the TPR before the first false positive) is always read."""
    from harness.core.figure import resolves

    return target == 0.0 or resolves(target, num_neg)


def thin_roc(roc: Roc) -> Roc:
    """Drop ROC points that lie on a straight segment between their neighbours (same curve, fewer rows)."""
    f, t = roc.fpr, roc.tpr
    if len(f) <= 2:
        return roc
    df, dt = np.diff(f), np.diff(t)
    keep = np.r_[True, (df[1:] * dt[:-1] != df[:-1] * dt[1:]), True]
    return Roc(f[keep], t[keep], roc.thresholds[keep], roc.num_pos, roc.num_neg)


#: a ROC file (``RUN_DIR/roc/*.csv``) holds a variant's whole staircase (corners only:
#: :func:`thin_roc`) when it has at most this many corners ...
ROC_FILE_EXACT_POINTS = 20_000
#: ... and otherwise every corner up to the first ``min(1% of the non-member guesses,
#: ROC_FILE_CORNER_NEGATIVES)`` false positives (the low-FPR region the paper reads) ...
ROC_FILE_CORNER_FPR = 0.01
ROC_FILE_CORNER_NEGATIVES = 20_000
#: ... plus the staircase's point at each FPR of this grid (0, then 100 points per decade from 1e-5
#: to 1: the ROC's last point with FPR <= g, the ``tpr_at_fpr`` rule) and its last point (1, 1):
#: at most 2 x 20 000 + 503 points, about 2.6 MB, whatever the number of guesses
ROC_FILE_GRID = (0.0, *(round(10 ** (k / 100), 12) for k in range(-500, 1)))


def roc_file_curve(roc: Roc) -> Roc:
    """The points of ``roc`` that its ROC file keeps (the constants above): the exact staircase
    (:func:`thin_roc`) where it is small, else its corners below
    ``min(ROC_FILE_CORNER_FPR, ROC_FILE_CORNER_NEGATIVES / num_neg)`` FPR and its points at the FPRs
    of :data:`ROC_FILE_GRID`. Every kept row is a corner of the ROC, with its threshold: the file's
    curve is the full one up to the corner FPR, and above it the curve through the full one's corners
    at 100 FPRs per decade (one step is 2.3% in FPR). The exact TPRs at the reported FPRs are
    results.json's ``tpr_at_fpr``."""
    thin = thin_roc(roc)
    if len(thin.fpr) <= ROC_FILE_EXACT_POINTS:
        return thin
    corner = min(ROC_FILE_CORNER_FPR, ROC_FILE_CORNER_NEGATIVES / roc.num_neg)
    keep = np.zeros(len(thin.fpr), bool)
    keep[: int(np.searchsorted(thin.fpr, corner + 1e-12, side="right"))] = True
    # the last point with FPR <= g for every grid FPR g: the staircase's value there
    grid_at = np.searchsorted(thin.fpr, np.asarray(ROC_FILE_GRID) + 1e-12, side="right") - 1
    keep[grid_at[grid_at >= 0]] = True
    keep[-1] = True
    return Roc(thin.fpr[keep], thin.tpr[keep], thin.thresholds[keep], roc.num_pos, roc.num_neg)


def bootstrap_draws(num_models: int, replicates: int, seed: int) -> np.ndarray:
    """(replicates, S) victim indices drawn with replacement: the same draws for every attack
    variant of a run (so that a choice among variants can be re-made inside each draw)."""
    return np.random.default_rng(seed).integers(0, num_models, size=(replicates, num_models))


def victim_counts(draws: np.ndarray, s_models: int) -> np.ndarray:
    """(B, S) float64: how often each replicate's draw holds each victim (one bincount for all rows)."""
    rows = np.arange(len(draws), dtype=np.int64)[:, None] * s_models
    return np.bincount((draws + rows).ravel(), minlength=len(draws) * s_models).reshape(len(draws), s_models).astype(
        np.float64)


def weighted_tpr_samples(
    scores: np.ndarray, membership: np.ndarray, targets: list[float], weights: np.ndarray, chunk: int = 0,
    groups: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[float, np.ndarray]:
    """TPR@FPR of the pooled ROC under each row of victim ``weights``: {target: (rows,)} (NaN where a
    row weighs no member or no non-member guess), read as the paper reads it (:func:`tpr_at_fpr`:
    the last ROC point with FPR <= t).

    ``scores`` and ``membership`` are (S, C); ``weights`` is (rows, S), non-negative: row b counts
    every guess about victim t ``weights[b, t]`` times (a bootstrap replicate's draw counts, or a
    0/1 mask that keeps one half of the victims), so all rows need one sort in total (``groups``:
    :func:`sorted_groups` of the flat scores, when the caller has sorted them already). Only the
    sorted guesses up to where every row's FPR exceeds the largest target are read, and of those only
    the ones where a non-member guess moves a row's FPR: each row's last point with FPR <= t is
    found by bisection over them. Every count is an integer (exact in float64), so the values are
    those of reading every row's whole ROC. ``chunk`` is accepted for compatibility and unused (the
    rows need O(rows x S) memory).
    """
    pre = _LowFprPrefix.build(scores, membership, max(targets, default=0.0), weights, groups)
    w_all, k = pre.weights, pre.k
    stats: dict[float, np.ndarray] = {}
    for t in targets:
        # the first column j (of neg_cols) where the row's FPR exceeds t; k where there is none
        lo = pre.first_over(t, denominator=np.where(pre.nneg > 0, pre.nneg, 1.0))
        last = np.where(lo < k, pre.neg_cols[np.minimum(lo, k - 1)] - 1, pre.width - 1) if k else \
            np.full(len(w_all), pre.width - 1)
        tp = pre.weighted(pre.pos_before, lo)  # exact: integers in float64
        with np.errstate(invalid="ignore", divide="ignore"):
            v = np.where(last >= 0, tp / pre.npos, 0.0)
        stats[t] = np.where(~pre.defined, np.nan, v)
    return stats


#: weighted non-member guesses past t N that the plotting-position read's prefix holds (it reads the
#: corners at floor(k*) and floor(k*) + 1 non-members, k* = t (N + 1) - 1)
_PLOTTING_MARGIN = 2.0


def weighted_tpr_plotting(
    scores: np.ndarray | None, membership: np.ndarray, targets: list[float], weights: np.ndarray,
    groups: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[float, np.ndarray]:
    """TPR at FPR t of the pooled ROC under each row of victim ``weights`` (as
    :func:`weighted_tpr_samples`), read at the **plotting position** with ties broken at random:
    {target: (rows,)}, NaN where a row weighs no member or no non-member guess.

    With N non-member guesses, the members above the (k+1)-th largest non-member score, c(k), sit at
    a true FPR whose expectation is (k+1)/(N+1) (the (k+1)-th largest of N uniform order statistics,
    Beta(k+1, N-k)). The paper's reading, the last ROC point with FPR <= t, takes k = floor(tN) and
    so reads at an expected FPR of (floor(tN) + 1)/(N + 1), above t (0.125% for a 0.1% target at
    N = 3 200). This reading puts k* = t(N+1) - 1 and interpolates linearly between c(floor k*) and
    c(floor k* + 1), so the read sits at an expected FPR of t. Within a group of tied scores holding
    a non-members and p members, c runs along the ROC's diagonal (the expected count under a random
    order of the tied guesses): c(k) = members above the group + p (k - non-members above it) / a,
    so that the read is continuous in the data instead of jumping a whole tie group. For
    k* < 0 (t < 1/(N+1)) the read is interpolated from (0, 0): (k* + 1) c(0)."""
    t_max = max(targets, default=0.0)
    pre = _LowFprPrefix.build(scores, membership, t_max, weights, groups, margin=_PLOTTING_MARGIN, through=True)
    n = pre.nneg
    stats: dict[float, np.ndarray] = {}
    for t in targets:
        kstar = t * (n + 1.0) - 1.0
        k1 = np.floor(kstar)
        lam = kstar - k1
        c1, c2 = pre.corner(k1), pre.corner(k1 + 1.0)
        c = np.where(k1 < 0, (kstar + 1.0) * c2, (1.0 - lam) * c1 + lam * c2)
        with np.errstate(invalid="ignore", divide="ignore"):
            stats[t] = np.where(~pre.defined, np.nan, c / np.where(pre.npos > 0, pre.npos, 1.0))
    return stats


@dataclass(frozen=True)
class _LowFprPrefix:
    """The low-FPR start of a variant's sorted pooled guesses, counted per victim, under rows of
    victim weights (:func:`weighted_tpr_samples`, :func:`weighted_tpr_plotting`).

    ``neg_cols``: the columns (groups of tied scores) of the prefix that hold a non-member guess;
    ``neg_cum[s, j]``: victim s's non-member guesses in columns <= neg_cols[j]; ``pos_before[s, j]``:
    its member guesses in columns < neg_cols[j] (j = k: the whole prefix); ``pos_through[s, j]``
    (when built ``through``): its member guesses in columns <= neg_cols[j]."""

    weights: np.ndarray
    npos: np.ndarray
    nneg: np.ndarray
    defined: np.ndarray
    width: int
    neg_cols: np.ndarray
    neg_cum: np.ndarray
    pos_before: np.ndarray
    pos_through: np.ndarray | None

    @property
    def k(self) -> int:
        return len(self.neg_cols)

    @classmethod
    def build(cls, scores: np.ndarray | None, membership: np.ndarray, t_max: float, weights: np.ndarray,
              groups: tuple[np.ndarray, np.ndarray] | None, margin: float = 0.0, through: bool = False
              ) -> "_LowFprPrefix":
        """The prefix up to the first column where every row has more than ``t_max`` N + ``margin``
        weighted non-member guesses above it (or the whole ROC). The scores are read only to sort
        them: None where ``groups`` is given."""
        s_models, c = np.shape(membership)
        y = np.asarray(membership, dtype=bool).ravel()
        order, ends = groups if groups is not None else sorted_groups(np.asarray(scores, dtype=np.float64).ravel())
        mem = np.asarray(membership, dtype=bool)
        tot_pos = mem.sum(axis=1).astype(np.float64)
        tot_neg = (~mem).sum(axis=1).astype(np.float64)
        # Only the low-FPR start of the sorted guesses matters: a row's TPR@t is read at its last
        # point with FPR <= t, so columns (groups of tied scores) past the first one where every
        # row's FPR exceeds the largest target change nothing. The prefix starts where the
        # unweighted FPR is twice that target (found on ever longer heads of the order, so that
        # a level's millions of guesses are not all read) and doubles until, at its last column,
        # every row's FPR is past it.
        w_all = np.asarray(weights, dtype=np.float64)
        npos_all, nneg_all = w_all @ tot_pos, w_all @ tot_neg
        defined = (npos_all > 0) & (nneg_all > 0)
        level = 2 * t_max * tot_neg.sum() + margin
        head = min(len(order), 4096)
        while True:  # the first column whose unweighted non-member count exceeds the level, if the head holds it
            cols = int(np.searchsorted(ends, head - 1, side="right"))  # columns wholly inside the head
            fp_head = np.cumsum(~y[order[:head]])[ends[:cols]]
            first = int(np.searchsorted(fp_head, level, side="right"))
            if first < cols or head == len(order):
                break
            head = min(len(order), 4 * head)
        del fp_head
        width = min(len(ends), max(256, first + 1))
        while width < len(ends):
            upto = ends[width - 1] + 1
            y_h = y[order[:upto]]
            neg_last = np.bincount(order[:upto][~y_h] // c, minlength=s_models).astype(np.float64)
            neg_denominator = np.where(nneg_all > 0, nneg_all, 1.0)
            if np.all(~defined | ((w_all @ neg_last - margin) / neg_denominator > t_max + 1e-12)):
                break
            width = min(len(ends), 2 * width)
        upto = ends[width - 1] + 1
        y_p, v_p = y[order[:upto]], order[:upto] // c  # each sorted guess's membership and victim
        column = np.repeat(np.arange(width), np.diff(np.r_[-1, ends[:width]]))  # each sorted guess's group
        neg_cols = np.unique(column[~y_p])
        k = len(neg_cols)
        neg_k = np.searchsorted(neg_cols, column[~y_p])
        pos_k = np.searchsorted(neg_cols, column[y_p], side="right")
        neg_cum = np.cumsum(np.bincount(v_p[~y_p] * k + neg_k, minlength=s_models * k).reshape(s_models, k), axis=1)
        pos_before = np.cumsum(np.bincount(v_p[y_p] * (k + 1) + pos_k, minlength=s_models * (k + 1))
                               .reshape(s_models, k + 1), axis=1)
        pos_through = None
        if through:
            pos_in = np.searchsorted(neg_cols, column[y_p], side="left")  # the first neg column at or after
            pos_through = np.cumsum(np.bincount(v_p[y_p] * (k + 1) + pos_in, minlength=s_models * (k + 1))
                                    .reshape(s_models, k + 1), axis=1)[:, :k]
        return cls(w_all, npos_all, nneg_all, defined, width, neg_cols, neg_cum, pos_before, pos_through)

    def weighted(self, counts: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Each row's weighted count ``sum_s w[b, s] counts[s, j[b]]``."""
        return np.einsum("bs,sb->b", self.weights, counts[:, j].astype(np.float64))

    def first_over(self, level: np.ndarray | float, denominator: np.ndarray | float = 1.0) -> np.ndarray:
        """Per row, the first index j of ``neg_cols`` whose weighted non-member count, divided by
        ``denominator``, exceeds ``level`` (each per row, or one for all; 1e-12 of slack) by
        bisection (the count never decreases along the columns); k where there is none."""
        k, rows = self.k, len(self.weights)
        lo, hi = np.zeros(rows, np.int64), np.full(rows, k, np.int64)
        if not k:
            return lo
        while True:
            active = lo < hi
            if not active.any():
                break
            mid = np.minimum((lo + hi) // 2, k - 1)
            over = self.weighted(self.neg_cum, mid) / denominator > level + 1e-12
            hi = np.where(active & over, mid, hi)
            lo = np.where(active & ~over, mid + 1, lo)
        return lo

    def corner(self, kk: np.ndarray) -> np.ndarray:
        """c(k) of :func:`weighted_tpr_plotting` per row: the weighted member count at the point of
        the ROC (ties along the diagonal) with ``kk`` weighted non-member guesses above it."""
        k = self.k
        j = np.minimum(self.first_over(kk), k - 1)  # the prefix ends past every row's count (build's margin)
        fp_at = self.weighted(self.neg_cum, j)
        fp_prev = np.where(j > 0, self.weighted(self.neg_cum, np.maximum(j - 1, 0)), 0.0)
        before = self.weighted(self.pos_before, j)
        after = self.weighted(self.pos_through, j)
        a = np.maximum(fp_at - fp_prev, 1e-300)
        frac = np.clip((kk - fp_prev) / a, 0.0, 1.0)
        return before + (after - before) * frac


@dataclass(frozen=True)
class AttackMetrics:
    tpr_at_fpr: dict[float, float]
    tpr_ci: dict[float, tuple[float, float]]
    resolved: dict[float, bool]
    auc: float
    balanced_accuracy: float
    num_pos: int
    num_neg: int
    roc: Roc
    #: each bootstrap replicate's TPR per target (the draws of :func:`bootstrap_draws` with the run's
    #: seed, shared by every variant), as the paper reads it; None without a bootstrap
    samples: dict[float, np.ndarray] | None = None
    #: TPR at each of the figure FPRs read at the plotting position (:func:`weighted_tpr_plotting`)
    reading: dict[float, float] | None = None
    #: the same in every bootstrap replicate (the same draws), None without a bootstrap
    reading_samples: dict[float, np.ndarray] | None = None
    #: the same with each victim model left out in turn (the delete-one-victim jackknife: (S,) per FPR),
    #: None without a bootstrap or with fewer than 3 victims
    reading_jackknife: dict[float, np.ndarray] | None = None
    #: the same with each of :data:`AUDIT_GROUPS` groups of audit samples left out in turn (the
    #: delete-a-group jackknife over audit samples: (G,) per FPR), None without a bootstrap
    reading_audit: dict[float, np.ndarray] | None = None


#: groups of audit samples of the delete-a-group jackknife over audit samples (:func:`audit_jackknife`)
AUDIT_GROUPS = 10


def audit_jackknife(scores: np.ndarray, membership: np.ndarray, targets: list[float],
                    groups: int = AUDIT_GROUPS, ties: tuple[np.ndarray, np.ndarray] | None = None
                    ) -> dict[float, np.ndarray] | None:
    """The plotting-position read at each target with each of ``groups`` interleaved groups of audit
    samples (columns c with c mod G = g) left out in turn: {target: (G,)}. Its jackknife SD
    (harness.core.figure.jackknife_sd) estimates how much the read moves with another draw of audit
    samples, which the victim bootstrap (conditional on them) does not; None with fewer than 2 G
    audit samples. ``ties``: :func:`sorted_groups` of the flat scores, where the caller has them."""
    c = scores.shape[1]
    if c < 2 * groups:
        return None
    reads = {t: np.empty(groups) for t in targets}
    ones = np.ones((1, scores.shape[0]))
    flat = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(membership, dtype=bool).ravel()
    # one sort (the caller's, where it has one): a subset of columns keeps this order
    order, ends = ties if ties is not None else sorted_groups(flat)
    # Each read needs only the start of the order, up to somewhat more than t N non-member guesses
    # (weighted_tpr_plotting's prefix): the order is cut at the end of a group of tied scores past
    # twice the level's t_max N + 2 non-members. A subset left with no more than t_max N_sub + 2 of
    # them before the cut (the prefix's own condition) is read from the whole order instead.
    t_max = max(targets, default=0.0)
    fp = np.cumsum(~y[order])
    cut = min(len(order), int(np.searchsorted(fp, 2.0 * (t_max * fp[-1] + _PLOTTING_MARGIN), side="right")) + 1)
    if cut < len(order):  # to the end of the group of ties it falls in
        cut = int(ends[np.searchsorted(ends, cut - 1)]) + 1
    row, col = np.divmod(order, c)
    neg_cols = np.bincount(col[:cut][~y[order[:cut]]], minlength=c)  # non-members before the cut, per column
    neg_total = (~np.asarray(membership, dtype=bool)).sum(axis=0)
    for g in range(groups):
        keep = np.arange(c) % groups != g
        n_sub, n_cut = float(neg_total[keep].sum()), float(neg_cols[keep].sum())
        upto = cut if (n_cut - _PLOTTING_MARGIN) / max(n_sub, 1.0) > t_max + 1e-9 else len(order)
        sel = keep[col[:upto]]
        new_col = np.cumsum(keep) - 1
        sub_order = row[:upto][sel] * int(keep.sum()) + new_col[col[:upto][sel]]
        s = flat[order[:upto][sel]]
        ends = np.flatnonzero(np.r_[s[1:] != s[:-1], True])  # the cut ends a group of ties
        # the scores are read only through the order (groups): no copy of the kept columns' scores
        got = weighted_tpr_plotting(None, np.ascontiguousarray(membership[:, keep]), targets, ones,
                                    groups=(sub_order, ends))
        for t in targets:
            reads[t][g] = got[t][0]
    return reads


def evaluate_scores(
    scores: np.ndarray,
    membership: np.ndarray,
    evaluated: np.ndarray,
    fprs: list[float],
    *,
    bootstrap: int,
    confidence: float,
    seed: int,
    reading_fprs: tuple[float, ...] = (),
) -> AttackMetrics:
    """All metrics of one attack variant over the evaluated canaries' pooled S x C guesses: the
    paper's reading at ``fprs`` (FPR 0 added, without an interval) with the level figures' one-variant
    interval (:func:`harness.core.figure.interval`: ``TPR +- f q_S sd``, sd the larger of the victim
    bootstrap's and the delete-one-victim jackknife's; its coverage, beside the percentile interval
    it replaced: ``python benchmarks/bench_headline_test.py --parts variant_ci``), and the
    plotting-position reading at ``reading_fprs`` with its replicates, on the run's draws."""
    every = bool(np.all(evaluated))
    sc = scores if every else scores[:, evaluated]  # no copy where every audit sample is evaluated
    mem = membership if every else membership[:, evaluated]
    flat = np.asarray(sc, dtype=np.float64).ravel()
    if np.isnan(flat).any():
        raise ValueError("attack scores contain NaN")
    groups = sorted_groups(flat)  # one sort for the ROC and every bootstrap replicate
    roc = roc_curve(flat, mem, groups)
    targets = [0.0, *fprs]
    readings = sorted(set(reading_fprs))
    samples, reading, reading_samples, reading_jackknife, reading_audit = None, None, None, None, None
    if readings:
        reading = {t: float(v[0]) for t, v in
                   weighted_tpr_plotting(sc, mem, readings, np.ones((1, sc.shape[0])), groups).items()}
    if bootstrap > 0:
        counts = victim_counts(bootstrap_draws(sc.shape[0], bootstrap, seed), sc.shape[0])
        samples = weighted_tpr_samples(sc, mem, targets, counts, groups=groups)
        if readings:
            reading_samples = weighted_tpr_plotting(sc, mem, readings, counts, groups)
            if sc.shape[0] >= 3:
                reading_jackknife = weighted_tpr_plotting(sc, mem, readings, 1.0 - np.eye(sc.shape[0]), groups)
            reading_audit = audit_jackknife(sc, mem, readings, ties=groups)
    tprs = {t: tpr_at_fpr(roc, t) for t in targets}
    ci = {t: (float("nan"), float("nan")) for t in targets}
    if samples is not None:  # the level figures' one-variant interval (harness.core.figure.interval)
        jack = weighted_tpr_samples(sc, mem, list(fprs), 1.0 - np.eye(sc.shape[0]), groups=groups) if sc.shape[0] >= 3 else None
        for t in fprs:
            ci[t] = interval(tprs[t], samples[t], sc.shape[0], confidence, t * roc.num_neg,
                             None if jack is None else jack[t])
    del groups
    return AttackMetrics(
        tpr_at_fpr=tprs,
        tpr_ci=ci,
        resolved={t: resolvable(t, roc.num_neg) for t in targets},
        auc=auc(roc),
        balanced_accuracy=balanced_accuracy(roc),
        num_pos=roc.num_pos,
        num_neg=roc.num_neg,
        roc=roc,
        samples=samples,
        reading=reading,
        reading_samples=reading_samples,
        reading_jackknife=reading_jackknife,
        reading_audit=reading_audit,
    )
