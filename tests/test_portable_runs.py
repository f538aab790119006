"""Runs are portable: paths are stored absolute, a moved dataset is one line naming --data-dir, and a
failed data lookup creates nothing (issue 36, item 3)."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from canaries.ood import OutOfDistribution
from harness.cli import app
from harness.core.config import validate_config
from harness.core.data import DataError, digits_arrays, download_cifar10, load_cifar10
from harness.defense_config import build_config
from harness.run.runner import run_fingerprint
from harness.run.runstore import RunDir

from conftest import TINY_ARGS

runner = CliRunner()


def _digits_npz(path: Path, brighter: int = 0) -> None:
    images, target = digits_arrays()
    x = np.clip(np.rint(images * (255 / 16)) + brighter, 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, x_train=x[:1300], y_train=target[:1300], x_test=x[1300:], y_test=target[1300:])


def test_a_relative_data_dir_resumes_from_another_folder_and_a_moved_dataset_names_the_fix(tmp_path, monkeypatch):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    _digits_npz(project / "data" / "d.npz")
    elsewhere.mkdir()
    monkeypatch.chdir(project)
    res = runner.invoke(app, ["evaluate", "undefended", "--set", "data.name=npz", "--data-dir", "data/d.npz",
                              "--out", "runs", *TINY_ARGS])
    assert res.exit_code == 0, res.output
    (run_dir,) = (project / "runs").iterdir()
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["data"]["path"] == str(project / "data" / "d.npz") and saved["run"]["out"] == str(project / "runs")
    manifest = RunDir(run_dir).load_manifest()
    assert manifest["cwd"] == str(project)
    # paths never enter the fingerprint: the config as typed (relative) gives the run's, so runs made
    # before paths were stored absolute still resume
    typed = validate_config({**saved, "data": {**saved["data"], "path": "data/d.npz"},
                             "run": {**saved["run"], "out": "runs"}})
    assert run_fingerprint(typed, RunDir(run_dir).load_data()) == manifest["fingerprint"]

    monkeypatch.chdir(elsewhere)
    res = runner.invoke(app, ["evaluate", "--run-dir", str(run_dir)])
    assert res.exit_code == 0, res.output
    assert "Resuming: 6 of 6 models already trained" in res.output
    assert list(elsewhere.iterdir()) == []  # nothing made in the folder the command ran from
    assert RunDir(run_dir).load_manifest()["cwd"] == str(project)  # the creation folder is kept

    os.replace(project / "data", project / "moved")
    res = runner.invoke(app, ["evaluate", "--run-dir", str(run_dir)])
    assert res.exit_code == 2
    assert "data moved" in res.output and str(project / "data" / "d.npz") in res.output
    assert "pass --data-dir" in res.output and manifest["data_fingerprint"][:12] in res.output
    assert not (project / "data").exists()  # the failed lookup created nothing

    _digits_npz(elsewhere / "other.npz", brighter=1)  # other data at the given path: refused, not a "different run"
    res = runner.invoke(app, ["evaluate", "--run-dir", str(run_dir), "--data-dir", str(elsewhere / "other.npz")])
    assert res.exit_code == 2 and "are not this run's" in res.output and "pass --data-dir" in res.output

    res = runner.invoke(app, ["evaluate", "--run-dir", str(run_dir), "--data-dir", "../project/moved/d.npz"])
    assert res.exit_code == 0, res.output
    assert "Resuming: 6 of 6 models already trained" in res.output
    assert json.loads((run_dir / "config.json").read_text())["data"]["path"] == str(project / "moved" / "d.npz")


def test_a_resumed_cifar10_run_whose_folder_is_gone_never_downloads(tmp_path, monkeypatch):
    import torchvision.datasets

    from harness.run.runner import load_run_data

    def no_download(*a, **k):
        raise AssertionError("a resumed run must not download its dataset again")

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", no_download)
    cfg = build_config("cifar10", {"defense": "undefended", "data.path": str(tmp_path / "gone" / "cifar10-subset")})
    assert cfg.data.download
    with pytest.raises(DataError, match=r"data moved: .*no such folder.*pass --data-dir .*0123456789ab"):
        load_run_data(cfg, {"data_fingerprint": "0123456789ab" * 5})
    assert list(tmp_path.iterdir()) == []


def _fake_batch(path: Path, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        pickle.dump({"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), "labels": list(range(n))}, f)


def test_a_failed_cifar10_download_creates_no_folder(tmp_path, monkeypatch):
    import torchvision.datasets

    class OfflineCIFAR10:  # as torchvision: makes its folders, starts the archive, then the network fails
        def __init__(self, root: str, train: bool, download: bool) -> None:
            (Path(root) / "cifar-10-batches-py").mkdir(parents=True)
            (Path(root) / "cifar-10-python.tar.gz").write_bytes(b"partial")
            raise RuntimeError("Network is unreachable")

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", OfflineCIFAR10)
    target = tmp_path / "shared" / "data" / "cifar10-subset"
    with pytest.raises(DataError, match="download failed .*Network is unreachable.*nothing was created"):
        download_cifar10(target)  # (load_cifar10 refuses a folder that does not exist before any download)
    assert list(tmp_path.iterdir()) == []  # neither the folders nor the temp download are left


def test_a_cifar10_download_lands_in_the_folder_once_complete(tmp_path, monkeypatch):
    import torchvision.datasets

    class FakeCIFAR10:
        def __init__(self, root: str, train: bool, download: bool) -> None:
            d = Path(root) / "cifar-10-batches-py"
            d.mkdir(parents=True)
            for i in range(1, 6):
                _fake_batch(d / f"data_batch_{i}", 10, i)
            _fake_batch(d / "test_batch", 10, 0)
            (Path(root) / "cifar-10-python.tar.gz").write_bytes(b"archive")

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", FakeCIFAR10)
    (tmp_path / "new" / "data").mkdir(parents=True)  # a folder made for the download (a missing one is a mistype)
    d = load_cifar10(tmp_path / "new" / "data", download=True)
    assert d.x_train.shape == (50, 3, 32, 32) and d.x_test.shape == (10, 3, 32, 32)
    assert sorted(p.name for p in (tmp_path / "new" / "data").iterdir()) == ["cifar-10-batches-py"]
    assert [p.name for p in tmp_path.iterdir()] == ["new"]  # the temp folder is gone
    assert load_cifar10(tmp_path / "new" / "data", download=False).fingerprint() == d.fingerprint()


def test_a_relative_ood_source_is_read_from_the_folder_the_run_was_created_in(tmp_path, monkeypatch):
    (tmp_path / "here").mkdir()
    torch.save(torch.full((4, 3, 8, 8), 7, dtype=torch.uint8), tmp_path / "ood.pt")
    monkeypatch.chdir(tmp_path / "here")
    gen = OutOfDistribution(source="ood.pt")
    assert gen.resolve_source(None, base_dir=str(tmp_path)) == tmp_path / "ood.pt"
    with pytest.raises(ValueError, match=r"'ood.pt' \(a relative path is read from .*here"):
        gen.resolve_source(None)
