"""The 2-D scattering transform (Bruna and Mallat 2013; Oyallon and Mallat 2015) as a fixed feature map.

Tramer and Boneh, "Differentially Private Learning Needs Better Features (or Much More Data)",
ICLR 2021, train linear models and small CNNs on ScatterNet features of CIFAR-10 (J = 2, L = 8: a
32 x 32 x 3 image becomes 3 x 81 channels of 8 x 8). The transform has no trainable parameters and
does not depend on the data, so it is computed once per image and every model of a run trains a head.

Implementation: kymatio's ``Scattering2D`` (torch frontend), the implementation Tramer and Boneh
used, pinned to its 0.3 release (docs/architecture.md says why we depend on it rather than write the
transform). kymatio 0.3.0 cannot be imported with SciPy >= 1.17: ``kymatio/__init__.py`` imports its
3-D module, which imports ``scipy.special.sph_harm``, removed from SciPy in favour of ``sph_harm_y``
(arguments in another order). :func:`_scipy_sph_harm_shim` adds that one name back, as the
documented identity ``sph_harm(m, n, theta, phi) == sph_harm_y(n, m, phi, theta)`` (old: theta the
azimuthal angle, phi the polar one; new: the other way round), before kymatio is imported; it adds
nothing where SciPy still has the function. The 2-D transform never calls it.
tests/test_scattering.py checks the identity against closed-form spherical harmonics and the
transform against kymatio's own output on real CIFAR-10 images.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: the kymatio releases this module is written and tested against (its output layout and defaults)
KYMATIO_VERSIONS = ">=0.3,<0.4"


def _scipy_sph_harm_shim() -> bool:
    """Give ``scipy.special`` back its ``sph_harm`` where SciPy removed it (SciPy >= 1.17), so that
    kymatio 0.3 imports; True when the name was added. ``sph_harm(m, n, theta, phi)`` with theta the
    azimuthal and phi the polar angle equals ``sph_harm_y(n, m, phi, theta)``."""
    import scipy.special as special

    if hasattr(special, "sph_harm"):
        return False

    def sph_harm(m: Any, n: Any, theta: Any, phi: Any) -> Any:
        return special.sph_harm_y(n, m, phi, theta)

    special.sph_harm = sph_harm
    return True


def kymatio_scattering2d() -> Any:
    """kymatio's ``Scattering2D`` class (torch frontend), importable whatever the SciPy version."""
    _scipy_sph_harm_shim()
    try:
        from kymatio.torch import Scattering2D
    except ImportError as e:  # a broken install: say what to install, not a traceback from kymatio's import
        raise ImportError(f"the scattering transform needs kymatio{KYMATIO_VERSIONS} "
                          f"(pip install 'kymatio{KYMATIO_VERSIONS}'): {e}") from e
    return Scattering2D


