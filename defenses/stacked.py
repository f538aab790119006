"""Many small models trained as one: G MLPs with stacked weights, one batched step for all of them.

A tiny model leaves a CPU's vector units (or a GPU) idle and spends its step in Python and kernel
launch overhead; G models stacked along a leading axis run each layer as one batched matrix product
(``torch.baddbmm``). Every model keeps what :func:`defenses.training.train_classifier` gives it when
trained alone: its own initialization (from its seed), its own training set (membership), its own
data order and augmentations (its own seeded generator, drawn in the same order), and the same
optimizer arithmetic (SGD with momentum and weight decay as ``torch.optim.SGD``: ``d = g + wd p``,
``b = m b + d``, ``p = p - lr b``) and learning-rate schedule (:func:`defenses.training.lr_factor`).
Results equal one-at-a-time training up to float rounding (the batched kernels sum in another
order); tests/test_stacked.py checks it.

Training sets of different sizes are padded: each model's loss is the mean over its own batch
(padded rows masked out), and a model whose epoch has fewer steps than the longest one skips the
extra steps entirely (no momentum or weight-decay update), so its step count and schedule are its
own. Only the plain ``mlp`` architecture is stacked (the quick preset's model); others train one at
a time (docs/executors.md says why and how the group size was chosen).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from defenses.base import FitContext, LabeledImages, Normalizer
from defenses.models import MLP
from defenses.training import lr_factor
from harness.augment import random_augment
from harness.config import TrainConfig


def stackable(cfg: TrainConfig) -> bool:
    """Whether the recipe's models can be trained stacked (:func:`train_stacked`)."""
    return cfg.model == "mlp"


def _linears(net: MLP) -> list[nn.Linear]:
    layers = [m for m in net.body if isinstance(m, nn.Linear)] + [net.head]
    if len(layers) != 3 or any(isinstance(m, nn.BatchNorm1d) for m in net.body):
        raise ValueError("train_stacked needs the plain mlp architecture (3 Linear layers, no BatchNorm)")
    return layers


