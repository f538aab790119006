"""Many small models trained as one: G models with stacked weights, one batched step for all of them.

A small model leaves a CPU's vector units or a GPU idle and spends its step in Python and kernel
launch overhead; G models stacked along a leading axis run each layer as one batched operation.
Every model keeps what :func:`defenses.training.train_classifier` gives it when trained alone: its
own initialization (from its seed), its own training set (membership), its own data order and
augmentations (its own seeded generator, drawn in the same order), the same optimizer (SGD with
momentum and weight decay as ``torch.optim.SGD``: ``d = g + wd p``, ``b = m b + d``,
``p = p - lr b``) and learning-rate schedule (:func:`defenses.training.lr_factor`), and the same
loss (a defense's own loss, per model: :data:`StackedLoss`). Results equal one-at-a-time training
up to float rounding (the batched kernels sum in another order); tests/test_stacked.py and
tests/test_stacked_cnn.py check it.

Two engines:

- the plain ``mlp`` with cross-entropy (the quick preset's undefended models): the backward pass
  and the SGD update written out (:class:`_StackedMLP`: no autograd graph, buffers reused from
  step to step, the weight gradients accumulated straight into the momentum buffers); a model's
  weights are bit-identical whatever the size of its group;
- every other stackable recipe (``cnn``, ``airbench``, and ``mlp`` with a defense's own loss):
  the G networks as one grouped network (:mod:`defenses.grouped`: grouped convolutions,
  per-model BatchNorm statistics, batched linear layers), autograd for the backward pass and the
  SGD update on the stacked parameters with each model's own learning rate. A model's weights
  depend on its group's size at float rounding (the kernels' summation order changes with the
  number of groups), so the runner trains the models of a run in fixed blocks
  (:func:`harness.run.runner.make_groups`).

Training sets of different sizes are padded: each model's loss is the mean over its own batch
(padded rows masked out, and left out of its BatchNorm statistics), and a model whose epoch has
fewer steps than the longest one skips the extra steps entirely (no momentum, weight-decay or
running-statistics update), so its step count and schedule are its own. docs/executors.md says
which group sizes were measured and chosen.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from defenses.base import FitContext, LabeledImages, Normalizer
from defenses.grouped import batch_norms, from_grouped, group_networks, model_axis, to_grouped, ungroup_into
from defenses.models import MLP
from defenses.training import init_network, lr_factor, uses_channels_last
from harness.core.augment import AugmentDraws, apply_augment, augment_draws
from harness.core.config import TrainConfig


STACKABLE_MODELS = ("mlp", "cnn", "airbench")
#: the architectures :mod:`defenses.grouped` trains as one grouped network (the others are written out)
GROUPED_MODELS = ("cnn", "airbench")

#: per-model losses of a stacked step: ``loss(logits (G, B, K), targets (G, B) or (G, B, K),
#: row_weight (G, B), epoch) -> (G,)``, model g's loss as it would be alone on its real rows:
#: ``row_weight[g]`` is ``1 / k_g`` on its ``k_g`` real rows and 0 on padding (a mean over its
#: batch is ``sum_i w_gi l_gi``)
StackedLoss = Callable[["torch.Tensor", "torch.Tensor", "torch.Tensor", int], "torch.Tensor"]


def stackable(cfg: TrainConfig) -> bool:
    """Whether the recipe's models can be trained stacked (:func:`train_stacked`)."""
    return cfg.model in STACKABLE_MODELS


def _linears(net: MLP) -> list[nn.Linear]:
    layers = [m for m in net.body if isinstance(m, nn.Linear)] + [net.head]
    if len(layers) != 3 or any(isinstance(m, nn.BatchNorm1d) for m in net.body):
        raise ValueError("train_stacked needs the plain mlp architecture (3 Linear layers, no BatchNorm)")
    return layers


def cross_entropy_loss(logits: torch.Tensor, targets: torch.Tensor, row_weight: torch.Tensor,
                       epoch: int) -> torch.Tensor:
    """Each model's mean cross-entropy over its real rows: ``sum_i w_gi CE(z_gi, y_gi)`` (G,)."""
    g, b, k = logits.shape
    ce = nn.functional.cross_entropy(logits.reshape(g * b, k), targets.reshape(g * b, *targets.shape[2:]),
                                     reduction="none").view(g, b)
    return (ce * row_weight).sum(1)


@dataclass(frozen=True)
class StackOptions:
    """Speed settings of the grouped engine that change no formula: ``channels_last`` (None: the
    measured choice for the device, :func:`defenses.training.channels_last_default`), ``bf16`` (forward and loss under
    ``torch.autocast`` to bfloat16: changes the arithmetic, off unless asked) and ``compile``
    (``torch.compile`` of the grouped network's forward pass)."""

    channels_last: bool | None = None
    bf16: bool = False
    compile: bool = False


