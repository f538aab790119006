"""DP-SGD for G models in one loop: their per-sample gradients as one nested ``vmap`` (issue 45).

:class:`~defenses.dpsgd_trainer.DPSGDTrainer` computes one model's per-sample gradients with
``vmap(grad(loss))`` over the samples of a physical batch. DP-SGD's gradients vectorise across
models too: with the G models' parameters stacked along a leading axis, one ``vmap`` over the models
of that per-sample ``vmap`` computes every model's per-sample gradients of its own samples at once
(benchmarks/bench_stacked_cnn.py ``dpsgd`` measures it against one model after the other, and the
largest difference, float rounding).

Everything else stays each model's own, drawn exactly as alone: the G trainers are ordinary
:class:`DPSGDTrainer` objects (own seeds, Poisson sampling and augmentation generator, noise
generator, EMA, accountant); per logical step, model g draws its Poisson batch, and for each
physical chunk of it its augmented copies (:meth:`DPSGDTrainer._inputs`, from its own generator in
its own order; a model whose batch has fewer chunks draws nothing more, as alone). The chunks are
padded to the largest with zero images whose clipping factor is 0, so that
``sum_i min(1, C / ||g_i||) g_i`` is each model's own sum over its own samples; then each trainer
adds its own noise, takes its step, updates its EMA and its accountant (:meth:`DPSGDTrainer.finish_step`).
A model whose epoch has fewer logical steps (a smaller training set) sits the extra steps out.
"""

from __future__ import annotations

import torch

from defenses.dpsgd_trainer import DPSGDTrainer, Grads, clip_factors, per_sample_grad_fn, per_sample_norms


def train_dpsgd_stacked(trainers: list[DPSGDTrainer], ctxs: list | None = None) -> list[torch.nn.Module]:
    """Train every trainer's network as :meth:`DPSGDTrainer.train` would, all G in one loop; return
    their EMA models (eval mode). The trainers must share settings, device and training-set size
    regime (their steps per epoch may differ: a model with fewer steps per epoch sits the extra ones out)."""
    if not trainers:
        raise ValueError("train_dpsgd_stacked needs at least one trainer")
    first = trainers[0]
    if any(t.settings != first.settings or t.device != first.device for t in trainers):
        raise ValueError("train_dpsgd_stacked: every trainer must share the DP-SGD settings and the device")
    grad_fn = torch.func.vmap(per_sample_grad_fn(first.net), in_dims=(0, 0, 0, 0))
    s = first.settings
    spe = [t.steps_per_epoch for t in trainers]
    for epoch in range(s.epochs):
        for step in range(max(spe)):
            live = [t for t, n in zip(trainers, spe) if step < n]
            for t, (total, size) in zip(live, clipped_sums(live, grad_fn)):
                t.finish_step(total, size)
        for i, t in enumerate(trainers):
            if ctxs is not None:
                ctxs[i].report("train", (epoch + 1) / s.epochs)
    out = []
    for t in trainers:
        t.net.eval()
        out.append(t.served())
    return out


def clipped_sums(trainers: list[DPSGDTrainer], grad_fn) -> list[tuple[Grads, int]]:
    """One logical step's clipped per-sample gradient sums of every trainer (each on its own Poisson
    batch, drawn here) with the batch's size, the per-sample gradients of all of them in one nested
    vmap per physical chunk."""
    idxs = [t.poisson_batch() for t in trainers]
    params = {k: torch.stack([dict(t.net.named_parameters())[k].detach() for t in trainers])
              for k, _ in trainers[0].net.named_parameters()}
    buffers = {k: torch.stack([dict(t.net.named_buffers())[k] for t in trainers])
               for k, _ in trainers[0].net.named_buffers()}
    totals = {k: torch.zeros_like(p) for k, p in params.items()}  # (G, ...)
    p = trainers[0].settings.physical_batch_size
    chunks = max((len(i) + p - 1) // p for i in idxs) if idxs else 0
    for c in range(chunks):
        parts = [i[c * p : (c + 1) * p] for i in idxs]
        width = max(len(x) for x in parts)
        xs, ys, mask = [], [], torch.zeros(len(trainers), width, dtype=torch.bool, device=trainers[0].device)
        for g, (t, part) in enumerate(zip(trainers, parts)):
            n = len(part)
            if n:  # a model with no sample in this chunk draws nothing, as alone
                x, y = t._inputs(part), t._y[part]
            else:
                x = torch.zeros((0, t.k, *t._x.shape[1:]), device=t.device)
                y = t._y[:0]
            mask[g, :n] = True
            xs.append(torch.cat([x, x.new_zeros((width - n, *x.shape[1:]))]))
            ys.append(torch.cat([y, y.new_zeros(width - n)]))
        grads = grad_fn(params, buffers, torch.stack(xs), torch.stack(ys).unsqueeze(-1))  # {k: (G, width, ...)}
        norms = torch.func.vmap(per_sample_norms)(grads)  # (G, width)
        f = clip_factors(norms, trainers[0].settings.max_grad_norm) * mask
        for k, gk in grads.items():
            totals[k] += torch.einsum("gp,gp...->g...", f, gk)
    return [({k: v[g] for k, v in totals.items()}, len(i)) for g, i in enumerate(idxs)]
