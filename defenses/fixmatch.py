"""FixMatch (Sohn et al., "FixMatch: Simplifying Semi-Supervised Learning with Consistency and
Confidence", NeurIPS 2020) for a group of networks trained side by side: PATE-FM's teachers and
student (defenses/pate.py).

Each step, every network g draws its own labeled batch (``batch_size`` examples, uniformly with
replacement from its own labeled set); the group draws one unlabeled batch (``mu * batch_size``
images, uniformly with replacement from the unlabeled pool) with one weak and one strong view of
each image, which every network of the group reads (the authors' PATE-FM code has every teacher read
the unlabeled set in the same unshuffled order; sharing the views too makes the augmentation cost
of a group that of one network). Network g minimises

    L_g = CE(f(weak(x_l)), y_l) + lambda_u * mean_u [ max_c p_c(weak(u)) >= tau ] CE(f(strong(u)), argmax_c p_c(weak(u)))

where p = softmax(f(weak(u))) is held fixed (no gradient). The group minimises sum_g L_g: each
network's gradient is its own loss's and its optimizer state its own; the random draws come from
one generator.

- **weak** augmentation: the dataset's own random flip and shift (``harness.core.augment.random_augment``:
  +-1 px shifts for the 8x8 digits, flips and +-4 px shifts for CIFAR-10: FixMatch's flip-and-shift,
  12.5% of the side).
- **strong** augmentation (:func:`strong_augment`): weak, then RandAugment as FixMatch uses it (two
  operations drawn per image from the list below, each with a magnitude drawn uniformly from its
  range, FixMatch's Table 12), then Cutout (a square of side up to ``cutout`` x the image side, filled
  with grey 0.5). Equalize and Color are left out (Color is the identity on one-channel images;
  Equalize needs per-image histograms); geometric operations are composed into one affine warp
  (bilinear, zero fill) applied after the pixel operations.
- the optimizer is FixMatch's: SGD with Nesterov momentum, weight decay on weights only (not on
  biases or normalization parameters), learning rate ``lr * cos(7 pi k / (16 K))`` at step k of K.
  FixMatch's exponential moving average of the weights is not used: the short schedules of the small
  presets (hundreds of steps) would leave an average with decay 0.999 far behind the weights.

Networks without BatchNorm train as one batched network (``torch.func.vmap`` over stacked weights);
those with BatchNorm (whose running statistics vmap cannot update) one forward each, in the same step.
"""

from __future__ import annotations

import copy
import math
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from defenses.fixmatch_recipe import FixMatchRecipe  # torch-free: a defense checks its recipe when named
from harness.core.augment import random_augment
from harness.core.data import AugmentSpec


# --- strong augmentation ---------------------------------------------------------------------------

#: RandAugment's operations as FixMatch draws them, with their magnitude ranges (FixMatch, Table 12)
STRONG_OPS = ("identity", "autocontrast", "brightness", "contrast", "posterize", "rotate", "sharpness",
              "shear_x", "shear_y", "solarize", "translate_x", "translate_y")