class _StackedBatches:
    """The G models' shared loop: each model's own permutation per epoch (from its own generator),
    its batches of ``batch_size`` rows padded to the longest epoch, its augmentation draws and its
    learning rate at each step. Model g's generator draws exactly what it draws alone
    (:func:`defenses.training.train_classifier`): the epoch's permutation, then each of its
    batches' augmentations, in order."""

    def __init__(self, trains: list[LabeledImages], ctxs: list[FitContext], cfg: TrainConfig, device: torch.device,
                 targets: list[np.ndarray] | None = None) -> None:
        self.trains, self.ctxs, self.cfg, self.device = trains, ctxs, cfg, device
        self.g = len(trains)
        self.sizes = [len(t) for t in trains]
        n_max = max(self.sizes)
        self.shape = trains[0].x.shape[1:]
        x_all = torch.zeros((self.g, n_max, *self.shape), dtype=torch.uint8)
        for g, t in enumerate(trains):
            x_all[g, : self.sizes[g]] = torch.from_numpy(t.x)
        src = [t.y for t in trains] if targets is None else targets
        t_all = torch.zeros((self.g, n_max, *src[0].shape[1:]), dtype=torch.from_numpy(src[0][:0]).dtype)
        for g, t in enumerate(src):
            t_all[g, : self.sizes[g]] = torch.from_numpy(t)
        self.normalize = Normalizer(trains[0].mean, trains[0].std, device)
        self.x_all, self.t_all = x_all.to(device), t_all.to(device)
        if not cfg.augment:  # the same elementwise arithmetic once per image instead of once per step
            self.x_all = self.normalize(self.x_all.reshape(self.g * n_max, *self.shape)).reshape(
                self.g, n_max, *self.shape)
        self.gens = [torch.Generator().manual_seed(c.seed) for c in ctxs]
        self.bsz = cfg.batch_size
        self.steps_per_epoch = [math.ceil(n / self.bsz) for n in self.sizes]
        self.totals = [s * cfg.epochs for s in self.steps_per_epoch]
        self.uniform = len(set(self.steps_per_epoch)) == 1  # every model at the same step, same learning rate
        self.step = np.zeros(self.g, dtype=np.int64)
        self.rows = torch.arange(self.g, device=device)[:, None]

    def lr_of(self, g: int) -> float:
        return self.cfg.lr * lr_factor(int(self.step[g]), self.totals[g], self.steps_per_epoch[g], self.cfg)

    def epochs(self) -> Iterator[Iterator[_Step]]:
        """One iterator of steps per epoch; progress is reported after each epoch."""
        for epoch in range(self.cfg.epochs):
            yield self._epoch(epoch)
            for c in self.ctxs:
                c.report("train", (epoch + 1) / self.cfg.epochs)

    def _epoch(self, epoch: int) -> Iterator[_Step]:
        bsz, spe_max = self.bsz, max(self.steps_per_epoch)
        # model g's permutation, padded with -1 to the longest epoch: step s reads columns [sB, (s+1)B)
        order = torch.full((self.g, spe_max * bsz), -1, dtype=torch.int64)
        for g, (n, gen) in enumerate(zip(self.sizes, self.gens)):
            order[g, :n] = torch.randperm(n, generator=gen)
        for s in range(spe_max):
            idx = order[:, s * bsz : (s + 1) * bsz]
            mask = idx >= 0
            counts = mask.sum(1)
            active = counts > 0
            idx_dev = idx.clamp(min=0).to(self.device)
            x = self.x_all[self.rows, idx_dev]
            if self.cfg.augment:
                x = self._augment(x, counts)
            full = bool(mask.all())
            # each model's loss is the mean over its own (unpadded) rows
            weight = (mask / counts.clamp(min=1)[:, None]).to(self.device, torch.float32)
            if self.uniform:  # every model at the same step
                lr = self.lr_of(0)
                lrs = torch.full((self.g,), lr, dtype=torch.float32, device=self.device)
            else:
                lr = None
                lrs = torch.tensor([self.lr_of(g) for g in range(self.g)], dtype=torch.float32, device=self.device)
            yield _Step(epoch, x, self.t_all[self.rows, idx_dev], mask, full, weight, lrs, lr,
                        None if bool(active.all()) else active, idx_dev, counts)
            self.step += active.numpy()

    def _augment(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Model g's first ``counts[g]`` rows augmented with its own draws, all G at once (padding
        rows unchanged), then normalized."""
        spec, shift = self.trains[0].augment, self.trains[0].augment.shift
        parts = [augment_draws(int(k), t.augment, gen) for k, t, gen in zip(counts, self.trains, self.gens)]
        b = self.bsz
        flat = x.reshape(self.g * b, *self.shape)

        def padded(attr: str, fill: Any) -> torch.Tensor | None:
            if getattr(parts[0], attr) is None:
                return None
            out = torch.full((self.g, b), fill, dtype=getattr(parts[0], attr).dtype)
            for g, d in enumerate(parts):
                out[g, : len(getattr(d, attr))] = getattr(d, attr)
            return out.view(-1)

        draws = AugmentDraws(padded("oy", shift), padded("ox", shift), padded("flip", False))
        out = apply_augment(flat, draws, spec.shift)
        return self.normalize(out).reshape(self.g, b, *self.shape)


@dataclass
class _Step:
    """One stacked step: inputs (G, B, ...) normalized, targets (G, B, ...), the real rows (G, B) bool
    on the CPU, whether every row is real, the row weights (G, B), each model's learning rate (G,)
    on the device and, where every model is at the same step, that rate as a number (``lr``), and
    the models taking the step (None: all), the rows read (G, B) on the device (padding: row 0) and
    each model's count of real rows (G,) on the CPU (its real rows are the first ones)."""

    epoch: int
    x: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    full: bool
    row_weight: torch.Tensor
    lrs: torch.Tensor
    lr: float | None
    active: torch.Tensor | None
    idx: torch.Tensor
    counts: torch.Tensor


