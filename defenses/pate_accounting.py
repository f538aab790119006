"""Privacy accounting of Confident-GNMax (Papernot, Song, Mironov, Raghunathan, Talwar, Erlingsson,
"Scalable Private Learning with PATE", ICLR 2018: Algorithm 1, Theorem 6, Propositions 7, 8 and 10),
as PATE-FM uses it (Malek et al., "Antipodes of Label Differential Privacy: PATE and ALIBI", NeurIPS 2021).

Neighbouring datasets differ in one example's label (label-DP). The example sits in one teacher's
partition, so at most that teacher's vote moves: on every query the vote histogram n(x) changes
by at most one vote out of one class and into another, L2 sensitivity sqrt(2), and its maximum
max_j n_j(x) by at most 1.

One query of Confident-GNMax (the paper's Algorithm 1):

1. **selection**: answer only if ``max_j n_j(x) + N(0, sigma1^2) >= T``. A Gaussian mechanism on a
   statistic of sensitivity 1: Renyi DP ``alpha / (2 sigma1^2)`` at every order alpha (the Gaussian
   mechanism's ``alpha Delta^2 / (2 sigma^2)``, Mironov, "Renyi Differential Privacy", 2017);
2. **release** (answered queries only): ``argmax_j (n_j(x) + N(0, sigma2^2))``, post-processing of the
   Gaussian mechanism on the histogram, sensitivity sqrt(2): ``alpha / sigma2^2`` (Papernot et al.
   2018, Proposition 8).

**Data-independent bound** (:func:`data_independent_rdp`): RDP composes additively over queries,
so ``rdp(alpha) = asked * alpha / (2 sigma1^2) + answered * alpha / sigma2^2``. Whether a query was
answered is itself an output of step 1, so step 2's cost is charged on the realized answered
queries: sound, and not what the references do (Papernot et al.'s accountant charges every query
asked step 2's *expected* cost, Pr[answered] times GNMax's; both are valid statements).

**Data-dependent bound** (:func:`data_dependent_rdp`): Papernot et al.'s Theorem 6 with the union
bound of Proposition 7 on q = Pr[GNMax does not return the plurality] and the orders of
Proposition 10 (GNMax); the same theorem for the threshold step with q = min(Pr[answered],
Pr[not answered]) and noise sqrt(2) sigma1. It depends on the private votes: it is a statement about
this dataset, not a guarantee that may be published as it is. The paper releases it through smooth
sensitivity (their ``smooth_sensitivity.py``), which this module does not implement.

**(eps, delta)** (:func:`epsilon_from_rdp`): ``min over alpha of rdp(alpha) + log((alpha - 1) / alpha)
- (log delta + log alpha) / (alpha - 1)`` (Balle et al. 2020, Proposition 12; Canonne, Kamath and
Steinke 2020; what the Antipodes code, dp_accounting and opacus use), and the classic
``rdp(alpha) + log(1 / delta) / (alpha - 1)`` (Mironov 2017, Proposition 3; Papernot et al. 2018)
beside it (:func:`epsilon_from_rdp_classic`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp
from scipy.stats import norm

#: Renyi orders: 1.01 ... 1.99 by 0.01, 2 ... 100 by 0.5, then 100 log-spaced orders up to 10^5
#: (the optimal order of a Gaussian composition grows as the noise does)
RDP_ORDERS = np.unique(np.concatenate([np.round(np.arange(1.01, 2.0, 0.01), 2), np.arange(2.0, 100.5, 0.5),
                                       np.logspace(2, 5, 100)]))


def gaussian_rdp(sigma: float, sensitivity: float, orders: np.ndarray = RDP_ORDERS) -> np.ndarray:
    """Renyi DP of the Gaussian mechanism, ``alpha * sensitivity^2 / (2 sigma^2)`` per order."""
    if not sigma > 0:
        raise ValueError(f"sigma must be positive, got {sigma}")
    return np.asarray(orders, dtype=np.float64) * sensitivity**2 / (2.0 * sigma**2)


def data_independent_rdp(sigma1: float, sigma2: float, asked: int, answered: int,
                         orders: np.ndarray = RDP_ORDERS) -> np.ndarray:
    """RDP curve of Confident-GNMax after ``asked`` queries of which ``answered`` were answered:
    the threshold step (sensitivity 1, noise sigma1) on every query asked, the noisy argmax
    (sensitivity sqrt(2), noise sigma2) on every answered one."""
    if asked < 0 or answered < 0 or answered > asked:
        raise ValueError(f"need 0 <= answered <= asked, got asked={asked}, answered={answered}")
    return asked * gaussian_rdp(sigma1, 1.0, orders) + answered * gaussian_rdp(sigma2, math.sqrt(2.0), orders)


def epsilon_from_rdp(rdp: np.ndarray, delta: float, orders: np.ndarray = RDP_ORDERS) -> tuple[float, float]:
    """(eps, best order) at ``delta`` with the conversion of Balle et al. 2020 (Proposition 12):
    ``eps = rdp + log((alpha - 1) / alpha) - (log delta + log alpha) / (alpha - 1)``, minimised over
    the orders (never below 0)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    a = np.asarray(orders, dtype=np.float64)
    eps = np.asarray(rdp, dtype=np.float64) + np.log1p(-1.0 / a) - (math.log(delta) + np.log(a)) / (a - 1.0)
    i = int(np.argmin(eps))
    return max(0.0, float(eps[i])), float(a[i])


