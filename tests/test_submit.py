"""Leaderboard submissions (leaderboard/submit.py): bundle, verify, refuse tampering, mark verified."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.run.runstore import RunDir
from leaderboard.submit import run_fingerprint_of, sha256_file

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


def _refusal(res, prefix: str = "error: refused:") -> str:
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(prefix), res.output
    assert "Traceback" not in res.output
    return lines[0]


def _rehash(files: dict, *names: str) -> None:
    """Update hashes.json for ``names``, so that only the later checks can catch the edit."""
    h = json.loads(files["hashes.json"])
    for name in names:
        h[name] = hashlib.sha256(files[name]).hexdigest()
    files["hashes.json"] = json.dumps(h).encode()


def _edit_results(edit):
    """A bundle edit applying ``edit(results)`` to results.json, with its hash updated."""
    def apply(files):
        r = json.loads(files["results.json"])
        edit(r)
        files["results.json"] = json.dumps(r).encode()
        _rehash(files, "results.json")
    return apply


def test_untouched_bundle_is_accepted_and_listed(bundle, tmp_path):
    res = _add(bundle, tmp_path / "site")
    assert res.exit_code == 0, res.output
    (entry,) = (tmp_path / "site" / "entries").iterdir()
    meta = json.loads((entry / "entry.json").read_text())
    assert meta["source"] == "submission" and meta["verified"] is False
    assert meta["bundle_sha256"] == sha256_file(bundle)
    assert (tmp_path / "site" / "index.html").is_file() and (entry / "index.html").is_file()


def test_the_same_bundle_added_twice_is_already_there_and_keeps_its_submission_time(bundle, tmp_path):
    site = tmp_path / "site"
    assert _add(bundle, site).exit_code == 0
    (entry,) = (site / "entries").iterdir()
    before = {p.name: p.read_bytes() for p in entry.iterdir()}
    res = _add(bundle, site)
    assert res.exit_code == 0, res.output
    assert " ".join(res.output.split()).startswith(f"already there: {entry.name}") and "accepted" not in res.output
    assert "nothing changed" in res.output and json.loads(before["entry.json"])["submitted"] in res.output
    assert {p.name: p.read_bytes() for p in entry.iterdir()} == before  # the submission time included


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


def test_submit_refuses_a_run_without_results_or_with_a_damaged_signals_file(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    damaged = copy / "sample-mislabeled" / "signals" / "model_0003.npz"
    damaged.write_bytes(damaged.read_bytes()[:100])
    line = _refusal(runner.invoke(app, ["submit", str(copy), "-o", str(tmp_path / "x.tar.gz")]), "error:")
    assert "model_0003.npz is damaged" in line
    (copy / "results.json").unlink()
    line = _refusal(runner.invoke(app, ["submit", str(copy), "-o", str(tmp_path / "x.tar.gz")]), "error:")
    assert "results.json does not exist" in line
    assert not (tmp_path / "x.tar.gz").exists()


@pytest.mark.parametrize("raised, code, line", [
    (KeyboardInterrupt(), 130, "interrupted: nothing was written"),
    (OSError(errno.ENOSPC, "No space left on device"), 2, "error: cannot write"),
])
def test_an_interrupted_or_failed_submit_leaves_the_old_bundle_and_no_temp_file(run_dir, bundle, tmp_path,
                                                                                   monkeypatch, raised, code, line):
    out = tmp_path / "entry.tar.gz"
    shutil.copyfile(bundle, out)
    old = out.read_bytes()
    real_addfile = tarfile.TarFile.addfile
    calls = []

    def addfile(self, tarinfo, fileobj=None):  # Ctrl-C or a full disk in the middle of the archive
        calls.append(tarinfo.name)
        if len(calls) == 3:
            raise raised
        return real_addfile(self, tarinfo, fileobj)

    monkeypatch.setattr(tarfile.TarFile, "addfile", addfile)
    res = runner.invoke(app, ["submit", str(run_dir), "-o", str(out)], env={"COLUMNS": "300"})
    assert len(calls) == 3 and res.exit_code == code, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(line) and "Traceback" not in res.output, res.output
    assert out.read_bytes() == old  # the previous bundle, untouched
    assert [p.name for p in tmp_path.iterdir()] == ["entry.tar.gz"]  # no temp file
    monkeypatch.undo()  # the run's lock was released: submitting again works and replaces the bundle
    assert runner.invoke(app, ["submit", str(run_dir), "-o", str(out)]).exit_code == 0
    with tarfile.open(out) as tar:
        assert "hashes.json" in tar.getnames() and "results.json" in tar.getnames()
    assert [p.name for p in tmp_path.iterdir()] == ["entry.tar.gz"]


def test_harness_attack_reproduces_results_bit_for_bit(run_dir, tmp_path):
    """The ground for accepting only exact re-computations: the bootstrap is seeded."""
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    before = json.loads((copy / "results.json").read_text())
    assert runner.invoke(app, ["attack", str(copy)]).exit_code == 0
    after = json.loads((copy / "results.json").read_text())
    for r in (before, after):
        r.pop("timings")
    assert json.dumps(before, sort_keys=True) == json.dumps(after, sort_keys=True)  # NaN == NaN as text


@pytest.mark.parametrize("edit, expected", [
    (lambda r: r.update(seed=5), "seed is 5 in results.json but 0 re-computed from the signals"),
    (lambda r: r["population"]["test_accuracy"]["per_model"].__setitem__(2, 0.99),
     "population.test_accuracy.per_model[2] is 0.99 in results.json but"),
    (lambda r: r["sample"]["attacks"][1]["tpr_ci"]["0.01"].__setitem__(0, 0.0) if
     r["sample"]["attacks"][1]["tpr_ci"]["0.01"][0] != 0.0 else
     r["sample"]["attacks"][1]["tpr_ci"]["0.01"].__setitem__(0, 0.5), "tpr_ci[0.01] is ["),
    (lambda r: r.update(my_claim="best defense"), "my_claim is in results.json but the re-run does not write it"),
])
def test_any_edited_number_or_key_is_refused(bundle, tmp_path, edit, expected):
    line = _refusal(_add(_rewrite(bundle, tmp_path / "bad.tar.gz", _edit_results(edit)), tmp_path / "site"))
    assert expected in line
    assert not (tmp_path / "site").exists()


def test_edited_config_is_refused_by_the_run_fingerprint(bundle, tmp_path):
    def edit(files):  # claim 20 epochs in both copies of the config
        for name in ("config.json", "results.json"):
            obj = json.loads(files[name])
            (obj if name == "config.json" else obj["config"])["train"]["epochs"] = 20
            files[name] = json.dumps(obj).encode()
        _rehash(files, "config.json", "results.json")

    line = _refusal(_add(_rewrite(bundle, tmp_path / "bad.tar.gz", edit), tmp_path / "site"))
    assert "the run fingerprint re-computed from config.json" in line


def test_a_bundle_whose_config_json_describes_other_models_than_its_results_is_refused(bundle, tmp_path):
    def edit(files):  # `harness submit` refuses such a run (RunDir.check_config); a bundle made by hand
        obj = json.loads(files["config.json"])
        obj["train"]["lr"] = 0.5
        files["config.json"] = json.dumps(obj).encode()
        _rehash(files, "config.json")

    line = _refusal(_add(_rewrite(bundle, tmp_path / "bad.tar.gz", edit), tmp_path / "site"))
    assert "describe different models" in line


def test_unlisted_files_and_links_are_refused(bundle, tmp_path):
    def extra(files):
        files["notes.txt"] = b"hello"

    line = _refusal(_add(_rewrite(bundle, tmp_path / "x.tar.gz", extra), tmp_path / "site"))
    assert "notes.txt is in the bundle but not in hashes.json" in line
    link = tmp_path / "link.tar.gz"
    with tarfile.open(link, "w:gz") as tar:
        info = tarfile.TarInfo("results.json")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)
    assert "'results.json' is a symlink" in _refusal(_add(link, tmp_path / "site"))


def _fake_rerun(run_dir: Path, dst: Path, seed: int, leak: float | None = None) -> Path:
    """The results.json of a maintainer's re-run with another seed (only its results are read);
    ``leak``: its sample-level leak's point (its standard errors kept)."""
    r = json.loads((run_dir / "results.json").read_text())
    r["seed"] = r["config"]["seed"] = seed
    if leak is not None:
        r["sample"]["figure"]["leak"].update(tpr=leak, lower=min(leak, r["sample"]["figure"]["leak"]["lower"]))
    dst.mkdir()
    (dst / "results.json").write_text(json.dumps(r))
    return dst