def train_group_networks(trains: list[LabeledImages], ctxs: list[FitContext], *,
                         targets: list[np.ndarray] | None = None, loss: StackedLoss | None = None,
                         options: StackOptions | None = None) -> list[nn.Module] | None:
    """The networks of a group (the recipe's architecture, each initialized from its own seed)
    trained stacked; None where the group trains one model at a time instead (a defense's
    ``fit_group`` then returns None): a recipe that is not :func:`stackable`, or a lone model of the
    grouped engine (it trains alone, by :func:`defenses.training.train_classifier`)."""
    cfg = ctxs[0].train
    if not stackable(cfg):
        return None
    if len(trains) == 1 and (cfg.model in GROUPED_MODELS or targets is not None or loss is not None):
        return None
    nets = [init_network(t, c) for t, c in zip(trains, ctxs)]
    return train_stacked(nets, trains, ctxs, targets=targets, loss=loss, options=options)


def train_stacked(nets: list[nn.Module], trains: list[LabeledImages], ctxs: list[FitContext],
                  cfg: TrainConfig | None = None, *, targets: list[np.ndarray] | None = None,
                  loss: StackedLoss | None = None, options: StackOptions | None = None) -> list[nn.Module]:
    """Train ``nets[g]`` on ``trains[g]`` with ``ctxs[g].seed`` as :func:`train_classifier` would,
    all G in one batched loop; the trained weights are copied back into ``nets`` (eval mode).

    ``targets[g]`` replaces model g's labels (soft labels (N_g, K), say) and ``loss`` the
    cross-entropy (:data:`StackedLoss`). Every context must share the recipe and device; the
    generator of model g is seeded with ``ctxs[g].seed`` and draws the epoch permutation, then
    each batch's augmentation, as alone.
    """
    if not nets or not (len(nets) == len(trains) == len(ctxs)):
        raise ValueError("train_stacked needs as many networks, training sets and contexts, at least one")
    if targets is not None and len(targets) != len(nets):
        raise ValueError("train_stacked needs one targets array per network")
    cfg = cfg or ctxs[0].train
    device = torch.device(ctxs[0].device)
    if any(torch.device(c.device) != device for c in ctxs):
        raise ValueError("train_stacked: every model of a group must train on one device")
    if cfg.model == "mlp" and loss is None and targets is None and (options is None or options == StackOptions()):
        return _train_mlp_written_out(nets, trains, ctxs, cfg, device)
    return _train_grouped(nets, trains, ctxs, cfg, device, targets, loss or cross_entropy_loss, options or StackOptions())


def _train_grouped(nets: list[nn.Module], trains: list[LabeledImages], ctxs: list[FitContext], cfg: TrainConfig,
                   device: torch.device, targets: list[np.ndarray] | None, loss: StackedLoss,
                   options: StackOptions) -> list[nn.Module]:
    """The grouped engine (:mod:`defenses.grouped`): forward and loss of all G models as one network,
    autograd's backward, then SGD on the stacked parameters, model g with its own learning rate."""
    g_models = len(nets)
    nets = [n.to(device) for n in nets]
    net = group_networks(nets).to(device).train()
    channels_last = uses_channels_last(net, device, options.channels_last)
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    forward = torch.compile(net) if options.compile else net
    norms = batch_norms(net)
    params = list(net.parameters())
    bufs = [torch.zeros_like(p) for p in params] if cfg.momentum else []
    steps_taken = np.zeros(g_models, dtype=np.int64)
    data = _StackedBatches(trains, ctxs, cfg, device, targets)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=options.bf16)
    for epoch_steps in data.epochs():
        for st in epoch_steps:
            xg = to_grouped(st.x)
            if channels_last:
                xg = xg.contiguous(memory_format=torch.channels_last)
            mask = None if st.full else st.mask.t().to(device)  # (B, G)
            for bn in norms:
                bn.row_mask = mask
            with autocast:
                logits = from_grouped(forward(xg), g_models)
                per_model = loss(logits.float(), st.targets, st.row_weight, st.epoch)
            for p in params:
                p.grad = None
            per_model.sum().backward()
            # models without a real row this step keep their weights and momentum (the masked
            # BatchNorm already left their running statistics as they were)
            _sgd_step_active(params, bufs, st, g_models, cfg)
            steps_taken += (st.mask.sum(1) > 0).numpy()
    for bn in norms:
        bn.row_mask = None
        bn.num_batches_tracked.zero_()
    ungroup_into(net, nets, [int(s) for s in steps_taken])
    return [n.eval() for n in nets]