def scattering_channels(channels: int, J: int, L: int) -> int:
    """Output channels of a J-scale, L-angle scattering of ``channels`` input channels up to order 2:
    ``channels * (1 + J L + L^2 J (J - 1) / 2)`` (243 for RGB at J = 2, L = 8)."""
    return channels * (1 + J * L + L * L * J * (J - 1) // 2)


def output_shape(image_shape: tuple[int, int, int], J: int, L: int) -> tuple[int, int, int]:
    """(channels, height, width) of the features of one (C, H, W) image: spatial size divided by 2^J."""
    c, h, w = image_shape
    if h % 2**J or w % 2**J:
        raise ValueError(f"a scattering with J = {J} needs image sides divisible by {2**J}, not {h} x {w}")
    return scattering_channels(c, J, L), h // 2**J, w // 2**J


@functools.lru_cache(maxsize=8)
def _transform(height: int, width: int, J: int, L: int) -> Any:
    """One kymatio transform per (shape, J, L): building its filter bank is the costly part."""
    return kymatio_scattering2d()(J=J, shape=(height, width), L=L, max_order=2)


def scatter(x: "torch.Tensor", J: int = 2, L: int = 8, chunk: int = 256) -> "torch.Tensor":
    """Scattering features of float32 images ``x`` (N, C, H, W) -> (N, C * K, H / 2^J, W / 2^J), K the
    coefficients per channel (:func:`scattering_channels`), in kymatio's order (channel-major: each
    input channel's K coefficients together), computed ``chunk`` images at a time. Differentiable
    (kymatio's torch ops), deterministic on one machine."""
    import torch

    if x.ndim != 4:
        raise ValueError(f"scatter takes images (N, C, H, W), not shape {tuple(x.shape)}")
    n, c, h, w = x.shape
    k, oh, ow = output_shape((c, h, w), J, L)
    t = _transform(h, w, J, L).to(x.device)
    if x.dtype != torch.float32:
        raise ValueError(f"scatter takes float32 images, not {x.dtype}")
    out = [t(x[i:i + chunk].contiguous()).reshape(-1, k, oh, ow) for i in range(0, n, chunk)]
    return torch.cat(out) if out else x.new_zeros((0, k, oh, ow))


def coefficient_index(J: int, L: int, psi: list[tuple[int, int]] | None = None) -> list[tuple[int, ...]]:
    """The coefficients of one input channel in kymatio's output order: ``(0,)`` (order 0), ``(1, n)``
    for each band-pass filter n (order 1: kymatio's filter order, scale-major then angle), and
    ``(2, n1, n2)`` for the filter pairs with a coarser second scale (order 2: n1 outer, n2 inner).
    ``psi``: the filters' (j, theta), in kymatio's order (default: scale-major, angle inner)."""
    psi = psi if psi is not None else [(j, t) for j in range(J) for t in range(L)]
    return ([(0,)] + [(1, n) for n in range(len(psi))]
            + [(2, a, b) for a in range(len(psi)) for b in range(len(psi)) if psi[b][0] > psi[a][0]])


@functools.lru_cache(maxsize=8)
def flip_filter_map(height: int, width: int, J: int, L: int) -> tuple[int, ...]:
    """For each band-pass filter n of the transform, the filter m whose response to the horizontally
    flipped image has the modulus of n's: read off the filter bank itself. A flip maps frequency
    (u, v) to (u, -v); kymatio's filters are real in the Fourier domain, and the mirror of filter n is
    either a filter m (``psi_m(u, v) = psi_n(u, -v)``) or the point reflection of one
    (``psi_m(-u, -v)``, whose spatial filter is the conjugate: the same modulus on real inputs). At
    L = 8 the angles pair as theta -> 6 - theta for theta < 7 and 7 -> 7."""
    import numpy as np

    t = _transform(height, width, J, L)
    filters = [np.asarray(p["levels"][0]) for p in t.psi]

    def mirror(f: np.ndarray) -> np.ndarray:
        return f[:, (-np.arange(f.shape[1])) % f.shape[1]]

    def point(f: np.ndarray) -> np.ndarray:
        return f[(-np.arange(f.shape[0])) % f.shape[0]][:, (-np.arange(f.shape[1])) % f.shape[1]]

    out = []
    for f in filters:
        m = mirror(f)
        match = [k for k, g in enumerate(filters) if np.allclose(m, g, atol=1e-6) or np.allclose(m, point(g), atol=1e-6)]
        if len(match) != 1:
            raise RuntimeError(f"the flipped filter matches {len(match)} filters of the bank, not one")
        out.append(match[0])
    return tuple(out)


def flip_permutation(channels: int, height: int, width: int, J: int = 2, L: int = 8) -> "list[int]":
    """The channel permutation P of a horizontal image flip in feature space: the features of the
    flipped image are, channel c, the original features' channel P[c] flipped along their width
    (order 0 stays; order 1 and 2 move each filter to its mirror, :func:`flip_filter_map`), per input
    channel block. The spatial part is exact only up to the subsampling grid: the 2^J grid of the
    flipped image's features lies 2^J - 1 pixels off the mirror of the original's (3 px at J = 2,
    three quarters of a 4 px cell), so the flipped feature map matches best the image flipped and
    rolled 2-3 px (relative error 7%, against 10% with the channels left in place; 17% unrolled:
    tests/test_scattering.py)."""
    t = _transform(height, width, J, L)
    psi = [(int(p["j"]), int(p["theta"])) for p in t.psi]
    sigma = flip_filter_map(height, width, J, L)
    order = coefficient_index(J, L, psi)
    pos = {k: i for i, k in enumerate(order)}
    block = [pos[k] if k[0] == 0 else pos[(1, sigma[k[1]])] if k[0] == 1 else pos[(2, sigma[k[1]], sigma[k[2]])]
             for k in order]
    return [c * len(order) + i for c in range(channels) for i in block]
