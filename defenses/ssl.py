"""Self-supervised pre-training as a defense: SimCLR and MoCo v2 (the paper's fourth case study,
section 6.4; protocol notes section 4.6).

The claim under test: labels touch only a linear probe, so the served classifier should leak
little. The encoder is pre-trained without labels on the model's training set (canaries
included), with the SSL augmentation (:mod:`defenses.ssl_augment`, drawn per sample):

- **SimCLR** (Chen et al. 2020): projection ``Linear(f, f, no bias) -> BN -> ReLU -> Linear(f, 128)``
  and the NT-Xent loss at temperature 0.5 (:func:`nt_xent`); the two views pass the network as one
  batch (``view_batching: concat``) or one pass per view as the paper's code (``separate``);
- **MoCo v2** (Chen et al. 2020, as the paper's code): a 128-d linear head, a momentum ("key")
  copy of encoder and head updated as ``theta_k <- m theta_k + (1 - m) theta_q`` with m = 0.99
  before each step, a FIFO queue of 4096 keys (:class:`KeyQueue`), temperature 0.1 and the
  symmetric loss ``ctr(q1, k2) + ctr(q2, k1)`` with both key batches enqueued; each view is encoded
  in its own pass (BatchNorm statistics per view), as the paper's code does. The paper's
  "shuffle BN" on one GPU with plain BatchNorm is the identity (batch statistics do not depend
  on the order of the batch) and is not reproduced.

Both use SGD (lr 0.06, momentum 0.9, weight decay 5e-4) with the per-epoch cosine schedule
``lr * (1 + cos(pi e / E)) / 2``, batches of 512 with the last partial batch dropped, 800 epochs at
paper scale. A linear probe ``Linear(f, K)`` is then trained on the frozen encoder with the
training labels, on one SSL-augmented view per sample per epoch (batch 256, SGD lr 0.5, weight
decay 5e-4, no momentum, x0.1 every 30 of 100 epochs). The encoder's BatchNorm stays in eval mode
while probing (the paper's code left it in train mode, so its running statistics drifted with
the probe's data: docs/protocol.md).

Served model: ``probe(encoder(x))`` logits (black-box); ``features(x)`` = the encoder's output
(white-box), which the contrastive-similarity attack reads.
"""

from __future__ import annotations

import copy
import math
from typing import Any, ClassVar

import numpy as np

from defenses.base import Defense, FitContext, LabeledImages, Normalizer, ServedModel, TorchClassifier
from defenses.encoder_names import ENCODER_KINDS, MAP_ENCODERS
from defenses.training import seeded_init
from harness.core.data import AugmentSpec
from harness.core.lazy import LazyModule
from defenses.ssl_augment import SSLAugment

# torch where a model trains: naming the defense (the attack phase, the reports) needs none
torch = LazyModule("torch")
F = LazyModule("torch.nn.functional")
nn = LazyModule("torch.nn")


def nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """NT-Xent (SimCLR, Chen et al. 2020, eq. 1) of the projections of two views (N, d) each.

    With ``u`` the 2N L2-normalized projections (views 1 then views 2) and ``s_ij = u_i . u_j / T``,
    the loss of anchor i with positive p(i) (its other view) is
    ``-log( exp(s_{i p(i)}) / sum_{k != i} exp(s_ik) )``, averaged over all 2N anchors."""
    n = z1.shape[0]
    u = F.normalize(torch.cat([z1, z2]), dim=1)
    sim = (u @ u.T) / temperature
    sim = sim.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=sim.device), float("-inf"))
    positive = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(sim.device)
    return F.cross_entropy(sim, positive)


