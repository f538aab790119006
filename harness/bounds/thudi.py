"""Membership-inference bounds from (epsilon, delta)-DP with a non-uniform prior (Thudi et al.).

Papers: Thudi, Shumailov, Boenisch, Papernot, "Bounding Membership Inference" (arXiv 2202.12232,
called C below) and its TMLR version "From Differential Privacy to Bounds on Membership Inference:
Less can be More" (called A). Notation: ``p1`` = P_x(1) = Pr[x in D], the prior (inclusion
probability) of the target point; P0 = 1 - p1. An adversary is the set S of outputs on which it
says "member"; TPR = Pr[H(D) in S | x in D], TNR = Pr[H(D) not in S | x not in D].

- Positive accuracy (precision) = Pr[x in D | H(D) in S], negative accuracy =
  Pr[x not in D | H(D) not in S].
- epsilon-DP (C, Theorem 1 and Corollary 1):
  (1 + e^eps P0/P1)^-1 <= PosAcc <= (1 + e^-eps P0/P1)^-1 and the same with P0, P1 swapped for
  NegAcc.
- (epsilon, delta)-DP (A, Theorem 3.3; C, Theorem 2), **corrected**: the papers' P(S|x) is the
  joint probability Pr[H(D) in S and x in D] = P1 * TPR, so in terms of the conditional TPR
  PosAcc <= (1 + e^-eps (P0/P1)(1 - delta/TPR))^-1. ``pos_acc_upper_literal`` keeps the printed
  formula (conditional reading) only to reproduce the papers' figure targets.
- Without a floor on TPR (resp. TNR) the delta > 0 bound is vacuous (A, Appendix A.1): the
  functions return 1 (upper) and 0 (lower) in that case.

Every function is pure and works on floats; invalid arguments raise ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from scipy.special import log_ndtr

__all__ = [
    "pos_acc_upper",
    "pos_acc_lower",
    "neg_acc_upper",
    "neg_acc_lower",
    "pos_acc_upper_literal",
    "required_epsilon",
    "required_epsilon_literal",
    "epsilon_for_prior",
    "epsilon_for_prior_literal",
    "positive_advantage",
    "max_positive_advantage",
    "group_mi_upper",
    "deletion_capacity",
    "deletion_capacity_paper",
    "counterexample_pos_acc",
    "counterexample_accuracy",
]


def _check_eps(epsilon: float) -> None:
    if not (epsilon >= 0.0) or math.isnan(epsilon):
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")


def _check_prob_open(name: str, p: float) -> None:
    if not (0.0 < p < 1.0):
        raise ValueError(f"{name} must be in (0, 1), got {p}")


def _check_delta(delta: float) -> None:
    if not (0.0 <= delta <= 1.0):
        raise ValueError(f"delta must be in [0, 1], got {delta}")


def _check_rate(name: str, rate: float | None) -> None:
    if rate is not None and not (0.0 < rate <= 1.0):
        raise ValueError(f"{name} must be in (0, 1], got {rate}")


def _upper(epsilon: float, odds_against: float, delta: float, rate: float | None) -> float:
    """(1 + e^-eps * odds_against * (1 - delta/rate))^-1, or 1 where that is vacuous."""
    if delta > 0.0:
        if rate is None or delta >= rate:
            return 1.0
        odds_against *= 1.0 - delta / rate
    return 1.0 / (1.0 + math.exp(-epsilon) * odds_against)


def _lower(epsilon: float, odds_against: float, delta: float, rate: float | None) -> float:
    """(1 + odds_against * (e^eps + delta/rate))^-1, or 0 where that is vacuous."""
    if delta > 0.0 and rate is None:
        return 0.0
    extra = delta / rate if delta > 0.0 else 0.0  # type: ignore[operator]
    if epsilon >= 700:
        return 0.0
    return 1.0 / (1.0 + odds_against * (math.exp(epsilon) + extra))


def pos_acc_upper(epsilon: float, p1: float, delta: float = 0.0, tpr: float | None = None) -> float:
    """Upper bound on positive accuracy (precision) of any MI adversary against an (eps, delta)-DP trainer.

    delta = 0: (1 + e^-eps P0/P1)^-1 (C, Theorem 1). delta > 0: the corrected Theorem 3.3 of A,
    (1 + e^-eps (P0/P1)(1 - delta/TPR))^-1, which needs the adversary's TPR floor ``tpr``; without
    it (or when delta >= tpr) the bound is vacuous and 1.0 is returned. At p1 = 0.5 and delta = 0
    it equals sigmoid(eps).
    """
    _check_eps(epsilon)
    _check_prob_open("p1", p1)
    _check_delta(delta)
    _check_rate("tpr", tpr)
    return _upper(epsilon, (1.0 - p1) / p1, delta, tpr)


def pos_acc_lower(epsilon: float, p1: float, delta: float = 0.0, tpr: float | None = None) -> float:
    """Lower bound on positive accuracy: (1 + e^eps P0/P1)^-1 for eps-DP (C, Theorem 1).

    For delta > 0 the symmetric DP inequality FPR <= e^eps TPR + delta gives
    (1 + (P0/P1)(e^eps + delta/TPR))^-1 (derived the same way as the corrected upper bound; not
    printed in the papers); without ``tpr`` it is 0.
    """
    _check_eps(epsilon)
    _check_prob_open("p1", p1)
    _check_delta(delta)
    _check_rate("tpr", tpr)
    return _lower(epsilon, (1.0 - p1) / p1, delta, tpr)


def neg_acc_upper(epsilon: float, p1: float, delta: float = 0.0, tnr: float | None = None) -> float:
    """Upper bound on negative accuracy: (1 + e^-eps (P1/P0)(1 - delta/TNR))^-1 (C, Corollary 1).

    The papers write S where its complement is meant; the rate that matters is the TNR
    Pr[not in S | x not in D]. Vacuous (1.0) when delta > 0 and ``tnr`` is missing or <= delta.
    """
    _check_eps(epsilon)
    _check_prob_open("p1", p1)
    _check_delta(delta)
    _check_rate("tnr", tnr)
    return _upper(epsilon, p1 / (1.0 - p1), delta, tnr)


def neg_acc_lower(epsilon: float, p1: float, delta: float = 0.0, tnr: float | None = None) -> float:
    """Lower bound on negative accuracy: (1 + e^eps P1/P0)^-1 (C, Corollary 1); with delta as in ``pos_acc_lower``."""
    _check_eps(epsilon)
    _check_prob_open("p1", p1)
    _check_delta(delta)
    _check_rate("tnr", tnr)
    return _lower(epsilon, p1 / (1.0 - p1), delta, tnr)


def pos_acc_upper_literal(epsilon: float, p1: float, delta: float, p_s_x: float) -> float:
    """FLAGGED reproduction: A's Theorem 3.3 exactly as printed, (1 + e^-eps P0/P1 - delta e^-eps P0/P(S|x))^-1.

    ``p_s_x`` is read as printed. Read as the conditional TPR this under-states the bound and is
    not a valid upper bound; use ``pos_acc_upper``. Only for reproducing the papers' accuracy
    targets (e.g. eps=3, p1=0.5, delta=1e-5, P(S|x)=0.01 -> 0.9525967). Returns 1.0 where the
    printed right-hand side is not positive ("valid only when positive").
    """
    _check_eps(epsilon)
    _check_prob_open("p1", p1)
    _check_delta(delta)
    _check_rate("p_s_x", p_s_x)
    p0 = 1.0 - p1
    denom = 1.0 + math.exp(-epsilon) * (p0 / p1 - delta * p0 / p_s_x)
    return 1.0 / denom if denom > 1.0 else 1.0


def _invert(target: float, odds_against: float) -> float:
    """Smallest eps >= 0 with (1 + e^-eps * odds_against)^-1 = target, NaN if none exists."""
    if not (0.0 < target <= 1.0):
        raise ValueError(f"target must be in (0, 1], got {target}")
    if target == 1.0:
        return math.inf
    if odds_against <= 0.0:
        return math.nan
    eps = math.log(odds_against / (1.0 / target - 1.0))
    return eps if eps >= 0.0 else math.nan


def required_epsilon(target: float, p1: float, delta: float = 0.0, tpr: float | None = None) -> float:
    """The epsilon at which ``pos_acc_upper(eps, p1, delta, tpr)`` equals ``target`` (A, section 3.3).

    eps = ln[(P0/P1)(1 - delta/TPR) / (1/target - 1)]. Returns NaN when no eps >= 0 attains the
    target (the bound at eps = 0 already exceeds it, roughly when p1 >= target, or delta >= TPR)
    and inf for target = 1.
    """
    _check_prob_open("p1", p1)
    _check_delta(delta)
    _check_rate("tpr", tpr)
    odds = (1.0 - p1) / p1
    if delta > 0.0:
        if tpr is None:
            return math.nan
        odds *= 1.0 - delta / tpr
    return _invert(target, odds)


def required_epsilon_literal(target: float, p1: float, delta: float, p_s_x: float) -> float:
    """FLAGGED reproduction: inverse of ``pos_acc_upper_literal``, ln[(P0/P1 - delta P0/P(S|x)) / (1/target - 1)]."""
    _check_prob_open("p1", p1)
    _check_delta(delta)
    _check_rate("p_s_x", p_s_x)
    p0 = 1.0 - p1
    return _invert(target, p0 / p1 - delta * p0 / p_s_x)


def epsilon_for_prior(eps0: float, p1: float, p1_ref: float = 0.5, delta: float = 0.0,
                      tpr: float | None = None) -> float:
    """"Less can be more" (A, section 4): the eps at prior ``p1`` that gives the same positive-accuracy
    bound as eps0 at prior ``p1_ref``.

    With delta = 0 or the corrected (conditional-TPR) bound this is exactly
    eps0 + ln[(P0/P1) / (P0_ref/P1_ref)], e.g. eps0 + ln 9 = eps0 + 2.1972 at p1 = 0.1. NaN when
    infeasible (e.g. p1 = 0.9 with eps0 = 1 or 2: the target is below the bound at eps = 0).
    """
    _check_eps(eps0)
    target = pos_acc_upper(eps0, p1_ref, delta, tpr)
    return required_epsilon(target, p1, delta, tpr)


def epsilon_for_prior_literal(eps0: float, p1: float, delta: float, p_s_x: float, p1_ref: float = 0.5) -> float:
    """FLAGGED reproduction of A's Figs. 5/6 targets with the printed formula and P(S|x) read as printed.

    E.g. eps0 = 3, delta = 1e-5, P(S|x) = 0.01 gives 5.1976 / 3.8475 / 2.1525 at p1 = 0.1 / 0.3 / 0.7.
    """
    _check_eps(eps0)
    target = pos_acc_upper_literal(eps0, p1_ref, delta, p_s_x)
    return required_epsilon_literal(target, p1, delta, p_s_x)


def positive_advantage(epsilon: float, p1: float) -> float:
    """Bound on the positive advantage 2(PosAcc - P1) <= 2((1 + e^-eps P0/P1)^-1 - P1) (C, section 7.5).

    At p1 = 0.5 it equals the Humphries advantage (e^eps - 1)/(e^eps + 1) = tanh(eps/2).
    """
    return 2.0 * (pos_acc_upper(epsilon, p1) - p1)


def max_positive_advantage(epsilon: float) -> tuple[float, float]:
    """(max over p1 of ``positive_advantage``, maximizing p1) = (2 tanh(eps/4), 1/(1 + e^{eps/2})).

    Setting the derivative of 2(1/(1 + e^-eps (1-p)/p) - p) to zero gives p* = 1/(1 + e^{eps/2})
    (derived in the bounds notes; not printed in the papers).
    """
    _check_eps(epsilon)
    return 2.0 * math.tanh(epsilon / 4.0), 1.0 / (1.0 + math.exp(epsilon / 2.0))


def group_mi_upper(epsilon: float, priors: Iterable[float]) -> float:
    """Group MI (C, Corollary 3): Pr[G intersects D | S] <= 1 - prod_{x in G} (1 + e^eps P_x(1)/P_x(0))^-1."""
    _check_eps(epsilon)
    log_keep = 0.0
    n = 0
    for p in priors:
        _check_prob_open("prior", p)
        log_keep += -math.log1p(math.exp(epsilon) * p / (1.0 - p)) if epsilon < 700 else -math.inf
        n += 1
    if n == 0:
        raise ValueError("the group needs at least one point")
    return -math.expm1(log_keep)


def _deletion(b: float, n: int, epsilon: float, c: float, sign: float) -> float:
    _check_eps(epsilon)
    if not (0.0 < b < 1.0):
        raise ValueError(f"B must be in (0, 1), got {b}")
    if n < 1 or not (0.0 < c < n):
        raise ValueError(f"need 0 < c < N, got c={c}, N={n}")
    p = c / n
    log_l = -math.log1p(math.exp(sign * epsilon) * p / (1.0 - p))  # ln L(c) < 0
    return math.log(b) / log_l


def deletion_capacity(b: float, n: int, epsilon: float, c: float) -> float:
    """Unlearning capacity (C, Corollary 2, corrected): m <= ln B / ln L(c) deletions keep
    negative accuracy above B, with L(c) = (1 + e^{+eps} (c/N)/(1 - c/N))^-1, the *lower* bound on
    negative accuracy at prior P1 = c/N (so the guarantee is valid).
    """
    return _deletion(b, n, epsilon, c, +1.0)


def deletion_capacity_paper(b: float, n: int, epsilon: float, c: float) -> float:
    """FLAGGED reproduction of A's Fig. 7: L(c) printed with e^{-eps}, the *upper* bound on negative
    accuracy, which over-states the capacity (e.g. 606.07 instead of 82.12 deletions at B=0.8,
    N=1e4, eps=1, c=10). Not a valid guarantee; use ``deletion_capacity``.
    """
    return _deletion(b, n, epsilon, c, -1.0)


def _log_phi(x: float) -> float:
    return float(log_ndtr(x))


def counterexample_pos_acc(offset: float, sigma: float = 4.0412) -> float:
    """A's Appendix A.1 (C, section 4.1) counterexample: positive accuracy of "predict D2 iff W <= alpha".

    One full-batch DP-SGD step, W_D1 ~ N(1e6, sigma^2), W_D2 ~ N(1e6 - 1, sigma^2) (sigma is a
    standard deviation), prior 1/2, ``offset`` = alpha - 1e6:
    PosAcc = Phi((offset + 1)/sigma) / [Phi(offset/sigma) + Phi((offset + 1)/sigma)], which tends to
    1 as offset -> -inf: without a TPR floor, (eps, delta)-DP does not bound positive accuracy.
    Computed in log space so it stays exact far in the tail.
    """
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    a = _log_phi((offset + 1.0) / sigma)
    b = _log_phi(offset / sigma)
    return 1.0 / (1.0 + math.exp(b - a))


def counterexample_accuracy(offset: float, sigma: float = 4.0412) -> float:
    """Balanced accuracy of the same test: (Phi((offset + 1)/sigma) + 1 - Phi(offset/sigma)) / 2.

    Maximal at offset = -1/2, where it is Phi(1/(2 sigma)) = 0.5492337 for sigma = 4.0412.
    """
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    return 0.5 * (math.exp(_log_phi((offset + 1.0) / sigma)) + math.exp(_log_phi(-offset / sigma)))
