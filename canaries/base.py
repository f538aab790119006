"""The canary generator interface (paper section 5.2: audit with canaries that mimic the most
vulnerable samples).

A generator takes the C audit samples (images and true labels) and returns them rewritten, plus
which of them are evaluated by the attacks and any extra samples that are in every model's training
set. Generators are deterministic given the :class:`CanaryContext` the harness passes in: its own
seeded RNG by default, or, with ``audit.rng: paper``, the per-sample draws of the paper code's RNG
tree (:class:`PaperDraws`), so that a canary's label change or colour is the paper's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from harness.core.design import PaperDraws  # noqa: F401 (part of CanaryContext)


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


@dataclass(frozen=True)
class CanaryContext:
    """What a generator may use besides the audit samples themselves.

    ``rng`` is this canary's own seeded stream (``SeedSequence([seed, 0xCA, name])``);
    ``pool_indices`` (C,) are the audit samples' indices in the training pool; ``data_dir`` is the
    dataset folder (``data.path``, None for the bundled digits); ``paper`` holds the paper code's
    draws when ``audit.rng`` is ``paper`` (None otherwise): built-in generators then use them
    instead of ``rng`` wherever the paper's code draws the same quantity.
    """

    num_classes: int
    rng: np.random.Generator
    pool_indices: np.ndarray
    data_dir: str | None = None
    paper: PaperDraws | None = None


class CanaryGenerator(ABC):
    """Rewrite the audit samples. Subclasses set ``name`` and ``description``.

    Parameters come from ``audit.canary_params.<name>``; a generator with none keeps this
    constructor, which refuses any. ``describe()`` returns what should be recorded with the run
    (e.g. the resolved source of OOD images), after ``apply``.
    """

    name: ClassVar[str]
    description: ClassVar[str]

    def __init__(self, **params: Any) -> None:
        if params:
            raise ValueError(f"canary {self.name!r} takes no parameters, got {sorted(params)}")

    @abstractmethod
    def apply(self, x: np.ndarray, y: np.ndarray, ctx: CanaryContext) -> Canaries:
        """Return the rewritten audit samples for images ``x`` (C, ...) uint8 and labels ``y`` (C,)."""

    def describe(self) -> dict[str, Any]:
        """Facts about the last ``apply`` worth recording (JSON-serializable); empty by default."""
        return {}
