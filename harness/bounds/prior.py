"""Earlier membership-inference bounds from (epsilon, delta)-DP, as compared in Thudi et al. (A, App. B).

Each function returns a *valid* bound clipped to [0, 1]: an advantage (2 Acc - 1) or an accuracy
above 1 says nothing, so ``clip=False`` only exists to reproduce the raw printed formula (e.g.
Yeom's e^1 - 1 = 1.718 at eps = 1). Advantage is 2(Acc - 1/2) for a balanced prior.

- Yeom et al. 2018 (CSF), Theorem 1: advantage <= e^eps - 1 (accuracy e^eps / 2).
- Erlingsson et al. 2019 ("That which we call private"): advantage <= 1 - e^-eps + delta e^-eps.
- Humphries et al. 2023 ("Investigating membership inference attacks under data dependencies"),
  also Mahloujifar et al. Theorem 3: advantage <= (e^eps - 1 + 2 delta) / (e^eps + 1).
- Sablayrolles et al. 2019 ("White-box vs black-box"): positive accuracy <= P1 + eps/4 (eps-DP).
- Mahloujifar et al. (Appendix G): positive accuracy <= sigmoid(eps) = 1/(1 + e^-eps) at P1 = 1/2
  ("with probability 1 - delta", a reading of delta that paper's own footnote calls inaccurate).
"""

from __future__ import annotations

import math

__all__ = [
    "yeom_advantage",
    "erlingsson_advantage",
    "humphries_advantage",
    "sablayrolles_pos_acc",
    "mahloujifar_pos_acc",
    "advantage_to_accuracy",
    "accuracy_to_advantage",
    "pos_acc_to_positive_advantage",
]


def _check(epsilon: float, delta: float = 0.0) -> None:
    if not (epsilon >= 0.0):
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    if not (0.0 <= delta <= 1.0):
        raise ValueError(f"delta must be in [0, 1], got {delta}")


def _clip(x: float, clip: bool) -> float:
    return min(1.0, max(0.0, x)) if clip else x


def yeom_advantage(epsilon: float, clip: bool = True) -> float:
    """Yeom et al. 2018: MI advantage <= e^eps - 1 (clipped to [0, 1]; vacuous for eps >= ln 2)."""
    _check(epsilon)
    raw = math.expm1(epsilon) if epsilon < 700 else math.inf
    return _clip(raw, clip)


def erlingsson_advantage(epsilon: float, delta: float = 0.0, clip: bool = True) -> float:
    """Erlingsson et al. 2019: MI advantage <= 1 - e^-eps + delta e^-eps."""
    _check(epsilon, delta)
    return _clip(-math.expm1(-epsilon) + delta * math.exp(-epsilon), clip)


def humphries_advantage(epsilon: float, delta: float = 0.0, clip: bool = True) -> float:
    """Humphries et al. 2023 (Mahloujifar et al. Theorem 3): advantage <= (e^eps - 1 + 2 delta)/(e^eps + 1).

    Written as (1 - e^-eps + 2 delta e^-eps)/(1 + e^-eps) so it stays finite for huge eps.
    """
    _check(epsilon, delta)
    e = math.exp(-epsilon)
    return _clip((1.0 - e + 2.0 * delta * e) / (1.0 + e), clip)


def sablayrolles_pos_acc(epsilon: float, p1: float, clip: bool = True) -> float:
    """Sablayrolles et al. 2019: positive accuracy <= P1 + eps/4 (eps-DP), clipped to [0, 1]."""
    _check(epsilon)
    if not (0.0 < p1 < 1.0):
        raise ValueError(f"p1 must be in (0, 1), got {p1}")
    return _clip(p1 + epsilon / 4.0, clip)


def mahloujifar_pos_acc(epsilon: float) -> float:
    """Mahloujifar et al. Appendix G: precision (and accuracy) <= sigmoid(eps) = 1/(1 + e^-eps) at P1 = 1/2."""
    _check(epsilon)
    return 1.0 / (1.0 + math.exp(-epsilon))


def advantage_to_accuracy(advantage: float) -> float:
    """Acc = (1 + Adv)/2 for a balanced prior."""
    return (1.0 + advantage) / 2.0


def accuracy_to_advantage(accuracy: float) -> float:
    """Adv = 2 Acc - 1 for a balanced prior."""
    return 2.0 * accuracy - 1.0


def pos_acc_to_positive_advantage(pos_acc: float, p1: float) -> float:
    """Positive advantage 2(PosAcc - P1) (Thudi et al. C, section 7.5); the ordinary advantage at P1 = 1/2."""
    return 2.0 * (pos_acc - p1)
