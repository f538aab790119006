"""HAMP (Chen and Pattabiraman, NDSS 2024): high-entropy soft labels, an entropy regularizer and a
test-time output modification.

Training (paper section IV-B, as run by the misleading-evaluations code):
- soft labels: the true class gets p and every other class (1 - p)/(K - 1), with p >= 1/K chosen
  so that the label's entropy is ``gamma * ln K`` (gamma = the entropy threshold);
- loss: ``KL(soft || softmax(z))`` averaged over the B x K elements (``reduction="mean"``, the
  original code's scale) minus ``alpha * mean_i H(softmax(z_i))``, alpha = regularization strength.

Test-time defense: for every query, draw a uniform random image, take the model's logits on it and
sort them; the served output gives the class of rank k (among the model's real logits on the
query) the k-th smallest random logit. The ranking, hence the predicted label, is kept; the scores
carry no information about the query beyond its ranking. Ties in the real logits are broken by
class index (the lower index ranks higher, as ``argmax`` picks it), never by float rounding.

``random_images`` (default None, the paper's): a fresh uniform random image per query. An integer M
instead draws each query's random image from a bank of M uniform random images, the same bank for
every model (seeded by :data:`BANK_SEED`), whose logits each model computes once: for networks on
a fixed feature map (the ``cifar10-scatter`` preset) a fresh image per query would pass 18 000
images a model through the transform, none of them ever seen again. The served scores are then
the sorted logits of one of M random images rather than of a fresh one; they still carry nothing
about the query beyond its ranking (docs/protocol.md, HAMP).

The served model answers with the defended output (``query``); the training-time-only model stays
queryable through ``raw_query`` for the ablation attack ``lira-raw``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from defenses.base import Defense, FitContext, LabeledImages, PrivacyKnob, ServedModel, TorchClassifier
from defenses.training import init_network, train_classifier

if TYPE_CHECKING:  # torch where a model trains: naming the defense needs none
    import torch


def soft_label_confidence(gamma: float, num_classes: int) -> float:
    """p in [1/K, 1) with ``-p ln p - (1-p) ln((1-p)/(K-1)) = gamma ln K`` (gamma in (0, 1])."""
    if not 0 < gamma <= 1:
        raise ValueError(f"entropy threshold must be in (0, 1], got {gamma}")
    k = num_classes
    target = gamma * math.log(k)

    def h(p: float) -> float:
        return -p * math.log(p) - (1 - p) * math.log((1 - p) / (k - 1)) - target

    if gamma == 1:
        return 1.0 / k
    from scipy.optimize import brentq

    return brentq(h, 1.0 / k, 1 - 1e-12, xtol=1e-15)


def hamp_loss(logits: torch.Tensor, soft: torch.Tensor, alpha: float) -> torch.Tensor:
    """KL(soft || softmax(logits)) with reduction "mean" minus alpha times the mean output entropy."""
    import torch

    logp = torch.log_softmax(logits, dim=1)
    kl = (soft * (torch.log(soft) - logp)).sum() / soft.numel()
    entropy = -(logp.exp() * logp).sum(1).mean()
    return kl - alpha * entropy


def hamp_stacked_loss(logits: torch.Tensor, soft: torch.Tensor, row_weight: torch.Tensor,
                      alpha: float) -> torch.Tensor:
    """:func:`hamp_loss` of each of G stacked models (G,) on its real rows: with ``w_gi`` = 1/k_g on
    model g's k_g real rows (0 on padding), ``sum_i w_gi KL_gi / K - alpha sum_i w_gi H_gi``, i.e. the
    KL divergence's mean over the k_g x K elements and the mean entropy, as alone."""
    import torch

    logp = torch.log_softmax(logits, dim=-1)
    kl = (soft * (torch.log(soft) - logp)).sum(-1) / soft.shape[-1]
    entropy = -(logp.exp() * logp).sum(-1)
    return (kl * row_weight).sum(1) - alpha * (entropy * row_weight).sum(1)


def rank_remap(real: np.ndarray, random_logits: np.ndarray) -> np.ndarray:
    """Give each class of ``real`` (N, K) the random logit of the same rank: the class with the
    k-th smallest real logit receives the k-th smallest of that row of ``random_logits``."""
    # class indices from smallest to largest; among tied logits the lower class index ranks higher,
    # so the served top class is the one np.argmax picks on the real logits
    tie_break = np.broadcast_to(-np.arange(real.shape[1]), real.shape)
    order = np.lexsort((tie_break, real), axis=1)
    sorted_rand = np.sort(random_logits, axis=1)
    out = np.empty_like(sorted_rand)
    np.put_along_axis(out, order, sorted_rand, axis=1)
    # make the top class strictly largest even if random logits tie
    top = order[:, -1]
    rows = np.arange(len(out))
    out[rows, top] = np.nextafter(out[rows, top], np.inf)
    return out


