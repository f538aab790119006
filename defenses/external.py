"""Models trained outside the harness (``harness plan`` / ``harness import``, docs/external-models.md).

A researcher's own training code (PyTorch, JAX, TensorFlow, scikit-learn, a cluster pipeline) trains
the S models of each experiment of an audit plan and writes their outputs on the plan's query
views; ``harness import`` builds a normal run directory of this defense from them. Nothing of it
trains here: :meth:`External.fit` refuses, and ``harness evaluate`` refuses the defense before
anything is written (the run's training cannot be re-run: a leaderboard verifies such an entry by
re-running its attacks only).

Its parameters record what the run holds, and so enter the run fingerprint: ``plan`` (the plan's
fingerprint), ``outputs`` (SHA-256 of the imported output files: other outputs of the same plan are
another run) and ``name`` (the user's label for the models, e.g. ``my-resnet``). The preset's
recipe (``train.*``) is the one the plan proposes to the outside trainer (``plan.json``,
``recipe``); the harness cannot check that it was followed.
"""

from __future__ import annotations

from typing import ClassVar

from defenses.base import Defense, FitContext, LabeledImages, ServedModel
from harness.core.errors import ConfigError

#: the one line every attempt to train this defense here gets
NOT_HERE = ("the 'external' defense stands for models trained outside the harness: write an audit plan with "
            "`harness plan`, train its models with your own code, and audit them with `harness import PLAN --outputs "
            "DIR` (docs/external-models.md); the harness cannot train or re-train them")


class External(Defense):
    name = "external"
    description = "models trained outside the harness: `harness plan`, your trainer, `harness import`"
    default_canary = "mislabeled"
    adaptive_attacks = ("lira",)
    param_defaults: ClassVar[dict[str, str]] = {"plan": "", "outputs": "", "name": ""}
    recipe_note = ("the models train outside the harness; the plan records the preset's recipe (plan.json, recipe) "
                   "for the outside trainer to follow")
    #: read by the runner and the API: a run of this defense is imported, never trained here
    trained_outside: ClassVar[bool] = True
    #: an outside model's features reach the white-box ``contrastive`` attack through the plan's SSL views
    provides = frozenset({"features"})

    def fit(self, train: LabeledImages, ctx: FitContext) -> ServedModel:
        raise ConfigError(NOT_HERE)
