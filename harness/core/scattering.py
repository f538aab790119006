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
