"""Many small models trained as one: G MLPs with stacked weights, one batched step for all of them.

A tiny model leaves a CPU's vector units (or a GPU) idle and spends its step in Python and kernel
launch overhead; G models stacked along a leading axis run each layer as one batched matrix product
(``torch.bmm``), with the backward pass and the SGD update written out (:class:`_StackedMLP`: no
autograd graph, buffers reused from step to step, the weight gradients accumulated straight into
the momentum buffers). Every model keeps what :func:`defenses.training.train_classifier` gives it
when trained alone: its own initialization (from its seed), its own training set (membership), its
own data order and augmentations (its own seeded generator, drawn in the same order), the same
optimizer (SGD with momentum and weight decay as ``torch.optim.SGD``: ``d = g + wd p``,
``b = m b + d``, ``p = p - lr b``) and learning-rate schedule (:func:`defenses.training.lr_factor`).
Results equal one-at-a-time training up to float rounding (the batched kernels sum in another
order); tests/test_stacked.py checks it, and that a model's weights are bit-identical whatever the
size of its group.

Training sets of different sizes are padded: each model's loss is the mean over its own batch
(padded rows masked out), and a model whose epoch has fewer steps than the longest one skips the
extra steps entirely (no momentum or weight-decay update), so its step count and schedule are its
own. Only the plain ``mlp`` architecture is stacked (the quick preset's model); others train one at
a time (docs/executors.md says why and how the group size was chosen).
"""

from __future__ import annotations

import copy
import functools
import math

import numpy as np
import torch
from torch import nn

from defenses.base import FitContext, LabeledImages, Normalizer
from defenses.models import MLP
from defenses.training import lr_factor
from harness.core.augment import random_augment
from harness.core.config import TrainConfig


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
    if len(nets) == 1 and device.type == "cpu" and torch.get_num_threads() > 1:
        # With several threads, the BLAS splits a lone product across them and sums in another order
        # than the same product in a batch (measured: layer 3's weight gradient). A lone model trains
        # beside a copy of itself instead, so a model's weights do not depend on its group's size.
        train_stacked([nets[0], copy.deepcopy(nets[0])], [trains[0]] * 2, [ctxs[0]] * 2, cfg)
        return [nets[0]]
    g_models = len(nets)
    layers = [_linears(net) for net in nets]
    # nn.Linear's layout: (G, out, in) weights, (G, 1, out) biases; a layer is x @ W^T + b
    weights = [torch.stack([ls[i].weight.detach() for ls in layers]).to(device).contiguous() for i in range(3)]
    biases = [torch.stack([ls[i].bias.detach() for ls in layers]).unsqueeze(1).to(device).contiguous()
              for i in range(3)]
    tensors = [t for pair in zip(weights, biases) for t in pair]  # W1, b1, W2, b2, W3, b3

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
    if not cfg.augment:  # the same elementwise arithmetic once per image instead of once per step
        x_all = normalize(x_all.reshape(g_models * n_max, *shape)).reshape(g_models, n_max, -1)
    gens = [torch.Generator().manual_seed(c.seed) for c in ctxs]
    bsz = cfg.batch_size
    steps_per_epoch = [math.ceil(n / bsz) for n in sizes]
    totals = [s * cfg.epochs for s in steps_per_epoch]
    uniform = len(set(steps_per_epoch)) == 1  # then every model is at the same step, same learning rate
    step = np.zeros(g_models, dtype=np.int64)
    spe_max = max(steps_per_epoch)
    rows = torch.arange(g_models, device=device)[:, None]
    stack = _StackedMLP(tensors, g_models, bsz, cfg.momentum, cfg.weight_decay)

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
            full = bool(mask.all())
            counts = mask.sum(1)
            active = counts > 0
            idx = idx.clamp(min=0).to(device)
            xb = x_all[rows, idx]
            if cfg.augment:
                xb = xb.clone()
                for g in range(g_models):
                    k = int(counts[g])
                    if k:
                        xb[g, :k] = random_augment(xb[g, :k], trains[g].augment, gens[g])
                xb = normalize(xb.reshape(g_models * bsz, *shape)).reshape(g_models, bsz, -1)
            # each model's loss is the mean cross-entropy over its own (unpadded) rows
            row_weight = None if full else (mask / counts.clamp(min=1)[:, None]).to(device, torch.float32)
            if uniform:  # every model at the same step
                lrs = torch.full((g_models,), lr_of(0), dtype=torch.float32, device=device)
            else:
                lrs = torch.tensor([lr_of(g) for g in range(g_models)], dtype=torch.float32, device=device)
            stack.sgd_step(xb, y_all[rows, idx], row_weight, lrs, None if bool(active.all()) else active.to(device))
            step += active.numpy()
        for c in ctxs:
            c.report("train", (epoch + 1) / cfg.epochs)

    for g, ls in enumerate(layers):
        with torch.no_grad():
            for i, lin in enumerate(ls):
                lin.weight.copy_(weights[i][g])
                lin.bias.copy_(biases[i][g, 0])
    return [net.to(device).eval() for net in nets]


