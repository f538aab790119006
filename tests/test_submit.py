"""Leaderboard submissions (leaderboard/submit.py): bundle, verify, refuse tampering, mark verified."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from leaderboard.submit import sha256_file

runner = CliRunner()
ARGS = ["--models", "6", "--audit-size", "20", "--epochs", "2", "--set", "train.width=32", "--set",
        "attack.bootstrap=20", "--workers", "1"]


def _run(out: Path, *extra: str) -> Path:
    res = runner.invoke(app, ["evaluate", "undefended", "--out", str(out), *ARGS, *extra])
    assert res.exit_code == 0, res.output
    (run_dir,) = out.iterdir()
    return run_dir


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return _run(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def bundle(run_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("b") / "entry.tar.gz"
    res = runner.invoke(app, ["submit", str(run_dir), "-o", str(out)])
    assert res.exit_code == 0, res.output
    return out


def _rewrite(bundle: Path, dst: Path, edit) -> Path:
    """A copy of ``bundle`` with ``edit(files: dict[name, bytes])`` applied."""
    with tarfile.open(bundle) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    edit(files)
    with tarfile.open(dst, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return dst


def _add(bundle: Path, site: Path):
    return runner.invoke(app, ["leaderboard", "add", str(bundle), "--site", str(site)])


def _refusal(res) -> str:
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: refused:"), res.output
    return lines[0]


def test_untouched_bundle_is_accepted_and_listed(bundle, tmp_path):
    res = _add(bundle, tmp_path / "site")
    assert res.exit_code == 0, res.output
    (entry,) = (tmp_path / "site" / "entries").iterdir()
    meta = json.loads((entry / "entry.json").read_text())
    assert meta["source"] == "submission" and meta["verified"] is False
    assert meta["bundle_sha256"] == sha256_file(bundle)
    assert (tmp_path / "site" / "index.html").is_file() and (entry / "index.html").is_file()


def test_edited_tpr_is_refused_naming_the_attack_and_fpr(bundle, tmp_path):
    def edit(files):
        r = json.loads(files["results.json"])
        a = r["sample"]["attacks"][0]
        a["tpr_at_fpr"]["0.001"] = 0.123456
        files["results.json"] = json.dumps(r).encode()
        h = json.loads(files["hashes.json"])
        import hashlib
        h["results.json"] = hashlib.sha256(files["results.json"]).hexdigest()
        files["hashes.json"] = json.dumps(h).encode()
        edit.label = f"sample/{a['name']}:{a['variant']} tpr_at_fpr[0.001] is 0.1235 in results.json"

    bad = _rewrite(bundle, tmp_path / "bad.tar.gz", edit)
    line = _refusal(_add(bad, tmp_path / "site"))
    assert edit.label in line and "re-computed from the signals" in line
    assert not (tmp_path / "site" / "entries").exists()


def test_edited_results_without_new_hash_is_refused_by_the_hash(bundle, tmp_path):
    def edit(files):
        r = json.loads(files["results.json"])
        r["population"]["best"]["tpr_at_fpr"]["0.001"] = 0.0
        files["results.json"] = json.dumps(r).encode()

    line = _refusal(_add(_rewrite(bundle, tmp_path / "bad.tar.gz", edit), tmp_path / "site"))
    assert "results.json hash mismatch" in line


def test_replaced_signals_file_is_refused(bundle, tmp_path):
    import hashlib

    name0 = "population/signals/model_0000.npz"
    name1 = "population/signals/model_0001.npz"

    def swap(files):  # another model's (genuine) signals under model 0's name, hashes updated
        files[name0] = files[name1]
        h = json.loads(files["hashes.json"])
        h[name0] = hashlib.sha256(files[name0]).hexdigest()
        files["hashes.json"] = json.dumps(h).encode()

    line = _refusal(_add(_rewrite(bundle, tmp_path / "swap.tar.gz", swap), tmp_path / "site"))
    assert "model_0000.npz belongs to another design or model" in line

    def replace(files):  # hashes not updated
        files[name0] = files[name1]

    line = _refusal(_add(_rewrite(bundle, tmp_path / "rep.tar.gz", replace), tmp_path / "site"))
    assert f"{name0} hash mismatch" in line


def test_unsafe_paths_and_non_bundles_are_refused(tmp_path):
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        info = tarfile.TarInfo("../evil")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    assert "unsafe path in bundle: '../evil'" in _refusal(_add(evil, tmp_path / "site"))
    assert not (tmp_path / "evil").exists()
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tar")
    assert "not a readable tar archive" in _refusal(_add(junk, tmp_path / "site"))


def test_submit_refuses_an_unfinished_run(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (copy / "population" / "signals" / "model_0002.npz").unlink()
    res = runner.invoke(app, ["submit", str(copy), "-o", str(tmp_path / "x.tar.gz")])
    assert res.exit_code == 2 and "population model 2 is not finished" in " ".join(res.output.split())
    assert not (tmp_path / "x.tar.gz").exists()


@pytest.mark.slow
def test_verify_needs_an_unseen_seed_and_agreeing_numbers(bundle, run_dir, tmp_path):
    site = tmp_path / "site"
    assert _add(bundle, site).exit_code == 0
    (entry,) = (site / "entries").iterdir()
    res = runner.invoke(app, ["leaderboard", "verify", entry.name, "--rerun", str(run_dir), "--site", str(site)])
    assert res.exit_code == 2 and "the entry's own seed" in res.output
    other = _run(tmp_path / "rerun", "--seed", "7")
    res = runner.invoke(app, ["leaderboard", "verify", entry.name, "--rerun", str(other), "--site", str(site)])
    assert res.exit_code == 0, res.output
    meta = json.loads((entry / "entry.json").read_text())
    assert meta["verified"] is True and "7" not in meta["verified_by"].split("sha256")[0]
    assert "verified" in (site / "index.html").read_text()
