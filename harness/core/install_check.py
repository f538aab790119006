"""torch and torchvision must come from matching builds.

A torchvision built for another torch build fails when it is imported or used, with errors such as
``operator torchvision::nms does not exist`` (its compiled ops did not load) or "PyTorch and
torchvision were compiled with different CUDA major versions". That happens when the two were
installed from different indexes (a CPU torch from download.pytorch.org, then a CUDA torchvision
from PyPI pulled in by ``pip install -e .``, or the reverse).

Two checks, both ending in one :class:`~harness.core.config.ConfigError` line that says how to install
matching builds:

- :func:`check_torch_builds`, at the start of the commands that train: the build labels of the two
  installed versions (``2.15.0+cpu``, ``0.29.2+cu132``), read from each package's ``version.py``
  as text, without importing torchvision (about 1 s): CPU against CUDA or ROCm, or two CUDA major
  versions, is a mismatch; on Linux an unlabelled version is PyPI's CUDA wheel. A version without a
  label elsewhere (macOS wheels, source builds) is not judged. Then the torch version torchvision's
  metadata requires (``Requires-Dist: torch (==2.5.0)``) must admit the installed torch.
- :func:`import_torchvision`, wherever the harness imports torchvision (the ResNet-18 encoder, the
  CIFAR-10 download): the real import, its failure turned into that line.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from importlib import metadata
from pathlib import Path
from types import ModuleType

from harness.core.errors import ConfigError

TORCH_INDEX = "https://download.pytorch.org/whl"

#: messages of a torchvision whose compiled ops do not fit the installed torch
_MISMATCH_SIGNS = ("torchvision::", "custom C++ ops", "CUDA major versions", "undefined symbol", "_C.so", "_C_stable")


def package_version(package: str) -> str | None:
    """``__version__`` from ``<package>/version.py`` read as text (the package is not imported);
    None when the package or the file is absent or holds no version."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        f = Path(folder) / "version.py"
        try:
            m = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", f.read_text(), re.M)
        except OSError:
            continue
        if m:
            return m.group(1)
    return None


def _build(version: str) -> str:
    """The local build label of a version (``cpu``, ``cu132``, ``rocm6.2``), or '' without one."""
    return version.partition("+")[2]


def _describe(label: str) -> str:
    if label == "cpu":
        return "CPU"
    m = re.fullmatch(r"cu(\d+)(\d)", label)
    if m:
        return f"CUDA {m.group(1)}.{m.group(2)}"
    return label.upper() if label.startswith("xpu") else label.replace("rocm", "ROCm ")


def build_mismatch(torch_version: str, torchvision_version: str, platform: str = sys.platform) -> str | None:
    """Why two installed versions are builds for different platforms, or None when they match or
    cannot be judged. On Linux a version without a build label is PyPI's default wheel, a CUDA
    build, so ``cpu`` against an unlabelled version is a mismatch; elsewhere (macOS wheels, source
    builds) an unlabelled version is not judged."""
    a, b = _build(torch_version), _build(torchvision_version)
    if platform.startswith("linux") and {a, b} == {"cpu", ""}:
        return f"{_describe('cpu')} vs PyPI's default (CUDA) build"
    if not a or not b or a == b:
        return None
    cuda_a, cuda_b = re.fullmatch(r"cu(\d+)\d", a), re.fullmatch(r"cu(\d+)\d", b)
    if cuda_a and cuda_b and cuda_a.group(1) == cuda_b.group(1):
        return None  # one CUDA major version: torchvision's own check accepts it
    return f"{_describe(a)} vs {_describe(b)}"


def install_advice(torch_version: str | None) -> str:
    """The command that installs matching builds, for the installed torch's platform."""
    label = _build(torch_version or "") or "cpu"
    index = f"{TORCH_INDEX}/{label}" if re.fullmatch(r"cpu|cu\d+|rocm[\d.]+|xpu", label) else f"{TORCH_INDEX}/cpu"
    cpu = f"{TORCH_INDEX}/cpu"
    pair = pypi_pair(torch_version)
    return (f"install both from one index: pip install --force-reinstall torch torchvision --index-url {index} "
            + (f"(or {cpu} for the CPU build), " if index != cpu else "")
            + (f"or, where that index cannot be reached, a matching pair from PyPI: pip install --force-reinstall "
               f"{pair}; " if pair else "")
            + "then pip install -e . (README, Set up)")


def pypi_pair(torch_version: str | None) -> str | None:
    """``'torch==2.M.*' 'torchvision==0.(M+15).*'`` for an installed torch 2.M: the torchvision release of
    the same series (0.15 came with torch 2.0, and each torch 2.x minor with the next), or None."""
    m = re.match(r"2\.(\d+)", torch_version or "")
    if not m:
        return None
    minor = int(m.group(1))
    return f"'torch==2.{minor}.*' 'torchvision==0.{minor + 15}.*'"


def version_mismatch(torch_version: str, torchvision_requires: list[str] | None) -> str | None:
    """Why the installed torch does not satisfy the torch requirement torchvision's metadata declares
    (``torch (==2.5.0)``, ``torch (>=2.14.0)``), or None (satisfied, or nothing declared)."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    try:
        version = Version(torch_version.partition("+")[0])
    except InvalidVersion:
        return None
    for text in torchvision_requires or []:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.name.lower() == "torch" and req.marker is None and req.specifier and \
                not req.specifier.contains(version, prereleases=True):
            return f"torchvision requires torch{req.specifier}"
    return None


def check_torch_builds() -> None:
    """Raise ConfigError when the installed torch and torchvision are builds for different
    platforms, or torchvision's declared torch requirement excludes the installed torch (module
    docstring); nothing is imported."""
    tv, tvv = package_version("torch"), package_version("torchvision")
    if tv is None or tvv is None:
        return
    why = build_mismatch(tv, tvv)
    if why:
        raise ConfigError(f"torch {tv} and torchvision {tvv} are builds for different platforms ({why}); "
                          f"torchvision's compiled ops fail with this torch: {install_advice(tv)}")
    try:
        requires = metadata.requires("torchvision")
    except metadata.PackageNotFoundError:
        requires = None
    why = version_mismatch(tv, requires)
    if why:
        raise ConfigError(f"torch {tv} and torchvision {tvv} are not a matching pair ({why}); "
                          f"torchvision's compiled ops fail with this torch: {install_advice(tv)}")


def import_torchvision(what: str) -> ModuleType:
    """``import torchvision`` for ``what`` (e.g. "the resnet18 encoder"); a torchvision that does
    not fit the installed torch, or none at all, is one ConfigError line."""
    try:
        return importlib.import_module("torchvision")
    except ModuleNotFoundError as e:
        if e.name != "torchvision":
            raise
        raise ConfigError(f"{what} needs torchvision, which is not installed: pip install torchvision "
                          f"(from the index torch came from: {install_advice(package_version('torch'))})") from None
    except (RuntimeError, ImportError, OSError, AttributeError) as e:
        text = str(e).splitlines()[0] if str(e) else type(e).__name__
        if not any(sign in str(e) for sign in _MISMATCH_SIGNS):
            raise
        tv = package_version("torch")
        raise ConfigError(f"{what} needs torchvision, whose import fails ({type(e).__name__}: {text}): torch {tv} "
                          f"and torchvision {package_version('torchvision')} are not matching builds; "
                          f"{install_advice(tv)}") from None