#: the seed of the shared bank of random images (``random_images``): one bank for every model
BANK_SEED = 0x4A4D50


def random_bank(m: int, image_shape: tuple[int, ...]) -> np.ndarray:
    """``m`` uniform random uint8 images, the same for every model (:data:`BANK_SEED`)."""
    return np.random.default_rng(BANK_SEED).integers(0, 256, size=(m, *image_shape), dtype=np.uint8)


class HAMPServed(ServedModel):
    """HAMP's served model: rank-preserving replacement of the scores (test-time defense).
    ``bank``: None (a fresh random image per query) or the shared random images to draw from."""

    def __init__(self, model: TorchClassifier, image_shape: tuple[int, ...], seed: int,
                 bank: np.ndarray | None = None) -> None:
        self.model = model
        self.image_shape = image_shape
        self.rng = np.random.default_rng(seed)
        self.bank_logits = None if bank is None else model.query(bank)

    def raw_query(self, x: np.ndarray) -> np.ndarray:
        return self.model.query(x)

    def query(self, x: np.ndarray) -> np.ndarray:
        real = self.model.query(x)
        if self.bank_logits is not None:
            random_logits = self.bank_logits[self.rng.integers(0, len(self.bank_logits), size=len(x))]
        else:
            noise = self.rng.integers(0, 256, size=(len(x), *self.image_shape), dtype=np.uint8)
            random_logits = self.model.query(noise)
        return rank_remap(real, random_logits).astype(np.float32)


class HAMP(Defense):
    name = "hamp"
    description = "HAMP: high-entropy soft labels + entropy regularizer + rank-preserving output masking"
    reference = "https://arxiv.org/abs/2307.01610"
    default_canary = "mislabeled"
    adaptive_attacks = ("label-only", "lira")
    ablation_attacks = ("lira-raw",)
    provides = frozenset({"raw_query"})
    param_defaults = {"entropy_threshold": 0.9996837722339832, "regularization": 0.005, "random_images": None}
    #: the paper's tuning (Aerni et al. section 6.3): a grid of entropy thresholds (the paper's three among them)
    #: and regularization strengths; a higher threshold (flatter soft labels) and a stronger entropy
    #: regularizer are more private, the threshold first
    privacy_knobs = (PrivacyKnob("entropy_threshold", (0.5, 0.7, 0.8, 0.9, 0.95, 0.99, 0.9996837722339832), "higher"),
                     PrivacyKnob("regularization", (0.001, 0.005, 0.01, 0.05), "higher"))

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        gamma, alpha = self.params["entropy_threshold"], self.params["regularization"]
        if not 0 < gamma <= 1:
            raise ValueError(f"entropy_threshold must be in (0, 1] (a fraction of the maximum entropy ln K), got {gamma!r}")
        if alpha < 0:
            raise ValueError(f"regularization must be >= 0, got {alpha!r}")
        m = self.params["random_images"]
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise ValueError(f"random_images must be a positive integer (the bank's size) or null (a fresh image "
                             f"per query), got {m!r}")

    def soft_labels(self, train: LabeledImages) -> np.ndarray:
        """The high-entropy soft labels (N, K): p on the true class, (1 - p) / (K - 1) elsewhere."""
        k = train.num_classes
        p = soft_label_confidence(float(self.params["entropy_threshold"]), k)
        soft = np.full((len(train), k), (1 - p) / (k - 1), dtype=np.float32)
        soft[np.arange(len(train)), train.y] = p
        return soft

    def served(self, net: Any, train: LabeledImages, ctx: FitContext) -> ServedModel:
        model = TorchClassifier(net, train.mean, train.std, ctx.device)
        shape = tuple(train.x.shape[1:])
        m = self.params["random_images"]
        return HAMPServed(model, shape, seed=ctx.seed + 1, bank=None if m is None else random_bank(int(m), shape))

    def fit(self, train: LabeledImages, ctx: FitContext) -> ServedModel:
        alpha = float(self.params["regularization"])
        net = init_network(train, ctx)
        net = train_classifier(net, train, ctx, targets=self.soft_labels(train),
                               loss_fn=lambda z, t, epoch: hamp_loss(z, t, alpha))
        return self.served(net, train, ctx)

    def stacks(self, train: Any) -> bool:
        from defenses.stacked import stackable

        return stackable(train)

    def fit_group(self, trains: list[LabeledImages], ctxs: list[FitContext]) -> list[ServedModel] | None:
        """The models trained stacked with HAMP's loss on their own soft labels
        (:func:`hamp_stacked_loss`); None where they train one at a time."""
        from defenses.stacked import train_group_networks

        alpha = float(self.params["regularization"])
        nets = train_group_networks(trains, ctxs, targets=[self.soft_labels(t) for t in trains],
                                    loss=lambda z, t, w, epoch: hamp_stacked_loss(z, t, w, alpha))
        if nets is None:
            return None
        return [self.served(n, t, c) for n, t, c in zip(nets, trains, ctxs)]