class KeyQueue:
    """MoCo's dictionary: the last ``size`` keys, first in first out. Starts as ``size`` random
    unit vectors (MoCo's initialization), drawn from ``generator``."""

    def __init__(self, size: int, dim: int, generator: torch.Generator, device: torch.device | str = "cpu") -> None:
        if size < 1:
            raise ValueError(f"queue size must be positive, got {size}")
        self.keys = F.normalize(torch.randn(size, dim, generator=generator), dim=1).to(device)
        self.ptr = 0

    def __len__(self) -> int:
        return self.keys.shape[0]

    def enqueue(self, k: torch.Tensor) -> None:
        """Replace the oldest ``len(k)`` keys with ``k`` (in order; only the newest ``size`` if more)."""
        with torch.no_grad():
            size = len(self)
            k = k.detach()[-size:]
            idx = (self.ptr + torch.arange(len(k))) % size
            self.keys[idx.to(self.keys.device)] = k.to(self.keys.dtype)
            self.ptr = int((self.ptr + len(k)) % size)


def momentum_update(key: nn.Module, query: nn.Module, m: float) -> None:
    """``theta_k <- m theta_k + (1 - m) theta_q`` for every parameter (MoCo, He et al. 2020, eq. 2);
    buffers (BatchNorm statistics) are the key network's own."""
    with torch.no_grad():
        for pk, pq in zip(key.parameters(), query.parameters()):
            pk.mul_(m).add_(pq.detach(), alpha=1 - m)


def moco_loss(q: torch.Tensor, k: torch.Tensor, queue: torch.Tensor, temperature: float) -> torch.Tensor:
    """InfoNCE of normalized queries ``q`` against their keys ``k`` (positives) and the queue
    (negatives): cross-entropy of ``[q.k, q.queue^T] / T`` with the positive at index 0."""
    pos = (q * k).sum(1, keepdim=True)
    neg = q @ queue.T
    logits = torch.cat([pos, neg], 1) / temperature
    return F.cross_entropy(logits, torch.zeros(len(q), dtype=torch.long, device=q.device))


class SSLServed(TorchClassifier):
    """Encoder + linear probe, served as :class:`TorchClassifier` of ``Sequential(encoder, probe)``:
    ``query`` returns the probe's logits, ``features`` the encoder's output."""

    def __init__(self, encoder: nn.Module, probe: nn.Module, mean: tuple[float, ...], std: tuple[float, ...],
                 device: str, record: dict[str, Any], augment: SSLAugment) -> None:
        super().__init__(nn.Sequential(encoder, probe), mean, std, device, record=record)
        self.encoder_only = TorchClassifier(encoder, mean, std, device)
        self.augment = augment

    def features(self, x: np.ndarray) -> np.ndarray:
        return self.encoder_only.query(x)

    def view_augmentation(self) -> SSLAugment:
        return self.augment


def cosine_epoch_lr(lr: float, epoch: int, epochs: int) -> float:
    """The paper's per-epoch cosine schedule ``lr (1 + cos(pi e / E)) / 2``."""
    return lr * 0.5 * (1 + math.cos(math.pi * epoch / epochs))


