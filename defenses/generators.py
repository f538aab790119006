"""DFKD's image generator (:mod:`defenses.dfkd`), in its own module: the defense's module stays
importable without torch (the attack phase and the reports name the defense, they train nothing)."""

from __future__ import annotations

import torch
from torch import nn


class Generator(nn.Module):
    """The fast-DFKD generator, sized to (C, H, W) images with H and W multiples of 4:
    ``Linear(nz, 128 (H/4)(W/4))`` -> BN -> Upsample x2 -> Conv3x3(128, 128, no bias) -> BN ->
    LeakyReLU(0.2) -> Upsample x2 -> Conv3x3(128, 64, no bias) -> BN -> LeakyReLU(0.2) ->
    Conv3x3(64, C) -> Sigmoid: images in [0, 1]."""

    def __init__(self, latent_dim: int, image_shape: tuple[int, int, int], ngf: int = 64) -> None:
        super().__init__()
        c, h, w = image_shape
        if h % 4 or w % 4:
            raise ValueError(f"the DFKD generator needs image sides that are multiples of 4, got {h} x {w}")
        self.init_size = (h // 4, w // 4)
        self.project = nn.Linear(latent_dim, 2 * ngf * (h // 4) * (w // 4))
        self.blocks = nn.Sequential(
            nn.BatchNorm2d(2 * ngf),
            nn.Upsample(scale_factor=2),
            nn.Conv2d(2 * ngf, 2 * ngf, 3, padding=1, bias=False),
            nn.BatchNorm2d(2 * ngf),
            nn.LeakyReLU(0.2),
            nn.Upsample(scale_factor=2),
            nn.Conv2d(2 * ngf, ngf, 3, padding=1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.LeakyReLU(0.2),
            nn.Conv2d(ngf, c, 3, padding=1),
            nn.Sigmoid(),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.project(z).view(z.shape[0], -1, *self.init_size)
        return self.blocks(h)
