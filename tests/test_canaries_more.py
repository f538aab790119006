"""The uniform, duplicates and ood canary generators."""

import hashlib
import re

import numpy as np
import pytest
import torch

from canaries.base import CanaryContext
from canaries.duplicates import MislabeledDuplicates
from canaries.ood import PAPER_MD5, OutOfDistribution, fit_to_shape
from harness.core import data as data_module
from harness.core.data import PAPER_OOD_SHA256, PAPER_OOD_URL
from canaries.uniform import UniformNoise
from conftest import SHARED

OOD_FILE = SHARED / "data" / "ood_imagenet_samples.pt"


def ctx(seed: int, c: int = 500, data_dir=None, k: int = 10, download: bool = False) -> CanaryContext:
    return CanaryContext(num_classes=k, rng=np.random.default_rng(seed), pool_indices=np.arange(c), data_dir=data_dir,
                         download=download)


def _audit(c=40, shape=(3, 32, 32)):
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (c, *shape), dtype=np.uint8), rng.integers(0, 10, c)


def test_uniform_noise_images_and_labels():
    x, y = _audit(200)
    c = UniformNoise().apply(x, y, ctx(1))
    assert c.x.shape == x.shape and c.x.dtype == np.uint8 and c.evaluated.all()
    assert not np.array_equal(c.x, x) and 100 < c.x.mean() < 155  # uniform over 0..255
    assert set(np.unique(c.y)) == set(range(10))


def test_duplicates_pair_clean_originals_with_mislabeled_copies():
    x, y = _audit(40)
    c = MislabeledDuplicates().apply(x, y, ctx(2))
    assert np.array_equal(c.x[:20], x[:20]) and np.array_equal(c.x[20:], x[:20])
    assert np.array_equal(c.y[:20], y[:20]) and (c.y[20:] != y[:20]).all()
    assert not c.evaluated[:20].any() and c.evaluated[20:].all()
    with pytest.raises(ValueError, match="even"):
        MislabeledDuplicates().apply(x[:5], y[:5], ctx(0))


