"""The ``uniform`` generator: images of i.i.d. uniform random pixels with uniformly random labels.

Out-of-distribution inputs that no natural sample resembles, so a model's output on them depends
on whether it trained on them (one of the DP-SGD canaries of the misleading-evaluations paper).
"""

from __future__ import annotations

import numpy as np

from canaries.base import Canaries, CanaryGenerator


class UniformNoise(CanaryGenerator):
    name = "uniform"
    description = "images of uniform random pixels with random labels (all evaluated)"

    def apply(self, x: np.ndarray, y: np.ndarray, *, num_classes: int, rng: np.random.Generator) -> Canaries:
        noise = rng.integers(0, 256, size=x.shape, dtype=np.uint8)
        labels = rng.integers(0, num_classes, size=len(y)).astype(np.int64)
        return Canaries(x=noise, y=labels, evaluated=np.ones(len(y), dtype=bool))
