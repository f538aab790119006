"""RelaxLoss (Chen, Yu and Fritz, ICLR 2022): keep the training loss near a target instead of
driving it to zero (Algorithm 1, as the authors' code and the misleading-evaluations code run it).

Per batch, with the mean cross-entropy l and target alpha:
- even (0-based) epoch: ``|l - alpha|`` -- normal descent above the target, gradient *ascent* below;
- odd epoch, l > alpha: ``l`` (normal descent);
- odd epoch, l <= alpha: posterior flattening + ascent,
  ``mean_i [(1 - correct_i) CE(z_i, s_i) - CE(z_i, y_i)]`` with the soft target
  ``s_i = (p_y on the true class, (1 - p_y)/(K - 1) elsewhere)`` built from the model's own
  (detached) confidence p_y: misclassified samples are pulled towards a flat posterior over the
  other classes, and every sample gets an ascent step on its loss.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from defenses.base import Defense, FitContext, LabeledImages, PrivacyKnob, ServedModel, TorchClassifier
from defenses.training import init_network, train_classifier

if TYPE_CHECKING:
    import torch


def relaxloss_loss(logits: torch.Tensor, y: torch.Tensor, epoch: int, alpha: float) -> torch.Tensor:
    """The RelaxLoss objective for one batch (see the module docstring)."""
    import torch
    from torch import nn

    ce = nn.functional.cross_entropy(logits, y, reduction="none")
    mean_ce = ce.mean()
    if epoch % 2 == 0:
        return (mean_ce - alpha).abs()
    if mean_ce.item() > alpha:
        return mean_ce
    k = logits.shape[1]
    with torch.no_grad():
        prob = torch.softmax(logits, dim=1)
        p_y = prob.gather(1, y[:, None])
        soft = ((1 - p_y) / (k - 1)).expand(-1, k).clone()
        soft.scatter_(1, y[:, None], p_y)
        correct = (logits.argmax(1) == y).float()
    flatten = -(soft * torch.log_softmax(logits, dim=1)).sum(1)
    return ((1 - correct) * flatten - ce).mean()


def relaxloss_stacked_loss(logits: torch.Tensor, y: torch.Tensor, row_weight: torch.Tensor, epoch: int,
                           alpha: float) -> torch.Tensor:
    """:func:`relaxloss_loss` of each of G stacked models (G,) on its real rows (``row_weight`` 1/k_g
    there, 0 on padding): the branch (descent, ascent, posterior flattening) chosen per model from
    its own mean cross-entropy, as alone."""
    import torch
    from torch import nn

    g, b, k = logits.shape
    ce = nn.functional.cross_entropy(logits.reshape(g * b, k), y.reshape(g * b), reduction="none").view(g, b)
    mean_ce = (ce * row_weight).sum(1)
    if epoch % 2 == 0:
        return (mean_ce - alpha).abs()
    with torch.no_grad():
        prob = torch.softmax(logits, dim=-1)
        p_y = prob.gather(-1, y[..., None])
        soft = ((1 - p_y) / (k - 1)).expand(-1, -1, k).clone()
        soft.scatter_(-1, y[..., None], p_y)
        correct = (logits.argmax(-1) == y).float()
    flatten = -(soft * torch.log_softmax(logits, dim=-1)).sum(-1)
    low = (((1 - correct) * flatten - ce) * row_weight).sum(1)
    return torch.where(mean_ce > alpha, mean_ce, low)


class RelaxLoss(Defense):
    name = "relaxloss"
    description = "RelaxLoss: gradient ascent and posterior flattening below a target training loss"
    reference = "https://openreview.net/forum?id=FEDfGWVZYIn"
    default_canary = "mislabeled"
    adaptive_attacks = ("lira",)
    param_defaults = {"target_loss": 0.5946}
    #: the loss RelaxLoss holds training at: the higher, the less a model fits its members (the paper's
    #: tuning: the largest threshold with at least the target accuracy); ln 10 = 2.30 is chance on 10 classes
    privacy_knobs = (PrivacyKnob("target_loss", (0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0), "higher"),)

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if not self.params["target_loss"] > 0:
            raise ValueError(f"target_loss must be positive, got {self.params['target_loss']!r}")

    def fit(self, train: LabeledImages, ctx: FitContext) -> ServedModel:
        alpha = float(self.params["target_loss"])
        net = init_network(train, ctx)
        net = train_classifier(net, train, ctx, loss_fn=lambda z, y, epoch: relaxloss_loss(z, y, epoch, alpha))
        return TorchClassifier(net, train.mean, train.std, ctx.device)


    def stacks(self, train: Any) -> bool:
        from defenses.stacked import stackable

        return stackable(train)

    def fit_group(self, trains: list[LabeledImages], ctxs: list[FitContext]) -> list[ServedModel] | None:
        """The models trained stacked with the RelaxLoss objective per model
        (:func:`relaxloss_stacked_loss`); None where they train one at a time."""
        from defenses.stacked import train_group_networks

        alpha = float(self.params["target_loss"])
        nets = train_group_networks(
            trains, ctxs, loss=lambda z, y, w, epoch: relaxloss_stacked_loss(z, y, w, epoch, alpha))
        if nets is None:
            return None
        return [TorchClassifier(n, t.mean, t.std, c.device) for n, t, c in zip(nets, trains, ctxs)]