@torch.no_grad()
def _sgd_step_active(params: list[torch.Tensor], bufs: list[torch.Tensor], st: Any, g_models: int,
                     cfg: TrainConfig) -> None:
    """:func:`_sgd_step` on the stacked parameters, the models without a real row in step ``st``
    (``st.active`` False) left with their weights and momentum as they were."""
    off = [] if st.active is None else (~st.active).nonzero().view(-1).tolist()
    keep = [[model_axis(t, g_models)[i].clone() for t in params + bufs] for i in off]
    _sgd_step(params, bufs, st.lrs, st.lr, g_models, cfg)
    with torch.no_grad():
        for i, saved in zip(off, keep):
            for t, t0 in zip(params + bufs, saved):
                model_axis(t, g_models)[i] = t0


def _sgd_step(params: list[torch.Tensor], bufs: list[torch.Tensor], lrs: torch.Tensor, lr: float | None,
              g_models: int, cfg: TrainConfig) -> None:
    """``torch.optim.SGD``'s update (dampening 0, no Nesterov) on stacked parameters:
    ``d = g + wd p``, ``b = m b + d`` (``b = d`` without momentum; from a zero buffer, ``b = d`` at the
    first step, as torch's), ``p = p - lr_g b``; ``lr`` (not None): every model's rate, else ``lrs``."""
    grads = [p.grad for p in params]
    if cfg.weight_decay:
        torch._foreach_add_(grads, params, alpha=cfg.weight_decay)
    if bufs:
        torch._foreach_mul_(bufs, cfg.momentum)
        torch._foreach_add_(bufs, grads)
        step = bufs
    else:
        step = grads
    if lr is not None:
        torch._foreach_add_(params, step, alpha=-lr)
        return
    for p, b in zip(params, step):
        pv, bv = model_axis(p, g_models), model_axis(b, g_models)
        pv.addcmul_(lrs.view(-1, *([1] * (pv.dim() - 1))), bv, value=-1.0)


