"""The ``mislabeled`` generator: each audit sample gets a uniformly random *wrong* label.

Paper section 5.2 / the released code's ``label_noise``: draw r uniform in {0..K-2} and use
``r if r < y else r + 1``, which is uniform over the K-1 classes other than y.
"""

from __future__ import annotations

import numpy as np

from canaries.base import Canaries, CanaryGenerator


def random_wrong_labels(y: np.ndarray, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Uniformly random labels different from ``y``."""
    if num_classes < 2:
        raise ValueError("mislabeling needs at least two classes")
    r = rng.integers(0, num_classes - 1, size=len(y))
    return np.where(r < y, r, r + 1).astype(np.int64)


class Mislabeled(CanaryGenerator):
    name = "mislabeled"
    description = "audit samples with a uniformly random wrong label (all evaluated)"

    def apply(self, x: np.ndarray, y: np.ndarray, *, num_classes: int, rng: np.random.Generator) -> Canaries:
        return Canaries(x=x.copy(), y=random_wrong_labels(y, num_classes, rng), evaluated=np.ones(len(y), dtype=bool))
