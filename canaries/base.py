"""The canary generator interface (paper section 5.2: audit with canaries that mimic the most
vulnerable samples).

A generator takes the C audit samples (images and true labels) and returns them rewritten, plus
which of them are evaluated by the attacks and any extra samples that are in every model's training
set. Generators are deterministic given the RNG the harness passes in.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np


@dataclass(frozen=True)
class Canaries:
    """Audit samples after a generator rewrote them.

    ``x`` (C, channels, H, W) uint8 and ``y`` (C,) int64 replace the audit samples in training and in
    the attack (scores use ``y``); ``evaluated`` (C,) bool marks the canaries the ROC pools;
    ``extra_x``/``extra_y`` are added to every model's training set.
    """

    x: np.ndarray
    y: np.ndarray
    evaluated: np.ndarray
    extra_x: np.ndarray = field(default_factory=lambda: np.zeros((0,), np.uint8))
    extra_y: np.ndarray = field(default_factory=lambda: np.zeros((0,), np.int64))

    def __post_init__(self) -> None:
        c = len(self.y)
        if self.x.shape[0] != c or self.evaluated.shape != (c,):
            raise ValueError("canary images, labels and evaluated mask must have the same length")
        if self.x.dtype != np.uint8:
            raise ValueError("canary images must be uint8")
        if not self.evaluated.any():
            raise ValueError("a canary generator must evaluate at least one sample")


class CanaryGenerator(ABC):
    """Rewrite the audit samples. Subclasses set ``name`` and ``description``."""

    name: ClassVar[str]
    description: ClassVar[str]

    def __init__(self, **params: Any) -> None:
        if params:
            raise ValueError(f"canary {self.name!r} takes no parameters, got {sorted(params)}")

    @abstractmethod
    def apply(self, x: np.ndarray, y: np.ndarray, *, num_classes: int, rng: np.random.Generator) -> Canaries:
        """Return the rewritten audit samples for images ``x`` (C, ...) uint8 and labels ``y`` (C,)."""