def _train_mlp_written_out(nets: list[MLP], trains: list[LabeledImages], ctxs: list[FitContext], cfg: TrainConfig,
                           device: torch.device) -> list[MLP]:
    """The written-out engine for the plain ``mlp`` with cross-entropy (:class:`_StackedMLP`)."""
    if len(nets) == 1 and device.type == "cpu" and torch.get_num_threads() > 1:
        # With several threads, the BLAS splits a lone product across them and sums in another order
        # than the same product in a batch (measured: layer 3's weight gradient). A lone model trains
        # beside a copy of itself instead, so a model's weights do not depend on its group's size.
        _train_mlp_written_out([nets[0], copy.deepcopy(nets[0])], [trains[0]] * 2, [ctxs[0]] * 2, cfg, device)
        return [nets[0]]
    g_models = len(nets)
    layers = [_linears(net) for net in nets]
    # nn.Linear's layout: (G, out, in) weights, (G, 1, out) biases; a layer is x @ W^T + b
    weights = [torch.stack([ls[i].weight.detach() for ls in layers]).to(device).contiguous() for i in range(3)]
    biases = [torch.stack([ls[i].bias.detach() for ls in layers]).unsqueeze(1).to(device).contiguous()
              for i in range(3)]
    tensors = [t for pair in zip(weights, biases) for t in pair]  # W1, b1, W2, b2, W3, b3
    data = _StackedBatches(trains, ctxs, cfg, device)
    stack = _StackedMLP(tensors, g_models, cfg.batch_size, cfg.momentum, cfg.weight_decay)
    for epoch_steps in data.epochs():
        for st in epoch_steps:
            stack.sgd_step(st.x.reshape(g_models, cfg.batch_size, -1), st.targets,
                           None if st.full else st.row_weight, st.lrs,
                           None if st.active is None else st.active.to(device))
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
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The logits (G, B, K) of inputs ``x`` (G, B, in), into a buffer the next step overwrites;
        the hidden activations stay for the backward pass (:meth:`step_from_logit_gradient`)."""
        w1, b1, w2, b2, w3, b3 = self.tensors
        torch.baddbmm(b1, x, w1.transpose(1, 2), out=self.h1).relu_()
        torch.baddbmm(b2, self.h1, w2.transpose(1, 2), out=self.h2).relu_()
        return torch.baddbmm(b3, self.h2, w3.transpose(1, 2), out=self.z)

    @torch.no_grad()
    def sgd_step(self, x: torch.Tensor, y: torch.Tensor, row_weight: torch.Tensor | None, lrs: torch.Tensor,
                 active: torch.Tensor | None) -> None:
        """One SGD step of every model on inputs ``x`` (G, B, in) and labels ``y`` (G, B), model g
        with learning rate ``lrs[g]``; ``row_weight`` (G, B) None means 1/B everywhere; models where
        ``active`` is False keep their weights and momentum."""
        keep = self._kept(active)
        z = self.forward(x)
        dz = torch.softmax(z, dim=-1)
        dz.scatter_add_(2, y.unsqueeze(-1), torch.full(y.shape + (1,), -1.0, dtype=dz.dtype, device=dz.device))
        if row_weight is None:
            dz.div_(z.shape[1])
        else:
            dz.mul_(row_weight.unsqueeze(-1))
        self._update(x, dz, lrs, active, keep)

    @torch.no_grad()
    def step_from_logit_gradient(self, x: torch.Tensor, dz: torch.Tensor, lrs: torch.Tensor,
                                 active: torch.Tensor | None,
                                 extra: Sequence[tuple[int, int, torch.Tensor]] = ()) -> None:
        """One SGD step of every model after :meth:`forward` on the same ``x``, from the gradient
        ``dz`` (G, B, K) of each model's loss with respect to its logits (a defense's own loss,
        differentiated by autograd); ``extra`` adds gradients the loss has with respect to a model's
        weights directly, ``(tensor index in W1, b1, W2, b2, W3, b3; model; gradient)``."""
        self._update(x, dz, lrs, active, self._kept(active), extra)

    def _kept(self, active: torch.Tensor | None) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        return None if active is None else [(t[~active].clone(), u[~active].clone())
                                            for t, u in zip(self.tensors, self.bufs)]

    def _update(self, x: torch.Tensor, dz: torch.Tensor, lrs: torch.Tensor, active: torch.Tensor | None,
                keep: list[tuple[torch.Tensor, torch.Tensor]] | None,
                extra: Sequence[tuple[int, int, torch.Tensor]] = ()) -> None:
        w1, b1, w2, b2, w3, b3 = self.tensors
        h1, h2, d1, d2 = self.h1, self.h2, self.d1, self.d2
        # input gradients first: they read the weights before the step changes them
        _relu_backward(torch.bmm(dz, w3, out=d2), h2)
        _relu_backward(torch.bmm(d2, w2, out=d1), h1)
        bw1, bb1, bw2, bb2, bw3, bb3 = self.bufs
        m = self.momentum
        for bw, bb, d, a in ((bw3, bb3, dz, h2), (bw2, bb2, d2, h1), (bw1, bb1, d1, x)):
            bw.baddbmm_(d.transpose(1, 2), a, beta=m)
            bb.mul_(m).add_(d.sum(1, keepdim=True))
        for i, g, grad in extra:
            self.bufs[i][g].add_(grad.view_as(self.bufs[i][g]))
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


# --- a defense's own train_classifier calls, stacked (a plugin's fit: defenses/cotrain.py) ------


@dataclass
class ModelCall:
    """One model's call of :func:`defenses.training.train_classifier`, with its arguments (``cfg``
    resolved: the recipe the call trains with)."""

    net: nn.Module
    train: LabeledImages
    ctx: FitContext
    cfg: TrainConfig
    targets: np.ndarray | None = None
    loss_fn: Callable[..., torch.Tensor] | None = None
    epoch_hook: Callable[[int, nn.Module], np.ndarray | None] | None = None
    channels_last: bool | None = None

    def plain(self) -> bool:
        """Cross-entropy on the labels, no hook: what the undefended model trains with."""
        return self.targets is None and self.loss_fn is None and self.epoch_hook is None


class ModelCode:
    """How a stacked loop runs a model's own code: ``loss(g)`` and ``hook(g)`` are context managers
    entered around every call of model g's loss and epoch hook (:mod:`defenses.cotrain` gives each
    model its own global RNGs there and names the model whose code raised). Default: nothing.
    ``equivalent(a, b)``: whether two values the models' losses capture behave as one (default:
    the same object; :mod:`defenses.cotrain` also counts the models' copies of one defense object
    whose attributes are the same objects)."""

    def loss(self, g: int) -> ContextManager[None]:
        return contextlib.nullcontext()

    def hook(self, g: int) -> ContextManager[None]:
        return contextlib.nullcontext()

    def equivalent(self, a: Any, b: Any) -> bool:
        return a is b


#: (kind, image shape, classes, width) -> what build_model builds for it: class, repr, parameter shapes
_BUILT: dict[tuple[Any, ...], tuple[type, str, list[tuple[str, tuple[int, ...]]]]] = {}


def built_kind(net: nn.Module) -> str | None:
    """The stackable kind (:data:`STACKABLE_MODELS`) of a network exactly as
    :func:`defenses.models.build_model` builds it for the ``harness_arch`` it carries: the same
    class and layers (``repr``), parameter shapes, float32 weights that all train, no forward of its
    own and no hooks. None for any other network, which no stacked loop may train: the loops
    rebuild the recorded architecture's computation (:func:`train_calls`)."""
    from defenses.models import build_model

    arch = getattr(net, "harness_arch", None)
    if not isinstance(arch, dict) or arch.get("kind") not in STACKABLE_MODELS:
        return None
    try:
        key = (arch["kind"], tuple(arch["image_shape"]), int(arch["num_classes"]), int(arch["width"]))
    except (KeyError, TypeError, ValueError):
        return None
    if key not in _BUILT:
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            ref = build_model(*key)
        _BUILT[key] = (type(ref), repr(ref), [(n, tuple(p.shape)) for n, p in ref.named_parameters()])
    cls, text, shapes = _BUILT[key]
    if type(net) is not cls or "forward" in vars(net) or repr(net) != text:
        return None
    if [(n, tuple(p.shape)) for n, p in net.named_parameters()] != shapes:
        return None
    if any(p.dtype != torch.float32 or not p.requires_grad for p in net.parameters()):
        return None
    if any(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or getattr(m, "_backward_pre_hooks", None)
           for m in net.modules()):
        return None
    return arch["kind"]