def train_stacked(nets: list[MLP], trains: list[LabeledImages], ctxs: list[FitContext],
                  cfg: TrainConfig | None = None) -> list[MLP]:
    """Train ``nets[g]`` on ``trains[g]`` with ``ctxs[g].seed`` as :func:`train_classifier` would,
    all G in one batched loop; the trained weights are copied back into ``nets`` (eval mode).

    Every context must share the recipe and device; the generator of model g is seeded with
    ``ctxs[g].seed`` and draws the epoch permutation, then each batch's augmentation, as alone.
    """
    if not nets or not (len(nets) == len(trains) == len(ctxs)):
        raise ValueError("train_stacked needs as many networks, training sets and contexts, at least one")
    cfg = cfg or ctxs[0].train
    device = torch.device(ctxs[0].device)
    if any(torch.device(c.device) != device for c in ctxs):
        raise ValueError("train_stacked: every model of a group must train on one device")
    g_models = len(nets)
    layers = [_linears(net) for net in nets]
    # (G, in, out) weights and (G, 1, out) biases: x @ W + b is F.linear(x, weight, bias)
    params = [torch.stack([ls[i].weight.detach().t() for ls in layers]).to(device).contiguous()
              for i in range(3)]
    biases = [torch.stack([ls[i].bias.detach() for ls in layers]).unsqueeze(1).to(device).contiguous()
              for i in range(3)]
    tensors = [t for pair in zip(params, biases) for t in pair]  # W1, b1, W2, b2, W3, b3
    for t in tensors:
        t.requires_grad_(True)
    bufs = [torch.zeros_like(t) for t in tensors]

    sizes = [len(t) for t in trains]
    n_max = max(sizes)
    shape = trains[0].x.shape[1:]
    x_all = torch.zeros((g_models, n_max, *shape), dtype=torch.uint8)
    y_all = torch.zeros((g_models, n_max), dtype=torch.int64)
    for g, t in enumerate(trains):
        x_all[g, : sizes[g]] = torch.from_numpy(t.x)
        y_all[g, : sizes[g]] = torch.from_numpy(t.y)
    x_all, y_all = x_all.to(device), y_all.to(device)
    normalize = Normalizer(trains[0].mean, trains[0].std, device)
    gens = [torch.Generator().manual_seed(c.seed) for c in ctxs]
    bsz = cfg.batch_size
    steps_per_epoch = [math.ceil(n / bsz) for n in sizes]
    totals = [s * cfg.epochs for s in steps_per_epoch]
    uniform = len(set(steps_per_epoch)) == 1  # then every model is at the same step, same learning rate
    step = np.zeros(g_models, dtype=np.int64)
    spe_max = max(steps_per_epoch)
    rows = torch.arange(g_models, device=device)[:, None]

    def lr_of(g: int) -> float:
        return cfg.lr * lr_factor(int(step[g]), totals[g], steps_per_epoch[g], cfg)

    for epoch in range(cfg.epochs):
        # model g's permutation, padded with -1 to the longest epoch: step s reads columns [sB, (s+1)B)
        order = torch.full((g_models, spe_max * bsz), -1, dtype=torch.int64)
        for g, (n, gen) in enumerate(zip(sizes, gens)):
            order[g, :n] = torch.randperm(n, generator=gen)
        for s in range(spe_max):
            idx = order[:, s * bsz : (s + 1) * bsz]
            mask = idx >= 0
            counts = mask.sum(1)
            active = counts > 0
            full = bool(mask.all())
            idx = idx.clamp(min=0).to(device)
            xb = x_all[rows, idx]  # (G, B, C, H, W)
            if cfg.augment:
                xb = xb.clone()
                for g in range(g_models):
                    k = int(counts[g])
                    if k:
                        xb[g, :k] = random_augment(xb[g, :k], trains[g].augment, gens[g])
            h = normalize(xb.reshape(g_models * bsz, *shape)).reshape(g_models, bsz, -1)
            h = torch.relu(torch.baddbmm(tensors[1], h, tensors[0]))
            h = torch.relu(torch.baddbmm(tensors[3], h, tensors[2]))
            z = torch.baddbmm(tensors[5], h, tensors[4])
            ce = nn.functional.cross_entropy(z.reshape(-1, z.shape[-1]), y_all[rows, idx].reshape(-1),
                                             reduction="none").reshape(g_models, bsz)
            if full:
                loss = ce.mean(1).sum()
            else:
                m = mask.to(device)
                loss = ((ce * m).sum(1) / counts.clamp(min=1).to(device)).sum()
            grads = torch.autograd.grad(loss, tensors)
            if uniform:  # every model at the same step
                lrs = torch.full((g_models,), lr_of(0), dtype=torch.float32, device=device)
            else:
                lrs = torch.tensor([lr_of(g) for g in range(g_models)], dtype=torch.float32, device=device)
            _sgd_step(tensors, grads, bufs, lrs, cfg.momentum, cfg.weight_decay,
                      None if bool(active.all()) else active.to(device))
            step += active.numpy()
        for c in ctxs:
            c.report("train", (epoch + 1) / cfg.epochs)

    for g, ls in enumerate(layers):
        with torch.no_grad():
            for i, lin in enumerate(ls):
                lin.weight.copy_(params[i][g].t())
                lin.bias.copy_(biases[i][g, 0])
    return [net.to(device).eval() for net in nets]


@torch.no_grad()
def _sgd_step(tensors: list[torch.Tensor], grads: tuple[torch.Tensor, ...], bufs: list[torch.Tensor],
              lrs: torch.Tensor, momentum: float, weight_decay: float, active: torch.Tensor | None) -> None:
    """One ``torch.optim.SGD`` step (dampening 0, no Nesterov) per stacked model, with model g's
    learning rate ``lrs[g]``; models where ``active`` is False keep their weights and momentum."""
    for p, grad, buf in zip(tensors, grads, bufs):
        keep = (p.clone(), buf.clone()) if active is not None else None
        if weight_decay:
            grad.add_(p, alpha=weight_decay)  # d = g + wd p (autograd's fresh gradient, updated in place)
        if momentum:
            torch.add(grad, buf, alpha=momentum, out=buf)  # b = d + m b; the first step: 0 * m + d = d
            grad = buf
        p.addcmul_(lrs.view(-1, *[1] * (p.dim() - 1)), grad, value=-1.0)  # p = p - lr_g b
        if keep is not None:
            off = ~active
            p[off], buf[off] = keep[0][off], keep[1][off]
