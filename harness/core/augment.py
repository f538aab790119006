"""Image augmentations on torch batches: the training-time random ones and the fixed query set.

Both translate with zero padding and crop back (the paper's ``RandomCrop(size, padding=s)`` on
uint8 images, so the border is black) and optionally flip horizontally.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.core.data import AugmentSpec


def shift_flip(x: torch.Tensor, dy: int, dx: int, flip: bool) -> torch.Tensor:
    """Translate a batch (N, C, H, W) by (dy, dx) pixels with zero fill, then flip if asked.

    Matches cropping ``[s+dy : s+dy+H, s+dx : s+dx+W]`` out of the zero-padded image: the content
    moves by (-dy, -dx).
    """
    if dy or dx:
        h, w = x.shape[-2:]
        out = torch.zeros_like(x)
        ys, yd = (slice(dy, h), slice(0, h - dy)) if dy >= 0 else (slice(0, h + dy), slice(-dy, h))
        xs, xd = (slice(dx, w), slice(0, w - dx)) if dx >= 0 else (slice(0, w + dx), slice(-dx, w))
        out[..., yd, xd] = x[..., ys, xs]
        x = out
    if flip:
        x = torch.flip(x, dims=(-1,))
    return x


@dataclass(frozen=True)
class AugmentDraws:
    """The random draws of :func:`random_augment` for n images, on the CPU: ``oy``, ``ox`` (n,) offsets
    in ``[0, 2s]`` into the zero-padded image (s: no shift) and ``flip`` (n,) bool; None where the
    dataset has no such augmentation."""

    oy: torch.Tensor | None
    ox: torch.Tensor | None
    flip: torch.Tensor | None


def augment_draws(n: int, spec: AugmentSpec, generator: torch.Generator) -> AugmentDraws:
    """Draw the per-sample shifts, then the flips, of n images from ``generator`` (the order
    :func:`random_augment` has always drawn them in)."""
    oy = ox = flip = None
    if spec.shift:
        oy = torch.randint(0, 2 * spec.shift + 1, (n,), generator=generator)
        ox = torch.randint(0, 2 * spec.shift + 1, (n,), generator=generator)
    if spec.flip:
        flip = torch.rand(n, generator=generator) < 0.5
    return AugmentDraws(oy, ox, flip)


def apply_augment(x: torch.Tensor, draws: AugmentDraws, shift: int) -> torch.Tensor:
    """Shift each image of ``x`` (N, C, H, W) by its drawn offset (zero fill, the crop of the image
    padded by ``shift``) and flip where drawn. Pure indexing: the same pixels whether the images of
    several models are augmented at once or one model's at a time."""
    n = x.shape[0]
    if draws.oy is not None and draws.ox is not None:
        s = shift
        pad = torch.nn.functional.pad(x, (s, s, s, s))
        oy, ox = draws.oy.to(x.device), draws.ox.to(x.device)
        h, w = x.shape[-2:]
        rows = oy[:, None] + torch.arange(h, device=x.device)[None, :]  # (n, h)
        cols = ox[:, None] + torch.arange(w, device=x.device)[None, :]  # (n, w)
        idx_n = torch.arange(n, device=x.device)[:, None, None]
        # gather (n, C, h, w): index pad[n, :, rows[n, i], cols[n, j]]
        x = pad.permute(0, 2, 3, 1)[idx_n, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)
    if draws.flip is not None:
        do = draws.flip.to(x.device)
        x = torch.where(do[:, None, None, None], torch.flip(x, dims=(-1,)), x)
    return x.contiguous()


def random_augment(x: torch.Tensor, spec: AugmentSpec, generator: torch.Generator) -> torch.Tensor:
    """Per-sample random shift in [-s, s]^2 and random horizontal flip (if the dataset allows)."""
    return apply_augment(x, augment_draws(x.shape[0], spec, generator), spec.shift)