class _StackedMLP:
    """G stacked ``Linear-ReLU-Linear-ReLU-Linear`` networks with cross-entropy and SGD, the forward
    and backward pass written out (no autograd graph) into buffers reused from step to step.

    Forward: ``h1 = relu(x W1^T + b1)``, ``h2 = relu(h1 W2^T + b2)``, ``z = h2 W3^T + b3``. With
    ``L_g = sum_i w_gi CE(z_gi, y_gi)`` (``w_gi = 1/B``, or ``1/n_g`` on model g's n_g real rows and 0
    on padding), backward: ``dz = w (softmax(z) - onehot(y))``; for a layer with input a and output
    gradient d: ``dW = d^T a``, ``db = sum_i d_i``, and the input gradient ``d W`` where ``a > 0``
    (the ReLU's derivative, read from its output as autograd does). SGD as ``torch.optim.SGD``
    (dampening 0, no Nesterov): ``b <- m b + (g + wd p)``, ``p <- p - lr_g b``, with the weight
    gradient's product accumulated straight into the momentum buffer (``b <- m b + d^T a``, then
    ``+ wd p``): the same arithmetic in one pass fewer over the weights, rounded in another order.
    """

    def __init__(self, tensors: list[torch.Tensor], g_models: int, bsz: int, momentum: float,
                 weight_decay: float) -> None:
        self.tensors = tensors
        self.bufs = [torch.zeros_like(t) for t in tensors]
        self.momentum, self.weight_decay = momentum, weight_decay
        w1, _, w2, _, w3, _ = tensors
        new = functools.partial(torch.empty, dtype=w1.dtype, device=w1.device)
        self.h1, self.h2 = new(g_models, bsz, w1.shape[1]), new(g_models, bsz, w2.shape[1])
        self.z = new(g_models, bsz, w3.shape[1])
        self.d1, self.d2 = new(g_models, bsz, w1.shape[1]), new(g_models, bsz, w2.shape[1])

    @torch.no_grad()
    def sgd_step(self, x: torch.Tensor, y: torch.Tensor, row_weight: torch.Tensor | None, lrs: torch.Tensor,
                 active: torch.Tensor | None) -> None:
        """One SGD step of every model on inputs ``x`` (G, B, in) and labels ``y`` (G, B), model g
        with learning rate ``lrs[g]``; ``row_weight`` (G, B) None means 1/B everywhere; models where
        ``active`` is False keep their weights and momentum."""
        w1, b1, w2, b2, w3, b3 = self.tensors
        h1, h2, z, d1, d2 = self.h1, self.h2, self.z, self.d1, self.d2
        keep = None if active is None else [(t[~active].clone(), u[~active].clone())
                                            for t, u in zip(self.tensors, self.bufs)]
        torch.baddbmm(b1, x, w1.transpose(1, 2), out=h1).relu_()
        torch.baddbmm(b2, h1, w2.transpose(1, 2), out=h2).relu_()
        torch.baddbmm(b3, h2, w3.transpose(1, 2), out=z)
        dz = torch.softmax(z, dim=-1)
        dz.scatter_add_(2, y.unsqueeze(-1), torch.full(y.shape + (1,), -1.0, dtype=dz.dtype, device=dz.device))
        if row_weight is None:
            dz.div_(z.shape[1])
        else:
            dz.mul_(row_weight.unsqueeze(-1))
        # input gradients first: they read the weights before the step changes them
        _relu_backward(torch.bmm(dz, w3, out=d2), h2)
        _relu_backward(torch.bmm(d2, w2, out=d1), h1)
        bw1, bb1, bw2, bb2, bw3, bb3 = self.bufs
        m = self.momentum
        for bw, bb, d, a in ((bw3, bb3, dz, h2), (bw2, bb2, d2, h1), (bw1, bb1, d1, x)):
            bw.baddbmm_(d.transpose(1, 2), a, beta=m)
            bb.mul_(m).add_(d.sum(1, keepdim=True))
        lr = lrs.view(-1, 1, 1)
        for p, buf in zip(self.tensors, self.bufs):
            if self.weight_decay:
                buf.add_(p, alpha=self.weight_decay)
            p.addcmul_(lr, buf, value=-1.0)
        if keep is not None:
            off = ~active
            for (t0, u0), t, u in zip(keep, self.tensors, self.bufs):
                t[off], u[off] = t0, u0


def _relu_backward(grad: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``grad`` where the ReLU's output ``out`` is positive, else 0, in place: autograd's own kernel
    for ReLU's backward (``threshold_backward``), many times faster here than ``masked_fill_``."""
    return torch.ops.aten.threshold_backward.grad_input(grad, out, 0.0, grad_input=grad)
