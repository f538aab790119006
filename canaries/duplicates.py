"""The ``duplicates`` generator (the SELENA canaries of the misleading-evaluations paper; the
paper code's ``duplicates_mislabel_half``).

The C audit positions form C/2 pairs: the k-th of the first half (an original, clean label) and
the k-th of the second half, which becomes a copy of the original's image with a uniformly random
wrong label (with ``audit.rng: paper``, the paper's ``label_changes`` draw of the *original*, as its
code does). Every position keeps its own membership (each is in half of the models,
independently), and only the mislabeled copies are evaluated. Split-AI-style defenses that
answer each training sample with teachers that never saw it are fooled by the clean twin.
"""

from __future__ import annotations

import numpy as np

from canaries.base import Canaries, CanaryContext, CanaryGenerator
from canaries.mislabeled import wrong_labels


class MislabeledDuplicates(CanaryGenerator):
    name = "duplicates"
    description = "half the audit samples duplicated; the copy gets a wrong label and is evaluated"

    def apply(self, x: np.ndarray, y: np.ndarray, ctx: CanaryContext) -> Canaries:
        c = len(y)
        if c < 2 or c % 2:
            raise ValueError(f"duplicates canaries need an even audit size >= 2, got {c}")
        half = c // 2
        xs, ys = x.copy(), y.copy()
        xs[half:] = x[:half]
        ys[half:] = wrong_labels(y[:half], ctx, slice(0, half))
        evaluated = np.zeros(c, dtype=bool)
        evaluated[half:] = True
        return Canaries(x=xs, y=ys, evaluated=evaluated)
