"""Empirical epsilon: lower bounds on the epsilon of a trainer from what an attack achieved.

DP auditing (Jagielski et al. 2020, "Auditing differentially private machine learning"; Nasr et
al. 2021, "Adversary instantiation"): if a trainer is (eps, delta)-DP, every membership test
satisfies TPR <= e^eps FPR + delta and TNR <= e^eps FNR + delta (the same inequality for the
complementary test), hence

    eps >= ln((TPR - delta) / FPR)    and    eps >= ln((1 - FPR - delta) / (1 - TPR)).

From finite counts we replace TPR by its Clopper-Pearson lower limit and FPR by its upper limit
(two-sided 1 - alpha intervals, so each one-sided limit holds with probability 1 - alpha/2 and
both together with probability >= 1 - alpha); the second form uses the same two limits
(TNR_lo = 1 - FPR_hi, FNR_hi = 1 - TPR_lo), so the larger of the two is still a 1 - alpha
statement. Maximising over all thresholds of a ROC picks the threshold after seeing the data,
which makes the bound optimistic unless the threshold was chosen on separate data; the
``bonferroni`` option divides alpha by the number of thresholds to keep a valid 1 - alpha bound.

Label-flip memorization game (Malek et al. 2021, "Antipodes of label differential privacy: PATE
and ALIBI", Game 3 / the PATE-FM and ALIBI audits): each canary is trained with one of two
labels chosen at random; the auditor sees the model's confidence in both labels, guesses the one
with the higher confidence and abstains when both are below tau. For an eps-label-DP trainer the
correct-guess rate CGR (over the guesses made) is at most e^eps/(1 + e^eps), so
eps >= ln(CGR/(1 - CGR)).

Three estimates of the game's rate:

- ``label_flip_game`` (Clopper-Pearson): one alternative label per canary, the guesses counted as
  independent Bernoulli trials; exact binomial interval. Valid under the game's independence
  heuristic (Game 3 treats the N canaries of one run as N independent runs of Game 2).
- ``weighted_acgr_game`` (the paper's appendix B as its text describes it): every canary plays
  against all C - 2 alternative labels; its rate ACGR_i over its m_i non-abstained guesses enters
  a weighted mean with the m_i as reliability weights, and a normal 95% interval of that mean
  gives the interval of eps. Valid asymptotically (many canaries with guesses) under the same
  independence heuristic across canaries; the C - 2 guesses of one canary are correlated and
  enter only through ACGR_i.
- ``paper_acgr_game`` (the authors' released code, ``memorization_attack/attack.py``): the same
  guesses against all C - 2 alternatives, estimated as that code does: ties count as wrong guesses,
  SE = s / sqrt(N_eff) (N_eff active canaries) instead of s sqrt(V2) / V1, a mean rate below 1/2 is
  flipped to 1 - rate, the lower end is floored at 1/2, and when every guess is right (or, after
  the flip, every one wrong) the lower end is 1 - 3 / N_eff (the rule of three) with more than 50
  active canaries and 1/2 (no evidence) otherwise; its taus are the 7 of ``PAPER_GAME_TAUS``.

Sweeping tau and keeping the best row chooses tau after seeing the data: Malek et al. report the
best uncorrected row (``paper_best`` is the authors' choice of that row); the audit also reports
the Bonferroni-corrected best (alpha divided by the number of taus), which stays a valid 1 - alpha
statement.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from harness.core.metrics import Roc, roc_curve

__all__ = [
    "EpsilonLowerBound",
    "LabelFlipResult",
    "LABEL_FLIP_THRESHOLDS",
    "clopper_pearson",
    "epsilon_lower_bound_from_counts",
    "epsilon_lower_bound_roc",
    "label_flip_game",
    "PAPER_GAME_TAUS",
    "PaperGameResult",
    "paper_acgr_game",
    "paper_best",
    "WeightedGameResult",
    "weighted_acgr_game",
    "WEIGHTED_GAME_TAUS",
]

LABEL_FLIP_THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
#: the paper's sweep of tau over [0.5, 0.99], in steps of 0.01
WEIGHTED_GAME_TAUS = tuple(round(0.5 + 0.01 * i, 2) for i in range(50))
#: the 7 thresholds of the authors' code (``compute_eps`` in ``memorization_attack/attack.py``)
PAPER_GAME_TAUS = LABEL_FLIP_THRESHOLDS


def clopper_pearson(k: int | np.ndarray, n: int | np.ndarray, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided 1 - alpha Clopper-Pearson (exact binomial) interval for k successes in n trials.

    lo = Beta(alpha/2; k, n - k + 1) (0 when k = 0), hi = Beta(1 - alpha/2; k + 1, n - k) (1 when
    k = n). Vectorised over k and n; returns floats for scalar input. The beta quantiles are
    ``scipy.special.betaincinv`` (Boost's ibeta_inv, what ``scipy.stats.beta.ppf`` calls: the same
    values without importing scipy.stats), each computed once per distinct (k, n) pair.
    """
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    k_arr = np.asarray(k, dtype=np.float64)
    n_arr = np.asarray(n, dtype=np.float64)
    if np.any(n_arr < 1) or np.any(k_arr < 0) or np.any(k_arr > n_arr):
        raise ValueError("need 0 <= k <= n and n >= 1")
    k_arr, n_arr = np.broadcast_arrays(k_arr, n_arr)
    if n_arr.size > 1 and np.all(n_arr == n_arr.flat[0]) and k_arr.size > n_arr.flat[0] // 4 and \
            float(n_arr.flat[0]).is_integer() and np.all(k_arr == np.floor(k_arr)):
        # one n and many k (a ROC's counts): the limits of every k = 0..n, kept for the next call
        lo_n, hi_n = _clopper_pearson_table(int(n_arr.flat[0]), float(alpha))
        k_int = k_arr.astype(np.int64)
        lo, hi = lo_n[k_int], hi_n[k_int]
    else:
        (ku, nu), inverse = np.unique(np.stack([k_arr.ravel(), n_arr.ravel()]), axis=1, return_inverse=True)
        lo_u, hi_u = _clopper_pearson_limits(ku, nu, alpha)
        inverse = inverse.reshape(k_arr.shape)
        lo, hi = lo_u[inverse], hi_u[inverse]
    if lo.ndim == 0:
        return float(lo), float(hi)  # type: ignore[return-value]
    return lo, hi


