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


def _pairwise_rows(rows: np.ndarray, start: int, n: int) -> np.ndarray:
    """numpy's pairwise summation (``pairwise_sum`` in its umath loops) of ``rows[start : start + n]``,
    element by element of the rows: below 8 terms one after the other; up to 128, eight running sums
    combined as ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)), then the remainder; above,
    the two halves (the first a multiple of 8 long) summed alike and added."""
    if n < 8:
        res = np.zeros(rows.shape[1:])
        for i in range(n):
            res += rows[start + i]
        return res
    if n <= 128:
        r = [rows[start + j].copy() for j in range(8)]
        i = 8
        while i < n - n % 8:
            for j in range(8):
                r[j] += rows[start + i + j]
            i += 8
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for k in range(i, n):
            res += rows[start + k]
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise_rows(rows, start, n2) + _pairwise_rows(rows, start + n2, n - n2)


def _sum_first(rows: np.ndarray) -> np.ndarray:
    """numpy's ``x.sum(axis=-1)`` of the contiguous array x whose last axis is ``rows``' first (x =
    moveaxis(rows, 0, -1)), computed from the rows as whole arrays: the same values where
    :func:`_row_sum_kind` found numpy's order for this length, else numpy itself."""
    kind = _row_sum_kind(rows.shape[0])
    if kind == "pairwise":
        return _pairwise_rows(rows, 0, rows.shape[0])
    if kind == "first-plus-pairwise":
        return rows[0] + _pairwise_rows(rows, 1, rows.shape[0] - 1)
    return np.ascontiguousarray(np.moveaxis(rows, 0, -1)).sum(axis=-1)


@lru_cache(maxsize=None)
def _row_sum_kind(k: int) -> str:
    """How this numpy sums a contiguous last axis of length ``k``, checked on probe rows: ``pairwise``
    (from 0, its pairwise summation of all k), ``first-plus-pairwise`` (the first term plus the
    pairwise sum of the others) or ``numpy`` (neither: the sums are left to numpy)."""
    x = np.random.default_rng(k).normal(size=(3, 5, 4, k)) * np.logspace(-3, 3, k)
    want = x.sum(axis=-1)
    rows = np.ascontiguousarray(np.moveaxis(x, -1, 0))
    if np.array_equal(_pairwise_rows(rows, 0, k), want):
        return "pairwise"
    if k > 1 and np.array_equal(rows[0] + _pairwise_rows(rows, 1, k - 1), want):
        return "first-plus-pairwise"
    return "numpy"


def label_entries(labels: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Flat indices, into a C-ordered array of ``shape`` (K, S, C, ...) whose first axis is the
    classes and third the samples, of the label's entry of every (model, sample, ...) position, in
    that order: ``a.reshape(-1)[label_entries(labels, a.shape)]`` is ``take_along_axis(a, labels
    broadcast, axis=0)[0]`` raveled, without the index arrays take_along_axis builds per call."""
    s, c = shape[1:3]
    rest = int(np.prod(shape[3:], dtype=np.int64))
    per_class = s * c * rest
    sample = np.asarray(labels).astype(np.intp) * per_class + np.arange(c, dtype=np.intp) * rest  # (C,)
    out = (np.arange(s, dtype=np.intp) * (c * rest))[:, None, None] + sample[None, :, None] + np.arange(rest)
    return out.reshape(-1)


def both_scores(logits: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """:data:`SCORE_FUNCTIONS`' scores of logits (S, C, A, K), ``{"logit": ..., "hinge": ...}``, each
    (S, C, A): the values of :func:`logit_score` and :func:`hinge_score`, from one float64 copy with
    the classes as its first axis, so that the maxima and sums over the K classes are K-1
    element-wise operations on whole arrays rather than numpy's reductions over rows of K (the sums
    in numpy's own order: :func:`_sum_first`; a maximum is exact in any order). Used where the
    SciPy log-sum-exp formula is known (:func:`_lse_kind`), else the two functions themselves."""
    if _lse_kind() != "separated" or np.ndim(logits) != 4:
        return {"logit": logit_score(logits, labels), "hinge": hinge_score(logits, labels)}
    labels = np.asarray(labels)
    k = logits.shape[-1]
    if logits.shape[1] != len(labels):
        raise ValueError(f"logits must be (S, C, A, K) with C = {len(labels)}, got {logits.shape}")
    if len(labels) and (labels.min() < 0 or labels.max() >= k):
        raise ValueError(f"labels must be class indices 0..{k - 1}")
    z = np.array(np.moveaxis(np.asarray(logits), -1, 0), dtype=np.float64, order="C", copy=True)  # (K, S, C, A)
    zf = z.reshape(-1)  # the same memory, flat
    at_label = label_entries(labels, z.shape)
    z_y = zf[at_label].reshape(z.shape[1:]) + 0.0  # + 0.0: -0.0 -> 0.0, as a sum over the row has it
    zf[at_label] = -np.inf
    a_max = z.max(axis=0)
    hinge = z_y - a_max
    # SciPy's separated log-sum-exp (_lse_separated), the classes first: exp(z - max) with the maxima
    # and the label left out as exact zeros. The exponentials are taken with finite values in their
    # place (the maxima's 0, the label's set to 0) and those terms multiplied by 0 after: an
    # exponent of -inf, or one that underflows, sends numpy's vectorized exp down a much slower path
    # (the finite values are the same). Where the maximum is not finite the
    # row's result is not either, and the direct formula below replaces it.
    is_max = z == a_max
    m = is_max.sum(axis=0, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        np.subtract(z, a_max, out=z)
        zf[at_label] = 0.0
        np.exp(z, out=z)
        np.multiply(z, ~is_max, out=z)
        zf[at_label] = 0.0
    del is_max, at_label
    s = _sum_first(z)
    del z, zf
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(s == 0, s, s / m)
        s = np.where(s < -1, -s - 2, s)
        lse = np.log1p(s) + np.log(np.abs(m)) + a_max
    bad = ~np.isfinite(lse)
    if bad.any():  # SciPy's direct formula where the separated one is not finite
        rest = np.array(logits, dtype=np.float64)[bad]
        rest[np.arange(len(rest)), np.broadcast_to(labels.reshape(1, -1, 1), bad.shape)[bad]] = -np.inf
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            lse[bad] = np.log(np.exp(rest).sum(axis=-1))
    return {"logit": z_y - lse, "hinge": hinge}


SCORE_FUNCTIONS = {"logit": logit_score, "hinge": hinge_score}
