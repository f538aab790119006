"""What a signal is: a named per-model measurement saved right after training (the contract between
the expensive training and the cheap attacks). The built-in signals and their computation live in
:mod:`harness.run.signals`; an attack may bring its own (``Attack.signals``: name -> :class:`Signal`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from harness.core.data import AugmentSpec

#: ``fn(served model, images, query spec, seed) -> array or None``; the served model is a
#: :class:`defenses.base.ServedModel` (typed Any here: the core layer knows no defense)
SignalFn = Callable[[Any, np.ndarray, AugmentSpec, int], "np.ndarray | None"]

#: repetitions of the contrastive views saved per model (the paper's 6); attacks may average fewer
CONTRASTIVE_REPETITIONS = 6

#: the served-model accesses (``Signal.requires``) that the deployed model does not serve to the
#: public, each with why an attack that reads one is left out of the leak
#: (:mod:`harness.audit.headline`; ``excluded_attacks`` in results.json)
NOT_SERVED = {
    "raw_query": "reads the outputs before the defense's test-time step (raw_query), which the deployed model "
                 "does not serve",
    "splitai_query": "reads SELENA's Split-AI ensemble (splitai_query), which the deployed model (the distilled "
                     "student) does not serve",
}
FISHER_EPS = 1e-45  # the paper's guard inside the logs


@dataclass(frozen=True)
class Signal:
    """A named per-model signal. ``requires``: the served model's capability it needs
    (``"features"``, ``"raw_query"`` or None); ``images``: computed on the ``"audit"`` samples, the
    ``"population"`` samples or the canaries' ``"neighbours"`` (near-duplicates); ``access``: what an
    adversary needs to read it. ``averages``: for a signal of repeated queries, the signal whose
    answers it averages (``logits_averaged`` averages ``logits``): computed only for a model whose
    serving is random, as the mean log-probabilities of ``audit.repeat_queries`` answers of ``fn``;
    for a model whose serving is deterministic it is that signal's log-softmax (R equal answers),
    which the attack phase computes instead of storing it."""

    name: str
    description: str
    fn: SignalFn
    requires: str | None = None
    images: str = "audit"
    access: str = "black-box"
    averages: str | None = None
