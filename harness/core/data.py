"""Datasets, their normalization and their augmentations.

Every dataset is held as uint8 images in NCHW layout plus int64 labels. Normalization (per-channel
mean/std) and the augmentations (random flips and +-shift px translations with zero padding, the
paper's ``RandomCrop(32, padding=4)`` + ``RandomHorizontalFlip``) are properties of the dataset, so
training and querying use the same ones.

Loaders:
- ``digits``: scikit-learn's bundled 8x8 digits (the embedded default; no network).
- ``cifar10``: the official ``cifar-10-batches-py`` pickles, read directly (so a folder holding a
  subset of each batch works); downloaded with torchvision when the folder is absent (nothing is
  created when the download fails: :func:`download_cifar10`).
- ``npz``: user data with arrays ``x_train, y_train, x_test, y_test`` (``data.scale`` maps other value
  ranges to pixels).

Data files the paper's audit reads beside CIFAR-10 (its OOD canaries, :func:`paper_ood_file`) are
fetched into the same folder under ``data.download``, from a pinned URL, their SHA-256 checked
before they are kept (:func:`download_verified`).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import importlib.util
import os
import pickle
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from harness.core.config import DEFAULT_DATA_DIR, ConfigError, DataConfig

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2023, 0.1994, 0.2010)
#: ImageNet's channel statistics, with which Tramer and Boneh normalize CIFAR-10 before the scattering
#: transform (``data.normalization: imagenet``)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: the paper's OOD canaries: one ImageNet train image for each of 500 classes, a bare uint8 tensor
#: [500, 3, 32, 32] that the paper's code loads from its data folder (canaries/ood.py)
PAPER_OOD_FILE = "ood_imagenet_samples.pt"
#: the file in the paper's public repository (github.com/ethz-spylab/misleading-privacy-evals, at its root),
#: pinned to a commit so that the bytes cannot change (the file is unchanged since the first release)
PAPER_OOD_URL = ("https://raw.githubusercontent.com/ethz-spylab/misleading-privacy-evals/"
                 "b2868d3b9bd0f2187fdfcc9a633f068a0f2cf128/ood_imagenet_samples.pt")
PAPER_OOD_SHA256 = "96977053f723d0a01637eea0bf21b7c0cbb5e4d9b11e6b72021672b6caec3384"  # 1 537 245 bytes


class DataError(ConfigError):
    """The data named by the config cannot be loaded (a user mistake: wrong path, bad file)."""


@dataclass(frozen=True)
class AugmentSpec:
    """Augmentations of a dataset: horizontal flips and translations of up to ``shift`` pixels."""

    flip: bool
    shift: int

    def query_offsets(self) -> list[tuple[bool, int, int]]:
        """The fixed query augmentations (flip, dy, dx), index 0 the unaugmented query.

        Ordered as in the paper's code: ``for flip in (F, T): for dy in (0,-s,s): for dx in (0,-s,s)``,
        so index ``a = 9*flip + 3*i_y + i_x`` (18 queries with flips, 9 without).
        """
        flips = (False, True) if self.flip else (False,)
        shifts = (0, -self.shift, self.shift) if self.shift else (0,)
        return [(f, dy, dx) for f in flips for dy in shifts for dx in shifts]


@dataclass(frozen=True)
class ImageDataset:
    """A train/test split of uint8 NCHW images with its normalization and augmentations."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    augment: AugmentSpec
    #: the validation split (``data.validation_size`` images held out of the training pool:
    #: :func:`hold_out_validation`); empty when the config holds none out
    x_val: np.ndarray | None = None
    y_val: np.ndarray | None = None
    _hash: list[str] = field(default_factory=list, repr=False, compare=False)

    @property
    def num_channels(self) -> int:
        return int(self.x_train.shape[1])

    @property
    def validation_size(self) -> int:
        return 0 if self.y_val is None else len(self.y_val)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.x_train.shape[1:])  # type: ignore[return-value]

    def fingerprint(self) -> str:
        """SHA-256 over all arrays and the normalization: the data part of a run's fingerprint."""
        if not self._hash:
            h = hashlib.sha256()
            arrays = [self.x_train, self.y_train, self.x_test, self.y_test]
            if self.validation_size:  # none held out: the fingerprint runs had before the split existed
                arrays += [self.x_val, self.y_val]
            for a in arrays:
                h.update(str((a.dtype, a.shape)).encode())
                h.update(np.ascontiguousarray(a).tobytes())
            h.update(repr((self.num_classes, self.mean, self.std, self.augment)).encode())
            self._hash.append(h.hexdigest())
        return self._hash[0]

    def save(self, path: Path) -> None:
        val = {"x_val": self.x_val, "y_val": self.y_val} if self.validation_size else {}
        np.savez(
            path,
            x_train=self.x_train,
            y_train=self.y_train,
            x_test=self.x_test,
            y_test=self.y_test,
            **val,
            meta=np.array(
                repr(
                    dict(
                        name=self.name,
                        num_classes=self.num_classes,
                        mean=self.mean,
                        std=self.std,
                        flip=self.augment.flip,
                        shift=self.augment.shift,
                    )
                )
            ),
        )

    @classmethod
    def load(cls, path: Path) -> "ImageDataset":
        import ast

        with np.load(path) as z:
            meta = ast.literal_eval(str(z["meta"]))
            return cls(
                name=meta["name"],
                x_train=z["x_train"],
                y_train=z["y_train"],
                x_test=z["x_test"],
                y_test=z["y_test"],
                num_classes=meta["num_classes"],
                mean=tuple(meta["mean"]),
                std=tuple(meta["std"]),
                augment=AugmentSpec(flip=meta["flip"], shift=meta["shift"]),
                x_val=z["x_val"] if "x_val" in z.files else None,
                y_val=z["y_val"] if "y_val" in z.files else None,
            )


