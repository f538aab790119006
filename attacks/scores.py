"""Per-query membership scores computed from a model's outputs, in float64.

- logit-scaled confidence (Carlini et al. 2022, eq. 4): ``z_y - logsumexp_{j != y} z_j``, which is
  ``log p_y - log(1 - p_y)`` for ``p = softmax(z)``; invariant to adding a constant to the logits;
- hinge: ``z_y - max_{j != y} z_j``.

The log-sum-exp is :func:`logsumexp_last`: the arithmetic of the installed
``scipy.special.logsumexp``, written out in plain numpy (bit for bit the same values, about four
times faster on the attack phase's many short rows; :func:`_lse_kind` checks which formula the
installed SciPy uses on probe rows, and calls SciPy itself where neither matches).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


def _lse_separated(a: np.ndarray) -> np.ndarray:
    """SciPy >= 1.15's logsumexp over the last axis of real ``a`` (``scipy/special/_logsumexp.py``):
    the maxima are taken out of the sum, ``log1p(sum exp(a - max) / m) + log(m) + max`` with m the
    number of maxima; rows whose result is not finite get ``log(sum(exp(a)))``."""
    a_max = a.max(axis=-1, keepdims=True)
    is_max = a == a_max
    m = is_max.sum(axis=-1, keepdims=True, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(np.where(is_max, -np.inf, a) - a_max)
    del is_max
    s = e.sum(axis=-1, keepdims=True)
    del e
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(s == 0, s, s / m)
        s = np.where(s < -1, -s - 2, s)  # never for real inputs (s >= 0); kept as SciPy has it
        out = (np.log1p(s) + np.log(np.abs(m)) + a_max)[..., 0]
    bad = ~np.isfinite(out)
    if bad.any():
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out[bad] = np.log(np.exp(a[bad]).sum(axis=-1))
    return out


def _lse_shifted(a: np.ndarray) -> np.ndarray:
    """SciPy < 1.15's logsumexp over the last axis of real ``a``: ``log(sum exp(a - max)) + max``, the
    maximum replaced by 0 where it is not finite."""
    a_max = a.max(axis=-1, keepdims=True)
    a_max[~np.isfinite(a_max)] = 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = np.log(np.exp(a - a_max).sum(axis=-1, keepdims=True))
    out += a_max
    return out[..., 0]


def _probe_rows() -> np.ndarray:
    """Rows that tell the log-sum-exp formulas apart: random, tied maxima, -inf entries, wide ranges."""
    rng = np.random.default_rng(12345)
    rows = [rng.normal(size=(64, 10)) * 3, rng.normal(size=(32, 10)) * 40, np.zeros((2, 10)),
            np.tile(np.r_[1.0, 1.0, 0.5, -2.0, 3.0, 3.0, 0.0, 0.0, 1.0, 2.0], (2, 1))]
    probe = np.concatenate(rows)
    probe[::3, 4] = -np.inf
    probe[1::7, 2] = probe[1::7, 5]
    return probe


@lru_cache(maxsize=1)
def _lse_kind() -> str:
    """Which plain-numpy formula reproduces the installed ``scipy.special.logsumexp`` bit for bit on
    :func:`_probe_rows` (``separated``, ``shifted``), or ``scipy`` (call SciPy itself)."""
    from scipy.special import logsumexp

    probe = _probe_rows()
    want = logsumexp(probe, axis=-1)
    for kind, fn in (("separated", _lse_separated), ("shifted", _lse_shifted)):
        if np.array_equal(fn(probe.copy()), want, equal_nan=True):
            return kind
    return "scipy"


def logsumexp_last(a: np.ndarray) -> np.ndarray:
    """``scipy.special.logsumexp(a, axis=-1)`` for real float64 ``a``: the same values, computed with
    plain numpy where the installed SciPy's formula is known (:func:`_lse_kind`)."""
    kind = _lse_kind()
    if kind == "separated":
        return _lse_separated(a)
    if kind == "shifted":
        return _lse_shifted(a)
    from scipy.special import logsumexp

    return logsumexp(a, axis=-1)


def _split(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(z_y, z with the label's entry set to -inf) for logits (..., C, A, K) and labels (C,), float64."""
    z = np.array(logits, dtype=np.float64, copy=True)  # never mutate the caller's array
    if z.ndim < 3 or z.shape[-3] != len(labels):
        raise ValueError(f"logits must be (..., C, A, K) with C = {len(labels)}, got {z.shape}")
    labels = np.asarray(labels)
    if len(labels) and (labels.min() < 0 or labels.max() >= z.shape[-1]):
        raise ValueError(f"labels must be class indices 0..{z.shape[-1] - 1}")
    idx = np.broadcast_to(labels.astype(np.intp).reshape(-1, 1, 1), (*z.shape[:-1], 1))
    z_y = np.take_along_axis(z, idx, axis=-1)[..., 0] + 0.0  # + 0.0: -0.0 -> 0.0, as a sum over the row has it
    np.put_along_axis(z, idx, -np.inf, axis=-1)
    return z_y, z


def logit_score(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``z_y - logsumexp_{j!=y} z_j`` for logits (..., C, A, K) and labels (C,); returns (..., C, A)."""
    z_y, rest = _split(logits, labels)
    return z_y - logsumexp_last(rest)


def hinge_score(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``z_y - max_{j!=y} z_j`` for logits (..., C, A, K) and labels (C,); returns (..., C, A)."""
    z_y, rest = _split(logits, labels)
    return z_y - rest.max(axis=-1)


def both_scores(logits: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """:data:`SCORE_FUNCTIONS`' scores of the same logits, sharing one float64 copy:
    ``{"logit": ..., "hinge": ...}``, each (..., C, A)."""
    z_y, rest = _split(logits, labels)
    hinge = z_y - rest.max(axis=-1)
    return {"logit": z_y - logsumexp_last(rest), "hinge": hinge}


SCORE_FUNCTIONS = {"logit": logit_score, "hinge": hinge_score}
