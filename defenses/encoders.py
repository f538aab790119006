"""Encoders for the self-supervised defenses: image -> feature vector (no classification head).

- ``resnet18``: the paper's CIFAR ResNet-18 (protocol notes section 4.6): torchvision's
  ``resnet18`` with a 3x3 stride-1 stem, no max-pool and no ``fc``, giving 512-d pooled features
  (the global average pool is a mean over the map, which has deterministic CUDA kernels).
- ``cnn``: three conv-BN-ReLU-maxpool stages (w, 2w, 4w channels) and a global mean pool: 4w-d
  features; a CPU-sized encoder for the ``cifar10`` preset.
- ``mlp``: flatten -> Linear(d, w) -> BN -> ReLU -> Linear(w, w) -> BN -> ReLU: w-d features; for
  the 8x8 digits of the ``quick`` preset.

Every encoder has ``out_dim``, the size of its features.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from defenses.encoder_names import ENCODER_KINDS
from defenses.models import global_avg_pool


class GlobalMeanPool(nn.Module):
    """(N, C, H, W) -> (N, C): the mean over the spatial map."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return global_avg_pool(x)


class ResNet18CIFAR(nn.Module):
    """torchvision's ResNet-18 adapted to 32x32 inputs (3x3/1 stem, no max-pool), fc removed."""

    def __init__(self, in_channels: int) -> None:
        super().__init__()
        from harness.core.install_check import import_torchvision

        import_torchvision("the resnet18 encoder")
        from torchvision.models import resnet18

        net = resnet18(weights=None)
        net.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
        net.maxpool = nn.Identity()
        net.avgpool = GlobalMeanPool()
        net.fc = nn.Identity()
        self.net = net
        self.out_dim = 512

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ConvEncoder(nn.Module):
    """Three conv-BN-ReLU-maxpool stages (w, 2w, 4w channels), then the global mean: 4w features."""

    def __init__(self, in_channels: int, width: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c = in_channels
        for mult in (1, 2, 4):
            layers += [nn.Conv2d(c, width * mult, 3, padding=1, bias=False), nn.BatchNorm2d(width * mult), nn.ReLU(),
                       nn.MaxPool2d(2)]
            c = width * mult
        self.body = nn.Sequential(*layers, GlobalMeanPool())
        self.out_dim = c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class MLPEncoder(nn.Module):
    """Two fully connected layers with BatchNorm: w features."""

    def __init__(self, in_features: int, width: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(in_features, width), nn.BatchNorm1d(width), nn.ReLU(),
                                  nn.Linear(width, width), nn.BatchNorm1d(width), nn.ReLU())
        self.out_dim = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def build_encoder(kind: str, image_shape: tuple[int, int, int], width: int) -> nn.Module:
    """An encoder by name (one of :data:`ENCODER_KINDS`) for images of ``image_shape`` (C, H, W);
    ``width`` sizes ``cnn`` and ``mlp`` (ResNet-18 has its own)."""
    c, h, w = image_shape
    if kind == "resnet18":
        return ResNet18CIFAR(c)
    if kind == "cnn":
        if h < 8 or w < 8:
            raise ValueError(f"the cnn encoder halves the image three times; it needs at least 8x8 images, got {h}x{w}")
        return ConvEncoder(c, width)
    if kind == "mlp":
        return MLPEncoder(math.prod(image_shape), width)
    raise ValueError(f"unknown encoder {kind!r}; known: {', '.join(ENCODER_KINDS)}")
