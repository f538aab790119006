"""The numbers ``harness bound`` reports, checked and assembled (docs/bounds.md): accuracy and
advantage bounds for an (epsilon, delta)-DP trainer (:func:`thudi_bounds`), the optimal bound of
DP-SGD's subsampled Gaussian steps (:func:`sgm_bounds`), and the same from DP-SGD's
hyperparameters (:func:`dpsgd_bounds`). Bad input raises :class:`ConfigError` (one line)."""

from __future__ import annotations

import math
from typing import Any

from harness.core.errors import ConfigError

#: the FPRs at which the TPR is bounded when none are given
DEFAULT_FPRS = (0.001, 0.01)


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


def thudi_bounds(epsilon: float, delta: float, p1: float, tpr: float | None, tnr: float | None) -> dict[str, Any]:
    """Everything ``bound thudi`` reports, in the units of docs/bounds.md (advantages in [0, 1])."""
    from harness.bounds import prior, thudi

    _check(math.isfinite(epsilon) and epsilon >= 0, f"--epsilon must be a finite number >= 0, got {epsilon}")
    _check(0.0 <= delta < 1.0, f"--delta must be in [0, 1), got {delta}")
    _check(0.0 < p1 < 1.0, f"--p1 must be in (0, 1), got {p1}")
    _check(tpr is None or 0.0 < tpr <= 1.0, f"--tpr must be in (0, 1], got {tpr}")
    _check(tnr is None or 0.0 < tnr <= 1.0, f"--tnr must be in (0, 1], got {tnr}")
    sab = prior.sablayrolles_pos_acc(epsilon, p1)
    return {
        "pos_acc_upper": thudi.pos_acc_upper(epsilon, p1, delta, tpr),
        "pos_acc_lower": thudi.pos_acc_lower(epsilon, p1, delta, tpr),
        "neg_acc_upper": thudi.neg_acc_upper(epsilon, p1, delta, tnr),
        "neg_acc_lower": thudi.neg_acc_lower(epsilon, p1, delta, tnr),
        "positive_advantage": thudi.positive_advantage(epsilon, p1),
        "advantage_bounds": {
            "yeom": prior.yeom_advantage(epsilon),
            "erlingsson": prior.erlingsson_advantage(epsilon, delta),
            "humphries": prior.humphries_advantage(epsilon, delta),
            "sablayrolles": prior.pos_acc_to_positive_advantage(sab, p1),
            "mahloujifar": prior.accuracy_to_advantage(prior.mahloujifar_pos_acc(epsilon)),
        },
    }


def sgm_bounds(q: float, noise: float, steps: int, fprs: list[float], delta: float) -> dict[str, Any]:
    """Everything ``bound sgm`` reports: optimal advantage, Pinsker, epsilon at delta, TPR at each FPR."""
    from harness.bounds import sgm

    _check(0.0 < q <= 1.0, f"--q must be in (0, 1], got {q}")
    _check(math.isfinite(noise) and noise > 0.0, f"--noise must be > 0, got {noise}")
    _check(steps >= 1, f"--steps must be >= 1, got {steps}")
    _check(0.0 < delta < 1.0, f"--delta must be in (0, 1), got {delta}")
    fprs = list(fprs) or list(DEFAULT_FPRS)
    for f in fprs:
        _check(0.0 <= f <= 1.0, f"--fpr must be in [0, 1], got {f}")
    b = sgm.SgmBound.compute(q, noise, steps)
    keys = [str(float(f)) for f in fprs]
    order = sorted(range(len(fprs)), key=lambda i: fprs[i])
    tprs = b.tpr_upper([fprs[i] for i in order])
    return {
        "q": float(q),
        "noise": float(noise),
        "steps": int(steps),
        "delta": float(delta),
        "advantage": b.advantage(),
        "advantage_pinsker": sgm.pinsker_advantage(q, noise, steps),
        "epsilon": b.epsilon(delta),
        "tpr_at_fpr": {keys[i]: float(t) for i, t in zip(order, tprs)},
        "value_discretization_interval": b.value_discretization_interval,
    }


def dpsgd_bounds(batch_size: int, dataset_size: int, epochs: float, noise: float, fprs: list[float], delta: float,
                 poisson_rate: str = "b_over_n") -> dict[str, Any]:
    """:func:`sgm_bounds` for DP-SGD hyperparameters: T = epochs x ceil(N/B) steps at rate q = B/N
    (``b_over_n``) or 1/ceil(N/B) (``paper``: Opacus's loader, the paper's code), with the inputs."""
    from harness.bounds import sgm

    _check(batch_size >= 1, f"--batch-size must be >= 1, got {batch_size}")
    _check(dataset_size >= batch_size, f"--dataset-size must be >= --batch-size, got {dataset_size} < {batch_size}")
    _check(math.isfinite(epochs) and epochs > 0, f"--epochs must be > 0, got {epochs}")
    _check(poisson_rate in ("b_over_n", "paper"), f"--poisson-rate must be b_over_n or paper, got {poisson_rate!r}")
    q, steps = sgm.dpsgd_params(batch_size, dataset_size, epochs, poisson_rate)
    return {**sgm_bounds(q, noise, steps, fprs, delta), "batch_size": batch_size, "dataset_size": dataset_size,
            "epochs": epochs, "poisson_rate": poisson_rate}