def test_verify_refuses_the_entry_own_seed_a_disagreeing_leak_and_a_reused_seed(bundle, run_dir, tmp_path):
    site = tmp_path / "site"
    assert _add(bundle, site).exit_code == 0
    (entry,) = (site / "entries").iterdir()

    def verify(name: str, rerun: Path):
        return runner.invoke(app, ["leaderboard", "verify", name, "--rerun", str(rerun), "--site", str(site)])

    line = _refusal(verify(entry.name, run_dir), "error: not verified:")
    assert "the entry's own seed" in line
    leak = json.loads((entry / "results.json").read_text())["sample"]["figure"]["leak"]
    # a re-run whose leak is far from the entry's, beyond both runs' errors over victims and audit samples
    spread = (leak["se"] ** 2 + leak["se_audit"] ** 2) ** 0.5
    assert 0 < spread < 0.1
    far = leak["tpr"] - 6 * spread if leak["tpr"] > 0.5 else leak["tpr"] + 6 * spread
    line = _refusal(verify(entry.name, _fake_rerun(run_dir, tmp_path / "far", 8, far)), "error: not verified:")
    assert "disagree (z = " in line
    assert json.loads((entry / "entry.json").read_text())["verified"] is False
    res = verify(entry.name, _fake_rerun(run_dir, tmp_path / "ok", 12345))
    assert res.exit_code == 0, res.output
    meta = json.loads((entry / "entry.json").read_text())
    assert meta["verified"] is True and "12345" not in meta["verified_by"]
    shutil.copytree(entry, site / "entries" / "another")  # a second entry may not reuse that seed
    (site / "entries" / "another" / "entry.json").write_text(json.dumps({"source": "submission", "verified": False}))
    line = _refusal(verify("another", tmp_path / "ok"), "error: not verified:")
    assert f"this seed already verified {entry.name}" in line