def call_key(call: ModelCall) -> tuple[Any, ...] | None:
    """What calls must share to train in one stacked loop (:func:`train_calls`): the network's
    architecture (:func:`built_kind`), the recipe, the device, the layout and the training images'
    shape, classes, normalization and augmentation; None for a call no stacked loop trains (another
    network, images that are not uint8 (N, C, H, W), targets that are not one row per image)."""
    kind = built_kind(call.net)
    t = call.train
    if kind is None or not isinstance(t.x, np.ndarray) or t.x.dtype != np.uint8 or t.x.ndim != 4 or len(t) == 0:
        return None
    if call.targets is not None and (not isinstance(call.targets, np.ndarray) or len(call.targets) != len(t)):
        return None
    device = torch.device(call.ctx.device)
    return (kind, repr(call.net), call.cfg.model_dump_json(), str(device),
            uses_channels_last(call.net, device, call.channels_last), tuple(t.x.shape[1:]), t.num_classes,
            tuple(t.mean), tuple(t.std), t.augment)


def train_calls(calls: list[ModelCall], code: ModelCode | None = None) -> None:
    """Train every call's network in place, each as :func:`defenses.training.train_classifier`
    would alone, all in one stacked loop (the calls share one :func:`call_key`); the networks end in
    eval mode. Calls without a loss, targets or hook of their own train as the undefended models do
    (:func:`train_stacked`'s engines); otherwise each model's loss is its own ``loss_fn`` on its own
    rows, targets and epoch (:func:`_train_mlp_calls`, :func:`_train_grouped_calls`), and its epoch
    hook gets its own network, whose weights are the stacked loop's own (views), current at every
    step. ``code`` runs the models' own code (:class:`ModelCode`)."""
    if not calls or call_key(calls[0]) is None or any(call_key(c) != call_key(calls[0]) for c in calls[1:]):
        raise ValueError("train_calls needs calls that train stacked together (one call_key)")
    code = code or ModelCode()
    cfg, device = calls[0].cfg, torch.device(calls[0].ctx.device)
    nets, trains, ctxs = [c.net for c in calls], [c.train for c in calls], [c.ctx for c in calls]
    mlp = built_kind(nets[0]) == "mlp"
    if all(c.plain() for c in calls):
        if mlp:
            _train_mlp_written_out(nets, trains, ctxs, cfg, device)
        else:
            _train_grouped(nets, trains, ctxs, cfg, device, None, cross_entropy_loss,
                           StackOptions(channels_last=calls[0].channels_last))
        return
    if mlp:
        _train_mlp_calls(calls, cfg, device, code)
    else:
        _train_grouped_calls(calls, cfg, device, code)


def _cross_entropy(logits: torch.Tensor, targets: torch.Tensor, epoch: int) -> torch.Tensor:
    """:func:`defenses.training.train_classifier`'s loss when none is given."""
    return nn.functional.cross_entropy(logits, targets)


def _own_targets(calls: list[ModelCall], device: torch.device) -> list[torch.Tensor]:
    return [torch.from_numpy(c.train.y if c.targets is None else c.targets).to(device) for c in calls]


def _run_hooks(calls: list[ModelCall], nets: list[nn.Module], targets: list[torch.Tensor], epoch: int,
               code: ModelCode, device: torch.device) -> None:
    """Each model's epoch hook before epoch ``epoch``, on its own network; new targets replace its own."""
    for g, c in enumerate(calls):
        if c.epoch_hook is None:
            continue
        with code.hook(g):
            new = c.epoch_hook(epoch, nets[g])
        nets[g].train()
        if new is not None:
            targets[g] = torch.from_numpy(new).to(device)


class _ModelLosses:
    """Each model's own loss on a step, as alone: its ``loss_fn`` (cross-entropy without one) of its
    logits on its k_g real rows (a fresh (k_g, K) tensor), their targets and the epoch; a model without
    a real row takes no step and computes nothing.

    Where every model's loss is one function (:func:`_one_function`: the same code and the same
    captured values, as when a plugin's ``fit`` defines it from its parameters alone) and every model
    has a full batch, the G losses are one call through ``torch.func.vmap``: the same function of
    each model's logits and targets, batched, which costs about what one model's call costs (a
    loss's few small operations are bound by their per-operation overhead, not their arithmetic).
    vmap refuses what it cannot batch exactly (random numbers, a value read into Python, a loss
    that is not one number per model); then, and for ragged steps, each model's loss is called on
    its own (:class:`ModelCode`: with its own torch RNG), as for losses that differ per model (one
    that reads the model's own network, say)."""

    def __init__(self, calls: list[ModelCall], code: ModelCode) -> None:
        self.calls, self.code = calls, code
        fns = [c.loss_fn or _cross_entropy for c in calls]
        self.batched = torch.func.vmap(fns[0], in_dims=(0, 0, None), randomness="error") \
            if _one_function(fns, code.equivalent) else None

    def __call__(self, logits: torch.Tensor, st: _Step, targets: list[torch.Tensor]) -> list[torch.Tensor]:
        if self.batched is not None and st.full:
            out = self._together(logits, st, targets)
            if out is not None:
                return [out.sum()]
        out = []
        for g, (c, k) in enumerate(zip(self.calls, st.counts.tolist())):
            if not k:
                continue
            z = logits[g, :k].clone()
            t = targets[g][st.idx[g, :k]]
            with self.code.loss(g):
                out.append((c.loss_fn or _cross_entropy)(z, t, st.epoch))
        return out

    def _together(self, logits: torch.Tensor, st: _Step, targets: list[torch.Tensor]) -> torch.Tensor | None:
        """The G losses (G,) of one vmapped call, or None (then never again) where vmap cannot give them."""
        if len({(t.dtype, t.shape[1:]) for t in targets}) != 1:
            return None
        t = torch.stack([targets[g][st.idx[g]] for g in range(len(targets))])
        try:
            out = self.batched(logits, t, st.epoch)  # type: ignore[misc]
        except Exception:  # noqa: BLE001 (not batchable: each model's own call says what is wrong, if anything)
            out = None
        if not (isinstance(out, torch.Tensor) and out.dim() >= 1 and out.shape[0] == len(targets)
                and out[0].numel() == 1 and out.requires_grad and out.is_floating_point()):
            self.batched = None
            return None
        return out


