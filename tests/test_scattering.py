"""The scattering transform (harness/core/scattering.py): kymatio 0.3 imported through the SciPy shim,
the shim's spherical harmonics against closed forms, and the features' layout and invariants."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from harness.core import scattering


def _patches(n: int) -> torch.Tensor:
    """n real 32 x 32 RGB patches (scikit-learn's bundled photos), float32 in [0, 1]."""
    from sklearn.datasets import load_sample_image

    out = []
    for name in ("china.jpg", "flower.jpg"):
        im = load_sample_image(name)
        for k in range(n):
            y, x = 37 * k % (im.shape[0] - 32), 53 * k % (im.shape[1] - 32)
            out.append(im[y:y + 32, x:x + 32].transpose(2, 0, 1))
    return torch.from_numpy(np.ascontiguousarray(np.stack(out[:n]), dtype=np.float32) / 255.0)


@pytest.mark.slow
def test_kymatio_imports_through_the_shim_whatever_the_scipy_version():
    """kymatio 0.3.0's package import reaches scipy.special.sph_harm (its 3-D module); SciPy >= 1.17
    removed it. In a fresh interpreter: the shim adds it where missing and kymatio imports."""
    code = ("import scipy.special as s; had = hasattr(s, 'sph_harm'); "
            "from harness.core.scattering import kymatio_scattering2d; cls = kymatio_scattering2d(); "
            "print(had, hasattr(s, 'sph_harm'), cls.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    had, has, name = out.stdout.split()
    assert has == "True" and name.startswith("Scattering")
    import scipy

    major, minor = (int(v) for v in scipy.__version__.split(".")[:2])
    if (major, minor) >= (1, 17):
        assert had == "False"  # the case the shim exists for, exercised here


def test_the_shimmed_sph_harm_is_the_old_scipy_function():
    """sph_harm(m, n, theta = azimuth, phi = polar) against closed-form spherical harmonics; a shim
    with the angles or the orders swapped fails."""
    scattering._scipy_sph_harm_shim()
    from scipy.special import sph_harm

    az, pol = 0.7, 1.1
    expected = {
        (0, 1): 0.5 * math.sqrt(3 / math.pi) * math.cos(pol),
        (1, 1): -0.5 * math.sqrt(3 / (2 * math.pi)) * math.sin(pol) * complex(math.cos(az), math.sin(az)),
        (-2, 2): 0.25 * math.sqrt(15 / (2 * math.pi)) * math.sin(pol) ** 2 * complex(math.cos(-2 * az), math.sin(-2 * az)),
        (1, 2): -0.5 * math.sqrt(15 / (2 * math.pi)) * math.sin(pol) * math.cos(pol) * complex(math.cos(az), math.sin(az)),
    }
    for (m, n), value in expected.items():
        assert abs(complex(sph_harm(m, n, az, pol)) - value) < 1e-12, (m, n)


@pytest.mark.slow
def test_features_equal_kymatios_own_output_in_chunks_and_keep_its_layout():
    """scatter() on real photo patches, computed in chunks of 3, equals one call of kymatio's
    Scattering2D (J = 2, L = 8) reshaped to (N, 243, 8, 8) to 1e-6, channel-major."""
    x = _patches(7)
    ours = scattering.scatter(x, J=2, L=8, chunk=3)
    ref = scattering.kymatio_scattering2d()(J=2, shape=(32, 32), L=8)(x)
    assert ours.shape == (7, 243, 8, 8) and ref.shape == (7, 3, 81, 8, 8)
    assert torch.allclose(ours, ref.reshape(7, 243, 8, 8), atol=1e-6, rtol=0)
    assert scattering.output_shape((3, 32, 32), 2, 8) == (243, 8, 8)
    assert scattering.scattering_channels(1, 3, 8) == 1 + 24 + 192


def test_features_of_a_constant_image_are_its_mean_at_order_zero_and_zero_above():
    """The low-pass filter keeps a constant (its gain at 0 is 1) and every wavelet removes it (zero
    mean): order 0 reads the constant, orders 1 and 2 read 0; a channel's coefficients stay in its
    own 81 channels."""
    x = torch.zeros(1, 3, 32, 32)
    x[0, 1] = 0.7  # only the green channel
    f = scattering.scatter(x)
    assert torch.allclose(f[0, 81], torch.full((8, 8), 0.7), atol=1e-4)
    assert f[0, 82:162].abs().max() < 1e-6
    assert f[0, :81].abs().max() == 0 and f[0, 162:].abs().max() == 0


def test_features_are_positively_homogeneous_and_see_texture():
    """S(a x) = a S(x) for a > 0 (linear filters, modulus); two different photo patches differ."""
    x = _patches(2)
    f, f2 = scattering.scatter(x), scattering.scatter(2.5 * x)
    assert torch.allclose(f2, 2.5 * f, rtol=1e-5, atol=1e-6)
    assert (f[0] - f[1]).abs().max() > 1e-2


def test_bad_inputs_are_one_clear_error():
    with pytest.raises(ValueError, match="divisible by 4"):
        scattering.scatter(torch.zeros(1, 3, 30, 30))
    with pytest.raises(ValueError, match="float32"):
        scattering.scatter(torch.zeros(1, 3, 32, 32, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        scattering.scatter(torch.zeros(3, 32, 32))


def test_the_flip_channel_permutation_from_the_filter_bank_matches_flipped_images(cifar_subset):
    """Issue 66: a horizontal flip in feature space is a channel permutation read off the filter bank
    (each filter to its mirror) plus a flip of the maps. On real images flipped before the transform
    (and rolled 2 px: the subsampling grid's offset), every channel's best-correlated channel of the
    flipped original features is the one the permutation names, and the permutation brings the
    features closer than the identity does."""
    import numpy as np
    import torch

    from harness.core.data import load_cifar10
    from harness.core.scattering import flip_filter_map, flip_permutation, scatter

    d = load_cifar10(cifar_subset, download=False)
    x = torch.from_numpy(d.x_train[:128]).float() / 255
    perm = np.array(flip_permutation(3, 32, 32))
    assert sorted(perm) == list(range(243)) and np.array_equal(perm[perm], np.arange(243))  # an involution
    assert flip_filter_map(32, 32, 2, 8)[:8] == (6, 5, 4, 3, 2, 1, 0, 7)
    s = scatter(x)
    flipped = scatter(torch.roll(torch.flip(x, dims=(-1,)), shifts=-2, dims=-1))
    mine = torch.flip(s, dims=(-1,))
    a = mine.permute(1, 0, 2, 3).reshape(243, -1).numpy()
    b = flipped.permute(1, 0, 2, 3).reshape(243, -1).numpy()
    a = (a - a.mean(1, keepdims=True)) / a.std(1, keepdims=True)
    b = (b - b.mean(1, keepdims=True)) / b.std(1, keepdims=True)
    corr = b @ a.T / a.shape[1]
    assert np.array_equal(corr.argmax(1), perm)
    err = lambda p: float((flipped - mine[:, p]).norm() / flipped.norm())  # noqa: E731
    assert err(perm) < 0.8 * err(np.arange(243))
