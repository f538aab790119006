"""Networks on fixed scattering features (Tramer and Boneh, ICLR 2021): the ``scatter-linear`` and
``scatter-cnn`` model kinds of :mod:`defenses.models`.

A :class:`FeatureNet` takes normalized images like every other network of the harness, so every
defense trains it and every attack queries it unchanged: its forward pass is ``head(features(x))``,
``features`` the fixed map ``GroupNorm(27 groups, no affine)(scatter(x))``: the J = 2, L = 8
scattering transform (:func:`harness.core.scattering.scatter`; RGB 32 x 32 -> 243 x 8 x 8), then each
image's channels normalized per group of 9 (a per-sample function with no parameters), read through
a :class:`harness.core.feature_cache.FeatureCache` shared by every network of the process, so that
each image's features are computed once per machine (the cache's disk folder,
:func:`feature_cache_root`) and the models train only their heads. The map has no parameters:
``state_dict`` holds the head's only. A training loop that sees a FeatureNet
(:func:`fixed_features`) computes its training set's features once and trains the head on them
(:func:`defenses.training.train_classifier`, DP-SGD), the same arithmetic as through the network.

Heads (Tramer and Boneh's ``ScatterLinear`` and their CIFAR-10 CNN on scattering features,
github.com/ftramer/Handcrafted-DP, models.py), on the normalized features:

- ``scatter-linear``: flatten -> Linear(15 552, K);
- ``scatter-cnn``: conv3x3(64) -> tanh -> maxpool 2 -> conv3x3(64) -> tanh -> flatten (64 x 4 x 4)
  -> Linear(1 024, K).

GroupNorm without affine parameters (not their privately estimated BatchNorm statistics) keeps each
sample's forward pass independent of the data, so DP-SGD's per-sample gradients and its accounting
need nothing extra, and it can be part of the fixed map.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from harness.core.feature_cache import FeatureCache
from harness.core.scattering import output_shape, scatter

#: the scattering's scales and angles (Tramer and Boneh's CIFAR-10 setting)
SCATTER_J, SCATTER_L = 2, 8
#: GroupNorm groups over the 243 scattering channels (Tramer and Boneh's CIFAR-10 choice among 9 / 27 / 81)
SCATTER_GROUPS = 27
#: rows kept in memory per process (62 KB each: 2.5 GB): a run's training pool, its 18 query views of
#: 1 000 audit and population images and the serving checks' copies fit
MEMORY_ROWS = 40_000
#: the environment variable naming the features' disk folder
CACHE_ENV = "HARNESS_FEATURE_CACHE"

_SHARED: dict[tuple, FeatureCache] = {}  # one cache per (parameters, folder) in a process: a memo, no state


def feature_cache_root() -> Path:
    """The disk folder of cached features: ``$HARNESS_FEATURE_CACHE``, else
    ``$XDG_CACHE_HOME/privacy-harness/features`` (``~/.cache/...``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "privacy-harness" / "features"


def scattering_params(device: torch.device | str) -> dict:
    """What identifies the features (the cache key): transform, J, L, kymatio and torch versions,
    the device type (CPU and GPU round differently)."""
    from harness.core.scattering import kymatio_scattering2d

    kymatio_scattering2d()  # imports kymatio through the SciPy shim
    import kymatio

    return {"transform": "scattering2d+groupnorm", "J": SCATTER_J, "L": SCATTER_L, "max_order": 2,
            "groups": SCATTER_GROUPS,
            "kymatio": kymatio.__version__, "torch": torch.__version__, "device": torch.device(device).type}


def shared_cache(device: torch.device | str = "cpu") -> FeatureCache:
    """The process's scattering cache for ``device``'s type and the current cache folder (built on
    first use)."""
    root = feature_cache_root()
    key = (torch.device(device).type, str(root))
    if key not in _SHARED:
        _SHARED[key] = FeatureCache(normalized_scatter, scattering_params(device), root, memory_rows=MEMORY_ROWS)
    return _SHARED[key]


def normalized_scatter(x: torch.Tensor) -> torch.Tensor:
    """The fixed map: ``GroupNorm(27, no affine)(scatter(x, J=2, L=8))`` (N, 243, 8, 8) for RGB 32 x 32."""
    f = scatter(x, SCATTER_J, SCATTER_L)
    return nn.functional.group_norm(f, SCATTER_GROUPS, eps=1e-5)


def fixed_features(net: nn.Module) -> "FeatureNet | None":
    """``net`` if its inputs go through a fixed feature map (a :class:`FeatureNet`), else None."""
    return net if isinstance(net, FeatureNet) else None


class FeatureNet(nn.Module):
    """``head(features(x))`` for normalized images x (N, C, H, W); the fixed map
    (:func:`normalized_scatter`) is read through the shared cache (not a submodule: no parameters,
    not in ``state_dict``, shared by copies)."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return shared_cache(x.device)(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class ScatterLinear(nn.Module):
    """One linear layer on the flattened (normalized) scattering features, started at zero (as
    logistic regression is): a random start would keep its random logits along every feature
    direction the training images do not span (15 552 features, a few thousand images), noise on
    test images that no training step removes (HAMP's near-uniform targets, whose margins are
    smaller than that noise, then test at chance)."""

    def __init__(self, channels: int, spatial: int, num_classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(channels * spatial, num_classes)
        nn.init.zeros_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        return self.fc(f.flatten(1))


class ScatterLinearBN(nn.Module):
    """BatchNorm over the scattering channels (affine, batch statistics in training), then the linear
    head of :class:`ScatterLinear` (started at zero): a head with BatchNorm statistics for DFKD's teacher
    on fixed features, whose synthesis matches them (defenses/dfkd.py, feature space)."""

    def __init__(self, channels: int, spatial: int, num_classes: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        self.fc = nn.Linear(channels * spatial, num_classes)
        nn.init.zeros_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        return self.fc(self.bn(f).flatten(1))


class ScatterCNN(nn.Module):
    """conv3x3(64)-tanh-maxpool-conv3x3(64)-tanh, one linear layer, on the (normalized) scattering maps."""

    def __init__(self, channels: int, side: int, num_classes: int, width: int = 64) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(channels, width, 3, padding=1), nn.Tanh(), nn.MaxPool2d(2),
                                      nn.Conv2d(width, width, 3, padding=1), nn.Tanh())
        self.fc = nn.Linear(width * (side // 2) ** 2, num_classes)

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(f).flatten(1))


def build_scatter_model(kind: str, image_shape: tuple[int, ...], num_classes: int, width: int) -> FeatureNet:
    """``scatter-linear``, ``scatter-linear-bn`` (BatchNorm before it: DFKD's teacher) or ``scatter-cnn``
    for images of ``image_shape`` (``width``: the CNN's channels; the linear heads have none)."""
    c, h, w = output_shape(tuple(image_shape), SCATTER_J, SCATTER_L)  # type: ignore[arg-type]
    if c % SCATTER_GROUPS:
        raise ValueError(f"scattering features of {image_shape[0]}-channel images have {c} channels, "
                         f"not divisible into {SCATTER_GROUPS} groups")
    if kind == "scatter-linear":
        return FeatureNet(ScatterLinear(c, h * w, num_classes))
    if kind == "scatter-linear-bn":
        return FeatureNet(ScatterLinearBN(c, h * w, num_classes))
    if kind == "scatter-cnn":
        if h != w or h % 2:
            raise ValueError(f"the scattering CNN head needs square feature maps of even side, not {h} x {w}")
        return FeatureNet(ScatterCNN(c, h, num_classes, width))
    raise ValueError(f"unknown scattering model {kind!r}")
