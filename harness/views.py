"""The query views the attacks read, as a dependency-free reference (numpy only).

The harness queries every model on each audit and population image under A fixed views: no flip
or a horizontal flip (where the dataset allows flips), times a translation by (dy, dx) in
{0, -s, s}^2 with zero fill (the paper's ``RandomCrop(size, padding=s)`` at its 9 fixed crops on
uint8 images: the border is black). View ``a`` is ``9 * flip + 3 * i_y + i_x`` in the order of
:func:`query_offsets` (18 views with flips, 9 without; digits: 9 views, shift 1).

This file imports nothing but numpy, so an outside trainer (JAX, TensorFlow, a cluster pipeline)
may copy it as it is: ``views(x, flip, shift)`` gives, bit for bit, the images the harness itself
queries (``tests/test_external_models.py`` compares it with :mod:`harness.core.augment`). A plan
folder (``harness plan``) also holds the views already applied (``<experiment>/query.npz``,
``views``), and ``plan.json`` names ``flip``, ``shift`` and the offsets (docs/external-models.md).
"""

from __future__ import annotations

import numpy as np

__all__ = ["query_offsets", "shift_flip", "views"]


def query_offsets(flip: bool, shift: int) -> list[tuple[bool, int, int]]:
    """The fixed views ``(flip, dy, dx)`` in the harness's order, view 0 the image as it is:
    ``for flip in (False, True): for dy in (0, -s, s): for dx in (0, -s, s)`` (flips only when
    ``flip``, shifts only when ``shift`` > 0)."""
    flips = (False, True) if flip else (False,)
    shifts = (0, -int(shift), int(shift)) if shift else (0,)
    return [(f, dy, dx) for f in flips for dy in shifts for dx in shifts]


def shift_flip(x: np.ndarray, dy: int, dx: int, flip: bool) -> np.ndarray:
    """A batch ``(N, C, H, W)`` translated by ``(dy, dx)`` pixels with zero fill, then flipped left to
    right if ``flip``: the crop ``[s+dy : s+dy+H, s+dx : s+dx+W]`` of the image zero-padded by s on
    every side, so the content moves by ``(-dy, -dx)``. The dtype is kept (uint8 pixels)."""
    x = np.asarray(x)
    out = x
    if dy or dx:
        h, w = x.shape[-2:]
        out = np.zeros_like(x)
        ys, yd = (slice(dy, h), slice(0, h - dy)) if dy >= 0 else (slice(0, h + dy), slice(-dy, h))
        xs, xd = (slice(dx, w), slice(0, w - dx)) if dx >= 0 else (slice(0, w + dx), slice(-dx, w))
        out[..., yd, xd] = x[..., ys, xs]
    if flip:
        out = out[..., ::-1]
    return np.ascontiguousarray(out)


def views(x: np.ndarray, flip: bool, shift: int) -> np.ndarray:
    """Every view of a batch: ``(N, A, C, H, W)`` for images ``(N, C, H, W)``, view ``a`` of image
    ``n`` at ``[n, a]`` (:func:`query_offsets`'s order). An outside model's outputs over the
    query set are ``(N, A, K)`` in the same order."""
    return np.stack([shift_flip(x, dy, dx, f) for f, dy, dx in query_offsets(flip, shift)], axis=1)