def _clopper_pearson_limits(k: np.ndarray, n: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    from scipy.special import betaincinv

    with np.errstate(invalid="ignore", divide="ignore"):
        lo = np.where(k > 0, betaincinv(k, n - k + 1, alpha / 2), 0.0)
        hi = np.where(k < n, betaincinv(k + 1, n - k, 1 - alpha / 2), 1.0)
    return lo, hi


@lru_cache(maxsize=16)
def _clopper_pearson_table(n: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`clopper_pearson` of every k = 0..n (read-only arrays): the attacks of one run share
    their n (the level's member and non-member guesses) and alpha."""
    k = np.arange(n + 1, dtype=np.float64)
    lo, hi = _clopper_pearson_limits(k, np.full_like(k, n), alpha)
    lo.flags.writeable = hi.flags.writeable = False
    return lo, hi


@dataclass(frozen=True)
class EpsilonLowerBound:
    """The best empirical epsilon lower bound and the operating point that achieves it.

    ``direction`` is "tpr/fpr" for ln((TPR_lo - delta)/FPR_hi) and "tnr/fnr" for
    ln((1 - FPR_hi - delta)/(1 - TPR_lo)). ``threshold`` is the score threshold ("member" iff
    score >= threshold), None when the input had no thresholds. ``epsilon`` is 0 when no
    threshold gives evidence (then the other fields describe the first threshold).
    """

    epsilon: float
    threshold: float | None
    direction: str
    tp: int
    fp: int
    num_pos: int
    num_neg: int
    tpr: float
    fpr: float
    tpr_lo: float
    fpr_hi: float
    delta: float
    alpha: float


def _safe_log_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """ln(num/den) where both are positive, -inf elsewhere (no evidence)."""
    ok = (num > 0) & (den > 0)
    return np.where(ok, np.log(np.where(ok, num, 1.0) / np.where(ok, den, 1.0)), -np.inf)


def _eps_terms(tpr_lo: np.ndarray, fpr_hi: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """ln((TPR_lo - delta)/FPR_hi) and ln((1 - FPR_hi - delta)/(1 - TPR_lo))."""
    return _safe_log_ratio(tpr_lo - delta, fpr_hi), _safe_log_ratio(1.0 - fpr_hi - delta, 1.0 - tpr_lo)


def epsilon_lower_bound_from_counts(tp: int | np.ndarray, fp: int | np.ndarray, num_pos: int, num_neg: int,
                                    delta: float = 0.0, alpha: float = 0.05,
                                    thresholds: np.ndarray | None = None) -> EpsilonLowerBound:
    """Empirical eps lower bound from true/false positive counts at one or many thresholds.

    ``tp`` and ``fp`` are counts (e.g. the cumulative counts of a ROC) out of ``num_pos`` members
    and ``num_neg`` non-members. eps = max over entries and both directions of
    ln((TPR_lo - delta)/FPR_hi) and ln((1 - FPR_hi - delta)/(1 - TPR_lo)), floored at 0, with
    two-sided 1 - alpha Clopper-Pearson limits.
    """
    if not (0.0 <= delta < 1.0):
        raise ValueError(f"delta must be in [0, 1), got {delta}")
    tp_a = np.atleast_1d(np.asarray(tp)).astype(np.int64)
    fp_a = np.atleast_1d(np.asarray(fp)).astype(np.int64)
    if tp_a.shape != fp_a.shape or tp_a.ndim != 1:
        raise ValueError("tp and fp must be 1-D and of the same length")
    if num_pos < 1 or num_neg < 1:
        raise ValueError("need at least one member and one non-member")
    if np.any(tp_a < 0) or np.any(tp_a > num_pos) or np.any(fp_a < 0) or np.any(fp_a > num_neg):
        raise ValueError("counts must satisfy 0 <= tp <= num_pos and 0 <= fp <= num_neg")
    if thresholds is not None and np.shape(thresholds) != tp_a.shape:
        raise ValueError("thresholds must have one entry per count")
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    monotone = bool(np.all(np.diff(tp_a) >= 0) and np.all(np.diff(fp_a) >= 0))
    if monotone and len(tp_a) > SEARCH_MIN_POINTS:
        i, t_lo, f_hi, e1_i, e2_i = _best_point_search(tp_a, fp_a, num_pos, num_neg, delta, alpha)
    else:
        tpr_lo, _ = clopper_pearson(tp_a, num_pos, alpha)
        _, fpr_hi = clopper_pearson(fp_a, num_neg, alpha)
        tpr_lo, fpr_hi = np.atleast_1d(tpr_lo), np.atleast_1d(fpr_hi)
        e1, e2 = _eps_terms(tpr_lo, fpr_hi, delta)
        best = np.maximum(e1, e2)
        i = int(np.argmax(best))
        t_lo, f_hi, e1_i, e2_i = float(tpr_lo[i]), float(fpr_hi[i]), float(e1[i]), float(e2[i])
    eps = max(e1_i, e2_i)
    return EpsilonLowerBound(
        epsilon=max(eps, 0.0),
        threshold=None if thresholds is None else float(np.asarray(thresholds)[i]),
        direction="tpr/fpr" if e1_i >= e2_i else "tnr/fnr",
        tp=int(tp_a[i]),
        fp=int(fp_a[i]),
        num_pos=int(num_pos),
        num_neg=int(num_neg),
        tpr=float(tp_a[i] / num_pos),
        fpr=float(fp_a[i] / num_neg),
        tpr_lo=t_lo,
        fpr_hi=f_hi,
        delta=float(delta),
        alpha=float(alpha),
    )


#: counts of a ROC above which :func:`epsilon_lower_bound_from_counts` searches for the best
#: threshold (:func:`_best_point_search`) instead of computing the limits at every one
SEARCH_MIN_POINTS = 4096
#: points per interval of the search's first level, and how many parts an interval splits into
SEARCH_BLOCK, SEARCH_SPLIT = 4096, 16


def _limits(k: np.ndarray, n: int, alpha: float, lower: bool) -> np.ndarray:
    """The Clopper-Pearson lower (``lower``) or upper limits of counts ``k`` out of ``n``: the values
    :func:`clopper_pearson` gives (the same Boost calls, element by element)."""
    kf = np.asarray(k, dtype=np.float64)
    lo, hi = _clopper_pearson_limits(kf, np.full_like(kf, float(n)), alpha)
    return lo if lower else hi


def _best_point_search(tp: np.ndarray, fp: np.ndarray, num_pos: int, num_neg: int, delta: float,
                       alpha: float) -> tuple[int, float, float, float, float]:
    """The index maximising max(e1, e2) over a ROC's cumulative counts (``tp``, ``fp`` non-decreasing),
    the first such index on ties, with its TPR_lo, FPR_hi, e1 and e2: what computing every point's
    limits and taking ``np.argmax`` gives, at a small share of the Boost calls.

    Best-first branch and bound over intervals of points: TPR_lo grows with tp and FPR_hi with fp,
    so on an interval [a, b] both terms are at most their value at (TPR_lo(tp_b), FPR_hi(fp_a))
    (e1 = ln((TPR_lo - delta) / FPR_hi), e2 = ln((1 - FPR_hi - delta) / (1 - TPR_lo))), which needs
    two limits per interval; an interval is split (then evaluated point by point) only while that
    bound, with a margin of 1e-9 for rounding, reaches the best value found so far. Every point that
    could equal or beat the maximum is therefore evaluated exactly, with the same limits, and the
    first maximiser kept."""
    n = len(tp)

    def bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        t_hi = _limits(tp[b], num_pos, alpha, lower=True)
        f_lo = _limits(fp[a], num_neg, alpha, lower=False)
        e1, e2 = _eps_terms(t_hi, f_lo, delta)
        u = np.maximum(e1, e2)
        return np.where(np.isfinite(u), u + 1e-9 * np.maximum(1.0, np.abs(u)), u)

    starts = np.arange(0, n, SEARCH_BLOCK)
    stops = np.minimum(starts + SEARCH_BLOCK, n)
    heap = [(-float(u), int(a), int(b)) for u, a, b in zip(bound(starts, stops - 1), starts, stops)]
    heapq.heapify(heap)
    best, best_i, best_rec = -np.inf, n, (0.0, 0.0, -np.inf, -np.inf)
    while heap:
        neg_u, a, b = heapq.heappop(heap)
        if -neg_u < best or (best == -np.inf and best_i < n and -neg_u == -np.inf):
            break  # every interval left is bounded below the best (or, all of them -inf, after the first point)
        if b - a <= SEARCH_SPLIT * 4:
            t_lo = _limits(tp[a:b], num_pos, alpha, lower=True)
            f_hi = _limits(fp[a:b], num_neg, alpha, lower=False)
            e1, e2 = _eps_terms(t_lo, f_hi, delta)
            val = np.maximum(e1, e2)
            j = int(np.argmax(val))
            if val[j] > best or (val[j] == best and a + j < best_i):
                best, best_i = float(val[j]), a + j
                best_rec = (float(t_lo[j]), float(f_hi[j]), float(e1[j]), float(e2[j]))
            continue
        cuts = np.unique(np.linspace(a, b, SEARCH_SPLIT + 1).astype(np.int64))
        sub_a, sub_b = cuts[:-1], cuts[1:]
        for u, sa, sb in zip(bound(sub_a, sub_b - 1), sub_a, sub_b):
            heapq.heappush(heap, (-float(u), int(sa), int(sb)))
    return (best_i, *best_rec)


def epsilon_lower_bound_roc(scores: np.ndarray, is_member: np.ndarray, delta: float = 0.0, alpha: float = 0.05,
                            bonferroni: bool = False, roc: Roc | None = None) -> EpsilonLowerBound:
    """Empirical eps lower bound maximised over every threshold of the ROC of ``scores`` vs ``is_member``.

    Thresholds are those of ``harness.core.metrics.roc_curve`` ("member" iff score >= threshold, ties
    move together). ``bonferroni`` uses alpha / (number of thresholds), which keeps the maximum a
    valid 1 - alpha bound; without it the maximum is optimistic (see the module docstring). ``roc``:
    :func:`~harness.core.metrics.roc_curve` of the same scores, when the caller has it.
    """
    roc = roc if roc is not None else roc_curve(scores, is_member)
    tp = np.rint(roc.tpr * roc.num_pos).astype(np.int64)
    fp = np.rint(roc.fpr * roc.num_neg).astype(np.int64)
    a = alpha / len(tp) if bonferroni else alpha
    res = epsilon_lower_bound_from_counts(tp, fp, roc.num_pos, roc.num_neg, delta, a, roc.thresholds)
    return res


@dataclass(frozen=True)
class LabelFlipResult:
    """Statistics of the label-flip memorization game at one abstention threshold ``tau``.

    ``cgr`` is the correct-guess rate over the ``num_guesses`` canaries where the auditor did not
    abstain, [cgr_lo, cgr_hi] its two-sided 1 - alpha Clopper-Pearson interval, and
    ``epsilon`` = ln(cgr/(1 - cgr)), ``epsilon_lo`` = ln(cgr_lo/(1 - cgr_lo)), ``epsilon_hi`` =
    ln(cgr_hi/(1 - cgr_hi)), each floored at 0 (inf at a rate of 1). ``epsilon_lo`` is the
    statistically valid lower bound on the trainer's label-DP epsilon. With no guesses, cgr is NaN,
    the epsilons are 0 and epsilon_hi is inf.
    """

    tau: float
    num_canaries: int
    num_guesses: int
    num_correct: int
    cgr: float
    cgr_lo: float
    cgr_hi: float
    epsilon: float
    epsilon_lo: float
    epsilon_hi: float
    alpha: float


def _logit_floor(p: float) -> float:
    if p >= 1.0:
        return math.inf
    if p <= 0.5:
        return 0.0
    return math.log(p / (1.0 - p))


def label_flip_game(conf_trained: np.ndarray, conf_alternative: np.ndarray, tau: float = 0.5,
                    alpha: float = 0.05) -> LabelFlipResult:
    """Label-flip memorization game (Malek et al. 2021, Game 3) at abstention threshold ``tau``.

    ``conf_trained[i]`` / ``conf_alternative[i]``: the model's confidence (probability) in the label
    canary i was trained with and in the other candidate label. The auditor, who does not know
    which is which, guesses the label with the higher confidence and abstains when
    max(conf) < tau or the two are tied. CGR = correct guesses / guesses; eps >= ln(CGR/(1 - CGR)).
    """
    if not (0.5 <= tau <= 0.99):
        raise ValueError(f"tau must be in [0.5, 0.99], got {tau}")
    ct = np.asarray(conf_trained, dtype=np.float64).ravel()
    ca = np.asarray(conf_alternative, dtype=np.float64).ravel()
    if ct.shape != ca.shape or ct.size == 0:
        raise ValueError("conf_trained and conf_alternative must be non-empty and of the same length")
    if not (np.isfinite(ct).all() and np.isfinite(ca).all()):
        raise ValueError("confidences must be finite")
    if np.any((ct < 0) | (ct > 1) | (ca < 0) | (ca > 1)):
        raise ValueError("confidences must be probabilities in [0, 1]")
    guess = (np.maximum(ct, ca) >= tau) & (ct != ca)
    n = int(guess.sum())
    k = int((guess & (ct > ca)).sum())
    if n == 0:
        return LabelFlipResult(tau, ct.size, 0, 0, math.nan, 0.0, 1.0, 0.0, 0.0, math.inf, alpha)
    lo, hi = clopper_pearson(k, n, alpha)
    cgr = k / n
    return LabelFlipResult(
        tau=float(tau),
        num_canaries=int(ct.size),
        num_guesses=n,
        num_correct=k,
        cgr=cgr,
        cgr_lo=float(lo),
        cgr_hi=float(hi),
        epsilon=_logit_floor(cgr),
        epsilon_lo=_logit_floor(float(lo)),
        epsilon_hi=_logit_floor(float(hi)),
        alpha=float(alpha),
    )


@dataclass(frozen=True)
class WeightedGameResult:
    """The label-flip game against all C - 2 alternatives at one ``tau`` (Malek et al. 2021, app. B).

    ``num_active`` canaries made at least one guess; ``num_guesses`` = sum of their m_i. ``acgr`` is
    the m_i-weighted mean of the per-canary rates, [acgr_lo, acgr_hi] its 1 - alpha interval
    (clipped to [0, 1]; [0, 1] with fewer than two active canaries), and the epsilons are
    ln(p / (1 - p)) at those rates, floored at 0 (inf at a rate of 1). ``interval`` says how it was
    made: ``normal`` (the paper's) or ``exact-canaries`` where the rates have zero sample variance
    (see :func:`weighted_acgr_game`).
    """

    tau: float
    num_canaries: int
    num_active: int
    num_guesses: int
    acgr: float
    acgr_lo: float
    acgr_hi: float
    epsilon: float
    epsilon_lo: float
    epsilon_hi: float
    alpha: float
    interval: str = "normal"


def _game_inputs(conf_trained: np.ndarray, conf_alternatives: np.ndarray, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """``conf_trained`` as (N,) and ``conf_alternatives`` as (N, J) float64 arrays, checked (ValueError)."""
    if not (0.5 <= tau <= 0.99):
        raise ValueError(f"tau must be in [0.5, 0.99], got {tau}")
    ct = np.asarray(conf_trained, dtype=np.float64).ravel()
    ca = np.asarray(conf_alternatives, dtype=np.float64)
    if ct.size == 0 or ca.ndim != 2 or ca.shape[0] != ct.size or ca.shape[1] < 1:
        raise ValueError("conf_trained must be (N,) and conf_alternatives (N, J) with N, J >= 1")
    if not (np.isfinite(ct).all() and np.isfinite(ca).all()):
        raise ValueError("confidences must be finite")
    if np.any((ct < 0) | (ct > 1)) or np.any((ca < 0) | (ca > 1)):
        raise ValueError("confidences must be probabilities in [0, 1]")
    return ct, ca


def weighted_acgr_game(conf_trained: np.ndarray, conf_alternatives: np.ndarray, tau: float = 0.5,
                       alpha: float = 0.05) -> WeightedGameResult:
    """The paper's game: canary i trained with label y'_i plays against each alternative y''_ij.

    ``conf_trained``: (N,) confidence in y'_i; ``conf_alternatives``: (N, J) confidences in the J = C - 2
    labels that are neither the true one nor y'_i. Guess j: the label with the higher confidence,
    abstaining when both are below tau or tied. ACGR_i = correct_i / m_i over the m_i guesses;
    ACGR = sum_i m_i ACGR_i / sum_i m_i; its variance uses the unbiased weighted variance with
    reliability weights, s^2 = sum_i m_i (ACGR_i - ACGR)^2 / (V1 - V2 / V1), and the standard error
    s sqrt(V2) / V1 (V1 = sum m_i, V2 = sum m_i^2); the interval is ACGR -/+ z_(1 - alpha/2) SE.

    Where every active canary has the same rate (s = 0, e.g. all guesses right at a high tau) the
    normal interval has zero width, and at a rate of 1 it would claim an infinite lower bound. The
    interval is then exact over the canaries instead (``interval="exact-canaries"``): a rate lies
    in [0, 1], so P(ACGR_i = 1) <= E[ACGR_i] <= 1 - P(ACGR_i = 0), and the Clopper-Pearson bounds
    on those two probabilities (k of the n active canaries at rate 1, resp. 0) give
    [lo(k_1, n), 1 - lo(k_0, n)]; both bounds are on the canaries' mean rate, the quantity the
    normal interval estimates. (The authors' code: the rule of three where every guess is right,
    a zero-width interval at any other common rate; :func:`paper_acgr_game`, docs/bounds.md.)
    """
    ct, ca = _game_inputs(conf_trained, conf_alternatives, tau)
    t = ct[:, None]
    guess = (np.maximum(t, ca) >= tau) & (t != ca)
    m = guess.sum(axis=1).astype(np.float64)
    correct = (guess & (t > ca)).sum(axis=1).astype(np.float64)
    active = m > 0
    n_act, n_guess = int(active.sum()), int(m.sum())
    if n_act == 0:
        return WeightedGameResult(float(tau), ct.size, 0, 0, math.nan, 0.0, 1.0, 0.0, 0.0, math.inf, float(alpha))
    w, rate = m[active], correct[active] / m[active]
    v1, v2 = w.sum(), (w**2).sum()
    mean = float((w * rate).sum() / v1)
    denom = v1 - v2 / v1
    interval = "normal"
    if n_act < 2 or denom <= 0:
        lo, hi = 0.0, 1.0
    elif np.all(rate == rate[0]):
        interval = "exact-canaries"
        lo = float(clopper_pearson(int((rate == 1).sum()), n_act, alpha)[0])
        hi = 1.0 - float(clopper_pearson(int((rate == 0).sum()), n_act, alpha)[0])
    else:
        from scipy.stats import norm

        se = math.sqrt(float((w * (rate - mean) ** 2).sum() / denom) * v2) / v1
        z = float(norm.ppf(1 - alpha / 2))
        lo, hi = max(0.0, float(mean - z * se)), min(1.0, float(mean + z * se))
    return WeightedGameResult(
        tau=float(tau), num_canaries=int(ct.size), num_active=n_act, num_guesses=n_guess, acgr=mean,
        acgr_lo=lo, acgr_hi=hi, epsilon=_logit_floor(mean), epsilon_lo=_logit_floor(lo),
        epsilon_hi=_logit_floor(hi), alpha=float(alpha), interval=interval,
    )


#: the authors' code's constants at its alpha = 0.05: the normal quantile (z_0.975 = 1.95996...,
#: rounded) and the rule of three (ln(1 / 0.05) = 2.996..., rounded)
PAPER_ALPHA, PAPER_Z, PAPER_THREE = 0.05, 1.96, 3.0
#: the rule of three applies only with more active canaries than this; fewer all-right canaries
#: are "discarded as a fluke" (lower end 1/2)
PAPER_MIN_CANARIES = 50


@dataclass(frozen=True)
class PaperGameResult:
    """The label-flip game against all C - 2 alternatives at one ``tau``, estimated as the authors'
    code does (Malek et al. 2021, ``memorization_attack/attack.py``, ``compute_eps``).

    ``num_guesses`` includes the ``num_ties`` guesses where both confidences were equal (counted as
    wrong). ``acgr`` is the rate the interval is centred on: the m_i-weighted mean rate, or 1 minus
    it where that mean was below 1/2 (``flipped``). [acgr_lo, acgr_hi] lies in [1/2, 1]; the
    epsilons are ln(p / (1 - p)) at those rates, floored at 0 (inf at a rate of 1). ``interval``:
    ``normal``; ``rule-of-three`` (every guess right, or every one wrong and flipped, with more than
    50 active canaries: lower end 1 - 3 / N_eff); ``all-correct-few`` (the same with at most 50:
    lower end 1/2); ``none`` (no guess: acgr NaN, interval [0, 1]).
    """

    tau: float
    num_canaries: int
    num_active: int
    num_guesses: int
    num_ties: int
    acgr: float
    flipped: bool
    acgr_lo: float
    acgr_hi: float
    epsilon: float
    epsilon_lo: float
    epsilon_hi: float
    alpha: float
    interval: str


def _paper_constants(alpha: float) -> tuple[float, float]:
    """(z, rule-of-three constant): the authors' 1.96 and 3 at their alpha 0.05; at another alpha
    (a Bonferroni-corrected sweep) the quantities they round, z_(1 - alpha/2) and ln(1 / alpha)
    (P(N_eff right of N_eff) = p^N_eff <= alpha gives p >= 1 - ln(1 / alpha) / N_eff)."""
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if alpha == PAPER_ALPHA:
        return PAPER_Z, PAPER_THREE
    from scipy.special import ndtri

    return float(ndtri(1 - alpha / 2)), math.log(1 / alpha)


def paper_acgr_game(conf_trained: np.ndarray, conf_alternatives: np.ndarray, tau: float = 0.5,
                    alpha: float = 0.05) -> PaperGameResult:
    """The authors' estimator of the game against all C - 2 alternatives (their ``compute_eps``).

    Guess j of canary i is made when max(conf_trained_i, conf_alternatives_ij) >= tau and is right
    when conf_trained_i > conf_alternatives_ij: a tie is a wrong guess (the weighted game abstains).
    Over the N_eff canaries with m_i > 0 guesses, with normalized weights w_i = m_i / sum m:
    mean = sum w_i ACGR_i, s^2 = sum w_i (ACGR_i - mean)^2 / (1 - sum w_i^2 + 1e-8) (the same s^2
    as the weighted game's, apart from the 1e-8), SE = s / sqrt(N_eff) (the weighted game:
    s sqrt(V2) / V1; the two agree only for equal m_i). The mean becomes max(mean, 1 - mean) (the
    DP definition is symmetric), the interval mean -/+ z SE is clipped to [1/2, 1], and where that
    mean is 1 the lower end is 1 - 3 / N_eff if N_eff > 50, else 1/2. z = 1.96 and 3 at alpha 0.05
    (:func:`_paper_constants` otherwise). The mean is sum correct / sum m, exact in float64, so
    "every guess right" is tested exactly (the authors' float32 mean of normalized weights can
    miss 1 by a rounding error).
    """
    ct, ca = _game_inputs(conf_trained, conf_alternatives, tau)
    z, three = _paper_constants(alpha)
    t = ct[:, None]
    guess = np.maximum(t, ca) >= tau
    m = guess.sum(axis=1).astype(np.float64)
    correct = (guess & (t > ca)).sum(axis=1).astype(np.float64)
    ties = int((guess & (t == ca)).sum())
    active = m > 0
    n_act, n_guess = int(active.sum()), int(m.sum())
    if n_act == 0:
        return PaperGameResult(float(tau), ct.size, 0, 0, 0, math.nan, False, 0.0, 1.0, 0.0, 0.0, math.inf,
                               float(alpha), "none")
    w, rate = m[active] / m.sum(), correct[active] / m[active]
    k = float(correct.sum())
    mean = k / n_guess
    var = float((w * (rate - mean) ** 2).sum()) / (1.0 - float((w**2).sum()) + 1e-8)
    se = math.sqrt(var / n_act)
    flipped = mean < 0.5
    if flipped:
        mean = 1.0 - mean
    lo, hi = max(0.5, mean - z * se), min(1.0, mean + z * se)
    interval = "normal"
    if k == n_guess or k == 0:  # every guess right, or every one wrong and flipped: mean 1, s = 0
        interval = "rule-of-three" if n_act > PAPER_MIN_CANARIES else "all-correct-few"
        lo = min(lo, 1.0 - three / n_act) if n_act > PAPER_MIN_CANARIES else 0.5
    return PaperGameResult(
        tau=float(tau), num_canaries=int(ct.size), num_active=n_act, num_guesses=n_guess, num_ties=ties,
        acgr=mean, flipped=bool(flipped), acgr_lo=lo, acgr_hi=hi, epsilon=_logit_floor(mean),
        epsilon_lo=_logit_floor(lo), epsilon_hi=_logit_floor(hi), alpha=float(alpha), interval=interval,
    )


def paper_best(epsilon_lo: list[float], epsilon_hi: list[float],
               taus: list[float]) -> tuple[float, float, float | None]:
    """The authors' choice among the rows of a tau sweep: (eps_lo, eps_hi, tau) of the first row
    with the largest lower end above 0; among rows with that lower end (0 included), a later row
    replaces it where its upper end is larger and finite. (0, 0, None) when no row qualifies."""
    best_lo, best_hi, best_tau = 0.0, 0.0, None
    for lo, hi, tau in zip(epsilon_lo, epsilon_hi, taus):
        if lo > best_lo:
            best_lo, best_hi, best_tau = lo, hi, tau
        elif lo == best_lo and best_hi < hi < math.inf:
            best_hi, best_tau = hi, tau
    return best_lo, best_hi, best_tau
