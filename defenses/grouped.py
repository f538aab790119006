"""G networks of one architecture as one grouped network: what the stacked trainer runs for CNNs.

:func:`group_networks` builds, from G networks of the same architecture, one network whose every
layer holds the G models' layers side by side along the channel axis, so that one forward pass
runs all G on their own inputs:

- ``Conv2d(cin, cout, groups=k)`` -> ``Conv2d(G cin, G cout, groups=G k)``: the grouped
  convolution's group g (of each of the k original groups) sees only model g's channels, so model
  g's output channels ``[g cout, (g+1) cout)`` are its own convolution of its own input;
- ``BatchNorm2d(C)`` -> :class:`GroupedBatchNorm2d` (G C channels): batch statistics are per
  channel, hence per model, and so are the running statistics; on a step where the models' batches
  have different numbers of real rows (padded rows), each model's statistics use only its own
  rows (:meth:`GroupedBatchNorm2d.forward`);
- ``Linear(fin, fout)`` -> :class:`GroupedLinear`: G independent products ``x_g W_g^T + b_g`` as
  one batched matrix product (``torch.baddbmm``) on the (B, G fin) activations;
- parameter-free layers (ReLU, GELU, max and average pooling, Flatten, Identity, containers) are
  kept: they act per channel or per position, and ``Flatten`` of (B, G C, H, W) puts model g's
  C H W features contiguously at ``[g C H W, (g+1) C H W)``, the order it flattens them alone.

The network's own ``forward`` is reused (``SmallCNN``, ``AirbenchNet``, ``MLP``: ``head(body(x))``),
on the grouped input (B, G C, H, W) (:func:`to_grouped`); its output (B, G K) is read back per
model by :func:`from_grouped`. Gradients of model g's parameters depend only on model g's loss:
nothing mixes the channels of two models. :func:`ungroup_into` copies the trained weights and
running statistics back into the G networks.
"""

from __future__ import annotations

import copy
from typing import Iterator

import torch
from torch import nn

from defenses.models import AvgPoolTo

#: modules without parameters or buffers that act per channel or per position: kept as they are
_KEPT = (nn.ReLU, nn.GELU, nn.MaxPool2d, nn.Flatten, nn.Identity, AvgPoolTo, nn.Sequential)