def _pixel_ops(x: torch.Tensor, u: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every pixel operation applied to the whole batch x (N, C, H, W) in [0, 1], each with its
    magnitude from ``u`` (N,) uniform in [0, 1) (FixMatch's Table 12 ranges)."""
    f = (0.05 + 0.9 * u).view(-1, 1, 1, 1)  # enhancement factors in [0.05, 0.95]
    lo = x.amin(dim=(2, 3), keepdim=True)
    hi = x.amax(dim=(2, 3), keepdim=True)
    # PIL's SMOOTH filter (the centre 5, the 8 neighbours 1, over 13), edges replicated
    h, w = x.shape[-2:]
    xp = F.pad(x, (1, 1, 1, 1), mode="replicate")
    smooth = (sum(xp[..., i:i + h, j:j + w] for i in range(3) for j in range(3)) + 4.0 * x) / 13.0
    levels = 2.0 ** torch.floor(4 + 5 * u).clamp(max=8).view(-1, 1, 1, 1)  # keep 4 ... 8 bits
    return {
        "autocontrast": torch.where(hi > lo, (x - lo) / (hi - lo).clamp_min(1e-8), x),
        "brightness": (f * x).clamp(0, 1),  # blend with black
        "contrast": (x.mean(dim=(1, 2, 3), keepdim=True) * (1 - f) + f * x).clamp(0, 1),  # with the mean grey
        "sharpness": (smooth + f * (x - smooth)).clamp(0, 1),  # with the smoothed image
        "posterize": torch.floor(x * 255.0 / (256.0 / levels)) * (256.0 / levels) / 255.0,
        "solarize": torch.where(x >= u.view(-1, 1, 1, 1), 1.0 - x, x),  # invert above a threshold in [0, 1]
    }


def _geometric_matrices(u: torch.Tensor) -> dict[str, torch.Tensor]:
    """(N, 3, 3) matrices in normalized coordinates ([-1, 1]) of every geometric operation, each with
    its magnitude from ``u`` (N,) uniform in [0, 1): rotate +-30 degrees, shear +-0.3, translate
    +-30% of the side."""
    n = len(u)
    s = 2 * u - 1  # in [-1, 1)
    eye = torch.eye(3, dtype=torch.float64).repeat(n, 1, 1)
    out = {name: eye.clone() for name in ("rotate", "shear_x", "shear_y", "translate_x", "translate_y")}
    t = s * math.pi / 6
    r = out["rotate"]
    r[:, 0, 0], r[:, 0, 1], r[:, 1, 0], r[:, 1, 1] = t.cos(), -t.sin(), t.sin(), t.cos()
    out["shear_x"][:, 0, 1] = 0.3 * s
    out["shear_y"][:, 1, 0] = 0.3 * s
    out["translate_x"][:, 0, 2] = 0.6 * s  # 30% of the side is 0.6 in normalized units
    out["translate_y"][:, 1, 2] = 0.6 * s
    return out


def strong_augment(x: torch.Tensor, g: torch.Generator, num_ops: int = 2, cutout: float = 0.5) -> torch.Tensor:
    """FixMatch's strong augmentation of a float batch (N, C, H, W) in [0, 1] (already weakly
    augmented): ``num_ops`` RandAugment operations per image, then Cutout (module doc). Every draw
    comes from ``g`` (a CPU generator)."""
    n, c, h, w = x.shape
    if n == 0:
        return x.clone()
    dev = x.device
    out = x
    warp = torch.eye(3, dtype=torch.float64).repeat(n, 1, 1)
    for _ in range(num_ops):
        ops = torch.randint(0, len(STRONG_OPS), (n,), generator=g)
        mags = torch.rand(n, generator=g, dtype=torch.float64)
        pixel = _pixel_ops(out, mags.to(dev, x.dtype))
        geo = _geometric_matrices(mags)
        # slot 0: unchanged (identity, or an operation of the other kind); then each operation's result
        pix_slot = torch.tensor([1 + list(pixel).index(o) if o in pixel else 0 for o in STRONG_OPS])[ops]
        geo_slot = torch.tensor([1 + list(geo).index(o) if o in geo else 0 for o in STRONG_OPS])[ops]
        rows = torch.arange(n)
        out = torch.stack([out, *pixel.values()])[pix_slot.to(dev), rows.to(dev)]
        mats = torch.stack([torch.eye(3, dtype=torch.float64).expand(n, 3, 3), *geo.values()])[geo_slot, rows]
        warp = mats @ warp
    # affine_grid written out: output pixel centres (x, y, 1) in normalized coordinates, times theta^T
    ys = (2 * torch.arange(h, dtype=torch.float64) + 1) / h - 1
    xs = (2 * torch.arange(w, dtype=torch.float64) + 1) / w - 1
    base = torch.stack([xs.repeat(h), ys.repeat_interleave(w), torch.ones(h * w, dtype=torch.float64)], 1)
    grid = (base[None] @ warp[:, :2, :].transpose(1, 2)).view(n, h, w, 2).to(dev, x.dtype)
    out = F.grid_sample(out, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    if cutout > 0:
        side = torch.ceil(cutout * torch.rand(n, generator=g, dtype=torch.float64) * min(h, w)).long()
        cy = torch.randint(0, h, (n,), generator=g)
        cx = torch.randint(0, w, (n,), generator=g)
        y0, x0 = cy - side // 2, cx - side // 2
        rows, cols = torch.arange(h)[None, :], torch.arange(w)[None, :]
        in_y = (rows >= y0[:, None]) & (rows < (y0 + side)[:, None])  # (n, H)
        in_x = (cols >= x0[:, None]) & (cols < (x0 + side)[:, None])  # (n, W)
        box = (in_y[:, :, None] & in_x[:, None, :]).to(dev)[:, None]  # (n, 1, H, W)
        out = torch.where(box, torch.full_like(out, 0.5), out)
    return out


#: pixels (images x pixels per image) drawn and augmented per call in :func:`train_fixmatch`
AUGMENT_CHUNK_PIXELS = 1 << 20


# --- the group of networks ---------------------------------------------------------------------------

def _has_batchnorm(net: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in net.modules())


class _Group:
    """G networks as one: ``forward(x)`` maps (G, N, C, H, W) to (G, N, K); ``param_groups`` are the
    optimizer's (decayed weights, undecayed biases and normalization parameters); ``finish`` puts
    the trained weights back into the networks."""

    def __init__(self, nets: list[nn.Module], device: torch.device) -> None:
        self.nets = [net.to(device).train() for net in nets]
        self.stacked = len(nets) > 1 and not any(_has_batchnorm(n) for n in nets)
        if self.stacked:
            from torch.func import functional_call, stack_module_state

            params, buffers = stack_module_state(self.nets)
            self.params = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
            self.buffers = buffers
            base = copy.deepcopy(self.nets[0]).to("meta")

            def one(p: dict, b: dict, x: torch.Tensor) -> torch.Tensor:
                return functional_call(base, (p, b), (x,))

            self._forward = torch.func.vmap(one)
            decay_dim = 3  # stacked: (G, out, in) and up
            named = list(self.params.items())
        else:
            decay_dim = 2
            named = [(f"{g}.{k}", p) for g, net in enumerate(self.nets) for k, p in net.named_parameters()]
        self.param_groups = [
            {"params": [p for _, p in named if p.ndim >= decay_dim], "decay": True},
            {"params": [p for _, p in named if p.ndim < decay_dim], "decay": False},
        ]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stacked:
            return self._forward(self.params, self.buffers, x)
        return torch.stack([net(xg) for net, xg in zip(self.nets, x)])

    def finish(self) -> list[nn.Module]:
        if self.stacked:
            with torch.no_grad():
                for name, p in self.params.items():
                    for g, net in enumerate(self.nets):
                        net.get_parameter(name).copy_(p[g])
        return [net.eval() for net in self.nets]


def train_fixmatch(nets: list[nn.Module], labeled_x: list[np.ndarray], labeled_y: list[np.ndarray],
                   unlabeled_x: np.ndarray, *, recipe: FixMatchRecipe, augment: AugmentSpec,
                   mean: tuple[float, ...], std: tuple[float, ...], seed: int, device: str,
                   progress: Callable[[float], None] | None = None) -> list[nn.Module]:
    """Train ``nets[g]`` with FixMatch on its labeled set (``labeled_x[g]`` uint8 NCHW, ``labeled_y[g]``)
    and the shared unlabeled pool ``unlabeled_x`` (uint8 NCHW, no labels); returns the networks in
    eval mode. All random draws come from ``seed``."""
    if not nets or len(nets) != len(labeled_x) or len(nets) != len(labeled_y):
        raise ValueError("train_fixmatch needs one labeled set per network, at least one network")
    if any(len(x) == 0 or len(x) != len(y) for x, y in zip(labeled_x, labeled_y)):
        raise ValueError("train_fixmatch: every network needs a non-empty labeled set with one label per image")
    if len(unlabeled_x) == 0:
        raise ValueError("train_fixmatch needs a non-empty unlabeled pool")
    dev = torch.device(device)
    n_models, bsz, ubsz = len(nets), recipe.batch_size, recipe.mu * recipe.batch_size
    sizes = torch.tensor([len(x) for x in labeled_x], dtype=torch.float64)
    offsets = torch.cumsum(torch.cat([torch.zeros(1, dtype=torch.float64), sizes[:-1]]), 0).long()
    x_lab = torch.from_numpy(np.ascontiguousarray(np.concatenate(labeled_x))).to(dev)
    y_lab = torch.from_numpy(np.concatenate(labeled_y).astype(np.int64)).to(dev)
    x_unl = torch.from_numpy(np.ascontiguousarray(unlabeled_x)).to(dev)
    mean_t = torch.tensor(mean, dtype=torch.float32, device=dev).view(1, -1, 1, 1)
    std_t = torch.tensor(std, dtype=torch.float32, device=dev).view(1, -1, 1, 1)
    gen = torch.Generator().manual_seed(int(seed))
    group = _Group(nets, dev)
    opt = torch.optim.SGD([{"params": pg["params"], "weight_decay": recipe.weight_decay if pg["decay"] else 0.0}
                           for pg in group.param_groups if pg["params"]],
                          lr=recipe.lr, momentum=recipe.momentum, nesterov=recipe.momentum > 0)
    shape = tuple(x_unl.shape[1:])
    # The batches of the next `chunk` steps are drawn and augmented at once (the same i.i.d. draws as
    # step by step; one augmentation call per chunk instead of per step: most of its cost is per call)
    chunk = max(1, AUGMENT_CHUNK_PIXELS // max(1, (ubsz + n_models * bsz) * math.prod(shape)))
    for step in range(recipe.steps):
        if step % chunk == 0:
            n_c = min(chunk, recipe.steps - step)
            li_c = (offsets[None, :, None] + torch.floor(torch.rand(n_c, n_models, bsz, generator=gen,
                                                                    dtype=torch.float64) * sizes[None, :, None]).long())
            li_c = li_c.view(n_c, n_models * bsz).to(dev)
            ui_c = torch.randint(0, len(x_unl), (n_c * ubsz,), generator=gen).to(dev)
            xl_c = (random_augment(x_lab[li_c.flatten()], augment, gen).float() / 255.0).view(n_c, n_models, bsz, *shape)
            uw_c = random_augment(x_unl[ui_c], augment, gen).float() / 255.0
            us_c = strong_augment(uw_c, gen, recipe.strong_ops, recipe.cutout).view(n_c, ubsz, *shape)
            uw_c = uw_c.view(n_c, ubsz, *shape)
        j = step % chunk
        for pg in opt.param_groups:
            pg["lr"] = recipe.lr * math.cos(7 * math.pi * step / (16 * recipe.steps))
        li, uw, us = li_c[j], uw_c[j], us_c[j]
        batch = torch.cat([xl_c[j], uw.expand(n_models, *uw.shape), us.expand(n_models, *us.shape)], dim=1)
        logits = group.forward((batch - mean_t) / std_t)  # (G, B + 2 mu B, K)
        k = logits.shape[-1]
        lx = F.cross_entropy(logits[:, :bsz].reshape(-1, k), y_lab[li], reduction="none").view(n_models, bsz)
        with torch.no_grad():
            conf, pseudo = torch.softmax(logits[:, bsz:bsz + ubsz], dim=-1).max(dim=-1)
            mask = (conf >= recipe.confidence).to(logits.dtype)
        lu = F.cross_entropy(logits[:, bsz + ubsz:].reshape(-1, k), pseudo.reshape(-1), reduction="none")
        lu = (lu.view(n_models, ubsz) * mask)
        loss = (lx.mean(dim=1) + recipe.lambda_u * lu.mean(dim=1)).sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if progress is not None and (step + 1) % 10 == 0:
            progress((step + 1) / recipe.steps)
    if progress is not None:
        progress(1.0)
    return group.finish()