def load_dataset(cfg: DataConfig, seed: int) -> ImageDataset:
    """Load the dataset named by ``cfg`` with its ``validation_size`` images held out of the training
    pool (:func:`hold_out_validation`); raise :class:`DataError` with a clear message on failure."""
    if cfg.name == "digits":
        data = load_digits(cfg.test_size, seed, cfg.validation_size)
    elif cfg.name == "cifar10":
        data = load_cifar10(Path(cfg.path or "data"), download=cfg.download)
    elif cfg.name == "npz":
        data = load_npz(Path(cfg.path or ""), cfg.scale)
    else:  # pragma: no cover - guarded by the config schema
        raise DataError(f"unknown dataset {cfg.name!r}")
    if cfg.normalization == "imagenet":
        if data.num_channels != 3:
            raise DataError(f"data.normalization=imagenet needs RGB images; {cfg.name} has {data.num_channels} channel(s)")
        data = dataclasses.replace(data, mean=IMAGENET_MEAN, std=IMAGENET_STD, _hash=[])
    return data if cfg.name == "digits" else hold_out_validation(data, cfg.validation_size, seed)


#: the stream of the validation split's draw (``SeedSequence([seed, VALIDATION_STREAM])``)
VALIDATION_STREAM = 0x7A11D


def validation_indices(pool: int, size: int, seed: int) -> np.ndarray:
    """The pool indices held out for validation: the first ``size`` of a seeded permutation of the
    ``pool`` training images (its own stream, so the test set, the audit design and the canaries draw
    as before), sorted."""
    if not 0 <= size < pool:
        raise DataError(f"data.validation_size must be between 0 and {pool - 1} (the training pool holds {pool} "
                        f"images), got {size}")
    order = np.random.default_rng(np.random.SeedSequence([seed, VALIDATION_STREAM])).permutation(pool)
    return np.sort(order[:size])


