"""Model architectures shared by the defenses.

- ``mlp``: flatten -> Linear(d, w) -> ReLU -> Linear(w, w) -> ReLU -> Linear(w, K) (quick preset).
- ``cnn``: three conv-BN-ReLU-maxpool stages (w, 2w, 4w channels), a 256-unit fully connected
  layer on the 4x4 map, and a linear head (the CPU-sized cifar10 preset).
- ``wrn16-4``: the paper's pre-activation WideResNet-16-4 (protocol notes section 4.0): all convs
  with bias, stride on the block's second conv, 1x1 conv skip on the raw block input when the shape
  changes; 2,751,146 parameters with BatchNorm.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, in_features: int, width: int, num_classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Flatten(), nn.Linear(in_features, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU()
        )
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class SmallCNN(nn.Module):
    """Three conv-BN-ReLU-maxpool stages, then a 256-unit fully connected layer on the 4x4 map."""

    def __init__(self, in_channels: int, width: int, num_classes: int, hidden: int = 256) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c = in_channels
        for mult in (1, 2, 4):
            layers += [nn.Conv2d(c, width * mult, 3, padding=1, bias=False), nn.BatchNorm2d(width * mult),
                       nn.ReLU(), nn.MaxPool2d(2)]
            c = width * mult
        self.body = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(c * 16, hidden),
                                  nn.ReLU())
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class _WideBlock(nn.Module):
    """Pre-activation block: conv_in(relu(norm_in(x))) -> conv_out(relu(norm_out(.))) + skip(x)."""

    def __init__(self, fin: int, fout: int, stride: int) -> None:
        super().__init__()
        self.norm_in = nn.BatchNorm2d(fin)
        self.conv_in = nn.Conv2d(fin, fout, 3, padding=1)
        self.norm_out = nn.BatchNorm2d(fout)
        self.conv_out = nn.Conv2d(fout, fout, 3, stride=stride, padding=1)
        self.skip = nn.Conv2d(fin, fout, 1, stride=stride) if stride != 1 or fin != fout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(torch.relu(self.norm_in(x)))
        h = self.conv_out(torch.relu(self.norm_out(h)))
        return h + self.skip(x)


class WideResNet(nn.Module):
    def __init__(self, in_channels: int, num_classes: int, depth: int = 16, widen: int = 4) -> None:
        super().__init__()
        n = (depth - 4) // 6
        widths = [16 * widen, 32 * widen, 64 * widen]
        self.conv_in = nn.Conv2d(in_channels, 16, 3, padding=1)
        blocks: list[nn.Module] = []
        fin = 16
        for w, stride in zip(widths, (1, 2, 2)):
            for i in range(n):
                blocks.append(_WideBlock(fin, w, stride if i == 0 else 1))
                fin = w
        self.blocks = nn.Sequential(*blocks)
        self.norm_out = nn.BatchNorm2d(fin)
        self.head = nn.Linear(fin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.blocks(self.conv_in(x))
        h = torch.relu(self.norm_out(h))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))


def build_model(kind: str, image_shape: tuple[int, int, int], num_classes: int, width: int) -> nn.Module:
    """Build an architecture by name for images of ``image_shape`` (C, H, W)."""
    c = image_shape[0]
    if kind == "mlp":
        return MLP(math.prod(image_shape), width, num_classes)
    if kind == "cnn":
        return SmallCNN(c, width, num_classes)
    if kind == "wrn16-4":
        return WideResNet(c, num_classes, depth=16, widen=4)
    raise ValueError(f"unknown model {kind!r}")
