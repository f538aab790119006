"""Image augmentations on torch batches: the training-time random ones and the fixed query set.

Both translate with zero padding and crop back (the paper's ``RandomCrop(size, padding=s)`` on
uint8 images, so the border is black) and optionally flip horizontally.
"""

from __future__ import annotations

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


def random_augment(x: torch.Tensor, spec: AugmentSpec, generator: torch.Generator) -> torch.Tensor:
    """Per-sample random shift in [-s, s]^2 and random horizontal flip (if the dataset allows)."""
    n = x.shape[0]
    if spec.shift:
        s = spec.shift
        pad = torch.nn.functional.pad(x, (s, s, s, s))
        oy = torch.randint(0, 2 * s + 1, (n,), generator=generator).to(x.device)
        ox = torch.randint(0, 2 * s + 1, (n,), generator=generator).to(x.device)
        h, w = x.shape[-2:]
        rows = oy[:, None] + torch.arange(h, device=x.device)[None, :]  # (n, h)
        cols = ox[:, None] + torch.arange(w, device=x.device)[None, :]  # (n, w)
        idx_n = torch.arange(n, device=x.device)[:, None, None]
        # gather (n, C, h, w): index pad[n, :, rows[n, i], cols[n, j]]
        x = pad.permute(0, 2, 3, 1)[idx_n, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)
    if spec.flip:
        do = (torch.rand(n, generator=generator) < 0.5).to(x.device)
        x = torch.where(do[:, None, None, None], torch.flip(x, dims=(-1,)), x)
    return x.contiguous()
