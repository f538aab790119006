"""The self-supervised (SimCLR / MoCo v2) augmentation, drawn per sample on torch batches.

The pipeline of the paper's SSL code (protocol notes sections 3.5 and 4.6), in its order:

1. ``RandomResizedCrop(size)``: a box of area ``U(scale) * H * W`` and aspect ratio
   ``exp(U(log 3/4, log 4/3))``, retried up to 10 times until it fits, else the central crop of
   the clamped ratio (torchvision's ``get_params``); resized back to ``H x W`` bilinearly (a crop is
   never larger than the image, so this only up-samples and needs no anti-aliasing);
2. horizontal flip with probability 1/2 (if ``flip``);
3. with probability ``jitter_p`` = 0.8, ``ColorJitter(0.4, 0.4, 0.4, 0.1)``: brightness, contrast and
   saturation factors ``U(0.6, 1.4)`` and a hue shift ``U(-0.1, 0.1)``, applied in a random order
   (torchvision's definitions: brightness ``x * b``; contrast blends with the mean grey level;
   saturation blends with the grey image; hue rotates H in HSV);
4. with probability ``grayscale_p`` = 0.2, the grey image ``0.2989 R + 0.587 G + 0.114 B`` (torchvision's).

Every parameter is drawn **per sample** from the caller's ``torch.Generator`` (on the CPU, so the
draws do not depend on the device). The paper's code applied its torchvision-v2 transform to a
whole 4-D batch, which draws one set of parameters per batch; we do not (docs/protocol.md). On
one-channel images saturation, hue and grayscale are the identity, as in torchvision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.core.lazy import LazyModule

# imported on first use: an SSL defense checks its augmentation parameters without torch
torch = LazyModule("torch")
F = LazyModule("torch.nn.functional")

GREY_WEIGHTS = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale


@dataclass(frozen=True)
class SSLAugment:
    """Parameters of the SSL augmentation (defaults: the paper's)."""

    crop_scale: tuple[float, float] = (0.08, 1.0)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip: bool = True
    brightness: float = 0.4
    contrast: float = 0.4
    saturation: float = 0.4
    hue: float = 0.1
    jitter_p: float = 0.8
    grayscale_p: float = 0.2

    def __post_init__(self) -> None:
        lo, hi = self.crop_scale
        if not 0 < lo <= hi <= 1:
            raise ValueError(f"crop_scale must satisfy 0 < low <= high <= 1, got {self.crop_scale}")
        for name in ("jitter_p", "grayscale_p"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be a probability, got {getattr(self, name)}")
        if not 0 <= self.hue <= 0.5:
            raise ValueError(f"hue must be in [0, 0.5], got {self.hue}")

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Augment a float batch (N, C, H, W) with values in [0, 1]; returns a new batch."""
        return ssl_augment(x, self, generator)


def _uniform(n: int, lo: float, hi: float, g: torch.Generator) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(n, generator=g, dtype=torch.float64)


def crop_boxes(n: int, height: int, width: int, scale: tuple[float, float], ratio: tuple[float, float],
               g: torch.Generator, tries: int = 10) -> torch.Tensor:
    """(n, 4) int boxes ``(top, left, h, w)`` as torchvision's ``RandomResizedCrop.get_params``,
    one per sample: the first of ``tries`` draws that fits, else the central crop."""
    area = height * width
    target = area * _uniform(n * tries, *scale, g).view(n, tries)
    aspect = torch.exp(_uniform(n * tries, math.log(ratio[0]), math.log(ratio[1]), g).view(n, tries))
    w = torch.round(torch.sqrt(target * aspect)).long()
    h = torch.round(torch.sqrt(target / aspect)).long()
    ok = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = torch.where(ok.any(1), ok.float().argmax(1), torch.full((n,), -1, dtype=torch.long))
    rows = torch.arange(n)
    hh = h[rows, first.clamp(min=0)]
    ww = w[rows, first.clamp(min=0)]
    # fallback: central crop with the ratio clamped into range
    in_ratio = width / height
    if in_ratio < ratio[0]:
        fw, fh = width, int(round(width / ratio[0]))
    elif in_ratio > ratio[1]:
        fh, fw = height, int(round(height * ratio[1]))
    else:
        fw, fh = width, height
    miss = first < 0
    hh = torch.where(miss, torch.full_like(hh, fh), hh)
    ww = torch.where(miss, torch.full_like(ww, fw), ww)
    u_top = torch.rand(n, generator=g, dtype=torch.float64)
    u_left = torch.rand(n, generator=g, dtype=torch.float64)
    top = torch.floor(u_top * (height - hh + 1).double()).long()
    left = torch.floor(u_left * (width - ww + 1).double()).long()
    top = torch.where(miss, (height - hh) // 2, top)
    left = torch.where(miss, (width - ww) // 2, left)
    return torch.stack([top, left, hh, ww], dim=1)


def resized_crop(x: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """Crop each image to its box (top, left, h, w) and resize it bilinearly to the input size, as
    ``torchvision``'s ``resized_crop``: half-pixel centres (``align_corners=False``), sampling
    positions clamped to the box so that no pixel outside it contributes."""
    n, c, height, width = x.shape
    b = boxes.to(torch.float64)
    top, left, h, w = (b[:, k, None] for k in range(4))
    qy = torch.arange(height, dtype=torch.float64)[None, :]
    qx = torch.arange(width, dtype=torch.float64)[None, :]
    ys = torch.minimum(torch.maximum(top + (qy + 0.5) * h / height - 0.5, top), top + h - 1)  # (n, H)
    xs = torch.minimum(torch.maximum(left + (qx + 0.5) * w / width - 0.5, left), left + w - 1)  # (n, W)
    gy = (2 * ys + 1) / height - 1
    gx = (2 * xs + 1) / width - 1
    grid = torch.stack([gx[:, None, :].expand(n, height, width), gy[:, :, None].expand(n, height, width)], -1)
    return F.grid_sample(x, grid.to(x.device, x.dtype), mode="bilinear", padding_mode="border", align_corners=False)


def grey(x: torch.Tensor) -> torch.Tensor:
    """(N, 1, H, W) grey level: ITU-R 601 weights for RGB, the image itself for one channel."""
    if x.shape[1] == 1:
        return x
    w = torch.tensor(GREY_WEIGHTS, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    return (x * w).sum(1, keepdim=True)


def rgb_to_hsv(x: torch.Tensor) -> torch.Tensor:
    """(N, 3, H, W) RGB in [0, 1] -> HSV with H in [0, 1)."""
    r, g, b = x.unbind(1)
    maxc, _ = x.max(1)
    minc, _ = x.min(1)
    delta = maxc - minc
    s = torch.where(maxc > 0, delta / maxc.clamp(min=1e-12), torch.zeros_like(maxc))
    d = torch.where(delta > 0, delta, torch.ones_like(delta))
    rc, gc, bc = (maxc - r) / d, (maxc - g) / d, (maxc - b) / d
    h = torch.where(maxc == r, bc - gc, torch.where(maxc == g, 2.0 + rc - bc, 4.0 + gc - rc))
    h = torch.where(delta > 0, torch.remainder(h / 6.0, 1.0), torch.zeros_like(h))
    return torch.stack([h, s, maxc], 1)


def hsv_to_rgb(x: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`rgb_to_hsv`."""
    h, s, v = x.unbind(1)
    h6 = torch.remainder(h, 1.0) * 6.0
    i = torch.floor(h6)
    f = h6 - i
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    i = i.long() % 6
    table = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)]
    out = torch.zeros_like(x)
    for k, (rr, gg, bb) in enumerate(table):
        m = (i == k).unsqueeze(1)
        out = torch.where(m, torch.stack([rr, gg, bb], 1), out)
    return out


