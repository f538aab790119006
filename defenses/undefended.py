"""No defense: the paper's undefended baseline (protocol notes section 4.1).

The preset's recipe trains the architecture it names (WRN16-4 for ``paper``, a small CNN for
``cifar10``, an MLP for ``quick``) with cross-entropy; the served model returns its logits.
"""

from __future__ import annotations

from defenses.base import Defense, FitContext, LabeledImages, ServedModel, TorchClassifier
from defenses.models import build_model
from defenses.training import seeded_init, train_classifier


class Undefended(Defense):
    name = "undefended"
    description = "plain training with the preset's recipe; served logits as-is"
    default_canary = "mislabeled"
    adaptive_attacks = ("lira",)

    def fit(self, train: LabeledImages, ctx: FitContext) -> ServedModel:
        shape = tuple(train.x.shape[1:])
        net = seeded_init(lambda: build_model(ctx.train.model, shape, train.num_classes, ctx.train.width), ctx.seed)
        net = train_classifier(net, train, ctx)
        return TorchClassifier(net, train.mean, train.std, ctx.device)
