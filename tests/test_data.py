import numpy as np
import pytest
import torch

from harness.core.augment import random_augment, shift_flip
from harness.core.config import ConfigError
from harness.defense_config import build_config
from harness.core.data import AugmentSpec, DataError, digits_arrays, load_cifar10, load_digits, load_npz


def test_digits_is_embedded_and_split_by_seed():
    d = load_digits(497, seed=0)
    assert d.x_train.shape == (1300, 1, 8, 8) and d.x_test.shape == (497, 1, 8, 8)
    assert d.x_train.dtype == np.uint8 and set(np.unique(d.y_train)) == set(range(10))
    assert load_digits(497, seed=0).fingerprint() == d.fingerprint() != load_digits(497, seed=1).fingerprint()


def test_digits_read_from_the_csv_equal_scikit_learns_loader():
    """The quick path (scikit-learn's CSV read without importing it) gives load_digits' arrays."""
    from sklearn.datasets import load_digits as sk_load_digits

    images, target = digits_arrays()
    d = sk_load_digits()
    assert images.dtype == d.images.dtype and np.array_equal(images, d.images)
    assert target.dtype == d.target.dtype and np.array_equal(target, d.target)


def test_cifar10_reads_the_official_pickles(cifar_subset):
    d = load_cifar10(cifar_subset, download=False)
    assert d.x_train.shape == (5085, 3, 32, 32) and d.x_test.shape == (1017, 3, 32, 32)
    assert set(np.unique(d.y_train)) == set(range(10))
    assert d.augment == AugmentSpec(flip=True, shift=4)
    assert len(d.augment.query_offsets()) == 18


def test_cifar10_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="no CIFAR-10"):
        load_cifar10(tmp_path / "absent", download=False)


def test_npz_accepts_nhwc_floats(tmp_path):
    rng = np.random.default_rng(0)
    p = tmp_path / "d.npz"
    np.savez(p, x_train=rng.random((40, 16, 16, 3)), y_train=rng.integers(0, 4, 40),
             x_test=rng.random((10, 16, 16, 3)), y_test=rng.integers(0, 4, 10))
    d = load_npz(p)
    assert d.x_train.shape == (40, 3, 16, 16) and d.x_train.dtype == np.uint8 and d.num_classes == 4
    np.savez(p, x_train=rng.random((4, 3, 8, 8)))
    with pytest.raises(ConfigError, match="lacks"):
        load_npz(p)


def test_query_offsets_follow_the_paper_order():
    offs = AugmentSpec(flip=True, shift=4).query_offsets()
    assert offs[0] == (False, 0, 0) and offs[9] == (True, 0, 0) and offs[1] == (False, 0, -4)
    assert len(AugmentSpec(flip=False, shift=1).query_offsets()) == 9


def test_shift_matches_cropping_the_zero_padded_image():
    x = torch.arange(2 * 3 * 6 * 6, dtype=torch.float32).reshape(2, 3, 6, 6)
    pad = torch.nn.functional.pad(x, (2, 2, 2, 2))
    for dy in (-2, 0, 2):
        for dx in (-2, 0, 2):
            crop = pad[..., 2 + dy : 8 + dy, 2 + dx : 8 + dx]
            assert torch.equal(shift_flip(x, dy, dx, False), crop)
            assert torch.equal(shift_flip(x, dy, dx, True), torch.flip(crop, dims=(-1,)))


def test_random_augment_produces_only_allowed_shifts():
    x = torch.rand(64, 1, 8, 8)
    out = random_augment(x, AugmentSpec(flip=False, shift=1), torch.Generator().manual_seed(0))
    allowed = [shift_flip(x, dy, dx, False) for dy in (-1, 0, 1) for dx in (-1, 0, 1)]
    for i in range(64):
        assert any(torch.equal(out[i], a[i]) for a in allowed)


def _npz(path, x_train, x_test=None):
    """An .npz of 4 classes around the given training images (the test images: their first 8)."""
    n = len(x_train)
    np.savez(path, x_train=x_train, y_train=np.arange(n) % 4, x_test=x_train[:8] if x_test is None else x_test,
             y_test=np.arange(8) % 4)
    return path


@pytest.mark.parametrize("bad, message", [
    (np.nan, r"1 NaN or infinite value\(s\) \(the first in image 3\)"),
    (np.inf, r"NaN or infinite"),
    (-np.inf, r"NaN or infinite"),
])
def test_npz_non_finite_pixels_are_refused_even_with_a_scale(tmp_path, bad, message):
    x = np.random.default_rng(0).random((16, 3, 8, 8))
    x[3, 1, 2, 2] = bad
    path = _npz(tmp_path / "d.npz", x)
    for scale in (None, 255.0):
        with pytest.raises(DataError, match=message):
            load_npz(path, scale)


