"""torch and torchvision from different builds: one error line at the start, saying how to fix it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.install_check import build_mismatch, install_advice, package_version, version_mismatch

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("torch_v, tv_v, why", [
    ("2.15.0+cpu", "0.29.2+cu132", "CPU vs CUDA 13.2"),
    ("2.15.0+cu132", "0.29.2+cpu", "CUDA 13.2 vs CPU"),
    ("2.15.0+cu128", "0.29.2+cu130", "CUDA 12.8 vs CUDA 13.0"),
    ("2.15.0+rocm6.2", "0.29.2+cu126", "ROCm 6.2 vs CUDA 12.6"),
    ("2.15.0+cu132", "0.29.2+cu132", None),
    ("2.15.0+cu126", "0.29.2+cu128", None),  # one CUDA major version: torchvision accepts it
    ("2.15.0", "0.29.2+cu132", None),  # no label (macOS wheels, source builds): not judged
])
def test_build_labels_are_compared(torch_v, tv_v, why):
    assert build_mismatch(torch_v, tv_v) == why


def test_an_unlabelled_version_is_pypis_cuda_wheel_on_linux_only():
    assert build_mismatch("2.5.0+cpu", "0.20.0", "linux") == "CPU vs PyPI's default (CUDA) build"
    assert build_mismatch("2.5.0", "0.20.0+cpu", "linux") == "CPU vs PyPI's default (CUDA) build"
    assert build_mismatch("2.5.0+cpu", "0.20.0", "darwin") is None


def test_torchvisions_declared_torch_version_must_admit_the_installed_torch():
    assert version_mismatch("2.5.0+cpu", ["numpy", "torch (==2.7.0)"]) == "torchvision requires torch==2.7.0"
    assert version_mismatch("2.5.0+cpu", ["torch==2.5.0"]) is None  # the local label is not part of the match
    assert version_mismatch("2.15.0+cu132", ["torch (>=2.14.0)"]) is None
    assert version_mismatch("2.15.0", ["scipy ; extra == 'scipy'"]) is None and version_mismatch("2.15.0", None) is None


def test_a_torchvision_made_for_another_torch_version_stops_evaluate_at_the_start(tmp_path):
    torch_v = package_version("torch") or "2.15.0"
    fake = _fake_torchvision(tmp_path / "site", "0.1.0" + (f"+{torch_v.partition('+')[2]}" if "+" in torch_v else ""),
                             NMS_ERROR)
    info = fake / "torchvision-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torchvision\nVersion: 0.1.0\n"
                                   "Requires-Dist: torch (==1.0.0)\n")
    proc = _harness(["evaluate", "undefended", "--out", str(tmp_path / "runs")], fake, tmp_path)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(err) == 1 and "are not a matching pair (torchvision requires torch==1.0.0)" in err[0], err
    assert not (tmp_path / "runs").exists()


def test_advice_names_the_index_of_the_installed_torch():
    assert "--index-url https://download.pytorch.org/whl/cu132" in install_advice("2.15.0+cu132")
    assert "--index-url https://download.pytorch.org/whl/cpu" in install_advice("2.15.0+cpu")
    assert "--index-url https://download.pytorch.org/whl/cpu" in install_advice("2.15.0")
    for version in ("2.15.0+cpu", "2.15.0"):  # the CPU index named once, not "... /whl/cpu (or /whl/cpu ...)"
        assert install_advice(version).count("whl/cpu") == 1, install_advice(version)
    assert "(or https://download.pytorch.org/whl/cpu for the CPU build)" in install_advice("2.15.0+cu132")
    # where download.pytorch.org cannot be reached (a PyPI mirror only): a matching pair of PyPI releases
    assert "where that index cannot be reached, a matching pair from PyPI: pip install --force-reinstall " \
           "'torch==2.14.*' 'torchvision==0.29.*'" in install_advice("2.14.1+cu130")
    assert "'torch==2.9.*' 'torchvision==0.24.*'" in install_advice("2.9.1")  # the pair this project's CI has used


def _fake_torchvision(root: Path, version: str, init: str = "") -> Path:
    """A torchvision package that shadows the installed one: its version.py and an __init__."""
    pkg = root / "torchvision"
    pkg.mkdir(parents=True)
    (pkg / "version.py").write_text(f"__version__ = '{version}'\ngit_version = 'x'\n")
    (pkg / "__init__.py").write_text(init)
    return root


def _harness(args: list[str], pythonpath: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(pythonpath), str(REPO)])}
    return subprocess.run([sys.executable, "-c", "from harness.cli import main; main()", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=120)


NMS_ERROR = "raise RuntimeError('operator torchvision::nms does not exist')\n"


def test_a_cpu_torchvision_beside_a_cuda_torch_stops_evaluate_at_the_start(tmp_path):
    torch_v = package_version("torch")
    if not torch_v or "+" not in torch_v:
        pytest.skip(f"the installed torch ({torch_v}) has no build label to compare")
    other = "cu132" if not torch_v.endswith("+cpu") else "cpu"
    other = "cpu" if other != "cpu" else "cu132"
    fake = _fake_torchvision(tmp_path / "site", f"0.29.2+{other}", NMS_ERROR)
    proc = _harness(["evaluate", "undefended", "--out", str(tmp_path / "runs")], fake, tmp_path)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(err) == 1 and err[0].startswith("error: torch ") and "builds for different platforms" in err[0]
    assert "pip install --force-reinstall torch torchvision --index-url" in err[0]
    assert not (tmp_path / "runs").exists()


def test_a_torchvision_whose_ops_do_not_load_stops_the_resnet_encoder_before_training(tmp_path):
    torch_v = package_version("torch") or "2.15.0"
    label = torch_v.partition("+")[2]
    fake = _fake_torchvision(tmp_path / "site", "0.29.2" + (f"+{label}" if label else ""), NMS_ERROR)
    proc = _harness(["evaluate", "ssl-simclr", "--set", "defense_params.encoder=resnet18", "--models", "6",
                     "--out", str(tmp_path / "runs")], fake, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("error: ssl-simclr: the resnet18 encoder")
    assert "operator torchvision::nms does not exist" in proc.stderr and "--index-url" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_import_torchvision_passes_other_errors_through(tmp_path, monkeypatch):
    """Only a mismatch becomes the install line; an unrelated bug in an import stays a traceback."""
    from harness.core.install_check import import_torchvision

    fake = _fake_torchvision(tmp_path / "site", "0.29.2", "raise RuntimeError('something else entirely')\n")
    monkeypatch.syspath_prepend(str(fake))
    monkeypatch.delitem(sys.modules, "torchvision", raising=False)
    with pytest.raises(RuntimeError, match="something else"):
        import_torchvision("a test")


def test_the_readme_install_part_says_how_to_get_matching_builds():
    readme = (REPO / "README.md").read_text()
    setup = readme[readme.index("## Set up"): readme.index("## Use")]
    assert "operator torchvision::nms does not exist" in setup and "--force-reinstall" in setup
