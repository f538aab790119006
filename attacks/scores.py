"""Per-query membership scores computed from a model's outputs, in float64.

- logit-scaled confidence (Carlini et al. 2022, eq. 4): ``z_y - logsumexp_{j != y} z_j``, which is
  ``log p_y - log(1 - p_y)`` for ``p = softmax(z)``; invariant to adding a constant to the logits;
- hinge: ``z_y - max_{j != y} z_j``.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp


def _split(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(z_y, z with the label's entry set to -inf) for logits (..., C, A, K) and labels (C,)."""
    z = np.array(logits, dtype=np.float64, copy=True)  # never mutate the caller's array
    if z.ndim < 3 or z.shape[-3] != len(labels):
        raise ValueError(f"logits must be (..., C, A, K) with C = {len(labels)}, got {z.shape}")
    onehot = np.broadcast_to(np.arange(z.shape[-1]) == labels[:, None, None], z.shape)
    z_y = np.where(onehot, z, 0.0).sum(-1)
    z[onehot] = -np.inf
    return z_y, z


def logit_score(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``z_y - logsumexp_{j!=y} z_j`` for logits (..., C, A, K) and labels (C,); returns (..., C, A)."""
    z_y, rest = _split(logits, labels)
    return z_y - logsumexp(rest, axis=-1)


def hinge_score(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``z_y - max_{j!=y} z_j`` for logits (..., C, A, K) and labels (C,); returns (..., C, A)."""
    z_y, rest = _split(logits, labels)
    return z_y - rest.max(axis=-1)


SCORE_FUNCTIONS = {"logit": logit_score, "hinge": hinge_score}
