"""The ``mislabeled`` generator: each audit sample gets a uniformly random *wrong* label.

Paper section 5.2 / the released code's ``label_noise``: draw r uniform in {0..K-2} and use
``r if r < y else r + 1``, which is uniform over the K-1 classes other than y. With
``audit.rng: paper`` r is the paper code's ``label_changes`` entry of the sample.
"""

from __future__ import annotations

import numpy as np

from canaries.base import Canaries, CanaryContext, CanaryGenerator


def wrong_labels_from_offsets(y: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``r if r < y else r + 1`` for offsets r in 0..K-2: a label different from ``y``."""
    return np.where(offsets < y, offsets, offsets + 1).astype(np.int64)


def random_wrong_labels(y: np.ndarray, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Uniformly random labels different from ``y``."""
    if num_classes < 2:
        raise ValueError("mislabeling needs at least two classes")
    return wrong_labels_from_offsets(y, rng.integers(0, num_classes - 1, size=len(y)))


def wrong_labels(y: np.ndarray, ctx: CanaryContext, positions: slice | np.ndarray = slice(None)) -> np.ndarray:
    """Wrong labels for ``y``, which are the audit samples at ``positions``: the paper's draws
    under ``audit.rng: paper``, else this canary's own RNG."""
    if ctx.paper is not None:
        return wrong_labels_from_offsets(y, ctx.paper.label_offsets[positions])
    return random_wrong_labels(y, ctx.num_classes, ctx.rng)


class Mislabeled(CanaryGenerator):
    name = "mislabeled"
    description = "audit samples with a uniformly random wrong label (all evaluated)"
    random_wrong_label = True

    def apply(self, x: np.ndarray, y: np.ndarray, ctx: CanaryContext) -> Canaries:
        return Canaries(x=x.copy(), y=wrong_labels(y, ctx), evaluated=np.ones(len(y), dtype=bool))