class SSLDefense(Defense):
    """Shared recipe of the SSL defenses; subclasses implement the pre-training objective."""

    default_canary = ("ood", "mislabeled")  # type: ignore[assignment]
    #: lira-sslview: the paper's own black-box score for SSL (LiRA on SSL-augmented views;
    #: attacks/ssl_view_lira.py), which knows the training augmentation like the contrastive attacks
    adaptive_attacks = ("lira", "contrastive", "contrastive-blackbox", "lira-sslview")
    provides = frozenset({"features"})
    train_fields: ClassVar[frozenset[str] | None] = frozenset()
    train_aliases = {"epochs": "epochs", "batch_size": "batch_size", "lr": "lr", "momentum": "momentum",
                     "weight_decay": "weight_decay", "width": "width"}
    recipe_note = ("SSL pre-trains its own encoder (defense_params.encoder, width) with the SSL augmentation and a "
                   "cosine schedule, then fits a linear probe (defense_params.probe_*); --epochs, --batch-size, --lr, "
                   "momentum and weight_decay set the pre-training, --width the cnn / mlp encoder")
    param_defaults: ClassVar[dict[str, Any]] = {
        "encoder": "resnet18",
        "width": 32,  # cnn / mlp encoders only
        "epochs": 800,
        "batch_size": 512,
        "lr": 0.06,
        "momentum": 0.9,
        "weight_decay": 5e-4,
        "temperature": 0.5,
        "probe_epochs": 100,
        "probe_batch_size": 256,
        "probe_lr": 0.5,
        "probe_weight_decay": 5e-4,
        "probe_step_every": 30,
        "crop_scale": [0.08, 1.0],
        "feature_noise": 0.0,  # scatter-conv only: the SD of the feature-space views' Gaussian noise
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        p = self.params
        if p["encoder"] not in ENCODER_KINDS:
            raise ValueError(f"encoder must be one of {', '.join(ENCODER_KINDS)}, got {p['encoder']!r}")
        for k in ("epochs", "batch_size", "probe_epochs", "probe_batch_size", "probe_step_every", "width"):
            if not isinstance(p[k], int) or isinstance(p[k], bool) or p[k] < 1:
                raise ValueError(f"{k} must be a positive integer, got {p[k]!r}")
        for k in ("lr", "temperature", "probe_lr"):
            if not isinstance(p[k], (int, float)) or p[k] <= 0:
                raise ValueError(f"{k} must be positive, got {p[k]!r}")
        scale = p["crop_scale"]
        if not (isinstance(scale, (list, tuple)) and len(scale) == 2 and all(isinstance(v, (int, float)) for v in scale)):
            raise ValueError(f"crop_scale must be [low, high], got {scale!r}")
        SSLAugment(crop_scale=(float(scale[0]), float(scale[1])))  # checks the range
        fn = p["feature_noise"]
        if not isinstance(fn, (int, float)) or isinstance(fn, bool) or fn < 0:
            raise ValueError(f"feature_noise must be a number >= 0, got {fn!r}")

    def check_config(self, cfg: Any) -> None:
        """The ResNet-18 encoder is torchvision's: a missing or mismatched torchvision stops the run
        here, before training, with one line (harness.core.install_check). An encoder on scattering
        maps needs RGB 32 x 32 images (CIFAR-10, or an npz of that shape)."""
        if self.params["encoder"] in MAP_ENCODERS and cfg.data.name == "digits":
            raise ValueError(f"encoder {self.params['encoder']} reads the scattering maps of RGB 32 x 32 images; "
                             "digits are 1 x 8 x 8 (use --preset cifar10-scatter, or encoder mlp / cnn)")
        if self.params["encoder"] not in MAP_ENCODERS and self.params["feature_noise"] != self.param_defaults["feature_noise"]:
            raise ValueError(f"feature_noise applies to the encoders on scattering maps ({', '.join(MAP_ENCODERS)}); "
                             f"encoder {self.params['encoder']} draws its views on images")
        if self.params["encoder"] == "resnet18":
            from harness.core.install_check import import_torchvision

            import_torchvision("the resnet18 encoder (defense_params.encoder)")

    def augmentation(self, spec: AugmentSpec) -> SSLAugment:
        """The SSL augmentation for a dataset: the paper's, with ``crop_scale`` and flips only where
        the dataset allows them (no flips for digits)."""
        lo, hi = self.params["crop_scale"]
        return SSLAugment(crop_scale=(float(lo), float(hi)), flip=spec.flip)

    # --- pre-training --------------------------------------------------------------------------
    def init_heads(self, feat_dim: int) -> dict[str, nn.Module]:
        """The trainable modules besides the encoder (projection head)."""
        raise NotImplementedError

    def pretrain_step(self, encoder: nn.Module, heads: dict[str, nn.Module], v1: torch.Tensor,
                      v2: torch.Tensor, state: dict[str, Any]) -> torch.Tensor:
        """The loss of one batch of two views (already normalized)."""
        raise NotImplementedError

    def pretrain_state(self, encoder: nn.Module, heads: dict[str, nn.Module], gen: torch.Generator,
                       device: torch.device) -> dict[str, Any]:
        """Objective-specific state (MoCo's key networks and queue); none by default."""
        return {}

    def check_train_size(self, smallest: int) -> None:
        if smallest < self.params["batch_size"]:
            raise ValueError(f"batch_size {self.params['batch_size']} is larger than the smallest model's training "
                             f"set ({smallest} samples; pre-training batches drop the last partial one)")

    def fit(self, train: LabeledImages, ctx: FitContext) -> ServedModel:
        """Pre-training (:meth:`pretrain`) and the probe (:meth:`train_probe`) on views of the training
        images; with an encoder on scattering maps, on feature-space views of their maps (:meth:`_fit_maps`)."""
        from defenses.encoders import build_encoder

        p = self.params
        self.check_train_size(len(train))  # the runner checked the smallest; a direct call is checked here
        if p["encoder"] in MAP_ENCODERS:
            return self._fit_maps(train, ctx)
        device = torch.device(ctx.device)
        augment = self.augmentation(train.augment)
        shape = tuple(train.x.shape[1:])
        encoder = seeded_init(lambda: build_encoder(p["encoder"], shape, p["width"]), ctx.seed).to(device)
        gen = torch.Generator().manual_seed(ctx.seed)
        normalize = Normalizer(train.mean, train.std, device)
        x_all = torch.from_numpy(train.x).to(device)

        def view(idx: torch.Tensor) -> torch.Tensor:
            return normalize(augment(x_all[idx].float() / 255.0, gen) * 255.0)

        last_loss = self.pretrain(encoder, len(train), view, gen, ctx)
        probe = self._probe(encoder, train.y, train.num_classes, view, gen, ctx)
        record = {"ssl_method": self.name, "encoder": p["encoder"], "feature_dim": encoder.out_dim,
                  "pretrain_final_loss": last_loss}
        return SSLServed(encoder, probe, train.mean, train.std, ctx.device, record, augment)

    def pretrain(self, encoder: nn.Module, n: int, view: Any, gen: torch.Generator, ctx: FitContext) -> float:
        """The self-supervised objective over ``epochs`` (cosine per-epoch schedule, SGD), each batch of
        ``batch_size`` sample indices (the last partial one dropped) seen as two views ``view(idx)``,
        drawn from ``gen``; returns the last batch's loss (RuntimeError where it is not finite)."""
        p = self.params
        device = next(encoder.parameters()).device
        heads = {k: m.to(device) for k, m in seeded_init(lambda: nn.ModuleDict(self.init_heads(encoder.out_dim)),
                                                         ctx.seed + 1).items()}
        state = self.pretrain_state(encoder, heads, gen, device)
        params = [*encoder.parameters(), *(q for h in heads.values() for q in h.parameters())]
        opt = torch.optim.SGD(params, lr=p["lr"], momentum=p["momentum"], weight_decay=p["weight_decay"])
        b = p["batch_size"]
        last_loss = float("nan")
        encoder.train()
        for h in heads.values():
            h.train()
        for epoch in range(p["epochs"]):
            for g in opt.param_groups:
                g["lr"] = cosine_epoch_lr(p["lr"], epoch, p["epochs"])
            perm = torch.randperm(n, generator=gen).to(device)
            for i in range(0, n - b + 1, b):  # drop_last
                idx = perm[i : i + b]
                v1 = view(idx)
                v2 = view(idx)
                loss = self.pretrain_step(encoder, heads, v1, v2, state)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                last_loss = float(loss.detach())
            ctx.report("pretrain", 0.9 * (epoch + 1) / p["epochs"])
        if not math.isfinite(last_loss):
            raise RuntimeError(f"{self.name}: pre-training diverged (loss {last_loss}); lower defense_params.lr")
        return last_loss

    # --- on fixed scattering maps (defenses/scatter_ssl.py) -----------------------------------------
    def _fit_maps(self, train: LabeledImages, ctx: FitContext) -> ServedModel:
        """The same pre-training and probe on the fixed scattering maps of the training images, with
        feature-space views (:class:`defenses.scatter_ssl.FeatureViewAugment`) and the
        :class:`defenses.scatter_ssl.ScatterConvEncoder`; served on images (the same fixed map first)."""
        from defenses.scatter_ssl import MAP_SHAPE, FeatureViewAugment, MapsServed, ScatterConvEncoder

        p = self.params
        if tuple(train.x.shape[1:]) != (3, 32, 32):
            raise ValueError(f"encoder {p['encoder']} reads the scattering maps of RGB 32 x 32 images, got images of "
                             f"shape {tuple(train.x.shape[1:])}")
        device = torch.device(ctx.device)
        lo, hi = p["crop_scale"]
        augment = FeatureViewAugment(crop_scale=(float(lo), float(hi)), flip=train.augment.flip,
                                     noise=float(p["feature_noise"]), mean=tuple(train.mean), std=tuple(train.std))
        with torch.no_grad():
            maps = torch.cat([augment.base_maps(train.x[i: i + 512]) for i in range(0, len(train.x), 512)]).to(device)
        encoder = seeded_init(lambda: ScatterConvEncoder(MAP_SHAPE[0], p["width"]), ctx.seed).to(device)
        gen = torch.Generator().manual_seed(ctx.seed)

        def view(idx: torch.Tensor) -> torch.Tensor:
            return augment(maps[idx].cpu(), gen).to(device)

        last_loss = self.pretrain(encoder, len(train), view, gen, ctx)
        probe = self._probe(encoder, train.y, train.num_classes, view, gen, ctx)
        record = {"ssl_method": self.name, "encoder": p["encoder"], "feature_dim": encoder.out_dim,
                  "pretrain_final_loss": last_loss, "views": "feature space (scattering maps)"}
        return MapsServed(encoder, probe, train.mean, train.std, ctx.device, record, augment)

    # --- linear probe ----------------------------------------------------------------------------
    def train_probe(self, encoder: nn.Module, train: LabeledImages, ctx: FitContext, normalize: Normalizer,
                    augment: SSLAugment, gen: torch.Generator) -> nn.Module:
        """The probe (:meth:`_probe`) on SSL views of the training images."""
        x_all = torch.from_numpy(train.x).to(torch.device(ctx.device))
        return self._probe(encoder, train.y, train.num_classes,
                           lambda idx: normalize(augment(x_all[idx].float() / 255.0, gen) * 255.0), gen, ctx)

    def _probe(self, encoder: nn.Module, y: np.ndarray, num_classes: int, view: Any, gen: torch.Generator,
               ctx: FitContext) -> nn.Module:
        """A linear classifier on the frozen encoder's features of one view ``view(idx)`` per sample and
        epoch, with the training labels ``y``. The encoder stays in eval mode (its BatchNorm statistics fixed)."""
        p = self.params
        device = torch.device(ctx.device)
        encoder.eval()
        for q in encoder.parameters():
            q.requires_grad_(False)
        probe = seeded_init(lambda: nn.Linear(encoder.out_dim, num_classes), ctx.seed + 2).to(device)
        opt = torch.optim.SGD(probe.parameters(), lr=p["probe_lr"], momentum=0.0, weight_decay=p["probe_weight_decay"])
        y_all = torch.from_numpy(y).to(device)
        n, b = len(y), p["probe_batch_size"]
        for epoch in range(p["probe_epochs"]):
            for g in opt.param_groups:
                g["lr"] = p["probe_lr"] * 0.1 ** (epoch // p["probe_step_every"])
            perm = torch.randperm(n, generator=gen).to(device)
            for i in range(0, n, b):
                idx = perm[i : i + b]
                with torch.no_grad():
                    h = encoder(view(idx))
                loss = F.cross_entropy(probe(h), y_all[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            ctx.report("probe", 0.9 + 0.1 * (epoch + 1) / p["probe_epochs"])
        return probe.eval()


#: SimCLR's ``view_batching``: how the two views of a pre-training batch pass the network
VIEW_BATCHING = ("concat", "separate")


class SimCLR(SSLDefense):
    """SimCLR pre-training (Chen et al. 2020) + linear probe (the paper's "SSL (SimCLR)").

    ``view_batching``: ``concat`` (default) passes the 2N views of a batch through encoder and
    projection as one batch, so every BatchNorm layer normalizes with statistics over both views
    and updates its running statistics once per step (Chen et al.'s SimCLR, whose global BatchNorm
    pools every view); ``separate`` passes view 1 and then view 2 on their own, as the paper's code
    (``SimCLR.get_loss``: two ``forward`` calls), so each view is normalized with its own batch
    statistics and the running statistics are updated twice per step (view 1, then view 2)."""

    name = "ssl-simclr"
    description = "SimCLR self-supervised encoder + linear probe (labels only in the probe)"
    reference = "https://arxiv.org/abs/2002.05709"
    param_defaults: ClassVar[dict[str, Any]] = {**SSLDefense.param_defaults, "temperature": 0.5, "projection_dim": 128,
                                                "view_batching": "concat"}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if self.params["view_batching"] not in VIEW_BATCHING:
            raise ValueError(f"view_batching must be one of {', '.join(VIEW_BATCHING)}, "
                             f"got {self.params['view_batching']!r}")

    def init_heads(self, feat_dim: int) -> dict[str, nn.Module]:
        return {"projection": nn.Sequential(nn.Linear(feat_dim, feat_dim, bias=False), nn.BatchNorm1d(feat_dim),
                                            nn.ReLU(), nn.Linear(feat_dim, self.params["projection_dim"]))}

    def pretrain_step(self, encoder: nn.Module, heads: dict[str, nn.Module], v1: torch.Tensor,
                      v2: torch.Tensor, state: dict[str, Any]) -> torch.Tensor:
        project = heads["projection"]
        if self.params["view_batching"] == "separate":
            z1, z2 = project(encoder(v1)), project(encoder(v2))
        else:
            z = project(encoder(torch.cat([v1, v2])))
            z1, z2 = z[: len(v1)], z[len(v1) :]
        return nt_xent(z1, z2, self.params["temperature"])


class MoCo(SSLDefense):
    """MoCo v2 pre-training (as the paper's code) + linear probe (the paper's "SSL (MoCo)")."""

    name = "ssl-moco"
    description = "MoCo v2 self-supervised encoder (momentum encoder, key queue) + linear probe"
    reference = "https://arxiv.org/abs/1911.05722"
    param_defaults: ClassVar[dict[str, Any]] = {**SSLDefense.param_defaults, "temperature": 0.1, "projection_dim": 128,
                                                "queue_size": 4096, "key_momentum": 0.99}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        q, m = self.params["queue_size"], self.params["key_momentum"]
        if not isinstance(q, int) or isinstance(q, bool) or q < 1:
            raise ValueError(f"queue_size must be a positive integer, got {q!r}")
        if not 0 <= m < 1:
            raise ValueError(f"key_momentum must be in [0, 1), got {m!r}")

    def init_heads(self, feat_dim: int) -> dict[str, nn.Module]:
        return {"projection": nn.Linear(feat_dim, self.params["projection_dim"])}

    def pretrain_state(self, encoder: nn.Module, heads: dict[str, nn.Module], gen: torch.Generator,
                       device: torch.device) -> dict[str, Any]:
        key_net = copy.deepcopy(nn.Sequential(encoder, heads["projection"]))
        for q in key_net.parameters():
            q.requires_grad_(False)
        return {"key": key_net, "queue": KeyQueue(self.params["queue_size"], self.params["projection_dim"], gen, device)}

    def pretrain_step(self, encoder: nn.Module, heads: dict[str, nn.Module], v1: torch.Tensor,
                      v2: torch.Tensor, state: dict[str, Any]) -> torch.Tensor:
        t = self.params["temperature"]
        query_net = nn.Sequential(encoder, heads["projection"])
        momentum_update(state["key"], query_net, self.params["key_momentum"])
        q1, q2 = (F.normalize(query_net(v), dim=1) for v in (v1, v2))
        with torch.no_grad():
            k1, k2 = (F.normalize(state["key"](v), dim=1) for v in (v1, v2))
        queue: KeyQueue = state["queue"]
        negatives = queue.keys.clone()  # the backward pass needs the keys as they were in the forward pass
        loss = moco_loss(q1, k2, negatives, t) + moco_loss(q2, k1, negatives, t)
        queue.enqueue(torch.cat([k1, k2]))
        return loss
