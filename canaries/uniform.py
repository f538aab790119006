"""The ``uniform`` generator: images of i.i.d. uniform random pixels with uniformly random labels.

Pure noise images that no natural sample resembles. Not one of the paper's canaries (its DP-SGD
audit uses one-colour ``blank`` images instead, see :mod:`canaries.blank`); kept as a separate,
harder-to-generalize OOD canary. Its draws always come from the harness's RNG, also under
``audit.rng: paper``.
"""

from __future__ import annotations

import numpy as np

from canaries.base import Canaries, CanaryContext, CanaryGenerator


class UniformNoise(CanaryGenerator):
    name = "uniform"
    description = "i.i.d. uniform random pixels per image (noise, not the paper's) with random labels"

    def apply(self, x: np.ndarray, y: np.ndarray, ctx: CanaryContext) -> Canaries:
        noise = ctx.rng.integers(0, 256, size=x.shape, dtype=np.uint8)
        labels = ctx.rng.integers(0, ctx.num_classes, size=len(y)).astype(np.int64)
        return Canaries(x=noise, y=labels, evaluated=np.ones(len(y), dtype=bool))