@pytest.mark.parametrize("x, message", [
    (np.full((16, 1, 8, 8), 127.7), r"floats in \[127.7, 127.7\], neither fractions"),  # cast to 127 before
    (np.linspace(-1, 1, 16 * 64).reshape(16, 1, 8, 8), r"floats in \[-1, 1\]"),  # normalized images
    (np.full((16, 1, 8, 8), 300.0), r"floats in \[300, 300\]"),
    (np.arange(16 * 64, dtype=np.int16).reshape(16, 1, 8, 8), r"integers in \[0, 1023\], outside the pixel range"),
    (np.full((16, 1, 8, 8), "a"), "not numeric"),
])
def test_npz_floats_outside_the_pixel_range_are_refused_not_cast(tmp_path, x, message):
    with pytest.raises(DataError, match=message) as e:
        load_npz(_npz(tmp_path / "d.npz", x))
    if "not numeric" not in message:
        assert "--set data.scale=S" in str(e.value)


def test_npz_conversions_without_a_scale_are_exact_or_the_documented_fraction_rule(tmp_path):
    whole = np.arange(16 * 64).reshape(16, 1, 8, 8) % 256
    assert np.array_equal(load_npz(_npz(tmp_path / "a.npz", whole.astype(np.float32))).x_train, whole)
    assert np.array_equal(load_npz(_npz(tmp_path / "b.npz", whole.astype(np.int64))).x_train, whole)
    frac = np.linspace(0, 1, 16 * 64).reshape(16, 1, 8, 8)
    assert np.array_equal(load_npz(_npz(tmp_path / "c.npz", frac)).x_train, np.rint(frac * 255))


def test_npz_data_scale_maps_values_to_pixels_explicitly(tmp_path):
    ten_bit = np.arange(16 * 64, dtype=np.int16).reshape(16, 1, 8, 8)
    d = load_npz(_npz(tmp_path / "d.npz", ten_bit), 255 / 1023)
    assert np.array_equal(d.x_train, np.rint(ten_bit * (255 / 1023)))
    assert d.x_train.max() == 255 and d.x_train.dtype == np.uint8
    assert np.all(load_npz(_npz(tmp_path / "e.npz", np.full((16, 1, 8, 8), 127.7)), 1.0).x_train == 128)
    with pytest.raises(DataError, match=r"times data.scale 2 spans \[0, 2046\], outside the pixel range"):
        load_npz(tmp_path / "d.npz", 2.0)


def test_data_scale_is_read_by_npz_only_and_checked(tmp_path):
    with pytest.raises(ConfigError, match="data.scale applies to npz datasets only"):
        build_config("quick", {"data.scale": 255})
    path = _npz(tmp_path / "d.npz", np.zeros((16, 1, 8, 8), np.uint8))
    for bad in (0, -1, ".nan"):
        with pytest.raises(ConfigError, match="data.scale"):
            build_config("quick", {"data.name": "npz", "data.path": str(path), "data.scale": bad})
    cfg = build_config("quick", {"data.name": "npz", "data.path": str(path), "data.scale": 255})
    assert cfg.data.scale == 255.0
    plain = build_config("quick", {"data.name": "npz", "data.path": str(path)})
    assert "scale" not in plain.model_determining()["data"]  # runs from before the field keep their fingerprint
    assert cfg.model_determining()["data"]["scale"] == 255.0


def test_npz_with_nan_pixels_is_one_error_line_before_any_run_directory(tmp_path):
    from typer.testing import CliRunner

    from harness.cli import app

    x = np.random.default_rng(0).random((40, 1, 8, 8))
    x[10, 0, 0, 0] = np.nan
    path = _npz(tmp_path / "d.npz", x)
    res = CliRunner().invoke(app, ["evaluate", "undefended", "--set", "data.name=npz", "--data-dir", str(path),
                                   "--out", str(tmp_path / "runs")])
    assert res.exit_code == 2, res.output
    assert "error:" in res.output and "NaN or infinite" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "runs").exists()


def test_the_papers_ood_file_is_found_beside_the_dataset_folder(tmp_path):
    """issue 55: ../shared/data holds cifar10-subset/ and ood_imagenet_samples.pt side by side; the
    file in the dataset folder itself comes first; in neither, without download, one clear error."""
    from harness.core.data import PAPER_OOD_FILE, DataError, paper_ood_file

    folder = tmp_path / "cifar10-subset"
    folder.mkdir()
    with pytest.raises(DataError, match="or above it"):
        paper_ood_file(folder, download=False)
    (tmp_path / PAPER_OOD_FILE).write_bytes(b"above")
    assert paper_ood_file(folder, download=False) == tmp_path / PAPER_OOD_FILE
    (folder / PAPER_OOD_FILE).write_bytes(b"inside")
    assert paper_ood_file(folder, download=False) == folder / PAPER_OOD_FILE


