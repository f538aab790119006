"""The ``ood`` generator: out-of-distribution images (protocol notes §2, ``ood``).

The j-th audit sample (in audit order) is replaced by the j-th image of an outside source; its
label is kept, as in the paper's code: the original label of the replaced sample, random with
respect to the new image's content and class-balanced (``label: random`` draws a uniform label
instead). Sources (``audit.canary_params.ood.source``):

- unset (the paper's; the ``paper`` and ``cifar10-scatter`` presets): ``ood_imagenet_samples.pt`` in
  the dataset folder (``data.path``) or the folder above it, the file the paper's code loads from its data directory: a bare uint8 tensor
  [500, 3, 32, 32] (one ImageNet train image per class for 500 classes). When the folder lacks it
  and ``data.download`` is set (cifar10), it is fetched from the paper's public repository at a
  pinned commit and kept only if its SHA-256 is the published file's
  (:func:`harness.core.data.paper_ood_file`). A file already there is read only if its MD5 is the
  paper's (``47acc093c6ce95b2d453dff3a97f2500``), as the paper's code checks it; another file
  under that name is refused (name it as ``source`` to use it anyway);
- a path: a tensor file in that format (any N >= C, [N, 1 or 3, H, W]), or a folder of image files
  (read in sorted name order);
- ``photos``: patches of scikit-learn's two bundled sample photos (china.jpg, flower.jpg), cut at
  seeded random positions; needs no file at all (the ``quick``, ``cifar10`` and ``fast`` presets'
  choice, so that they run offline from a local dataset copy).

Images are resized (bilinear, antialiased) to the dataset's image size and converted to its
channel count (luma for grey, repeated channels for colour).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import torch

from canaries.base import Canaries, CanaryContext, CanaryGenerator, param_path
from harness.core.data import PAPER_OOD_FILE, DataError, paper_ood_file

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}
PAPER_MD5 = "47acc093c6ce95b2d453dff3a97f2500"
PHOTOS = "photos"


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


def sample_photo_patches(n: int, rng: np.random.Generator, patch: int = 96) -> np.ndarray:
    """``n`` RGB patches (n, 3, patch, patch) of scikit-learn's bundled photos at random positions."""
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


def _md5(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class OutOfDistribution(CanaryGenerator):
    name = "ood"
    description = ("out-of-distribution images (the paper's ImageNet file, a .pt tensor, an image folder, or "
                   "'photos'), original labels kept")

    def __init__(self, source: str | None = None, label: str = "original", **params: Any) -> None:
        super().__init__(**params)
        if source is not None and (not isinstance(source, str) or not source):
            raise ValueError(f"source must be a path or {PHOTOS!r}, got {source!r}")
        if label not in ("original", "random"):
            raise ValueError(f"label must be 'original' (the paper's) or 'random', got {label!r}")
        self.source = source
        self.label = label
        self._record: dict[str, Any] = {}

    def resolve_source(self, data_dir: str | None, download: bool = False, base_dir: str | None = None) -> str | Path:
        """The source to read: :data:`PHOTOS` or an absolute path (the paper's file when ``source``
        is unset, downloaded into ``data_dir`` when it is absent there and ``download`` is set; a
        relative ``source`` read from ``base_dir``, the folder the run was created in:
        :attr:`CanaryContext.base_dir`)."""
        if self.source == PHOTOS:
            return PHOTOS
        if self.source is not None:
            path = param_path(self.source, base_dir)
            if not path.exists():
                where = "" if Path(self.source).expanduser().is_absolute() else \
                    f" (a relative path is read from {base_dir or Path.cwd()}, the folder the run was created in)"
                raise ValueError(f"OOD source {self.source!r}{where} does not exist")
            return path
        others = (f"set --set audit.canary_params.ood.source=PATH (a uint8 tensor file [N,3,H,W] or an image "
                  f"folder) or ...source={PHOTOS} (bundled photo patches)")
        if not data_dir:
            raise ValueError(f"ood canaries read the paper's {PAPER_OOD_FILE} from the data folder, and this "
                             f"dataset has no data folder; {others}")
        try:
            return paper_ood_file(Path(data_dir).expanduser().absolute(), download=download)
        except DataError as e:
            raise ValueError(f"{e}; or put the file there yourself, or {others}") from None

    def apply(self, x: np.ndarray, y: np.ndarray, ctx: CanaryContext) -> Canaries:
        c = len(y)
        src = self.resolve_source(ctx.data_dir, ctx.download, ctx.base_dir)
        record: dict[str, Any] = {"label": self.label}
        if src == PHOTOS:
            raw = sample_photo_patches(c, ctx.rng)
            record["source"] = "photos (scikit-learn sample images, random patches)"
        else:
            path = Path(src)
            raw = _load_folder(path) if path.is_dir() else _load_tensor_file(path)
            record["source"] = str(path)
            if path.is_file():
                md5 = _md5(path)
                record.update(md5=md5, is_papers_file=md5 == PAPER_MD5)
                if self.source is None and md5 != PAPER_MD5:  # the paper's file, by name: its code raises here too
                    raise ValueError(f"{path} is not the paper's {PAPER_OOD_FILE} (MD5 {md5}, the paper's is "
                                     f"{PAPER_MD5}): a different or damaged file; replace it, or read it as your "
                                     f"own source with --set audit.canary_params.ood.source={path}")
            if len(raw) < c:
                raise ValueError(f"OOD source {str(path)!r} has {len(raw)} images, the audit needs {c}")
            raw = raw[:c]
        images = fit_to_shape(raw, tuple(x.shape[1:]))  # type: ignore[arg-type]
        if self.label == "original":
            labels = np.asarray(y, np.int64).copy()
        else:
            labels = ctx.rng.integers(0, ctx.num_classes, size=c).astype(np.int64)
        self._record = record
        return Canaries(x=images, y=labels, evaluated=np.ones(c, dtype=bool))

    def describe(self) -> dict[str, Any]:
        return dict(self._record)