def test_ood_from_an_image_folder(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(3)
    for i in range(12):
        Image.fromarray(rng.integers(0, 256, (48, 40, 3), dtype=np.uint8)).save(tmp_path / f"img_{i:02d}.png")
    x, y = _audit(10)
    c = OutOfDistribution(source=str(tmp_path)).apply(x, y, ctx(0))
    assert c.x.shape == (10, 3, 32, 32) and c.evaluated.all()
    assert np.array_equal(c.y, y)  # the paper's rule: the replaced sample's label is kept
    r = OutOfDistribution(source=str(tmp_path), label="random").apply(x, y, ctx(0))
    assert np.array_equal(r.x, c.x) and not np.array_equal(r.y, y) and r.y.max() < 10
    with pytest.raises(ValueError, match="has 12 images"):
        OutOfDistribution(source=str(tmp_path)).apply(*_audit(20), ctx(0))


def test_ood_photo_patches_and_the_papers_default_source(tmp_path):
    x, y = _audit(30, shape=(1, 8, 8))
    a = OutOfDistribution(source="photos").apply(x, y, ctx(5))
    b = OutOfDistribution(source="photos").apply(x, y, ctx(5))
    assert a.x.shape == (30, 1, 8, 8) and np.array_equal(a.x, b.x)
    assert len({im.tobytes() for im in a.x}) == 30
    assert OutOfDistribution(source="photos").apply(*_audit(4), ctx(0)).x.shape == (4, 3, 32, 32)
    # unset source: the paper's file in the data folder, and a clear error naming the options without it
    with pytest.raises(ValueError, match="ood_imagenet_samples.pt.*source=photos"):
        OutOfDistribution().apply(*_audit(4), ctx(0, data_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="no data folder"):
        OutOfDistribution().apply(*_audit(4, shape=(1, 8, 8)), ctx(0))
    torch.save(torch.full((6, 3, 32, 32), 7, dtype=torch.uint8), tmp_path / "ood_imagenet_samples.pt")
    # another file under the paper's name is refused (the paper's code raises on a wrong MD5) ...
    with pytest.raises(ValueError, match=r"is not the paper's ood_imagenet_samples.pt \(MD5 [0-9a-f]{32}"):
        OutOfDistribution().apply(*_audit(4), ctx(0, data_dir=str(tmp_path)))
    # ... and read when named as the source, its MD5 recorded
    gen = OutOfDistribution(source=str(tmp_path / "ood_imagenet_samples.pt"))
    c = gen.apply(*_audit(4), ctx(0, data_dir=str(tmp_path)))
    assert (c.x == 7).all() and gen.describe()["is_papers_file"] is False


def test_ood_from_the_papers_tensor_file():
    if not OOD_FILE.is_file():
        pytest.skip(f"{OOD_FILE} not found (only CI and developers have ../shared)")
    x, y = _audit(500)
    gen = OutOfDistribution(source=str(OOD_FILE))
    c = gen.apply(x, y, ctx(0))
    assert gen.describe()["is_papers_file"] is True  # the MD5 of protocol notes section 2
    raw = torch.load(OOD_FILE, weights_only=True)
    assert np.array_equal(c.x, raw.numpy())  # same size: taken as is, in order
    assert list(c.x[0, 0, 0, :8]) == [157, 176, 185, 129, 141, 148, 105, 75]  # protocol notes' check


def _need_paper_file():
    if not OOD_FILE.is_file():
        pytest.skip(f"{OOD_FILE} not found (only CI and developers have ../shared)")


def test_the_pinned_download_is_the_papers_file():
    # the SHA-256 a download must match is the paper's file's (the MD5 recorded by every run agrees)
    _need_paper_file()
    blob = OOD_FILE.read_bytes()
    assert len(blob) == 1_537_245 and hashlib.sha256(blob).hexdigest() == PAPER_OOD_SHA256
    assert hashlib.md5(blob).hexdigest() == PAPER_MD5
    assert PAPER_OOD_URL.startswith("https://raw.githubusercontent.com/ethz-spylab/misleading-privacy-evals/")
    assert re.search(r"/[0-9a-f]{40}/ood_imagenet_samples\.pt$", PAPER_OOD_URL)  # a commit, not a branch


def test_a_missing_paper_file_is_downloaded_checked_kept_and_used(tmp_path, monkeypatch):
    _need_paper_file()
    monkeypatch.setattr(data_module, "PAPER_OOD_URL", OOD_FILE.as_uri())  # no network in tests
    folder = tmp_path / "data"
    gen = OutOfDistribution()
    c = gen.apply(*_audit(500), ctx(0, data_dir=str(folder), download=True))
    assert [p.name for p in folder.iterdir()] == ["ood_imagenet_samples.pt"]  # no temp file left beside it
    assert (folder / "ood_imagenet_samples.pt").read_bytes() == OOD_FILE.read_bytes()
    assert gen.describe()["is_papers_file"] is True
    assert np.array_equal(c.x, torch.load(OOD_FILE, weights_only=True).numpy())
    # once there, it is read without another download (this URL would fail)
    monkeypatch.setattr(data_module, "PAPER_OOD_URL", (tmp_path / "gone.pt").as_uri())
    again = OutOfDistribution().apply(*_audit(500), ctx(0, data_dir=str(folder), download=True))
    assert np.array_equal(again.x, c.x)


def test_a_corrupt_or_failed_download_is_refused_and_nothing_is_kept(tmp_path, monkeypatch):
    other = tmp_path / "other.pt"
    torch.save(torch.full((500, 3, 32, 32), 7, dtype=torch.uint8), other)  # a valid tensor file, not the paper's
    folder = tmp_path / "data"
    folder.mkdir()
    monkeypatch.setattr(data_module, "PAPER_OOD_URL", other.as_uri())
    with pytest.raises(ValueError, match=r"SHA-256 [0-9a-f]{64}, not the expected " + PAPER_OOD_SHA256) as e:
        OutOfDistribution().apply(*_audit(4), ctx(0, data_dir=str(folder), download=True))
    assert "\n" not in str(e.value) and "nothing was kept" in str(e.value)
    assert list(folder.iterdir()) == []  # neither the file nor its temp file
    monkeypatch.setattr(data_module, "PAPER_OOD_URL", (tmp_path / "absent.pt").as_uri())
    with pytest.raises(ValueError, match="download of the paper's OOD canaries .* failed .*nothing was kept"):
        OutOfDistribution().apply(*_audit(4), ctx(0, data_dir=str(folder), download=True))
    assert list(folder.iterdir()) == []


def test_without_data_download_a_missing_paper_file_names_the_option(tmp_path, monkeypatch):
    def no_network(*a, **k):
        raise AssertionError("downloaded although data.download is false")

    monkeypatch.setattr(data_module, "download_verified", no_network)
    with pytest.raises(ValueError, match=r"no ood_imagenet_samples.pt .* and data.download is false: "
                                         r"--set data.download=true .* fetches it"):
        OutOfDistribution().apply(*_audit(4), ctx(0, data_dir=str(tmp_path), download=False))
    assert list(tmp_path.iterdir()) == []


def test_fit_to_shape_converts_channels_and_size():
    rgb = np.full((2, 3, 16, 16), 200, np.uint8)
    grey = fit_to_shape(rgb, (1, 8, 8))
    assert grey.shape == (2, 1, 8, 8) and (grey == 200).all()
    assert fit_to_shape(grey, (3, 4, 4)).shape == (2, 3, 4, 4)
