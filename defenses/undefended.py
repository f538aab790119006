"""No defense: the paper's undefended baseline (protocol notes section 4.1).

The preset's recipe trains the architecture it names (WRN16-4 for ``paper``, a small CNN for
``cifar10``, an MLP for ``quick``) with cross-entropy; the served model returns its logits.
"""

from __future__ import annotations

from typing import Any

from defenses.base import Defense, FitContext, LabeledImages, ServedModel, TorchClassifier

# the training modules (torch) are imported where a model is trained: naming the defense, as the
# attack phase and the reports do, needs no torch


class Undefended(Defense):
    name = "undefended"
    description = "plain training with the preset's recipe; served logits as-is"
    default_canary = "mislabeled"
    adaptive_attacks = ("lira",)

    def fit(self, train: LabeledImages, ctx: FitContext) -> ServedModel:
        from defenses.training import init_network, train_classifier

        net = init_network(train, ctx)
        net = train_classifier(net, train, ctx)
        return TorchClassifier(net, train.mean, train.std, ctx.device)

    def stacks(self, train: Any) -> bool:
        from defenses.stacked import stackable

        return stackable(train)

    def fit_group(self, trains: list[LabeledImages], ctxs: list[FitContext]) -> list[ServedModel] | None:
        """The models trained stacked (:mod:`defenses.stacked`: ``mlp``, ``cnn``, ``airbench``); None
        where they train one at a time (:func:`defenses.stacked.train_group_networks`)."""
        from defenses.stacked import train_group_networks

        nets = train_group_networks(trains, ctxs)
        if nets is None:
            return None
        return [TorchClassifier(n, t.mean, t.std, c.device) for n, t, c in zip(nets, trains, ctxs)]