class GroupedLinear(nn.Module):
    """G ``nn.Linear(fin, fout)`` layers: input (B, G fin), output (B, G fout); weight (G, fout, fin),
    bias (G, fout) or None."""

    def __init__(self, groups: int, fin: int, fout: int, bias: bool) -> None:
        super().__init__()
        self.groups, self.fin, self.fout = groups, fin, fout
        self.weight = nn.Parameter(torch.empty(groups, fout, fin))
        self.bias = nn.Parameter(torch.empty(groups, fout)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        h = x.reshape(b, self.groups, self.fin).transpose(0, 1)  # (G, B, fin)
        if self.bias is None:
            out = torch.bmm(h, self.weight.transpose(1, 2))
        else:
            out = torch.baddbmm(self.bias.unsqueeze(1), h, self.weight.transpose(1, 2))
        return out.transpose(0, 1).reshape(b, self.groups * self.fout)


class GroupedBatchNorm2d(nn.BatchNorm2d):
    """``BatchNorm2d`` over the G C channels of G models, with an optional row mask.

    Without a mask (every model's batch full) it is ``nn.BatchNorm2d`` itself: per-channel batch
    statistics, per-channel running statistics. With ``row_mask`` (B, G) bool set (a step where
    model g has only ``k_g`` real rows, the rest padding), model g's channels are normalized with
    the mean and biased variance over its ``k_g`` rows and all positions, ``n_g = k_g H W`` values:
    ``mu = sum(x) / n_g``, ``var = sum((x - mu)^2) / n_g``, ``y = (x - mu) / sqrt(var + eps) w + b``;
    its running statistics move by ``momentum`` towards ``mu`` and the unbiased ``var n_g / (n_g - 1)``
    (as ``nn.BatchNorm2d`` alone on those k_g rows); a model with no real row keeps them.
    """

    row_mask: torch.Tensor | None = None

    def __init__(self, groups: int, channels: int, eps: float, momentum: float | None) -> None:
        super().__init__(groups * channels, eps=eps, momentum=momentum)
        self.groups, self.channels = groups, channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.row_mask is None or not self.training:
            return super().forward(x)
        if self.momentum is None:
            raise ValueError("grouped BatchNorm with a row mask needs a momentum (cumulative averages are not stacked)")
        b, _, h, w = x.shape
        x = x.float()  # statistics in float32, as batch_norm computes them under autocast
        m = self.row_mask.to(x.dtype)  # (B, G)
        m = m.repeat_interleave(self.channels, dim=1).view(b, -1, 1, 1)  # (B, G C, 1, 1)
        count = m.sum(0).view(-1) * (h * w)  # (G C,)
        denom = count.clamp(min=1)
        mean = (x * m).sum((0, 2, 3)) / denom
        centred = x - mean.view(1, -1, 1, 1)
        var = (centred.square() * m).sum((0, 2, 3)) / denom
        out = centred * torch.rsqrt(var + self.eps).view(1, -1, 1, 1)
        out = out * self.weight.view(1, -1, 1, 1) + self.bias.view(1, -1, 1, 1)
        if self.track_running_stats:
            with torch.no_grad():
                live = count > 0
                unbiased = var * count / (count - 1).clamp(min=1)
                mom = self.momentum
                self.running_mean.copy_(torch.where(live, (1 - mom) * self.running_mean + mom * mean, self.running_mean))
                self.running_var.copy_(torch.where(live, (1 - mom) * self.running_var + mom * unbiased,
                                                   self.running_var))
        return out


def _leaves(net: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    for name, mod in net.named_modules():
        if not list(mod.children()):
            yield name, mod


def groupable(net: nn.Module) -> str | None:
    """Why ``net`` cannot be grouped (None when it can): every leaf module must be a Conv2d,
    BatchNorm2d, Linear or one of the parameter-free layers this module knows."""
    for name, mod in _leaves(net):
        if isinstance(mod, (nn.Conv2d, nn.Linear)) or type(mod) is nn.BatchNorm2d or isinstance(mod, _KEPT):
            continue
        return f"layer {name or type(net).__name__} ({type(mod).__name__}) has no grouped form"
    return None


def _set(root: nn.Module, name: str, mod: nn.Module) -> None:
    parent, _, attr = name.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, attr, mod)


@torch.no_grad()
def group_networks(nets: list[nn.Module]) -> nn.Module:
    """One grouped network holding ``nets`` (same architecture, see the module docstring); the
    networks themselves are not changed. Raises ValueError for a layer with no grouped form."""
    problem = groupable(nets[0])
    if problem:
        raise ValueError(f"cannot train {type(nets[0]).__name__} stacked: {problem}")
    g = len(nets)
    out = copy.deepcopy(nets[0])
    per_net = [dict(_leaves(n)) for n in nets]
    for name, mod in _leaves(nets[0]):
        mods = [p[name] for p in per_net]
        if isinstance(mod, nn.Conv2d):
            new: nn.Module = nn.Conv2d(g * mod.in_channels, g * mod.out_channels, mod.kernel_size, mod.stride,
                                       mod.padding, mod.dilation, g * mod.groups, mod.bias is not None,
                                       mod.padding_mode, device=mod.weight.device)
            new.weight.copy_(torch.cat([m.weight for m in mods]))
            if mod.bias is not None:
                new.bias.copy_(torch.cat([m.bias for m in mods]))
        elif type(mod) is nn.BatchNorm2d:
            if not (mod.affine and mod.track_running_stats):
                raise ValueError(f"layer {name}: grouped BatchNorm needs affine=True and running statistics")
            new = GroupedBatchNorm2d(g, mod.num_features, mod.eps, mod.momentum).to(mod.weight.device)
            for attr in ("weight", "bias", "running_mean", "running_var"):
                getattr(new, attr).copy_(torch.cat([getattr(m, attr) for m in mods]))
            new.num_batches_tracked.copy_(mod.num_batches_tracked)
        elif isinstance(mod, nn.Linear):
            new = GroupedLinear(g, mod.in_features, mod.out_features, mod.bias is not None).to(mod.weight.device)
            new.weight.copy_(torch.stack([m.weight for m in mods]))
            if mod.bias is not None:
                new.bias.copy_(torch.stack([m.bias for m in mods]))
        else:
            continue
        new.train(mod.training)
        _set(out, name, new)
    out.harness_groups = g
    return out


@torch.no_grad()
def ungroup_into(grouped: nn.Module, nets: list[nn.Module], batches_tracked: list[int] | None = None) -> None:
    """Copy the grouped network's weights and running statistics back into ``nets`` (model g's share
    into ``nets[g]``); ``batches_tracked[g]``, when given, becomes each BatchNorm's
    ``num_batches_tracked`` of model g (the steps it took)."""
    g = len(nets)
    per_net = [dict(_leaves(n)) for n in nets]
    for name, mod in _leaves(grouped):
        if isinstance(mod, nn.Conv2d):
            for i, p in enumerate(per_net):
                p[name].weight.copy_(mod.weight.unflatten(0, (g, -1))[i])
                if mod.bias is not None:
                    p[name].bias.copy_(mod.bias.view(g, -1)[i])
        elif isinstance(mod, GroupedBatchNorm2d):
            for i, p in enumerate(per_net):
                for attr in ("weight", "bias", "running_mean", "running_var"):
                    getattr(p[name], attr).copy_(getattr(mod, attr).view(g, -1)[i])
                p[name].num_batches_tracked.fill_(
                    int(mod.num_batches_tracked) if batches_tracked is None else batches_tracked[i])
        elif isinstance(mod, GroupedLinear):
            for i, p in enumerate(per_net):
                p[name].weight.copy_(mod.weight[i])
                if mod.bias is not None:
                    p[name].bias.copy_(mod.bias[i])


def batch_norms(grouped: nn.Module) -> list[GroupedBatchNorm2d]:
    return [m for m in grouped.modules() if isinstance(m, GroupedBatchNorm2d)]


def model_axis(p: torch.Tensor, groups: int) -> torch.Tensor:
    """A view of a grouped parameter (or its gradient or momentum) with the models on the first
    axis: (G, ...), whatever its memory format."""
    return p.unflatten(0, (groups, -1))


def to_grouped(x: torch.Tensor) -> torch.Tensor:
    """(G, B, C, H, W) -> (B, G C, H, W): model g's images in channels [g C, (g+1) C)."""
    g, b = x.shape[:2]
    return x.transpose(0, 1).reshape(b, g * x.shape[2], *x.shape[3:])


def from_grouped(z: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, G K) -> (G, B, K): model g's outputs."""
    b = z.shape[0]
    return z.reshape(b, groups, -1).transpose(0, 1)
