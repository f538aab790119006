"""Model architectures shared by the defenses.

- ``mlp``: flatten -> Linear(d, w) -> ReLU -> Linear(w, w) -> ReLU -> Linear(w, K) (quick preset).
- ``mlp-bn``: ``mlp`` with BatchNorm1d(w) after each hidden Linear (flatten -> Linear -> BN -> ReLU
  -> Linear -> BN -> ReLU -> Linear(w, K)): DFKD's teacher and student at the quick preset (its
  synthesis matches the teacher's BatchNorm statistics, so the teacher needs BN layers). A
  one-sample training batch (the last batch of an epoch can be one sample) is normalized with the
  running statistics instead of failing (:class:`BatchNorm1d`).
- ``cnn``: three conv-BN-ReLU-maxpool stages (w, 2w, 4w channels), a 256-unit fully connected
  layer on the 4x4 map, and a linear head (the CPU-sized cifar10 preset).
- ``wrn16-4``: the paper's pre-activation WideResNet-16-4 (protocol notes section 4.0): all convs
  with bias, stride on the block's second conv, 1x1 conv skip on the raw block input when the shape
  changes; 2,751,146 parameters with BatchNorm.
- ``cnn-gn``: ``cnn`` with GroupNorm(min(16, C), C) in place of BatchNorm (per-sample gradients
  for DP-SGD need a model without batch statistics); PyTorch's default initialization.
- ``wrn16-4-gn``: the paper's DP-SGD variant of WRN16-4 (protocol notes section 4.0, after De et
  al. 2022): GroupNorm(min(16, C), C), norm after the ReLU (``conv(norm(relu(x)))``), skip
  ``Seq(ReLU, GN, conv1x1)``, head ``norm(relu(x))``, weights trunc_normal(std=1/sqrt(fan_in)),
  biases 0; 2,751,562 parameters.
- ``scatter-linear``, ``scatter-linear-bn``, ``scatter-cnn``: a linear head (with BatchNorm before it:
  DFKD's teacher) or small CNN head on fixed scattering features of the
  image (Tramer and Boneh 2021; :mod:`defenses.scatter_models`), the ``cifar10-scatter`` preset's.

:func:`build_model` records what it built on the module (``net.harness_arch``: kind, image shape,
classes, width), so that a trained network can be saved and rebuilt (:func:`rebuild_model`;
``harness evaluate --save-models``).
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn


class BatchNorm1d(nn.BatchNorm1d):
    """``nn.BatchNorm1d`` that normalizes a one-sample training batch with its running statistics
    (and leaves them unchanged): one sample has no batch variance, and torch refuses it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and x.shape[0] == 1:
            return nn.functional.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                            False, 0.0, self.eps)
        return super().forward(x)


class MLP(nn.Module):
    """Two hidden layers of ``width`` units; with ``batch_norm``, BatchNorm1d after each hidden Linear."""

    def __init__(self, in_features: int, width: int, num_classes: int, batch_norm: bool = False) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        for fin in (in_features, width):
            layers.append(nn.Linear(fin, width))
            if batch_norm:
                layers.append(BatchNorm1d(width))
            layers.append(nn.ReLU())
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def group_norm(channels: int) -> nn.GroupNorm:
    """GroupNorm(min(16, C), C), the DP-SGD models' normalization (protocol notes section 4.0)."""
    return nn.GroupNorm(min(16, channels), channels)


