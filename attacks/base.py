"""The attack interface.

An attack reads the signals every model left behind (stacked over models: ``(S, C, ...)``), the
labels the audit samples were trained/scored with and the membership matrix, and returns one score
per (victim model, audit sample) for each of its variants: higher means "member". Attacks that fit
anything (LiRA's Gaussians, label-only's regressions) do it leave-one-out: for victim t, only the
other S-1 models and their membership are used (paper section 5.2).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np


@dataclass(frozen=True)
class AttackInput:
    """Everything an attack may use. ``signals[name]`` has shape (S, C, ...)."""

    signals: dict[str, np.ndarray]
    labels: np.ndarray  # (C,) labels of the (rewritten) audit samples
    membership: np.ndarray  # (S, C) bool

    @property
    def num_models(self) -> int:
        return int(self.membership.shape[0])


class Attack(ABC):
    """Subclasses set ``name``, ``description`` and ``needs`` (signal names) and implement ``score``."""

    name: ClassVar[str]
    description: ClassVar[str]
    needs: ClassVar[frozenset[str]] = frozenset({"logits"})

    def __init__(self, **params: Any) -> None:
        if params:
            raise ValueError(f"attack {self.name!r} takes no parameters, got {sorted(params)}")

    @abstractmethod
    def score(self, inp: AttackInput) -> dict[str, np.ndarray]:
        """Map variant name -> scores (S, C) in float64; row t scores model t as the victim."""
