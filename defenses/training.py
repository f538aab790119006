"""One supervised training loop shared by the defenses, with a hook for custom losses.

SGD with momentum and weight decay; the learning rate is set per step: an optional linear warm-up
over ``warmup_epochs`` (from 1/steps to 1, as the paper's ``LinearLR``), then ``constant``,
``cosine`` (to 0) or ``step`` (multiply by ``gamma`` at the given fractions of training; the
paper's x0.2 at epochs 60/120/160 of 200). Batches are reshuffled every epoch from a seeded
generator and augmented per sample when ``augment`` is set.
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Callable

import numpy as np

from defenses.base import FitContext, LabeledImages, Normalizer
from harness.core.config import TrainConfig

if TYPE_CHECKING:  # torch is imported where a network is built or trained: a defense module that
    # imports this one stays importable without it (the attack phase and the reports need no torch)
    import torch
    from torch import nn

LossFn = Callable[["torch.Tensor", "torch.Tensor", int], "torch.Tensor"]

#: per thread: ``GROUP.train``, set by :mod:`defenses.cotrain` in the thread of a co-trained ``fit``,
#: takes a :func:`train_classifier` call's arguments and returns True once the group has trained the
#: network stacked (False: train it here)
GROUP = threading.local()


def lr_factor(step: int, total_steps: int, steps_per_epoch: int, cfg: TrainConfig) -> float:
    """Multiplier of the base learning rate at optimizer step ``step`` (0-based)."""
    warm = cfg.warmup_epochs * steps_per_epoch
    if step < warm:
        return (step + 1) / warm
    if cfg.schedule == "constant":
        return 1.0
    if cfg.schedule == "cosine":
        t = (step - warm) / max(1, total_steps - warm)
        return 0.5 * (1 + math.cos(math.pi * t))
    passed = sum(step >= round(m * total_steps) for m in cfg.milestones)
    return cfg.gamma**passed


def channels_last_default(device: torch.device) -> bool:
    """Whether convolutional networks train with channels-last activations on ``device``: yes on the
    CPU, where it was measured faster (docs/executors.md, Stacked CNNs: the same arithmetic,
    rounded in another order); no on CUDA until a GPU measurement says otherwise (docs/gpu.md)."""
    return device.type == "cpu"


def uses_channels_last(net: nn.Module, device: torch.device, channels_last: bool | None) -> bool:
    """``channels_last`` where given, else :func:`channels_last_default`; only for a network with a 2-d convolution."""
    from torch import nn

    if not any(isinstance(m, nn.Conv2d) for m in net.modules()):
        return False
    return channels_last_default(device) if channels_last is None else channels_last


def train_classifier(
    net: nn.Module,
    train: LabeledImages,
    ctx: FitContext,
    *,
    cfg: TrainConfig | None = None,
    targets: np.ndarray | None = None,
    loss_fn: LossFn | None = None,
    epoch_hook: Callable[[int, nn.Module], np.ndarray | None] | None = None,
    channels_last: bool | None = None,
) -> nn.Module:
    """Train ``net`` in place on ``train`` and return it in eval mode.

    ``targets`` replaces the hard labels (e.g. soft labels (N, K) for distillation);
    ``loss_fn(logits, targets, epoch)`` replaces cross-entropy; ``epoch_hook(epoch, net)``, called
    before each epoch, may return new targets for all N samples (e.g. ALIBI's refreshed posteriors).
    ``channels_last`` (None: :func:`channels_last_default`) keeps a convolutional network's weights
    and activations channels-last (a memory layout: the same arithmetic, rounded in another order).

    Called from a ``fit`` the runner co-trains (a plugin's, :mod:`defenses.cotrain`), the call waits
    for the other models of its group and trains stacked with their calls, each model as here
    (:func:`defenses.stacked.train_calls`), where the network is the preset's own
    (:func:`init_network`); any other call trains here. (The co-training sets :data:`GROUP`'s ``train``
    in that ``fit``'s thread: this module imports neither it nor the stacked engine.)
    """
    import torch
    from torch import nn

    from harness.core.augment import random_augment

    cfg = cfg or ctx.train
    together = getattr(GROUP, "train", None)
    if together is not None and together(net, train, ctx, cfg, targets, loss_fn, epoch_hook, channels_last):
        return net
    device = torch.device(ctx.device)
    net.to(device).train()
    layout = torch.channels_last if uses_channels_last(net, device, channels_last) else torch.contiguous_format
    net.to(memory_format=layout)
    x_all = torch.from_numpy(train.x).to(device)
    t_all = torch.from_numpy(train.y if targets is None else targets).to(device)
    normalize = Normalizer(train.mean, train.std, device)
    model, x_all, normalize = _on_fixed_features(net, x_all, normalize, cfg.augment)
    rows = RowGather(x_all) if model is not net else x_all.__getitem__
    loss_fn = loss_fn or (lambda z, t, epoch: nn.functional.cross_entropy(z, t))
    opt = torch.optim.SGD(net.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(ctx.seed)
    n = len(train)
    steps_per_epoch = math.ceil(n / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    step = 0
    for epoch in range(cfg.epochs):
        if epoch_hook is not None:
            new = epoch_hook(epoch, net)
            net.train()
            if new is not None:
                t_all = torch.from_numpy(new).to(device)
        perm = torch.randperm(n, generator=gen).to(device)
        for i in range(0, n, cfg.batch_size):
            idx = perm[i : i + cfg.batch_size]
            xb = rows(idx)
            if cfg.augment:
                xb = random_augment(xb, train.augment, gen)
            xb = normalize(xb).contiguous(memory_format=layout)
            for g in opt.param_groups:
                g["lr"] = cfg.lr * lr_factor(step, total, steps_per_epoch, cfg)
            loss = loss_fn(model(xb), t_all[idx], epoch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
        ctx.report("train", (epoch + 1) / cfg.epochs)
    return net.eval()


def _on_fixed_features(net: nn.Module, x: torch.Tensor, normalize: Callable[[torch.Tensor], torch.Tensor],
                       augment: bool) -> tuple[nn.Module, torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """``(module trained, its inputs, their preparation)``: for a network on a fixed feature map
    (:func:`defenses.scatter_models.fixed_features`) trained without augmentation, its head, the
    training set's features (computed once: ``head(features(normalize(x)))`` is what ``net`` computes
    per batch) and no preparation; otherwise ``net``, the images and ``normalize``."""
    from defenses.scatter_models import fixed_features

    fixed = fixed_features(net)
    if fixed is None or augment:
        return net, x, normalize
    import torch

    with torch.no_grad():
        feats = fixed.features(normalize(x))
    return fixed.head, feats, lambda f: f


class RowGather:
    """``x[idx]`` (rows along the first axis) written into one buffer reused from call to call. On
    fixed features a batch is megabytes (62 KB a row): a fresh tensor per step is memory the
    allocator maps and faults in anew each time, 2-3x the cost of the copy itself (692 rows: 28 ms
    against 9.5 ms on one core). The result is overwritten by the next call: use it before then."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x
        self._buf: torch.Tensor | None = None

    def __call__(self, idx: torch.Tensor) -> torch.Tensor:
        import torch

        n = len(idx)
        if self._buf is None or len(self._buf) < n:
            self._buf = torch.empty((int(n * 1.25) + 1, *self.x.shape[1:]), dtype=self.x.dtype, device=self.x.device)
        out = self._buf[:n]
        torch.index_select(self.x, 0, idx, out=out)
        return out


def seeded_init(build: Callable[[], nn.Module], seed: int) -> nn.Module:
    """Build a module with its parameter initialization drawn from ``seed`` (torch's RNG restored after)."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def init_network(train: LabeledImages, ctx: FitContext, seed: int | None = None) -> nn.Module:
    """The preset's architecture (``ctx.train.model``, ``ctx.train.width``) for ``train``'s image
    shape and classes, initialized from ``seed`` (default ``ctx.seed``)."""
    from defenses.models import build_model

    shape = tuple(train.x.shape[1:])
    return seeded_init(lambda: build_model(ctx.train.model, shape, train.num_classes, ctx.train.width),
                       ctx.seed if seed is None else seed)