class SmallCNN(nn.Module):
    """Three conv-norm-ReLU-maxpool stages, then a 256-unit fully connected layer on the 4x4 map.

    ``norm`` is ``"batch"`` (BatchNorm2d, the ``cnn`` kind) or ``"group"`` (GroupNorm(min(16, C), C),
    the ``cnn-gn`` kind for DP-SGD).
    """

    def __init__(self, in_channels: int, width: int, num_classes: int, hidden: int = 256,
                 norm: str = "batch") -> None:
        super().__init__()
        if norm not in ("batch", "group"):
            raise ValueError(f"norm must be 'batch' or 'group', got {norm!r}")
        make_norm = nn.BatchNorm2d if norm == "batch" else group_norm
        layers: list[nn.Module] = []
        c = in_channels
        for mult in (1, 2, 4):
            layers += [nn.Conv2d(c, width * mult, 3, padding=1, bias=False), make_norm(width * mult),
                       nn.ReLU(), nn.MaxPool2d(2)]
            c = width * mult
        self.body = nn.Sequential(*layers, AvgPoolTo(4), nn.Flatten(), nn.Linear(c * 16, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class AvgPoolTo(nn.Module):
    """``AdaptiveAvgPool2d(size)`` for the shapes these models produce, with deterministic CUDA
    kernels (adaptive pooling's CUDA backward is not deterministic and is refused under
    ``torch.use_deterministic_algorithms``): the identity at ``size``, ``avg_pool2d`` when the side is
    a multiple of ``size``, and replication when it is 1; adaptive pooling otherwise."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        if (h, w) == (self.size, self.size):
            return x
        if h == w and h % self.size == 0:
            return nn.functional.avg_pool2d(x, h // self.size)
        if (h, w) == (1, 1):
            return x.expand(*x.shape[:-2], self.size, self.size)
        return nn.functional.adaptive_avg_pool2d(x, self.size)


def global_avg_pool(x: torch.Tensor) -> torch.Tensor:
    """(N, C, H, W) -> (N, C): the mean over the spatial positions (deterministic on CUDA)."""
    return x.mean(dim=(-2, -1))


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


def wide_stages(block: Callable[[int, int, int], nn.Module], depth: int, widen: int) -> tuple[nn.Sequential, int]:
    """The three WRN stages after the 16-channel stem: (depth - 4) / 6 blocks each, widths
    16k, 32k, 64k (k = ``widen``), stride 1, 2, 2 on each stage's first block. Returns the
    blocks and the output channels. ``block(fin, fout, stride)`` builds one block."""
    n = (depth - 4) // 6
    blocks: list[nn.Module] = []
    fin = 16
    for w, stride in zip((16 * widen, 32 * widen, 64 * widen), (1, 2, 2)):
        for i in range(n):
            blocks.append(block(fin, w, stride if i == 0 else 1))
            fin = w
    return nn.Sequential(*blocks), fin


class WideResNet(nn.Module):
    def __init__(self, in_channels: int, num_classes: int, depth: int = 16, widen: int = 4) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.blocks, fin = wide_stages(_WideBlock, depth, widen)
        self.norm_out = nn.BatchNorm2d(fin)
        self.head = nn.Linear(fin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.blocks(self.conv_in(x))
        h = torch.relu(self.norm_out(h))
        return self.head(global_avg_pool(h))


class _WideBlockGN(nn.Module):
    """DP block (De et al. 2022 order): conv_in(norm_in(relu(x))) -> conv_out(norm_out(relu(.))) + skip(x).

    The skip is ``Seq(ReLU, GN(fin), conv1x1)`` (with the block's stride) when the shape changes,
    else the identity.
    """

    def __init__(self, fin: int, fout: int, stride: int) -> None:
        super().__init__()
        self.norm_in = group_norm(fin)
        self.conv_in = nn.Conv2d(fin, fout, 3, padding=1)
        self.norm_out = group_norm(fout)
        self.conv_out = nn.Conv2d(fout, fout, 3, stride=stride, padding=1)
        self.skip: nn.Module = (
            nn.Sequential(nn.ReLU(), group_norm(fin), nn.Conv2d(fin, fout, 1, stride=stride))
            if stride != 1 or fin != fout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(self.norm_in(torch.relu(x)))
        h = self.conv_out(self.norm_out(torch.relu(h)))
        return h + self.skip(x)


class WideResNetGN(nn.Module):
    """WRN16-4 for DP-SGD (protocol notes section 4.0, ``use_group_norm``, ``swap_order``,
    ``custom_init``): GroupNorm blocks of :class:`_WideBlockGN`, head ``norm(relu(x))`` -> average
    pool -> linear; conv and linear weights ``trunc_normal_(std=1/sqrt(fan_in))`` (bounds +-2
    absolute, torch's default), biases 0, GroupNorm weight 1 and bias 0."""

    def __init__(self, in_channels: int, num_classes: int, depth: int = 16, widen: int = 4) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.blocks, fin = wide_stages(_WideBlockGN, depth, widen)
        self.norm_out = group_norm(fin)
        self.head = nn.Linear(fin, num_classes)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                fan_in = m.weight[0].numel()  # in_channels / groups * kh * kw, or in_features
                nn.init.trunc_normal_(m.weight, std=1.0 / math.sqrt(fan_in))
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.GroupNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.blocks(self.conv_in(x))
        h = self.norm_out(torch.relu(h))
        return self.head(global_avg_pool(h))


class AirbenchNet(nn.Module):
    """The network of Keller Jordan's cifar10-airbench (airbench94), built here from its published
    description: a 2x2 convolution to 24 channels ("whitening" width 2 * C * 2^2) and GELU, three
    conv groups (widths ``w``, 4w, 4w; each conv3x3 -> max-pool 2 -> BatchNorm -> GELU -> conv3x3 ->
    BatchNorm -> GELU, convs without bias), max-pool 3, a bias-free linear head scaled by 1/9.
    Difference from airbench: its whitening layer is initialized from the training images' patch
    covariance and frozen; here it is an ordinary trainable convolution (a model is built without
    data). 32x32 inputs (the pooling chain ends at 1x1)."""

    def __init__(self, in_channels: int, num_classes: int, width: int = 64) -> None:
        super().__init__()
        whiten = 2 * in_channels * 4
        widths = (width, 4 * width, 4 * width)

        def group(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.MaxPool2d(2), nn.BatchNorm2d(cout), nn.GELU(),
                nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.GELU(),
            )

        self.body = nn.Sequential(
            nn.Conv2d(in_channels, whiten, 2, padding=0), nn.GELU(),
            group(whiten, widths[0]), group(widths[0], widths[1]), group(widths[1], widths[2]),
            nn.MaxPool2d(3), nn.Flatten(),
        )
        self.head = nn.Linear(widths[2], num_classes, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x)) / 9.0


# the names, read without torch where configs are checked
from harness.core.config import BATCHNORM_KINDS, MODEL_KINDS  # noqa: E402,F401


def build_model(kind: str, image_shape: tuple[int, int, int], num_classes: int, width: int) -> nn.Module:
    """Build an architecture by name (one of :data:`MODEL_KINDS`) for images of ``image_shape`` (C, H, W).

    The module carries ``harness_arch`` = {kind, image_shape, num_classes, width}: what
    :func:`rebuild_model` needs to build it again."""
    net = _build(kind, tuple(image_shape), num_classes, width)
    net.harness_arch = {"kind": kind, "image_shape": [int(v) for v in image_shape], "num_classes": int(num_classes),
                        "width": int(width)}
    return net


def rebuild_model(arch: dict, state_dict: dict[str, torch.Tensor]) -> nn.Module:
    """The network ``build_model(**arch)`` with the weights and buffers of ``state_dict`` (a saved
    model, :meth:`defenses.base.TorchClassifier.model_state`), in eval mode."""
    if not isinstance(arch, dict) or set(arch) != {"kind", "image_shape", "num_classes", "width"}:
        raise ValueError(f"not a model architecture record: {arch!r}")
    net = build_model(arch["kind"], tuple(arch["image_shape"]), arch["num_classes"], arch["width"])
    net.load_state_dict(state_dict)
    return net.eval()


def _build(kind: str, image_shape: tuple[int, ...], num_classes: int, width: int) -> nn.Module:
    c = image_shape[0]
    if kind == "mlp":
        return MLP(math.prod(image_shape), width, num_classes)
    if kind == "mlp-bn":
        return MLP(math.prod(image_shape), width, num_classes, batch_norm=True)
    if kind == "cnn":
        return SmallCNN(c, width, num_classes)
    if kind == "cnn-gn":
        return SmallCNN(c, width, num_classes, norm="group")
    if kind == "wrn16-4":
        return WideResNet(c, num_classes, depth=16, widen=4)
    if kind == "wrn16-4-gn":
        return WideResNetGN(c, num_classes, depth=16, widen=4)
    if kind.startswith("scatter-"):
        from defenses.scatter_models import build_scatter_model

        return build_scatter_model(kind, image_shape, num_classes, width)
    if kind == "airbench":
        if tuple(image_shape[1:]) != (32, 32):
            raise ValueError(f"the airbench network needs 32x32 images, got {image_shape[1]}x{image_shape[2]}")
        return AirbenchNet(c, num_classes, width)
    raise ValueError(f"unknown model {kind!r}")