def _one_function(fns: list[Callable[..., Any]], equivalent: Callable[[Any, Any], bool]) -> bool:
    """Whether the callables compute one function: the same object, or plain functions with the same
    code, globals and defaults whose captured variables hold equivalent values (:func:`_same_values`);
    bound methods of equivalent objects."""
    first = fns[0]
    for f in fns[1:]:
        if f is first:
            continue
        if inspect.ismethod(first) and inspect.ismethod(f):
            if f.__func__ is not first.__func__ or not _same_values([f.__self__], [first.__self__], equivalent):
                return False
            continue
        if not (inspect.isfunction(first) and inspect.isfunction(f)):
            return False
        kw_f, kw_0 = f.__kwdefaults__ or {}, first.__kwdefaults__ or {}
        if (f.__code__ is not first.__code__ or f.__globals__ is not first.__globals__
                or not _same_values(f.__defaults__ or (), first.__defaults__ or (), equivalent)
                or sorted(kw_f) != sorted(kw_0)
                or not _same_values([kw_f[k] for k in sorted(kw_f)], [kw_0[k] for k in sorted(kw_0)], equivalent)):
            return False
        try:
            cells_f = [c.cell_contents for c in f.__closure__ or ()]
            cells_0 = [c.cell_contents for c in first.__closure__ or ()]
        except ValueError:  # an empty cell
            return False
        if not _same_values(cells_f, cells_0, equivalent):
            return False
    return True


_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None))


def _same_values(a: Any, b: Any, equivalent: Callable[[Any, Any], bool]) -> bool:
    """Pairwise the same object, values of one immutable scalar type with the same ``repr``, or
    ``equivalent``."""
    if len(a) != len(b):
        return False
    return all(x is y or (type(x) is type(y) and type(x) in _IMMUTABLE and repr(x) == repr(y)) or equivalent(x, y)
               for x, y in zip(a, b))


def _backward(losses: list[torch.Tensor]) -> None:
    """``loss.backward()`` of every model's loss at once (each model's gradients are its own loss's)."""
    torch.autograd.backward(losses)


def _direct_gradients(owned: list[list[torch.Tensor]]) -> list[tuple[int, int, torch.Tensor]]:
    """(tensor index, model, gradient) of every gradient a loss left on a model's own parameters (a
    loss that reads them: a penalty on the weights, another forward pass of the network), taken off
    them: the stacked step adds them to the model's gradient, as the optimizer alone would see it."""
    out = []
    for g, params in enumerate(owned):
        for i, p in enumerate(params):
            if p.grad is not None:
                out.append((i, g, p.grad))
                p.grad = None
    return out


def _alias(mine: torch.Tensor, stacked: torch.Tensor) -> None:
    """Make a model's own parameter or buffer (the same Python object) a view of its share of the
    stacked tensor: what its fit, its loss and its hook read is the stacked loop's current value."""
    mine.data = stacked.view(mine.shape)


def _unalias(owned: list[list[torch.Tensor]]) -> None:
    """Give the models' parameters and buffers storage of their own again, with their trained values."""
    for tensors in owned:
        for t in tensors:
            t.data = t.detach().clone()


def _train_mlp_calls(calls: list[ModelCall], cfg: TrainConfig, device: torch.device, code: ModelCode) -> None:
    """The written-out MLP engine (:class:`_StackedMLP`) with each model's own loss: the forward pass
    and the backward pass through the layers written out as for cross-entropy, the gradient of each
    model's loss with respect to its logits from autograd (:class:`_ModelLosses`), plus any gradient
    the loss has with respect to the model's weights directly (:func:`_direct_gradients`)."""
    g_models = len(calls)
    nets = [c.net for c in calls]
    layers = [_linears(net) for net in nets]
    weights = [torch.stack([ls[i].weight.detach() for ls in layers]).to(device).contiguous() for i in range(3)]
    biases = [torch.stack([ls[i].bias.detach() for ls in layers]).unsqueeze(1).to(device).contiguous()
              for i in range(3)]
    tensors = [t for pair in zip(weights, biases) for t in pair]  # W1, b1, W2, b2, W3, b3
    owned: list[list[torch.Tensor]] = []
    for g, ls in enumerate(layers):
        mine: list[torch.Tensor] = []
        for i, lin in enumerate(ls):
            _alias(lin.weight, weights[i][g])
            _alias(lin.bias, biases[i][g, 0])
            mine += [lin.weight, lin.bias]
        owned.append(mine)
    for net in nets:
        net.train()
        for p in net.parameters():
            p.grad = None
    targets = _own_targets(calls, device)
    data = _StackedBatches([c.train for c in calls], [c.ctx for c in calls], cfg, device)
    stack = _StackedMLP(tensors, g_models, cfg.batch_size, cfg.momentum, cfg.weight_decay)
    losses = _ModelLosses(calls, code)
    try:
        for epoch, epoch_steps in enumerate(data.epochs()):
            _run_hooks(calls, nets, targets, epoch, code, device)
            for st in epoch_steps:
                x = st.x.reshape(g_models, cfg.batch_size, -1)
                z = stack.forward(x).clone().requires_grad_()
                _backward(losses(z, st, targets))
                dz = z.grad if z.grad is not None else torch.zeros_like(z)
                stack.step_from_logit_gradient(x, dz, st.lrs, None if st.active is None else st.active.to(device),
                                               _direct_gradients(owned))
    finally:
        _unalias(owned)
    for net in nets:
        net.eval()