def test_verify_marks_an_entry_verified_by_a_real_rerun(bundle, tmp_path):
    site = tmp_path / "site"
    assert _add(bundle, site).exit_code == 0
    (entry,) = (site / "entries").iterdir()
    other = _run(tmp_path / "rerun", "--seed", "7")
    res = runner.invoke(app, ["leaderboard", "verify", entry.name, "--rerun", str(other), "--site", str(site)])
    assert res.exit_code == 0, res.output
    meta = json.loads((entry / "entry.json").read_text())
    assert meta["verified"] is True and "7" not in meta["verified_by"].split("sha256")[0]
    assert "verified" in (site / "index.html").read_text()


def test_file_plugin_bundle_carries_its_source_and_needs_trust(tmp_path, monkeypatch):
    from conftest import NEAREST_LABEL_PLUGIN as PLUGIN

    monkeypatch.chdir(tmp_path)
    (tmp_path / "memo.py").write_text(PLUGIN)
    res = runner.invoke(app, ["evaluate", "memo.py:Memorize", "--out", "runs", "--models", "6",
                              "--audit-size", "20", "--set", "attack.bootstrap=20", "--workers", "1"])
    assert res.exit_code == 0, res.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    run = RunDir(run_dir)
    copy = tmp_path / "elsewhere.py"
    shutil.copy(tmp_path / "memo.py", copy)  # the fingerprint reads the code from a copy, keeps the path
    assert run_fingerprint_of(run.load_config(), run.load_data(), f"{copy}:Memorize") == \
        run_fingerprint_of(run.load_config(), run.load_data())
    assert runner.invoke(app, ["submit", str(run_dir), "-o", "entry.tar.gz"]).exit_code == 0
    with tarfile.open("entry.tar.gz") as tar:
        assert tar.extractfile("defense_source/memo.py").read().decode() == PLUGIN
        assert "defense_source/memo.py" in json.loads(tar.extractfile("hashes.json").read())
    line = _refusal(_add(Path("entry.tar.gz"), tmp_path / "site"))
    assert "--trust-plugin" in line and not (tmp_path / "site").exists()
    res = runner.invoke(app, ["leaderboard", "add", "entry.tar.gz", "--site", "site", "--trust-plugin"])
    assert res.exit_code == 0, res.output
    (entry,) = (tmp_path / "site" / "entries").iterdir()
    assert json.loads((entry / "results.json").read_text())["defense"] == "memo.py:Memorize"
    # the maintainer re-runs the bundled source from a folder of their own: the absolute path differs,
    # the published form (file name and class) is the same, so the re-run verifies the entry
    rerun = json.loads((run_dir / "results.json").read_text())
    rerun["seed"] = rerun["config"]["seed"] = 987
    rerun["defense"] = rerun["config"]["defense"] = f"{tmp_path / 'maintainer' / 'memo.py'}:Memorize"
    (tmp_path / "rerun.json").write_text(json.dumps(rerun))
    res = runner.invoke(app, ["leaderboard", "verify", entry.name, "--rerun", "rerun.json", "--site", "site"])
    assert res.exit_code == 0, res.output
    assert str(tmp_path) not in "".join(f.read_text() for f in (tmp_path / "site").rglob("*") if f.is_file())
    (tmp_path / "memo.py").write_text(PLUGIN + "\n# changed\n")
    line = _refusal(runner.invoke(app, ["submit", str(run_dir), "-o", "again.tar.gz"]), "error:")
    assert "changed since the run trained with it" in line


