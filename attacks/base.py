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
    """Everything an attack may use. ``signals[name]`` has shape (S, C, ...) for the audit samples;
    ``population_logits`` (S, Z, A, K), when saved, are the models' outputs on Z test images no model
    trained on, with labels ``population_labels`` (Z,). ``trained_with_augmentation`` says whether
    the models were trained on augmented images (the run's ``train.augment``): attacks then read the
    augmented query views in their primary variant; otherwise those views are inputs the model never
    saw in training, and the primary variants read the plain query only."""

    signals: dict[str, np.ndarray]
    labels: np.ndarray  # (C,) labels of the (rewritten) audit samples
    membership: np.ndarray  # (S, C) bool
    population_labels: np.ndarray | None = None  # (Z,)
    trained_with_augmentation: bool = True

    @property
    def num_models(self) -> int:
        return int(self.membership.shape[0])


class Attack(ABC):
    """Subclasses set ``name``, ``description`` and ``needs`` (signal names) and implement ``score``.

    Every attack declares one *primary* variant (:meth:`primary`): the one configuration that
    stands for the attack in headlines, chosen before seeing any result. The other variants are
    reported in the details only, so that a headline is never a maximum over many configurations.
    Parameters come from ``attack.params.<name>``; this constructor refuses any.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    needs: ClassVar[frozenset[str]] = frozenset({"logits"})

    def __init__(self, **params: Any) -> None:
        if params:
            raise ValueError(f"attack {self.name!r} takes no parameters, got {sorted(params)}")

    @abstractmethod
    def score(self, inp: AttackInput) -> dict[str, np.ndarray]:
        """Map variant name -> scores (S, C) in float64; row t scores model t as the victim."""

    def primary(self, variants: list[str], inp: AttackInput) -> str:
        """The primary variant among the names ``score`` returned for ``inp`` (default: the first).
        It may depend on facts fixed before any result is seen (e.g. ``inp.trained_with_augmentation``),
        never on the scores."""
        return variants[0]

    def params(self) -> dict[str, Any]:
        """The attack's parameters as used (recorded in results.json); empty by default."""
        return {}
