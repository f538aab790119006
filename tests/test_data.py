import numpy as np
import pytest
import torch

from harness.augment import random_augment, shift_flip
from harness.config import ConfigError
from harness.data import AugmentSpec, digits_arrays, load_cifar10, load_digits, load_npz


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
