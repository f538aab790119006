"""Gaussian differential privacy (GDP): the trade-off curve, its (epsilon, delta) reading, and a lower
bound on mu read off an attack's ROC (docs/bounds.md, "The audit bracket").

**mu-GDP** (Dong, Roth and Su, "Gaussian Differential Privacy", JRSS-B 2022, Definition 2.6): a
mechanism is mu-GDP when every test of "x absent" against "x present" has a type II error of at least
the trade-off of N(0, 1) vs N(mu, 1),

    G_mu(a) = Phi(Phi^-1(1 - a) - mu),      i.e.  FNR >= Phi(Phi^-1(1 - FPR) - mu)

for every threshold of every attack; the curve is symmetric, so the complementary test gives the
same condition. Equivalently TPR <= Phi(Phi^-1(FPR) + mu) = :func:`blow_up` (FPR), the "blow-up
function" B = 1 - G_mu of Mahloujifar, Melis and Chaudhuri (ICML 2025).

**(epsilon, delta) of mu-GDP** (Dong et al., Corollary 2.13; Balle and Wang 2018, Theorem 8): mu-GDP
implies (eps, delta(eps))-DP for every eps >= 0 with

    delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2),

and :func:`gdp_epsilon` inverts it at a delta. Caveat (stated wherever it is reported): "the trainer
is not mu-GDP" does not imply "the trainer is not (eps(mu), delta)-DP" (a mechanism can be
(eps, delta)-DP at one delta and not mu-GDP); the epsilon of a GDP lower bound is the epsilon of the
Gaussian mechanism that the bound rules out, as Nasr et al. 2023 and Mahloujifar et al. 2025
report it. Only Steinke et al.'s bound (:mod:`harness.bounds.one_run`) is a lower bound on the
trainer's (eps, delta) itself.

**The GDP reading of a ROC** (Nasr, Hayes, Steinke, Balle, Tramèr, Jagielski, Carlini and Terzis,
"Tight Auditing of Differentially Private Machine Learning", USENIX Security 2023, which reads its
audits' (FPR, FNR) through the GDP trade-off curve): at a threshold with FP false positives out of N
non-members and FN false negatives out of P members, Clopper-Pearson upper limits FPR_hi and FNR_hi
give, by the condition above,

    mu >= Phi^-1(1 - FPR_hi) - Phi^-1(FNR_hi)       (= -Phi^-1(FPR_hi) - Phi^-1(FNR_hi)),

a 1 - alpha lower bound on mu when FPR_hi and FNR_hi are one-sided 1 - alpha/2 limits. The threshold
is chosen after seeing the data, which is accounted for (:func:`gdp_lower_bound_roc`) either with a
Bonferroni correction or by choosing the threshold on a random half of the guesses and reading the
bound on the other half (``correction="split"``).

**What the Bonferroni correction counts** (``correction="bonferroni"``): every threshold of the ROC,
i.e. every distinct score of the guesses ("member" iff score >= it; tied scores are one threshold;
the +inf threshold, which guesses nothing, is left out): T thresholds are T tests at alpha / T each
(each limit one-sided at alpha / (2T)), and the largest bound over all T is kept. jax_privacy's
``CanaryScoreAuditor.epsilon_from_gdp`` (the same reading) puts each limit at alpha / (2n) with n
the points of the ROC's hull only (its ``_pareto_frontier`` of the (FN, TN) counts at every distinct
score and +inf), and maximizes over those points. The harness counts every threshold because the
threshold is chosen after looking at the data: every threshold the search could pick is a test
that counts, and the hull is itself selected from all the thresholds by the same data, so counting
only its points understates the multiplicity (the family looks small because the data made it
small). With more than a few distinct scores the hull has far fewer points than the ROC has
thresholds, so the harness's level per test is smaller and its bound more conservative.

The Clopper-Pearson limits treat the guesses as independent Bernoulli trials: true for Nasr et al.'s
many training runs, a heuristic for guesses about one trained model (the canaries of one run share
its training) and for the pooled S x C guesses of ``harness evaluate`` (they share the victims'
training and the shadow models): the reading's confidence is **nominal**, and it is reported as such
(:mod:`harness.bounds.bracket`). :mod:`harness.bounds.fdp_one_run` is the rigorous one-run bound on
the same mu.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.special import ndtr, ndtri

__all__ = [
    "GdpReading",
    "blow_up",
    "blow_up_inverse",
    "gdp_delta",
    "gdp_epsilon",
    "gdp_lower_bound_roc",
    "gdp_mu_from_rates",
    "tradeoff",
    "CORRECTIONS",
]

CORRECTIONS = ("bonferroni", "split")


def tradeoff(fpr: float | np.ndarray, mu: float) -> float | np.ndarray:
    """G_mu(FPR) = Phi(Phi^-1(1 - FPR) - mu): the smallest FNR any test can have at that FPR under mu-GDP."""
    return ndtr(ndtri(1.0 - np.asarray(fpr, dtype=np.float64)) - mu)


def blow_up(x: float | np.ndarray, mu: float | np.ndarray) -> np.ndarray:
    """B(x) = 1 - G_mu(x) = Phi(Phi^-1(x) + mu): the largest TPR at FPR x (Mahloujifar et al. 2025's
    "blow-up function")."""
    return ndtr(ndtri(np.clip(x, 0.0, 1.0)) + mu)


def blow_up_inverse(y: float | np.ndarray, mu: float | np.ndarray) -> np.ndarray:
    """B^-1(y) = Phi(Phi^-1(y) - mu): the smallest FPR at which a test can reach TPR y under mu-GDP."""
    return ndtr(ndtri(np.clip(y, 0.0, 1.0)) - mu)


def gdp_delta(mu: float, epsilon: float | np.ndarray) -> float | np.ndarray:
    """delta(eps) of mu-GDP: Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (Dong et al. Cor. 2.13), in [0, 1]."""
    e = np.asarray(epsilon, dtype=np.float64)
    if mu <= 0:
        val = np.zeros_like(e)
    elif math.isinf(mu):
        val = np.ones_like(e)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            val = ndtr(-e / mu + mu / 2) - np.exp(e) * ndtr(-e / mu - mu / 2)
        val = np.clip(np.where(np.isfinite(val), val, 0.0), 0.0, 1.0)
    return float(val) if val.ndim == 0 else val


def gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest eps >= 0 with delta(eps) <= ``delta`` for mu-GDP (0 for mu = 0, inf for mu = inf),
    by bisection to a relative 1e-9 (delta(eps) is decreasing in eps)."""
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if mu < 0 or math.isnan(mu):
        raise ValueError(f"mu must be >= 0, got {mu}")
    if mu == 0 or gdp_delta(mu, 0.0) <= delta:
        return 0.0
    if math.isinf(mu):
        return math.inf
    lo, hi = 0.0, max(1.0, mu * mu)
    while gdp_delta(mu, hi) > delta:
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-9 * max(1.0, hi):
        mid = (lo + hi) / 2
        if gdp_delta(mu, mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def gdp_mu_from_rates(fpr: float | np.ndarray, fnr: float | np.ndarray) -> np.ndarray:
    """mu = Phi^-1(1 - FPR) - Phi^-1(FNR), floored at 0 (inf where FPR = 0 or FNR = 0): the smallest
    mu whose trade-off curve allows the point (FPR, FNR)."""
    f = np.asarray(fpr, dtype=np.float64)
    n = np.asarray(fnr, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        mu = ndtri(1.0 - f) - ndtri(n)
    return np.maximum(np.where(np.isnan(mu), 0.0, mu), 0.0)


@dataclass(frozen=True)
class GdpReading:
    """A 1 - alpha lower bound on mu read off a ROC (module docstring), and the epsilon of mu-GDP at
    ``delta``. ``threshold``, ``fp``/``num_neg``, ``fn``/``num_pos``: the point that attains it (the
    evaluation half's counts with ``split``); ``fpr_hi``/``fnr_hi`` its Clopper-Pearson upper limits
    at the corrected level; ``mu_point``: Phi^-1(1 - FPR) - Phi^-1(FNR) at the raw rates there
    (descriptive, not a bound); ``tests``: the number of thresholds the correction covers."""

    mu: float
    epsilon: float
    delta: float
    alpha: float
    correction: str
    tests: int
    threshold: float | None
    fp: int
    num_neg: int
    fn: int
    num_pos: int
    fpr_hi: float
    fnr_hi: float
    mu_point: float

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["method"] = ("GDP reading of the ROC (Nasr et al. 2023): mu >= Phi^-1(1 - FPR_hi) - Phi^-1(FNR_hi), "
                       + ("Bonferroni over every threshold of the ROC" if self.correction == "bonferroni" else
                          "threshold chosen on a random half, read on the other")
                       + "; nominal confidence: the Clopper-Pearson limits treat the guesses as independent trials, "
                         "and they are not")
        return d


def _counts(scores: np.ndarray, member: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """(thresholds, FP, FN, N, P) at every threshold of the ROC ("member" iff score >= threshold)."""
    from harness.core.metrics import roc_curve

    roc = roc_curve(scores, member)
    tp = np.rint(roc.tpr * roc.num_pos).astype(np.int64)
    fp = np.rint(roc.fpr * roc.num_neg).astype(np.int64)
    return roc.thresholds, fp, roc.num_pos - tp, roc.num_neg, roc.num_pos


def _mu_lo(fp: np.ndarray, fn: np.ndarray, num_neg: int, num_pos: int, alpha: float) -> tuple[np.ndarray, ...]:
    """(mu_lo, FPR_hi, FNR_hi) at each point, the upper limits one-sided at alpha/2 each (the upper ends
    of two-sided 1 - alpha Clopper-Pearson intervals)."""
    from harness.bounds.empirical import clopper_pearson

    fpr_hi = np.atleast_1d(clopper_pearson(fp, np.full_like(fp, num_neg), alpha)[1])
    fnr_hi = np.atleast_1d(clopper_pearson(fn, np.full_like(fn, num_pos), alpha)[1])
    return gdp_mu_from_rates(fpr_hi, fnr_hi), fpr_hi, fnr_hi


def gdp_lower_bound_roc(scores: np.ndarray, is_member: np.ndarray, *, alpha: float = 0.05, delta: float = 1e-5,
                        correction: str = "bonferroni", seed: int = 0) -> GdpReading:
    """The 1 - alpha GDP lower bound on mu from an attack's scores (flat, any shape) against membership.

    ``bonferroni``: every threshold of the ROC is a test at level alpha / (number of thresholds) and
    the largest bound is kept. ``split``: a seeded random half of the guesses (members and
    non-members halved separately) chooses the threshold with the largest bound at level alpha;
    the other half gives the bound at that threshold at level alpha.
    """
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}, got {correction!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(is_member, dtype=bool).ravel()
    if correction == "bonferroni":
        thr, fp, fn, nn, npos = _counts(s, y)
        thr, fp, fn = thr[1:], fp[1:], fn[1:]  # the +inf threshold guesses nothing: no evidence
        level = alpha / len(thr)
        mu, fpr_hi, fnr_hi = _mu_lo(fp, fn, nn, npos, level)
        i = int(np.argmax(mu))
        tests, t_i, fp_i, fn_i, n_i, p_i = len(thr), float(thr[i]), int(fp[i]), int(fn[i]), nn, npos
    else:
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0x6D9]))
        pick = np.zeros(len(s), dtype=bool)
        for cls in (True, False):
            idx = np.flatnonzero(y == cls)
            pick[rng.permutation(idx)[: len(idx) // 2]] = True
        thr_a, fp_a, fn_a, nn_a, np_a = _counts(s[pick], y[pick])
        mu_a = _mu_lo(fp_a[1:], fn_a[1:], nn_a, np_a, alpha)[0]
        t_i = float(thr_a[1:][int(np.argmax(mu_a))])
        ev = ~pick
        guess = s[ev] >= t_i
        n_i, p_i = int((~y[ev]).sum()), int(y[ev].sum())
        fp_i, fn_i = int((guess & ~y[ev]).sum()), int((~guess & y[ev]).sum())
        level, tests = alpha, 1
        mu_arr, fpr_hi, fnr_hi = _mu_lo(np.array([fp_i]), np.array([fn_i]), n_i, p_i, alpha)
        mu, i = mu_arr, 0
    m_lo = float(mu[i])
    point = float(gdp_mu_from_rates(fp_i / max(n_i, 1), fn_i / max(p_i, 1)))
    return GdpReading(mu=m_lo, epsilon=gdp_epsilon(m_lo, delta), delta=float(delta), alpha=float(alpha),
                      correction=correction, tests=int(tests), threshold=t_i, fp=fp_i, num_neg=int(n_i), fn=fn_i,
                      num_pos=int(p_i), fpr_hi=float(fpr_hi[i]), fnr_hi=float(fnr_hi[i]), mu_point=point)