def hold_out_validation(data: ImageDataset, size: int, seed: int) -> ImageDataset:
    """``data`` with ``size`` training-pool images moved to its validation split (``x_val``, ``y_val``:
    :func:`validation_indices`): no model trains on them, no audit sample or canary is drawn from them,
    and they are not test images, so a setting chosen on them (``harness tune``) never saw the test set.
    ``size`` 0 returns ``data`` unchanged. The normalization is the dataset's own (a constant for
    CIFAR-10 and npz files)."""
    if size == 0:
        return data
    held = validation_indices(len(data.y_train), size, seed)
    keep = np.ones(len(data.y_train), dtype=bool)
    keep[held] = False
    return ImageDataset(name=data.name, x_train=data.x_train[keep], y_train=data.y_train[keep], x_test=data.x_test,
                        y_test=data.y_test, num_classes=data.num_classes, mean=data.mean, std=data.std,
                        augment=data.augment, x_val=data.x_train[held], y_val=data.y_train[held])


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as ``(images (1797, 8, 8) float64 in 0..16, target (1797,))``, the arrays
    ``sklearn.datasets.load_digits()`` returns, read from the CSV file scikit-learn ships (each row: 64
    pixel values, then the label) without importing scikit-learn, which takes about 2 s (a tenth of
    the quick preset's run). Where an installed scikit-learn keeps the file elsewhere or in another
    layout, its loader reads it (same arrays: tests/test_data.py)."""
    spec = importlib.util.find_spec("sklearn")
    csv = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz" if spec and spec.origin else None
    data = None
    if csv is not None and csv.is_file():
        try:
            with gzip.open(csv, "rt") as f:
                data = np.loadtxt(f, delimiter=",")
        except (OSError, ValueError):
            data = None
    if data is None or data.shape != (1797, 65):  # not the layout this reads: scikit-learn's own loader
        from sklearn.datasets import load_digits as _load

        d = _load()
        return d.images, d.target
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)


def load_digits(test_size: int, seed: int, validation_size: int = 0) -> ImageDataset:
    """scikit-learn's digits: 1797 real 8x8 grey images (values 0..16, scaled to uint8 0..255).

    The train/test split is a seeded permutation; augmentations are +-1 px shifts without flips
    (a flipped digit is another symbol). ``validation_size`` images of the training part are held
    out (:func:`hold_out_validation`) before the normalization is computed from the rest.
    """
    images, target = digits_arrays()
    n = len(target)
    if not 0 < test_size < n - 1:
        raise DataError(f"data.test_size must be between 1 and {n - 2} for digits, got {test_size}")
    x = np.rint(images * (255.0 / 16.0)).astype(np.uint8)[:, None, :, :]
    y = target.astype(np.int64)
    perm = np.random.default_rng(np.random.SeedSequence([seed, 0xD161])).permutation(n)
    test, train = perm[:test_size], perm[test_size:]
    held = train[validation_indices(len(train), validation_size, seed)]
    train = train[~np.isin(train, held)]  # the pool's order kept
    mean = float(x[train].mean() / 255.0)
    std = float(x[train].std() / 255.0)
    return ImageDataset(
        name="digits",
        x_train=x[train],
        y_train=y[train],
        x_test=x[test],
        y_test=y[test],
        num_classes=10,
        mean=(mean,),
        std=(std,),
        augment=AugmentSpec(flip=False, shift=1),
        x_val=x[held] if validation_size else None,
        y_val=y[held] if validation_size else None,
    )


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(path, "rb") as f:
            d = pickle.load(f, encoding="latin1")
        x = np.asarray(d["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
        y = np.asarray(d["labels"], dtype=np.int64)
    except (OSError, pickle.UnpicklingError, KeyError, ValueError, EOFError) as e:
        raise DataError(f"{path} is not a CIFAR-10 python batch file ({type(e).__name__}: {e})") from None
    if len(x) != len(y):
        raise DataError(f"{path}: {len(x)} images but {len(y)} labels")
    return x, y


def _find_cifar_folder(root: Path) -> Path | None:
    for cand in (root, root / "cifar-10-batches-py"):
        if (cand / "data_batch_1").is_file() and (cand / "test_batch").is_file():
            return cand
    return None


def refuse_mistyped_root(root: Path) -> None:
    """A CIFAR-10 ``root`` that does not exist (other than the default ``./data``) is most often a
    mistype: refused in one line, never a download attempt."""
    if not root.exists() and root.absolute() != Path(DEFAULT_DATA_DIR).absolute():
        raise DataError(f"--data-dir (data.path) {root}: no such folder. To download CIFAR-10 there, create it "
                        f"first (mkdir -p {root}); `--data-dir {DEFAULT_DATA_DIR}` (the default) downloads into "
                        "./data")


def check_data_path(cfg: DataConfig) -> None:
    """The checks of the data's place that need no reading: a CIFAR-10 folder that does not exist, an npz
    file that does not exist. Run before anything heavy is imported (``harness evaluate`` and ``harness
    tune`` refuse such a mistake in a second or two); the loaders repeat them."""
    if cfg.name == "cifar10":
        root = Path(cfg.path or DEFAULT_DATA_DIR)
        if _find_cifar_folder(root) is None:
            if not cfg.download:
                where = "" if root.is_dir() else " (no such folder)"
                raise DataError(f"no CIFAR-10 batch files (data_batch_1..5, test_batch) under {root}{where}")
            refuse_mistyped_root(root)
    elif cfg.name == "npz" and cfg.path is not None and not Path(cfg.path).is_file():
        raise DataError(f"npz file {cfg.path!r} does not exist")


def load_cifar10(root: Path, *, download: bool = True) -> ImageDataset:
    """CIFAR-10 from the official python pickles in ``root`` or ``root/cifar-10-batches-py``.

    When neither holds the batch files and ``download`` is set, torchvision downloads the official
    archive (:func:`download_cifar10`: nothing is created unless it succeeds; no checksum is
    required when reading, so a subset folder also works), into an existing folder or the default
    one (``./data``); a ``root`` that does not exist is refused as a likely mistype.
    """
    folder = _find_cifar_folder(root)
    if folder is None:
        if not download:
            where = "" if root.is_dir() else " (no such folder)"
            raise DataError(f"no CIFAR-10 batch files (data_batch_1..5, test_batch) under {root}{where}")
        refuse_mistyped_root(root)
        folder = download_cifar10(root)
    parts = [_read_cifar_batch(folder / f"data_batch_{i}") for i in range(1, 6) if (folder / f"data_batch_{i}").is_file()]
    x_train = np.concatenate([p[0] for p in parts])
    y_train = np.concatenate([p[1] for p in parts])
    x_test, y_test = _read_cifar_batch(folder / "test_batch")
    return ImageDataset(
        name="cifar10",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        num_classes=10,
        mean=CIFAR10_MEAN,
        std=CIFAR10_STD,
        augment=AugmentSpec(flip=True, shift=4),
    )


def _nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def download_cifar10(root: Path) -> Path:
    """Download the official CIFAR-10 archive with torchvision and put its ``cifar-10-batches-py``
    into ``root``; return that folder. Nothing is created unless the download succeeds: torchvision
    fetches and extracts into a temp folder in ``root``'s nearest existing ancestor (same file
    system), which is removed whatever happens; only the complete batch folder is moved into
    ``root`` (created then, with its parents). A failure is one :class:`DataError` line."""
    import shutil
    import tempfile

    from harness.core.errors import os_error_message
    from harness.core.install_check import import_torchvision

    try:
        import_torchvision(f"downloading CIFAR-10 (no batch files under {root})")
    except ConfigError as e:
        raise DataError(str(e)) from None
    from torchvision.datasets import CIFAR10

    base = _nearest_existing(root)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".cifar10-download-", dir=base))
    except OSError as e:
        raise DataError(f"no CIFAR-10 files under {root}, and no download is possible there: "
                        f"{os_error_message(e)}") from None
    try:
        print(f"downloading CIFAR-10 into {root}", file=sys.stderr, flush=True)
        try:
            CIFAR10(root=str(tmp), train=True, download=True)
        except Exception as e:
            raise DataError(f"no CIFAR-10 files under {root} and the download failed ({type(e).__name__}: {e}); "
                            "nothing was created") from None
        got = _find_cifar_folder(tmp)
        if got is None:
            raise DataError(f"the CIFAR-10 download finished but held no batch files; nothing was created under {root}")
        target = root.absolute() / "cifar-10-batches-py"
        if target.exists():
            raise DataError(f"{target} exists but lacks data_batch_1 or test_batch: move it away, or point "
                            "--data-dir (data.path) at a complete copy")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(got, target)
        except OSError as e:
            raise DataError(f"cannot put the downloaded CIFAR-10 into {root}: {os_error_message(e)}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def download_verified(url: str, path: Path, sha256: str, what: str) -> None:
    """Fetch ``url`` into ``path`` and keep it only if its SHA-256 is ``sha256``.

    The bytes stream into a temp file beside ``path`` while they are hashed; a failed download or a
    different digest removes the temp file (nothing half-written is kept) and raises one
    :class:`DataError` line; a good one is fsynced and renamed onto ``path``
    (:func:`harness.core.atomic.atomic_write_with`, as every file the harness writes).
    """
    import http.client
    import urllib.error
    import urllib.request  # here, not at the top: most runs never download, and it takes a while to import

    from harness.core.atomic import atomic_write_with
    from harness.core.errors import os_error_message

    def failed(reason: str) -> DataError:
        return DataError(f"the download of {what} from {url} to {path} failed ({reason}); nothing was kept")

    def fetch(f: BinaryIO) -> None:
        h = hashlib.sha256()
        try:
            r = urllib.request.urlopen(url, timeout=60)
        except (OSError, http.client.HTTPException) as e:  # no network, an HTTP error (URLError is an OSError)
            raise failed(f"{type(e).__name__}: {e}") from None
        with r:
            while True:
                try:
                    block = r.read(1 << 20)
                except (OSError, http.client.HTTPException) as e:  # the connection broke off
                    raise failed(f"{type(e).__name__}: {e}") from None
                if not block:
                    break
                h.update(block)
                f.write(block)
        if h.hexdigest() != sha256:
            raise DataError(f"the download of {what} from {url} has SHA-256 {h.hexdigest()}, not the expected "
                            f"{sha256}; nothing was kept")

    print(f"downloading {what} from {url} to {path}", file=sys.stderr, flush=True)
    try:
        atomic_write_with(path, fetch)
    except OSError as e:  # the data folder: read-only, full, a file where a folder should be
        raise failed(os_error_message(e)) from None


def paper_ood_file(folder: Path, *, download: bool) -> Path:
    """The paper's OOD canary file in the data folder ``folder``, or else in the folder above it (a
    dataset folder beside the file: ``data/cifar10-subset`` and ``data/ood_imagenet_samples.pt``);
    fetched into ``folder`` from :data:`PAPER_OOD_URL` and checked against :data:`PAPER_OOD_SHA256`
    when it is in neither and ``download`` (``data.download``) is set. Absent without ``download``: a
    :class:`DataError` naming ``data.download``. A file found is used as it is (canaries/ood.py records
    its path, its MD5 and whether it is the paper's)."""
    for path in (folder / PAPER_OOD_FILE, folder.parent / PAPER_OOD_FILE):
        if path.is_file():
            return path
    path = folder / PAPER_OOD_FILE
    if not download:
        raise DataError(f"no {PAPER_OOD_FILE} (the paper's OOD canaries) in the data folder {str(folder)!r} or above it, and "
                        f"data.download is false: --set data.download=true (cifar10) fetches it from {PAPER_OOD_URL}")
    download_verified(PAPER_OOD_URL, path, PAPER_OOD_SHA256, f"the paper's OOD canaries ({PAPER_OOD_FILE})")
    return path


def _range(x: np.ndarray) -> str:
    return f"[{x.min():.6g}, {x.max():.6g}]"


def _pixels(x: np.ndarray, key: str, path: Path, scale: float | None) -> np.ndarray:
    """uint8 pixel values of a numeric image array; never a silent cast.

    - non-numeric arrays, and NaN or infinite values, are refused;
    - with ``scale`` (``data.scale``): ``rint(value x scale)``, which must lie in 0..255;
    - without it: uint8 as is; integers (and whole-number floats) in 0..255 exactly; floats that all
      lie in [0, 1] times 255, rounded (the documented [0, 1] convention); anything else is refused
      with the range found and the ``data.scale`` that would convert it.
    """
    if not (np.issubdtype(x.dtype, np.number) or np.issubdtype(x.dtype, np.bool_)) or \
            np.issubdtype(x.dtype, np.complexfloating):
        raise DataError(f"{path}: {key} has dtype {x.dtype}, not numeric pixel values")
    if x.size == 0:
        raise DataError(f"{path}: {key} is empty")
    if np.issubdtype(x.dtype, np.floating):
        bad = ~np.isfinite(x)
        if bad.any():
            first = np.unravel_index(int(np.argmax(bad)), x.shape)
            raise DataError(f"{path}: {key} holds {int(bad.sum())} NaN or infinite value(s) (the first in image "
                            f"{first[0]}); images must be finite pixel values")
    if scale is not None:
        y = np.rint(x.astype(np.float64) * scale)
        if y.min() < 0 or y.max() > 255:
            raise DataError(f"{path}: {key} times data.scale {scale:g} spans {_range(y)}, outside the pixel range "
                            f"0..255 (its values span {_range(x)}); choose data.scale so that value x scale lies in "
                            "0..255")
        return y.astype(np.uint8)
    if x.dtype == np.uint8:
        return x
    hint = ("set how values map to pixels with --set data.scale=S (pixel = value x S, rounded to the nearest "
            "integer in 0..255: e.g. S = 1 for pixel values, 255 for fractions in [0, 1])")
    lo, hi = x.min(), x.max()
    if np.issubdtype(x.dtype, np.floating):
        if lo >= 0 and hi <= 1:
            return np.rint(x.astype(np.float64) * 255).astype(np.uint8)
        if lo >= 0 and hi <= 255 and np.all(x == np.rint(x)):
            return x.astype(np.uint8)
        raise DataError(f"{path}: {key} holds floats in {_range(x)}, neither fractions in [0, 1] nor whole pixel "
                        f"values 0..255; {hint}")
    if lo < 0 or hi > 255:
        raise DataError(f"{path}: {key} holds integers in {_range(x)}, outside the pixel range 0..255; {hint}")
    return x.astype(np.uint8)


def _to_nchw_uint8(x: np.ndarray, key: str, path: Path, scale: float | None = None) -> np.ndarray:
    if x.ndim == 3:
        x = x[:, None]
    if x.ndim != 4:
        raise DataError(f"{path}: {key} must have shape [N, C, H, W] or [N, H, W, C], got {x.shape}")
    if x.shape[1] not in (1, 3) and x.shape[3] in (1, 3):
        x = x.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(_pixels(x, key, path, scale))


#: the largest class index an npz dataset may hold (its classifier has one output per class)
MAX_LABEL = 100_000


def _labels(y: np.ndarray, key: str, path: Path) -> np.ndarray:
    """Integer class labels 0..K-1 as int64 (N,): integer-valued, non-negative, at least one."""
    y = np.asarray(y)
    if y.ndim != 1 and not (y.ndim == 2 and y.shape[1] == 1):
        raise DataError(f"{path}: {key} must be a vector of class indices, got shape {y.shape}")
    y = y.ravel()
    if len(y) == 0:
        raise DataError(f"{path}: {key} is empty")
    if not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.bool_)):
        if not np.issubdtype(y.dtype, np.floating) or not np.all(np.isfinite(y)) or np.any(y != np.round(y)):
            raise DataError(f"{path}: {key} must hold integer class indices 0..K-1, got dtype {y.dtype}")
    if y.min() < 0:
        raise DataError(f"{path}: {key} holds negative label {int(y.min())}; labels must be 0..K-1")
    if float(y.max()) > MAX_LABEL:  # checked before the cast, which would wrap a uint64 label round
        raise DataError(f"{path}: {key} holds label {y.max()}; labels must be class indices 0..K-1")
    return y.astype(np.int64)


