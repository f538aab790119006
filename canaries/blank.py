"""The ``blank`` generator: the paper's DP-SGD ``blank_images`` canaries (protocol notes §2).

Each canary is the whole image filled with one colour: an RGB colour drawn uniformly from
{0..255}^3 per canary, and a label drawn uniformly over all K classes (it may equal the sample's
true label). For a single-channel dataset the colour is converted to grey (luma
0.299 R + 0.587 G + 0.114 B, rounded), as the OOD canaries are. With ``audit.rng: paper`` the
colour and label are the paper code's ``colors`` and ``blank_labels`` draws of the sample; otherwise
the colour comes first, then the label, from this canary's own RNG.
"""

from __future__ import annotations

import numpy as np

from canaries.base import Canaries, CanaryContext, CanaryGenerator


def fill_images(colors: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """(C, ch, H, W) uint8 images, image i filled with ``colors[i]`` (RGB, (C, 3) uint8)."""
    ch, h, w = shape
    rgb = colors.astype(np.float64)
    if ch == 1:
        values = np.rint(rgb @ np.array([0.299, 0.587, 0.114]))[:, None]
    elif ch == 3:
        values = rgb
    else:
        raise ValueError(f"blank canaries need 1- or 3-channel images, got {ch} channels")
    values = np.clip(values, 0, 255).astype(np.uint8)
    return np.ascontiguousarray(np.broadcast_to(values[:, :, None, None], (len(colors), ch, h, w)))


class Blank(CanaryGenerator):
    name = "blank"
    description = "one random colour filling the whole image (the paper's DP-SGD blank canary), label uniform over all classes"

    def apply(self, x: np.ndarray, y: np.ndarray, ctx: CanaryContext) -> Canaries:
        c = len(y)
        if ctx.paper is not None:
            colors, labels = ctx.paper.colors, ctx.paper.blank_labels
        else:
            colors = ctx.rng.integers(0, 256, size=(c, 3), dtype=np.uint8)
            labels = ctx.rng.integers(0, ctx.num_classes, size=c)
        images = fill_images(np.asarray(colors, np.uint8), tuple(x.shape[1:]))  # type: ignore[arg-type]
        return Canaries(x=images, y=np.asarray(labels, np.int64), evaluated=np.ones(c, dtype=bool))
