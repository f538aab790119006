"""No defense: the paper's undefended baseline (protocol notes section 4.1).

The preset's recipe trains the architecture it names (WRN16-4 for ``paper``, a small CNN for
``cifar10``, an MLP for ``quick``) with cross-entropy; the served model returns its logits.
"""

from __future__ import annotations

from defenses.base import Defense, FitContext, LabeledImages, ServedModel, TorchClassifier
from defenses.training import init_network, train_classifier


class Undefended(Defense):
    name = "undefended"
    description = "plain training with the preset's recipe; served logits as-is"
    default_canary = "mislabeled"
    adaptive_attacks = ("lira",)

    def fit(self, train: LabeledImages, ctx: FitContext) -> ServedModel:
        net = init_network(train, ctx)
        net = train_classifier(net, train, ctx)
        return TorchClassifier(net, train.mean, train.std, ctx.device)