def load_npz(path: Path, scale: float | None = None) -> ImageDataset:
    """User data: an .npz with ``x_train, y_train, x_test, y_test``, NCHW or NHWC. Images are uint8
    pixels, integers or whole-number floats in 0..255, floats in [0, 1] (times 255), or any finite
    numbers mapped by ``scale`` (``data.scale``: ``rint(value x scale)`` in 0..255); anything else,
    NaN or infinite values included, is refused (:func:`_pixels`).

    Augmentations: flips and shifts of 1/8 of the image side; normalization from the training images.
    """
    if not path.is_file():
        raise DataError(f"npz file {str(path)!r} does not exist")
    try:
        z = np.load(path)
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read {path}: {e}") from None
    missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in z.files]
    if missing:
        raise DataError(f"{path} lacks arrays {missing}")
    x_train = _to_nchw_uint8(z["x_train"], "x_train", path, scale)
    x_test = _to_nchw_uint8(z["x_test"], "x_test", path, scale)
    y_train = _labels(z["y_train"], "y_train", path)
    y_test = _labels(z["y_test"], "y_test", path)
    if len(y_train) != len(x_train) or len(y_test) != len(x_test):
        raise DataError(f"{path}: image and label counts differ (x_train {len(x_train)}, y_train {len(y_train)}, "
                        f"x_test {len(x_test)}, y_test {len(y_test)})")
    if x_train.shape[1:] != x_test.shape[1:]:
        raise DataError(f"{path}: train and test images have different shapes")
    k = int(y_train.max()) + 1
    if y_test.max() >= k:
        raise DataError(f"{path}: y_test holds label {int(y_test.max())}, but y_train's labels are 0..{k - 1}: "
                        "every test class must occur in the training labels (classes are 0..K-1)")
    empty = np.setdiff1d(np.arange(k), y_train)
    if len(empty):
        raise DataError(f"{path}: y_train's labels must be 0..K-1 with every class present; its largest label "
                        f"{k - 1} leaves {len(empty)} class(es) without a training image (first: {int(empty[0])})")
    if len(np.unique(y_train)) < 2:
        raise DataError(f"{path}: y_train holds a single class; membership inference needs a classifier")
    xf = x_train.astype(np.float64) / 255.0
    mean = tuple(float(m) for m in xf.mean(axis=(0, 2, 3)))
    std = tuple(float(s) + 1e-8 for s in xf.std(axis=(0, 2, 3)))
    return ImageDataset(
        name="npz",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        num_classes=k,
        mean=mean,
        std=std,
        augment=AugmentSpec(flip=True, shift=max(1, x_train.shape[-1] // 8)),
    )
