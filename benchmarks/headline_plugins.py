"""Two defense plugins with a known answer for the headline test (benchmarks/bench_headline_test.py,
tests/test_strongest.py):

- ``RandomLogits``: no training; the served logits are seeded Gaussian noise per image and model,
  independent of membership. Nothing beats anything: a warning is a false alarm.
- ``ThresholdOnly``: undefended training that declares only the weakest attack (a global
  threshold on the victim's own score) as its adaptive one. LiRA and RMIA beat it by far: the test
  must flag it.

    harness evaluate benchmarks/headline_plugins.py:RandomLogits
"""

from __future__ import annotations

import hashlib

import numpy as np

from defenses.base import Defense, ServedModel
from defenses.undefended import Undefended


class RandomServed(ServedModel):
    """Seeded Gaussian logits per image (its bytes) and model (its seed)."""

    def __init__(self, seed: int, num_classes: int) -> None:
        self.seed, self.k = seed, num_classes

    def query(self, x: np.ndarray) -> np.ndarray:
        out = np.empty((len(x), self.k), np.float32)
        for i, img in enumerate(x):
            digest = hashlib.blake2b(np.ascontiguousarray(img).tobytes(), digest_size=8).digest()
            out[i] = np.random.default_rng([self.seed, int.from_bytes(digest, "little")]).normal(size=self.k)
        return out


class RandomLogits(Defense):
    name = "random-logits"
    description = "no training; served logits are seeded noise, independent of membership"

    def fit(self, train, ctx):
        return RandomServed(ctx.seed, train.num_classes)


class ThresholdOnly(Undefended):
    name = "threshold-only"
    description = "undefended training, declaring the weakest attack its only adaptive one"
    adaptive_attacks = ("threshold",)


class LiraAndThreshold(Undefended):
    """Undefended training, declaring LiRA and the threshold attack: the same models as the default
    and as :class:`ThresholdOnly`, declared a third way (the leak must not move)."""

    name, description = "lira-and-threshold", "undefended training declaring LiRA and the threshold attack"
    adaptive_attacks = ("lira", "threshold")
