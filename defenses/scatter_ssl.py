"""Self-supervised pre-training on fixed scattering maps (issue 66): SimCLR and MoCo v2 at the
``cifar10-scatter`` preset, where every image goes through the fixed ScatterNet map
(:mod:`defenses.scatter_models`: ``GroupNorm(27)(scatter(x, J=2, L=8))``, 243 x 8 x 8 for RGB 32 x 32).

The paper pre-trains a ResNet-18 on pixels for 800 epochs (about a day per model on 2 CPU cores). Here
the encoder is a small CNN on the maps (:class:`ScatterConvEncoder`), and the two views of SimCLR / MoCo
are drawn **in feature space** from each image's maps (:class:`FeatureViewAugment`, per sample, from the
caller's generator):

1. a random resized crop of the 8 x 8 maps: a box of area ``U(crop_scale)`` of the map and aspect
   ratio ``exp(U(log 3/4, log 4/3))`` (its centre uniform where the box fits), resampled to 8 x 8
   bilinearly (``grid_sample``, zero outside): one map cell is 4 image pixels, so a crop of scale s is
   the image crop of the same scale, up to the transform's own grid;
2. where the dataset allows flips, with probability 1/2 the horizontal flip in feature space: the
   channel permutation read off the filter bank (each filter to its mirror,
   :func:`harness.core.scattering.flip_permutation`) and the maps flipped along their width;
3. where asked (``feature_noise`` > 0; the preset's views have none), Gaussian noise of that SD on every
   coefficient (the maps are GroupNorm-ed: unit scale per group). Colour jitter has no counterpart: the
   transform's GroupNorm divides a per-colour scale out. The noise costs: one normal draw per coefficient,
   15 552 per view, which made the attacks' 216 view batches per level the largest part of a model's time.

The training set's maps are computed once per model (through the shared feature cache: once per
machine), and every view is a cheap tensor operation. The adaptive attacks (contrastive white-box and
black-box, LiRA on SSL views) draw their views the same way from the query views' maps
(:mod:`harness.run.signals`, ``ssl_view_pairs``), so they know the training augmentation as the paper's
attacks do; the draws depend on the run's seed only, never on the model.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from defenses.base import Normalizer, TorchClassifier
from harness.core.lazy import LazyModule

torch = LazyModule("torch")
F = LazyModule("torch.nn.functional")
nn = LazyModule("torch.nn")

#: the shape of one image's maps at the cifar10-scatter setting (RGB 32 x 32, J = 2, L = 8)
MAP_SHAPE = (243, 8, 8)


@dataclass(frozen=True)
class FeatureViewAugment:
    """The feature-space SSL augmentation (module docstring); ``mean``/``std``: the images'
    normalization, with which :meth:`base_maps` computes the maps of uint8 images."""

    crop_scale: tuple[float, float] = (0.25, 1.0)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip: bool = True
    noise: float = 0.0
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()
    space: str = field(default="features", init=False)

    def __post_init__(self) -> None:
        lo, hi = self.crop_scale
        if not 0 < lo <= hi <= 1:
            raise ValueError(f"crop_scale must satisfy 0 < low <= high <= 1, got {self.crop_scale}")
        if not (isinstance(self.noise, (int, float)) and self.noise >= 0):
            raise ValueError(f"feature_noise must be a number >= 0, got {self.noise!r}")

    def base_maps(self, x: np.ndarray | "torch.Tensor") -> "torch.Tensor":
        """The fixed maps of uint8 images (N, C, H, W), through the shared feature cache."""
        from defenses.scatter_models import shared_cache

        xt = torch.as_tensor(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else x
        return shared_cache("cpu")(Normalizer(self.mean, self.std, "cpu")(xt))

    def __call__(self, maps: "torch.Tensor", generator: "torch.Generator") -> "torch.Tensor":
        """One view of each map (N, C, H, W), every parameter drawn per sample from ``generator``."""
        n, c, h, w = maps.shape
        lo, hi = self.crop_scale
        area = lo + (hi - lo) * torch.rand(n, generator=generator, dtype=torch.float64)
        log_r = math.log(self.crop_ratio[0]) + (math.log(self.crop_ratio[1]) - math.log(self.crop_ratio[0])) * torch.rand(
            n, generator=generator, dtype=torch.float64)
        ratio = torch.exp(log_r)
        sx = torch.sqrt(area * ratio).clamp(max=1.0)  # box width / map width
        sy = torch.sqrt(area / ratio).clamp(max=1.0)
        cx = (1 - sx) * (2 * torch.rand(n, generator=generator, dtype=torch.float64) - 1)  # centre, in [-1, 1] units
        cy = (1 - sy) * (2 * torch.rand(n, generator=generator, dtype=torch.float64) - 1)
        flip = (torch.rand(n, generator=generator) < 0.5) if self.flip else torch.zeros(n, dtype=torch.bool)
        noise = torch.randn(maps.shape, generator=generator) * self.noise if self.noise > 0 else None
        theta = torch.zeros(n, 2, 3, dtype=torch.float64)
        theta[:, 0, 0] = torch.where(flip, -sx, sx)  # a flip reads the box right to left
        theta[:, 0, 2] = cx
        theta[:, 1, 1] = sy
        theta[:, 1, 2] = cy
        src = maps.float()
        if bool(flip.any()):
            perm = torch.as_tensor(_flip_permutation(c, h, w))
            rows = flip.nonzero().squeeze(1)
            src = src.clone()
            src[rows] = src[rows][:, perm]
        grid = F.affine_grid(theta.float(), [n, c, h, w], align_corners=False)
        out = F.grid_sample(src, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        return out + noise if noise is not None else out


@functools.lru_cache(maxsize=4)
def _flip_permutation(channels: int, h: int, w: int) -> tuple[int, ...]:
    """The flip's channel permutation for maps of ``channels`` x h x w (81 coefficients per colour
    channel at J = 2, L = 8; the image is 4x the map's side)."""
    from harness.core.scattering import flip_permutation

    per_colour = 81
    if channels % per_colour:
        raise ValueError(f"maps of {channels} channels are not J = 2, L = 8 scattering maps (81 per colour channel)")
    return tuple(flip_permutation(channels // per_colour, 4 * h, 4 * w))


class ScatterConvEncoder(nn.Module):
    """A small CNN on the maps: ``1x1 conv (C -> w) -> BN -> ReLU -> 3x3 conv (w -> w) -> BN -> ReLU ->
    3x3 conv, stride 2 (w -> 2w) -> BN -> ReLU``, flattened: 2w x (side / 2)^2 features (1 024 for w = 32
    on 8 x 8 maps; a global mean instead left the probe at 35% test accuracy, where the maps' own linear
    head reaches 60%)."""

    def __init__(self, channels: int, width: int, side: int = 8) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(2 * width), nn.ReLU(),
            nn.Flatten())
        self.out_dim = 2 * width * ((side + 1) // 2) ** 2

    def forward(self, f: "torch.Tensor") -> "torch.Tensor":
        return self.body(f)


def is_maps(x: Any) -> bool:
    """Whether a query batch holds feature maps (float, 243 x 8 x 8) rather than uint8 images."""
    return getattr(x, "dtype", None) != np.uint8 and tuple(np.shape(x)[1:]) == MAP_SHAPE


class MapsNet(nn.Module):
    """``net(maps(x))`` for normalized images: the fixed map through the shared cache, then ``net``."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: "torch.Tensor") -> "torch.Tensor":
        from defenses.scatter_models import shared_cache

        return self.net(shared_cache(x.device)(x))


class MapsServed(TorchClassifier):
    """Encoder + linear probe on the fixed maps, served on images (``query``: the probe's logits;
    ``features``: the encoder's output). Both also take feature maps (float32 (N, 243, 8, 8)): the
    feature-space SSL views of the adaptive attacks (:class:`FeatureViewAugment`)."""

    def __init__(self, encoder: nn.Module, probe: nn.Module, mean: tuple[float, ...], std: tuple[float, ...],
                 device: str, record: dict[str, Any], augment: FeatureViewAugment) -> None:
        self.head = nn.Sequential(encoder, probe).eval()
        self.encoder = encoder.eval()
        super().__init__(MapsNet(self.head), mean, std, device, record=record)
        self.encoder_only = TorchClassifier(MapsNet(self.encoder), mean, std, device)
        self.augment = augment

    def _on_maps(self, net: nn.Module, x: np.ndarray) -> np.ndarray:
        outs = []
        with torch.no_grad():
            for i in range(0, len(x), self.batch_size):
                outs.append(net(torch.as_tensor(np.ascontiguousarray(x[i: i + self.batch_size]),
                                                dtype=torch.float32, device=self.device)).float().cpu())
        return torch.cat(outs).numpy()

    def query(self, x: np.ndarray) -> np.ndarray:
        return self._on_maps(self.head, x) if is_maps(x) else super().query(x)

    def features(self, x: np.ndarray) -> np.ndarray:
        return self._on_maps(self.encoder, x) if is_maps(x) else self.encoder_only.query(x)

    def view_augmentation(self) -> FeatureViewAugment:
        return self.augment