def _rows(x: np.ndarray) -> set[bytes]:
    return {r.tobytes() for r in x.reshape(len(x), -1)}


def test_validation_split_is_held_out_of_the_pool_by_seed(cifar_subset, tmp_path):
    """data.validation_size moves a seeded draw of the training pool to x_val: disjoint from what
    models train on (by index and by content), the test set untouched, the rest of the pool in its
    order, the same draw for the same seed; 0 keeps the dataset and its fingerprint as before."""
    from harness.core.config import DataConfig
    from harness.core.data import load_dataset, validation_indices

    full = load_cifar10(cifar_subset, download=False)
    cfg = DataConfig(name="cifar10", path=str(cifar_subset), download=False, validation_size=500)
    d = load_dataset(cfg, seed=0)
    assert d.x_val.shape == (500, 3, 32, 32) and len(d.y_train) == 5085 - 500
    assert np.array_equal(d.x_test, full.x_test) and np.array_equal(d.y_test, full.y_test)
    held = validation_indices(5085, 500, seed=0)
    keep = np.setdiff1d(np.arange(5085), held)
    assert np.array_equal(d.x_val, full.x_train[held]) and np.array_equal(d.y_val, full.y_train[held])
    assert np.array_equal(d.x_train, full.x_train[keep]) and np.array_equal(d.y_train, full.y_train[keep])
    assert load_dataset(cfg, seed=0).fingerprint() == d.fingerprint() != load_dataset(cfg, seed=1).fingerprint()
    none = load_dataset(cfg.model_copy(update={"validation_size": 0}), seed=0)
    assert none.validation_size == 0 and none.fingerprint() == full.fingerprint()
    d.save(tmp_path / "d.npz")  # a run directory keeps the split
    back = type(d).load(tmp_path / "d.npz")
    assert np.array_equal(back.x_val, d.x_val) and back.fingerprint() == d.fingerprint()
    with pytest.raises(DataError, match="validation_size must be between 0 and 5084"):
        load_dataset(cfg.model_copy(update={"validation_size": 5085}), seed=0)


def test_digits_validation_split_leaves_the_test_split_and_normalizes_without_it():
    from harness.core.config import DataConfig
    from harness.core.data import load_dataset

    d = load_dataset(DataConfig(test_size=497, validation_size=200), seed=0)
    plain = load_digits(497, seed=0)
    assert np.array_equal(d.x_test, plain.x_test) and len(d.y_train) == 1100 and len(d.y_val) == 200
    assert d.mean[0] == pytest.approx(d.x_train.mean() / 255.0)
    assert not _rows(d.x_val) & _rows(d.x_test)


def test_imagenet_normalization_is_a_switch_with_its_own_fingerprint(cifar_subset):
    """data.normalization=imagenet: Tramer and Boneh's statistics (a new data fingerprint, so runs of
    the two never mix); refused for one-channel images; the default keeps runs' fingerprints."""
    from harness.core.config import DataConfig
    from harness.core.data import IMAGENET_MEAN, IMAGENET_STD, load_dataset

    cfg = DataConfig(name="cifar10", path=str(cifar_subset), download=False)
    own = load_dataset(cfg, 0)
    inet = load_dataset(cfg.model_copy(update={"normalization": "imagenet"}), 0)
    assert (inet.mean, inet.std) == (IMAGENET_MEAN, IMAGENET_STD) and np.array_equal(inet.x_train, own.x_train)
    assert inet.fingerprint() != own.fingerprint()
    assert own.fingerprint() == load_cifar10(cifar_subset, download=False).fingerprint()
    with pytest.raises(DataError, match="needs RGB images"):
        load_dataset(DataConfig(normalization="imagenet"), 0)
    assert "normalization" not in build_config("quick").model_determining()["data"]


def test_a_mistyped_data_dir_is_one_line_and_no_download(tmp_path, monkeypatch):
    """A --data-dir that does not exist is refused before any download (a mistype); an existing folder
    without batch files, or the default ./data, still downloads."""
    from harness.core import data as data_module

    def no_network(root):
        raise AssertionError(f"a download was attempted into {root}")

    monkeypatch.setattr(data_module, "download_cifar10", no_network)
    with pytest.raises(DataError, match="no such folder. To download CIFAR-10 there, create it first"):
        load_cifar10(tmp_path / "cifar10-subsett", download=True)
    calls = []
    monkeypatch.setattr(data_module, "download_cifar10", lambda root: calls.append(root) or (_ for _ in ()).throw(
        DataError("stop")))
    with pytest.raises(DataError, match="stop"):
        load_cifar10(tmp_path, download=True)  # exists, empty: the download is what the user asked for
    assert calls == [tmp_path]
