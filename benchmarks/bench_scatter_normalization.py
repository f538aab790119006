"""How much the image normalization before the scattering transform changes the ``cifar10-scatter``
features (issue 64: Tramer and Boneh normalize CIFAR-10 images with ImageNet's mean and std, the harness
with CIFAR-10's own).

    python benchmarks/bench_scatter_normalization.py --data-dir ../shared/data/cifar10-subset [--images 1000]

The fixed map is GroupNorm(27 groups, no affine, eps 1e-5) of the J = 2, L = 8 scattering; each group holds
9 channels of one colour channel, and the scattering is positively homogeneous, so a per-colour scale of
the input cancels in GroupNorm but for its eps, and a per-colour offset moves only the zero-frequency
(order-0) coefficients. Prints, over the first ``--images`` training images: the relative difference of
the two feature maps (||f_ImageNet - f_CIFAR|| / ||f_CIFAR||, median and maximum over images), the
smallest group variance the GroupNorm divides by (against its eps), and the same difference with the
offsets equal (scale only) to separate the two effects.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from defenses.scatter_models import SCATTER_GROUPS, SCATTER_J, SCATTER_L
from harness.core.data import CIFAR10_MEAN, CIFAR10_STD, load_cifar10
from harness.core.scattering import scatter

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def features(x: torch.Tensor, mean: tuple, std: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    xn = (x / 255.0 - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
    f = scatter(xn, SCATTER_J, SCATTER_L)
    g = f.reshape(len(f), SCATTER_GROUPS, -1)
    return torch.nn.functional.group_norm(f, SCATTER_GROUPS, eps=1e-5), g.var(dim=2, unbiased=False).min(dim=1).values


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", required=True)
    p.add_argument("--images", type=int, default=1000)
    args = p.parse_args()
    d = load_cifar10(Path(args.data_dir), download=False)
    x = torch.from_numpy(d.x_train[: args.images]).float()
    with torch.no_grad():
        ref, var = features(x, CIFAR10_MEAN, CIFAR10_STD)
        inet, _ = features(x, IMAGENET_MEAN, IMAGENET_STD)
        scale_only, _ = features(x, CIFAR10_MEAN, IMAGENET_STD)
    for name, f in (("ImageNet mean and std", inet), ("ImageNet std only (scale)", scale_only)):
        rel = ((f - ref).flatten(1).norm(dim=1) / ref.flatten(1).norm(dim=1)).numpy()
        print(f"{name}: relative feature difference median {np.median(rel):.2e}, max {rel.max():.2e}")
    print(f"smallest group variance over images: {var.min().item():.3e} (GroupNorm eps 1e-5)")


if __name__ == "__main__":
    main()
