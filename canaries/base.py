"""The canary generator interface (paper section 5.2: audit with canaries that mimic the most
vulnerable samples).

A generator takes the C audit samples (images and true labels) and returns them rewritten, plus
which of them are evaluated by the attacks and any extra samples that are in every model's training
set. Generators are deterministic given the :class:`CanaryContext` the harness passes in: its own
seeded RNG by default, or, with ``audit.rng: paper``, the per-sample draws of the paper code's RNG
tree (:class:`PaperDraws`), so that a canary's label change or colour is the paper's.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from harness.core.design import PaperDraws  # noqa: F401 (part of CanaryContext)


@dataclass(frozen=True)
class Canaries:
    """Audit samples after a generator rewrote them.

    ``x`` (C, channels, H, W) uint8 and ``y`` (C,) int64 replace the audit samples in training and in
    the attack (scores use ``y``); ``evaluated`` (C,) bool marks the canaries the ROC pools;
    ``extra_x``/``extra_y`` are added to every model's training set. ``neighbour_x`` (C, channels,
    H, W) uint8, when a generator provides it (``near-duplicates``), holds each canary's matched
    near-duplicate among the samples every model trains on: the neighbour attacks query it instead
    of the canary, scored with the canary's label (``lira-neighbour``: SELENA's Split-AI there, the
    paper's ``splitai_nn``; ``lira-neighbour-student``: the served model); empty otherwise.
    """

    x: np.ndarray
    y: np.ndarray
    evaluated: np.ndarray
    extra_x: np.ndarray = field(default_factory=lambda: np.zeros((0,), np.uint8))
    extra_y: np.ndarray = field(default_factory=lambda: np.zeros((0,), np.int64))
    neighbour_x: np.ndarray = field(default_factory=lambda: np.zeros((0,), np.uint8))

    def __post_init__(self) -> None:
        c = len(self.y)
        if self.x.shape[0] != c or self.evaluated.shape != (c,):
            raise ValueError("canary images, labels and evaluated mask must have the same length")
        if self.x.dtype != np.uint8:
            raise ValueError("canary images must be uint8")
        if not self.evaluated.any():
            raise ValueError("a canary generator must evaluate at least one sample")
        if len(self.neighbour_x) and (self.neighbour_x.shape != self.x.shape or self.neighbour_x.dtype != np.uint8):
            raise ValueError("neighbour images must be uint8 and shaped like the canary images, one per canary")

    @property
    def has_neighbours(self) -> bool:
        return bool(len(self.neighbour_x))


@dataclass(frozen=True)
class CanaryContext:
    """What a generator may use besides the audit samples themselves.

    ``rng`` is this canary's own seeded stream (``SeedSequence([seed, 0xCA, name])``);
    ``pool_indices`` (C,) are the audit samples' indices in the training pool; ``data_dir`` is the
    dataset folder (``data.path``, None for the bundled digits); ``paper`` holds the paper code's
    draws when ``audit.rng`` is ``paper`` (None otherwise): built-in generators then use them
    instead of ``rng`` wherever the paper's code draws the same quantity. ``pool_x`` / ``pool_y``
    are the whole training pool (the non-audit samples every model trains on among them),
    ``data_fingerprint`` identifies it, ``device`` is the run's (for a generator that runs a
    network), and ``store`` keeps expensive per-dataset arrays between runs (embeddings): an
    :class:`ArrayStore` or None. ``download`` says whether a generator may fetch a missing data file
    into ``data_dir`` (``data.download`` on a cifar10 dataset: the paper's OOD canary file).
    ``base_dir`` is the folder a relative path among the generator's parameters is read from: the
    folder the run was created in (harness.run.runner.creation_folder), so that a run resumed from
    elsewhere finds the same files; None: the current folder.
    """

    num_classes: int
    rng: np.random.Generator
    pool_indices: np.ndarray
    data_dir: str | None = None
    paper: PaperDraws | None = None
    pool_x: np.ndarray | None = None
    pool_y: np.ndarray | None = None
    data_fingerprint: str = ""
    device: str = "cpu"
    store: "ArrayStore | None" = None
    download: bool = False
    base_dir: str | None = None


def param_path(name: str, base_dir: str | None) -> Path:
    """A path among a generator's parameters, absolute: ``~`` expanded, a relative one read from
    ``base_dir`` (:attr:`CanaryContext.base_dir`; the current folder when None)."""
    p = Path(name).expanduser()
    return p if p.is_absolute() else (Path(base_dir) if base_dir is not None else Path.cwd()) / p


class ArrayStore(Protocol):
    """Arrays kept between runs under a key (the run store's cache: harness.run.runstore.ArrayCache)."""

    def load(self, key: str) -> np.ndarray | None: ...

    def save(self, key: str, array: np.ndarray) -> None: ...

    def where(self, key: str) -> str: ...


class CanaryGenerator(ABC):
    """Rewrite the audit samples. Subclasses set ``name`` and ``description``.

    Parameters come from ``audit.canary_params.<name>``; a generator with none keeps this
    constructor, which refuses any. A generator with parameters declares them as keyword arguments
    of its own constructor, takes ``**params`` besides and passes those here: an unknown one is
    then refused naming the known ones (:meth:`parameter_names`). ``describe()`` returns what
    should be recorded with the run (e.g. the resolved source of OOD images), after ``apply``.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    #: whether the canaries carry neighbour images (``Canaries.neighbour_x``) for the neighbour attacks
    provides_neighbours: ClassVar[bool] = False
    #: whether each canary keeps its pool image and takes a label drawn uniformly from the K - 1 others,
    #: independently of everything else (``mislabeled``): a model that never trained on a canary predicts
    #: its label only by chance, which the membership-provenance test reads (harness.core.checks)
    random_wrong_label: ClassVar[bool] = False

    def __init__(self, **params: Any) -> None:
        if params:
            # the run prefixes "canary '<name>': ", as to every generator's ValueError
            known = self.parameter_names()
            if not known:
                raise ValueError(f"takes no parameters, got {sorted(params)}")
            raise ValueError(f"unknown parameter(s) {sorted(params)}; known: {known}")

    @classmethod
    def parameter_names(cls) -> list[str]:
        """The generator's parameters: its constructor's named keyword arguments, sorted."""
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        return sorted(n for n, p in inspect.signature(cls.__init__).parameters.items()
                      if n != "self" and p.kind in kinds)

    @abstractmethod
    def apply(self, x: np.ndarray, y: np.ndarray, ctx: CanaryContext) -> Canaries:
        """Return the rewritten audit samples for images ``x`` (C, ...) uint8 and labels ``y`` (C,)."""

    def describe(self) -> dict[str, Any]:
        """Facts about the last ``apply`` worth recording (JSON-serializable); empty by default."""
        return {}