def _strict(text: str):
    """Parse as RFC 8259 JSON: the bare Infinity / NaN tokens Python's json writes are refused."""
    def refuse(token):
        raise ValueError(f"bare {token} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def nonfinite_run(tmp_path_factory) -> Path:
    """A real run whose results.json holds non-finite numbers: without a bootstrap every CI is
    [NaN, NaN] (at a 5% headline FPR, resolvable with 60 non-member guesses)."""
    run_dir = _run(tmp_path_factory.mktemp("nan"), "--set", "attack.fprs=[0.05]", "--set", "attack.bootstrap=0")
    ci = json.loads((run_dir / "results.json").read_text())["population"]["attacks"][0]["tpr_ci"]["0.05"]
    assert ci == ["NaN", "NaN"], ci  # the case under test; else the test proves nothing
    return run_dir


def test_results_json_is_strict_json_and_a_nan_ci_round_trips_submit_and_add(nonfinite_run, tmp_path):
    """issue 36, defect 1: results.json held bare `Infinity` / `NaN`, which strict parsers refuse;
    a genuine bundle with non-finite numbers must be accepted (inf - inf and nan != nan)."""
    from harness import load_run

    results = _strict((nonfinite_run / "results.json").read_text())
    assert results["population"]["attacks"][0]["tpr_ci"]["0.05"] == ["NaN", "NaN"]
    _strict((nonfinite_run / "config.json").read_text())
    _strict((nonfinite_run / "manifest.json").read_text())
    ci = load_run(nonfinite_run).data["population"]["attacks"][0]["tpr_ci"]["0.05"]
    assert all(v != v for v in ci)  # the API reads them back as floats
    out = tmp_path / "entry.tar.gz"
    assert runner.invoke(app, ["submit", str(nonfinite_run), "-o", str(out)]).exit_code == 0
    res = _add(out, tmp_path / "site")
    assert res.exit_code == 0, res.output
    (entry,) = (tmp_path / "site" / "entries").iterdir()
    assert _strict((entry / "results.json").read_text())["population"]["attacks"][0]["tpr_ci"]["0.05"] == ["NaN", "NaN"]


def test_an_older_results_json_with_bare_nan_is_still_read_submitted_and_published_as_strict_json(
        nonfinite_run, tmp_path):
    from harness.core import jsonio

    run = tmp_path / "run"
    shutil.copytree(nonfinite_run, run)
    old = json.dumps(jsonio.loads((run / "results.json").read_text()), indent=2)  # bare tokens, as before
    assert "NaN" in old and "\"NaN\"" not in old
    (run / "results.json").write_text(old)
    res = runner.invoke(app, ["report", str(run)])
    assert res.exit_code == 0, res.output
    out = tmp_path / "entry.tar.gz"
    assert runner.invoke(app, ["submit", str(run), "-o", str(out)]).exit_code == 0
    assert _add(out, tmp_path / "site").exit_code == 0
    (entry,) = (tmp_path / "site" / "entries").iterdir()
    _strict((entry / "results.json").read_text())  # the site serves valid JSON even for an old file
    (entry / "results.json").write_text(old)  # an entry of a site built by an earlier version
    from leaderboard.site import rebuild

    assert len(rebuild(tmp_path / "site")) == 1
    _strict((entry / "results.json").read_text())


def test_verification_treats_equal_infinities_and_nans_as_equal():
    from leaderboard.submit import compare_numbers

    inf, nan = float("inf"), float("nan")
    a = {"seed": 0, "r": {"ci": [0.5, inf], "nan_ci": [nan, nan]}}
    assert compare_numbers(a, json.loads(json.dumps(a))) is None
    finite = {**a, "r": {**a["r"], "ci": [0.5, 3.0]}}
    assert "r.ci[1] is inf in results.json but 3 re-computed" in compare_numbers(a, finite)
    assert compare_numbers({**a, "r": {**a["r"], "ci": [0.5, -inf]}}, a) is not None