def _blend(a: torch.Tensor, b: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    f = factor.view(-1, 1, 1, 1).to(a.dtype)
    return (f * a + (1 - f) * b).clamp(0, 1)


def _jitter_op(op: int, x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """One ColorJitter operation on a sub-batch: 0 brightness, 1 contrast, 2 saturation, 3 hue."""
    if op == 0:
        return _blend(x, torch.zeros_like(x), factor)
    if op == 1:
        mean = grey(x).mean(dim=(1, 2, 3), keepdim=True)
        return _blend(x, mean.expand_as(x), factor)
    if x.shape[1] == 1:
        return x
    if op == 2:
        return _blend(x, grey(x).expand_as(x), factor)
    hsv = rgb_to_hsv(x)
    hsv[:, 0] = torch.remainder(hsv[:, 0] + factor.view(-1, 1, 1).to(x.dtype), 1.0)
    return hsv_to_rgb(hsv)


def ssl_augment(x: torch.Tensor, spec: SSLAugment, g: torch.Generator) -> torch.Tensor:
    """The SSL augmentation of a float batch in [0, 1] (see the module docstring), per sample."""
    n, c, height, width = x.shape
    if n == 0:
        return x.clone()
    dev = x.device
    boxes = crop_boxes(n, height, width, spec.crop_scale, spec.crop_ratio, g)
    out = resized_crop(x, boxes)
    if spec.flip:
        do = (torch.rand(n, generator=g) < 0.5).to(dev)
        out = torch.where(do.view(-1, 1, 1, 1), torch.flip(out, dims=(-1,)), out)
    apply = torch.rand(n, generator=g) < spec.jitter_p
    factors = torch.stack([
        _uniform(n, max(0.0, 1 - spec.brightness), 1 + spec.brightness, g),
        _uniform(n, max(0.0, 1 - spec.contrast), 1 + spec.contrast, g),
        _uniform(n, max(0.0, 1 - spec.saturation), 1 + spec.saturation, g),
        _uniform(n, -spec.hue, spec.hue, g),
    ], 1)  # (n, 4)
    order = torch.argsort(torch.rand(n, 4, generator=g), dim=1)  # a random permutation per sample
    for pos in range(4):
        for op in range(4):
            idx = torch.nonzero(apply & (order[:, pos] == op)).flatten()
            if len(idx):
                d = idx.to(dev)
                out[d] = _jitter_op(op, out[d], factors[idx, op].to(dev))
    to_grey = torch.rand(n, generator=g) < spec.grayscale_p
    if c == 3 and to_grey.any():
        d = torch.nonzero(to_grey).flatten().to(dev)
        out[d] = grey(out[d]).expand(-1, 3, -1, -1)
    return out
