"""The ``none`` generator: audit samples as they are (the population-level experiment)."""

from __future__ import annotations

import numpy as np

from canaries.base import Canaries, CanaryContext, CanaryGenerator


class NoCanaries(CanaryGenerator):
    name = "none"
    description = "audit samples unchanged: the population-level experiment"

    def apply(self, x: np.ndarray, y: np.ndarray, ctx: CanaryContext) -> Canaries:
        return Canaries(x=x.copy(), y=y.copy(), evaluated=np.ones(len(y), dtype=bool))