def epsilon_from_rdp_classic(rdp: np.ndarray, delta: float, orders: np.ndarray = RDP_ORDERS) -> tuple[float, float]:
    """(eps, best order) at ``delta`` with Mironov's conversion ``rdp + log(1 / delta) / (alpha - 1)``
    (Proposition 3), the one of Papernot et al. 2018's accountant."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    a = np.asarray(orders, dtype=np.float64)
    eps = np.asarray(rdp, dtype=np.float64) - math.log(delta) / (a - 1.0)
    i = int(np.argmin(eps))
    return float(eps[i]), float(a[i])


# --- data-dependent analysis (Papernot et al. 2018, Theorem 6, Propositions 7 and 10) ------------------

def log_q_gnmax(votes: np.ndarray, sigma: float) -> float:
    """Proposition 7: log of the union bound on Pr[argmax(votes + N(0, sigma^2 I)) != plurality],
    ``sum over j != j* of Pr[N(0, 2 sigma^2) >= n_j* - n_j]``, capped at log((m - 1) / m)."""
    v = np.asarray(votes, dtype=np.float64)
    top = int(np.argmax(v))
    gaps = np.delete(v[top] - v, top)
    logq = float(logsumexp(norm.logsf(gaps, scale=math.sqrt(2.0) * sigma)))
    return min(logq, math.log1p(-1.0 / len(v)))


def log_pr_answered(votes: np.ndarray, threshold: float, sigma1: float) -> float:
    """log Pr[max(votes) + N(0, sigma1^2) >= threshold]."""
    return float(norm.logsf(threshold - float(np.max(votes)), scale=sigma1))


def _log1mexp(x: float) -> float:
    """log(1 - exp(x)) for x <= 0."""
    if x > 0:
        raise ValueError(f"log1mexp needs x <= 0, got {x}")
    if x == 0:
        return -math.inf
    return math.log(-math.expm1(x)) if x > -0.693 else math.log1p(-math.exp(x))


def rdp_theorem6(logq: float, sigma: float, orders: np.ndarray = RDP_ORDERS) -> np.ndarray:
    """Papernot et al. 2018, Theorem 6, for a mechanism that is (mu, mu / sigma^2)-RDP at every
    order mu (GNMax with noise sigma) and returns a fixed outcome except with probability at most
    q = exp(logq): the smaller of ``alpha / sigma^2`` and

        1 / (alpha - 1) log((1 - q) A^(alpha - 1) + q B^(alpha - 1)),
        A = (1 - q) / (1 - (q e^eps2)^((mu2 - 1) / mu2)),  B = e^eps1 / q^(1 / (mu1 - 1)),

    with mu2 = sigma sqrt(log(1 / q)), mu1 = mu2 + 1, eps_i = mu_i / sigma^2 (Proposition 10), at the
    orders alpha < mu1 where the theorem's conditions hold (mu2 > 1, q e^eps2 < 1 and
    q <= e^((mu2 - 1) eps2) / (mu1 / (mu1 - 1) * mu2 / (mu2 - 1))^mu2)."""
    a = np.asarray(orders, dtype=np.float64)
    independent = a / sigma**2
    if logq > 0:
        raise ValueError(f"logq must be <= 0, got {logq}")
    if math.isinf(logq):  # the outcome is certain: the mechanism is constant on this dataset
        return np.zeros_like(independent)
    mu2 = sigma * math.sqrt(-logq)
    mu1 = mu2 + 1.0
    eps1, eps2 = mu1 / sigma**2, mu2 / sigma**2
    use = (a < mu1) & (mu2 > 1.0)
    if not use.any() or not -logq > eps2:
        return independent
    if logq > (mu2 - 1.0) * eps2 - mu2 * (math.log(mu1 / (mu1 - 1.0)) + math.log(mu2 / (mu2 - 1.0))):
        return independent
    log1q = _log1mexp(logq)
    log_a = log1q - _log1mexp((logq + eps2) * (1.0 - 1.0 / mu2))
    log_b = eps1 - logq / (mu1 - 1.0)
    dependent = np.logaddexp(log1q + (a - 1.0) * log_a, logq + (a - 1.0) * log_b) / (a - 1.0)
    return np.where(use, np.minimum(independent, dependent), independent)


def data_dependent_rdp(votes: np.ndarray, answered: np.ndarray, threshold: float, sigma1: float, sigma2: float,
                       orders: np.ndarray = RDP_ORDERS) -> np.ndarray:
    """Data-dependent RDP curve of Confident-GNMax over the queries asked: ``votes`` (asked, classes)
    are their vote histograms, ``answered`` (asked,) which were answered. Each query costs its
    threshold step (Theorem 6 with q = min(p, 1 - p), p = Pr[answered], noise sqrt(2) sigma1);
    an answered query also its GNMax release (Theorem 6 with Proposition 7's q, noise sigma2)."""
    votes = np.asarray(votes, dtype=np.float64)
    total = np.zeros(len(orders), dtype=np.float64)
    for v, ans in zip(votes, np.asarray(answered, dtype=bool)):
        lp = log_pr_answered(v, threshold, sigma1)
        total += rdp_theorem6(min(lp, _log1mexp(lp)) if lp < 0 else -math.inf, math.sqrt(2.0) * sigma1, orders)
        if ans:
            total += rdp_theorem6(log_q_gnmax(v, sigma2), sigma2, orders)
    return total


@dataclass(frozen=True)
class PATEPrivacy:
    """What PATE-FM records about its label privacy (labels only)."""

    epsilon: float                 # data-independent, Balle et al.'s conversion
    order: float
    epsilon_classic: float         # data-independent, Mironov's conversion
    epsilon_data_dependent: float  # Theorem 6 on this run's votes (not publishable as is)
    order_data_dependent: float
    delta: float
    asked: int
    answered: int


def account(votes: np.ndarray, answered: np.ndarray, threshold: float, sigma1: float, sigma2: float,
            delta: float) -> PATEPrivacy:
    """Both analyses of one run of Confident-GNMax (``votes`` of the queries asked, in order)."""
    asked, n_ans = len(votes), int(np.sum(answered))
    indep = data_independent_rdp(sigma1, sigma2, asked, n_ans)
    eps, order = epsilon_from_rdp(indep, delta)
    eps_c, _ = epsilon_from_rdp_classic(indep, delta)
    dep = data_dependent_rdp(votes, answered, threshold, sigma1, sigma2)
    eps_d, order_d = epsilon_from_rdp(dep, delta)
    return PATEPrivacy(epsilon=eps, order=order, epsilon_classic=eps_c, epsilon_data_dependent=eps_d,
                       order_data_dependent=order_d, delta=delta, asked=asked, answered=n_ans)