def _alias_grouped(grouped: nn.Module, nets: list[nn.Module]) -> tuple[list[list[torch.Tensor]],
                                                                       list[tuple[torch.Tensor, list[torch.Tensor]]]]:
    """Every model's parameters and BatchNorm statistics made views of its share of the grouped
    network's (:func:`_alias`); returns each model's aliased tensors and, per grouped parameter,
    the models' own parameters that are its shares."""
    from defenses.grouped import GroupedBatchNorm2d, GroupedLinear

    g_models = len(nets)
    per_net = [dict(n.named_modules()) for n in nets]
    owned: list[list[torch.Tensor]] = [[] for _ in nets]
    shares: list[tuple[torch.Tensor, list[torch.Tensor]]] = []
    for name, mod in grouped.named_modules():
        if isinstance(mod, GroupedBatchNorm2d):
            params, stats = ["weight", "bias"], ["running_mean", "running_var"]
        elif isinstance(mod, (nn.Conv2d, GroupedLinear)):
            params, stats = ["weight"] + (["bias"] if mod.bias is not None else []), []
        else:
            continue
        for attr in params + stats:
            stacked = getattr(mod, attr)
            mine = [getattr(p[name], attr) for p in per_net]
            for g, t in enumerate(mine):
                _alias(t, model_axis(stacked.detach(), g_models)[g])
                owned[g].append(t)
            if attr in params:
                shares.append((stacked, mine))
    return owned, shares


def _train_grouped_calls(calls: list[ModelCall], cfg: TrainConfig, device: torch.device, code: ModelCode) -> None:
    """The grouped engine (:func:`_train_grouped`) with each model's own loss (:class:`_ModelLosses`)
    and epoch hook, the models' own networks views of the grouped one (:func:`_alias_grouped`)."""
    g_models = len(calls)
    nets = [c.net.to(device) for c in calls]
    net = group_networks(nets).to(device).train()
    if uses_channels_last(net, device, calls[0].channels_last):
        net = net.to(memory_format=torch.channels_last)
        layout = torch.channels_last
    else:
        layout = torch.contiguous_format
    owned, shares = _alias_grouped(net, nets)
    counted = [[m for m in n.modules() if isinstance(m, nn.BatchNorm2d)] for n in nets]
    for n in nets:
        n.train()
        for p in n.parameters():
            p.grad = None
    norms = batch_norms(net)
    params = list(net.parameters())
    bufs = [torch.zeros_like(p) for p in params] if cfg.momentum else []
    steps_taken = np.zeros(g_models, dtype=np.int64)
    data = _StackedBatches([c.train for c in calls], [c.ctx for c in calls], cfg, device)
    targets = _own_targets(calls, device)
    losses = _ModelLosses(calls, code)
    try:
        for epoch, epoch_steps in enumerate(data.epochs()):
            _run_hooks(calls, nets, targets, epoch, code, device)
            for st in epoch_steps:
                xg = to_grouped(st.x).contiguous(memory_format=layout)
                mask = None if st.full else st.mask.t().to(device)  # (B, G)
                for bn in norms:
                    bn.row_mask = mask
                logits = from_grouped(net(xg), g_models)
                for p in params:
                    p.grad = None
                _backward(losses(logits, st, targets))
                for stacked, mine in shares:
                    if stacked.grad is None:
                        stacked.grad = torch.zeros_like(stacked)
                    for g, t in enumerate(mine):
                        if t.grad is not None:  # the loss read model g's own parameter directly
                            model_axis(stacked.grad, g_models)[g].add_(t.grad.view_as(model_axis(stacked, g_models)[g]))
                            t.grad = None
                _sgd_step_active(params, bufs, st, g_models, cfg)
                steps_taken += (st.mask.sum(1) > 0).numpy()
    finally:
        for bn in norms:
            bn.row_mask = None
        _unalias(owned)
    with torch.no_grad():  # each BatchNorm counts the steps its model took (besides its loss's own passes)
        for g, ms in enumerate(counted):
            for m in ms:
                m.num_batches_tracked.add_(int(steps_taken[g]))
    for n in nets:
        n.eval()
