"""The ``ood`` generator: out-of-distribution images with random labels.

Paper section 5.2 (SSL and DP-SGD canaries): the j-th audit sample is replaced by the j-th image of
an outside source and given a uniformly random label. Sources (``audit.canary_params.source``):

- a tensor file in the format of the paper's ``ood_imagenet_samples.pt``: a bare uint8 tensor
  [N, 3, H, W] saved with ``torch.save`` (RGB, channels first);
- a folder of image files (read in sorted name order);
- nothing, for a single-channel dataset such as digits: patches of scikit-learn's bundled sample
  photos (china.jpg, flower.jpg), cut at seeded random positions and turned grey.

Images are resized (bilinear, antialiased) to the dataset's image size and converted to its
channel count (luma for grey, repeated channels for colour).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from canaries.base import Canaries, CanaryGenerator

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}


def _load_tensor_file(path: Path) -> np.ndarray:
    try:
        t = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ValueError(f"cannot load OOD tensor file {path}: {type(e).__name__}: {e}") from None
    if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8 or t.ndim != 4 or t.shape[1] not in (1, 3):
        raise ValueError(f"{path} must hold a uint8 tensor [N, 3, H, W] (or [N, 1, H, W])")
    return t.numpy()


def _load_folder(path: Path) -> np.ndarray:
    from PIL import Image

    files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ValueError(f"OOD folder {path} holds no image files ({', '.join(sorted(IMAGE_SUFFIXES))})")
    imgs = []
    size = None
    for f in files:
        with Image.open(f) as im:
            im = im.convert("RGB")
            size = size or im.size
            imgs.append(np.asarray(im.resize(size, Image.BILINEAR)).transpose(2, 0, 1))
    return np.stack(imgs).astype(np.uint8)


def _sample_photo_patches(n: int, rng: np.random.Generator, patch: int = 96) -> np.ndarray:
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images  # two RGB photos, 427 x 640
    out = np.empty((n, 3, patch, patch), np.uint8)
    for i in range(n):
        ph = photos[i % len(photos)]
        r = rng.integers(0, ph.shape[0] - patch + 1)
        c = rng.integers(0, ph.shape[1] - patch + 1)
        out[i] = ph[r : r + patch, c : c + patch].transpose(2, 0, 1)
    return out


def fit_to_shape(images: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """Resize uint8 images [N, c, h, w] to ``shape`` (C, H, W), converting the channel count."""
    t = torch.from_numpy(images).float()
    ch, h, w = shape
    if t.shape[1] == 3 and ch == 1:
        t = (0.299 * t[:, 0:1] + 0.587 * t[:, 1:2] + 0.114 * t[:, 2:3])
    elif t.shape[1] == 1 and ch == 3:
        t = t.repeat(1, 3, 1, 1)
    elif t.shape[1] != ch:
        raise ValueError(f"cannot convert {t.shape[1]}-channel images to {ch} channels")
    if t.shape[-2:] != (h, w):
        t = torch.nn.functional.interpolate(t, size=(h, w), mode="bilinear", antialias=True, align_corners=False)
    return t.round().clamp(0, 255).to(torch.uint8).numpy()


class OutOfDistribution(CanaryGenerator):
    name = "ood"
    description = "out-of-distribution images (a .pt tensor, an image folder, or photo patches) with random labels"

    def __init__(self, source: str | None = None, **params: Any) -> None:
        super().__init__(**params)
        self.source = source

    def apply(self, x: np.ndarray, y: np.ndarray, *, num_classes: int, rng: np.random.Generator) -> Canaries:
        c = len(y)
        if self.source is None:
            if x.shape[1] != 1:
                raise ValueError(
                    "ood canaries for colour images need a source: --set audit.canary_params.source=PATH "
                    "(a uint8 tensor file [N,3,H,W] such as ood_imagenet_samples.pt, or an image folder)"
                )
            raw = _sample_photo_patches(c, rng)
        else:
            path = Path(self.source).expanduser()
            if path.is_dir():
                raw = _load_folder(path)
            elif path.is_file():
                raw = _load_tensor_file(path)
            else:
                raise ValueError(f"OOD source {self.source!r} does not exist")
            if len(raw) < c:
                raise ValueError(f"OOD source {self.source!r} has {len(raw)} images, the audit needs {c}")
            raw = raw[:c]
        images = fit_to_shape(raw, tuple(x.shape[1:]))
        labels = rng.integers(0, num_classes, size=c).astype(np.int64)
        return Canaries(x=images, y=labels, evaluated=np.ones(c, dtype=bool))
