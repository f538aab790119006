"""Nothing lost, nothing inconsistent: one writer per run directory (a lock), attack settings and
results changed together (one journaled commit), and OS failures (read-only folders, files where
folders belong, a full disk) as one error line with nothing half-written."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import HANG_GUARD_S, TINY_ARGS, gated_defense, wait_for
from harness.cli import app
from harness.run.runlock import LOCK_NAME, RunLock, RunLockedError
from harness.run.runstore import COMMIT_JOURNAL, commit_files, recover_commit

runner = CliRunner()
ARGS = TINY_ARGS
CLI = [sys.executable, "-c", "from harness.cli import main; main()"]
#: the CLI with Ctrl-C deliverable: a test suite started in the background by a shell without job control
#: (``bash .ci/run &``) hands its children SIGINT ignored, and Python then keeps it ignored (measured: the
#: attacks ran to their end, exit 0, the SIGINT lost)
INTERRUPTIBLE_CLI = [sys.executable, "-c", "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                     "from harness.cli import main; main()"]
ENV = {**os.environ, "COLUMNS": "300"}
UNBUFFERED = {**ENV, "PYTHONUNBUFFERED": "1"}  # a line the test waits for is not held in a pipe's buffer


def _error_lines(output: str) -> list[str]:
    return [ln for ln in output.splitlines() if ln.startswith("error:")]


# --- the lock ------------------------------------------------------------------------------------

HOLDER = """
import select, sys
from harness.run.runlock import RunLock
lock = RunLock(sys.argv[1], command="harness evaluate held-by-test").acquire()
print("locked", flush=True)
select.select([sys.stdin], [], [], float(sys.argv[2]))  # until the test closes stdin (argv[2]: the hang guard)
lock.release()
"""


def _hold(run_dir: Path) -> subprocess.Popen:
    """A process that holds the run directory's lock until :func:`_release` (returned once it holds it)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir), str(HANG_GUARD_S)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def _release(holder: subprocess.Popen) -> None:
    holder.stdin.close()
    holder.wait(timeout=HANG_GUARD_S)


def _read_until(proc: subprocess.Popen, text: str) -> str:
    """``proc``'s stdout up to and including the first line holding ``text`` (all of it if none does)."""
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if text in line:
            break
    return "".join(lines)


def test_a_second_lock_names_the_first_holder_and_a_released_one_is_free(tmp_path):
    with RunLock(tmp_path / "run", command="harness evaluate x"):
        with pytest.raises(RunLockedError, match=rf"in use by process {os.getpid()} on .* \(`harness evaluate x`"):
            RunLock(tmp_path / "run").acquire()
        with pytest.raises(RunLockedError, match=f"in use by process {os.getpid()}"):  # a reader waits for writers
            RunLock(tmp_path / "run", shared=True).acquire()
    with RunLock(tmp_path / "run") as again:
        assert again.took_over is None  # a clean release leaves no record behind
    with RunLock(tmp_path / "run", shared=True), RunLock(tmp_path / "run", shared=True):  # readers share
        with pytest.raises(RunLockedError, match="another process reading it"):  # a writer waits for them
            RunLock(tmp_path / "run").acquire()


def test_evaluate_on_a_locked_run_directory_exits_2_naming_the_pid_and_trains_nothing(run_copy):
    shutil.rmtree(run_copy / "population" / "signals")
    holder = _hold(run_copy)
    try:
        proc = subprocess.run([*CLI, "evaluate", "undefended", "--run-dir", str(run_copy), *ARGS], capture_output=True,
                              text=True, env=ENV, timeout=HANG_GUARD_S)
    finally:
        _release(holder)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (error,) = _error_lines(proc.stderr)
    assert f"is in use by process {holder.pid} on" in error and "harness evaluate held-by-test" in error
    assert "--wait" in error
    assert not (run_copy / "population" / "signals").exists()


@pytest.mark.slow
def test_wait_waits_for_the_holder_then_runs(run_copy):
    """The holder lets go only once the waiter has said it waits: no sleep decides the order."""
    holder = _hold(run_copy)
    waiter = subprocess.Popen([*CLI, "attack", str(run_copy), "--wait"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=UNBUFFERED)
    try:
        # blocks until the waiter says it waits; should it never say so, the holder's hang guard lets go
        before = _read_until(waiter, "waiting for process")
        assert holder.poll() is None  # still holding
    finally:
        _release(holder)
    after, err = waiter.communicate(timeout=HANG_GUARD_S)
    assert waiter.returncode == 0, before + after + err
    assert f"waiting for process {holder.pid}" in before and "Results:" in after


def test_the_lock_of_a_killed_process_is_taken_over(run_copy):
    holder = _hold(run_copy)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert json.loads((run_copy / LOCK_NAME).read_text())["pid"] == holder.pid  # its record is still there
    res = runner.invoke(app, ["attack", str(run_copy)])
    assert res.exit_code == 0, res.output
    assert f"took over the lock of process {holder.pid}" in " ".join(res.output.split())
    assert (run_copy / LOCK_NAME).read_text() == ""


@pytest.mark.slow
def test_two_evaluates_on_one_run_train_it_once(tmp_path):
    """The first evaluate's training waits at a gate (conftest.GATED_DEFENSE) while the second is
    refused and the third waits for it: each step starts once the one before has said it is there."""
    out = tmp_path / "runs"
    defense, gate = gated_defense(tmp_path)
    env = {**UNBUFFERED, "TEST_GATE": str(gate)}
    cmd = [*CLI, "evaluate", defense, "--out", str(out), *ARGS]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    third = None
    try:
        wait_for(lambda: (gate / "blocked-0").exists() or first.poll() is not None, "the first evaluate to train")
        assert first.poll() is None, "the first evaluate ended before it trained"
        second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=HANG_GUARD_S)
        third = subprocess.Popen([*cmd, "--wait"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        waited = _read_until(third, "waiting for process")
    finally:
        (gate / "open").touch()  # the first evaluate trains on (and a hung step ends)
    out1, err1 = first.communicate(timeout=HANG_GUARD_S)
    out3, err3 = third.communicate(timeout=HANG_GUARD_S)
    assert first.returncode == 0, out1 + err1
    assert second.returncode == 2 and f"in use by process {first.pid}" in second.stderr, second.stdout + second.stderr
    assert third.returncode == 0, waited + out3 + err3
    assert f"waiting for process {first.pid}" in waited
    assert "Training 6 models" in out1 and "Training" not in waited + out3  # the waiting one found them all trained
    assert "Resuming: 6 of 6 models already trained" in out3


# --- attack settings and results change together -----------------------------------------------------

def test_commit_is_all_or_nothing_and_an_interrupted_one_is_rolled_forward(tmp_path, monkeypatch):
    for name in ("a.txt", "b.txt", "sub/c.txt"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("old")
    real_replace, calls = os.replace, []

    def crash_on_second(src, dst):  # Ctrl-C between the renames, after the commit point (the journal's rename)
        calls.append(dst)
        if len(calls) == 3:  # journal, a.txt, then b.txt is interrupted
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        commit_files(tmp_path, {"a.txt": b"new", "b.txt": b"new", "sub/c.txt": b"new"})
    monkeypatch.setattr(os, "replace", real_replace)
    assert (tmp_path / COMMIT_JOURNAL).is_file() and (tmp_path / "a.txt").read_text() == "new"
    assert recover_commit(tmp_path)
    assert [(tmp_path / n).read_text() for n in ("a.txt", "b.txt", "sub/c.txt")] == ["new"] * 3
    assert not (tmp_path / COMMIT_JOURNAL).exists() and not list(tmp_path.rglob("*.tmp"))

    def crash_while_writing(*a, **k):  # Ctrl-C before the commit point: nothing changes
        raise KeyboardInterrupt

    monkeypatch.setattr("harness.run.runstore.atomic_write_json", crash_while_writing)
    with pytest.raises(KeyboardInterrupt):
        commit_files(tmp_path, {"a.txt": b"newer", "b.txt": b"newer"})
    assert (tmp_path / "a.txt").read_text() == "new" and not list(tmp_path.rglob("*.tmp"))
    assert not recover_commit(tmp_path)


def _attack_with_sigint(run_dir: Path, bootstrap: int) -> subprocess.CompletedProcess:
    """``harness attack RUN --set attack.bootstrap=N``, SIGINT as soon as it has announced the new
    settings: the attacks run after that line, and the commit only after them, so the interrupt always
    lands before the commit (no sleep: on a fast machine the attacks could end within any fixed one)."""
    proc = subprocess.Popen([*INTERRUPTIBLE_CLI, "attack", str(run_dir), "--set", f"attack.bootstrap={bootstrap}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "Changing the run's saved attack settings" in line:
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(lines) + out, err)


def test_interrupted_attack_with_new_settings_changes_nothing_and_the_bundle_is_accepted(run_copy, tmp_path):
    before = {n: (run_copy / n).read_bytes() for n in ("config.json", "results.json", "table.csv", "attacks.csv")}
    proc = _attack_with_sigint(run_copy, 400_000)
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "interrupted: nothing was changed" in proc.stderr and "Traceback" not in proc.stderr
    assert {n: (run_copy / n).read_bytes() for n in before} == before
    assert not list(run_copy.rglob("*.tmp")) and not (run_copy / COMMIT_JOURNAL).exists()
    bundle = tmp_path / "e.tgz"
    sub = runner.invoke(app, ["submit", str(run_copy), "-o", str(bundle)])
    assert sub.exit_code == 0, sub.output
    add = runner.invoke(app, ["leaderboard", "add", str(bundle), "--site", str(tmp_path / "site")])
    assert add.exit_code == 0 and "accepted" in add.output, add.output


def test_attack_set_says_it_changes_the_saved_settings_and_saves_them_with_the_results(run_copy):
    res = runner.invoke(app, ["attack", str(run_copy), "--set", "attack.bootstrap=30"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "Changing the run's saved attack settings: attack.bootstrap=30" in text
    assert "Saved the new attack settings in" in text
    cfg = json.loads((run_copy / "config.json").read_text())
    assert cfg["attack"]["bootstrap"] == 30 == json.loads((run_copy / "results.json").read_text())["config"]["attack"]["bootstrap"]


def test_settings_changed_by_an_interrupted_evaluate_do_not_break_the_bundle(run_copy, tmp_path):
    """An interrupted `harness evaluate --set attack...` leaves config.json with its new attack
    settings and results.json with the settings of its own numbers: the bundle verifies with those."""
    cfg = json.loads((run_copy / "config.json").read_text())
    cfg["attack"]["bootstrap"] = 7
    cfg["run"]["workers"] = 2
    (run_copy / "config.json").write_text(json.dumps(cfg, indent=2))
    bundle = tmp_path / "e.tgz"
    assert runner.invoke(app, ["submit", str(run_copy), "-o", str(bundle)]).exit_code == 0
    add = runner.invoke(app, ["leaderboard", "add", str(bundle), "--site", str(tmp_path / "site")])
    assert add.exit_code == 0, add.output
    cfg["train"]["lr"] = 0.5  # but a config.json of other models is refused, by submit already
    (run_copy / "config.json").write_text(json.dumps(cfg, indent=2))
    res = runner.invoke(app, ["submit", str(run_copy), "-o", str(tmp_path / "e2.tgz")])
    assert res.exit_code == 2 and "config.json was edited after training: train.lr is 0.5" in res.output, res.output


def test_an_evaluate_interrupted_in_its_attack_phase_leaves_settings_results_and_bundle_agreeing(run_copy, tmp_path,
                                                                                                   monkeypatch):
    """`harness evaluate DEFENSE --run-dir RUN ... --set attack.bootstrap=...` on a finished run, interrupted in
    its attack phase: config.json keeps the attack settings of the saved results, the manifest keeps
    the run's creation time (results.json records it), and the bundle is accepted; the same command
    run to its end saves the new settings with the new results."""
    import harness.audit.attack_phase as attack_phase

    before_cfg = json.loads((run_copy / "config.json").read_text())
    before_manifest = json.loads((run_copy / "manifest.json").read_text())
    time.sleep(1.1)  # a later second: a re-written creation time would differ

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(attack_phase, "evaluate_run", interrupted)
    again = ["evaluate", "undefended", "--run-dir", str(run_copy), *[a.replace("bootstrap=20", "bootstrap=7") for a in ARGS]]
    res = runner.invoke(app, again)
    assert res.exit_code != 0 and "interrupted" in res.output, res.output
    monkeypatch.undo()
    cfg = json.loads((run_copy / "config.json").read_text())
    results = json.loads((run_copy / "results.json").read_text())
    assert cfg["attack"] == results["config"]["attack"] == before_cfg["attack"]
    assert json.loads((run_copy / "manifest.json").read_text())["created"] == before_manifest["created"]
    bundle = tmp_path / "e.tgz"
    assert runner.invoke(app, ["submit", str(run_copy), "-o", str(bundle)]).exit_code == 0
    add = runner.invoke(app, ["leaderboard", "add", str(bundle), "--site", str(tmp_path / "site")])
    assert add.exit_code == 0, add.output
    res = runner.invoke(app, again)
    assert res.exit_code == 0, res.output
    cfg = json.loads((run_copy / "config.json").read_text())
    assert cfg["attack"]["bootstrap"] == 7 == json.loads((run_copy / "results.json").read_text())["config"]["attack"]["bootstrap"]


def test_a_commit_interrupted_after_its_commit_point_is_finished_by_the_next_command(run_copy):
    """A journal left by an attack phase killed between its renames: the next command (here `harness
    report`, which reads results.json without rewriting it) finishes the renames first."""
    from harness.run.runstore import results_digest

    results = json.loads((run_copy / "results.json").read_text())
    results["seed"] = 12345  # the committed version differs visibly from the one in place
    tmp = run_copy / ".results.json.abc.tmp"
    tmp.write_text(json.dumps(results))
    manifest = {**json.loads((run_copy / "manifest.json").read_text()), "results_digest": results_digest(results)}
    tmp_manifest = run_copy / ".manifest.json.abc.tmp"  # the attack phase commits the digest with the results
    tmp_manifest.write_text(json.dumps(manifest))
    (run_copy / COMMIT_JOURNAL).write_text(json.dumps({"moves": [[tmp.name, "results.json"],
                                                                  [tmp_manifest.name, "manifest.json"]]}))
    (run_copy / ".table.csv.zzz.tmp").write_text("a temp file of a commit that never reached its commit point")
    res = runner.invoke(app, ["report", str(run_copy)])
    assert res.exit_code == 0, res.output
    assert "seed 12345" in res.output
    assert json.loads((run_copy / "results.json").read_text())["seed"] == 12345
    assert not (run_copy / COMMIT_JOURNAL).exists() and not list(run_copy.glob(".*.tmp"))


# --- OS failures: one line, exit 2, nothing half-written ---------------------------------------------

def test_a_file_given_as_run_dir_or_out_is_one_line(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    for args in (["--run-dir", str(f)], ["--out", str(f)]):
        res = runner.invoke(app, ["evaluate", "undefended", *args, *ARGS])
        assert res.exit_code == 2, res.output
        (error,) = _error_lines(res.output)
        assert "is a file" in error
    assert f.read_text() == "x"


def test_leaderboard_build_out_a_file_is_one_line(finished_run, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    res = runner.invoke(app, ["leaderboard", "build", str(finished_run), "--out", str(f)])
    assert res.exit_code == 2 and "--out" in res.output and "is a file" in res.output, res.output
    assert f.read_text() == "x"


def test_a_read_only_out_is_one_line(tmp_path, tmpfs):
    ro = tmpfs("1m", readonly=True)
    res = runner.invoke(app, ["evaluate", "undefended", "--out", str(ro / "runs"), *ARGS])
    assert res.exit_code == 2, res.output
    (error,) = _error_lines(res.output)
    assert "Read-only file system" in error and "choose a writable folder" in error
    assert "Traceback" not in res.output


def test_audit_one_run_into_a_read_only_folder_is_one_line(tmpfs):
    ro = tmpfs("1m", readonly=True)
    res = runner.invoke(app, ["audit-one-run", "undefended", "--canaries", "20", "--epochs", "1", "--out", str(ro)])
    assert res.exit_code == 2 and "Read-only file system" in "".join(_error_lines(res.output)), res.output
    assert "nothing was trained" in "".join(_error_lines(res.output)) and ".tmp" not in res.output  # checked first


def _make_read_only(finished_run: Path, tmp_path: Path, tmpfs, lock_file: bool) -> Path:
    """A copy of ``finished_run`` this process cannot write: as root (whom permissions do not stop)
    on a tmpfs remounted read-only (EROFS), else by chmod -R a-w (EACCES); without its lock file
    when ``lock_file`` is False (a run unpacked from an archive)."""
    if os.geteuid() == 0:
        disk = tmpfs("8m")
        shutil.copytree(finished_run, disk / "run")
        if not lock_file:
            (disk / "run" / LOCK_NAME).unlink()
        proc = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return disk / "run"
    run = tmp_path / "archived"
    shutil.copytree(finished_run, run)
    if not lock_file:
        (run / LOCK_NAME).unlink()
    subprocess.run(["chmod", "-R", "a-w", str(run)], check=True)
    return run


@pytest.mark.parametrize("lock_file", [True, False], ids=["with-lock-file", "without-lock-file"])
def test_a_read_only_run_is_read_by_report_and_submit_and_refused_by_writers_in_one_line(
        finished_run, tmp_path, tmpfs, lock_file):
    """issue 36, defect 4: `report` and `submit` failed on `.harness.lock: Read-only file system`;
    reading an archived or shared run needs no write lock."""
    from harness import report

    run = _make_read_only(finished_run, tmp_path, tmpfs, lock_file)
    try:
        before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
        res = runner.invoke(app, ["report", str(run)])
        assert res.exit_code == 0, res.output
        text = " ".join(res.output.split())
        assert "is read-only here" in text and "not re-exported" in text and "population level" in text
        notes = []
        assert report(run, progress=notes.append).data["seed"] == json.loads((run / "results.json").read_text())["seed"]
        assert any("read-only" in n.message for n in notes)
        res = runner.invoke(app, ["submit", str(run), "-o", str(tmp_path / "entry.tar.gz")])
        assert res.exit_code == 0 and (tmp_path / "entry.tar.gz").is_file(), res.output
        if lock_file:  # the bundle of an archived run is accepted like any other
            res = runner.invoke(app, ["leaderboard", "add", str(tmp_path / "entry.tar.gz"), "--site",
                                      str(tmp_path / "site")])
            assert res.exit_code == 0, res.output
        for args in (["attack", str(run)], ["report", str(run), "--html"], ["evaluate", "--run-dir", str(run)]):
            res = runner.invoke(app, args)
            assert res.exit_code == 2 and "Traceback" not in res.output, res.output
            (error,) = _error_lines(res.output)
            assert "read-only here" in error, error
        assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    finally:
        if os.geteuid() != 0:
            subprocess.run(["chmod", "-R", "u+w", str(run)], check=True)


@pytest.mark.slow
def test_a_full_disk_stops_with_one_line_and_the_run_resumes_once_space_is_freed(tmp_path, tmpfs):
    disk = tmpfs("2m")
    filler = disk / "filler"
    filler.write_bytes(b"\0" * (1400 * 1024))  # about 600 KB left: data, designs and a few models fit
    out = disk / "runs"
    proc = subprocess.run([*CLI, "evaluate", "undefended", "--out", str(out), *ARGS], capture_output=True, text=True,
                          env=ENV, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (error,) = _error_lines(proc.stderr)
    assert "No space left on device" in error and "free some space and run the same command again" in error
    assert "Traceback" not in proc.stderr
    (run_dir,) = out.iterdir()
    saved = sorted(run_dir.glob("population/signals/model_*.npz"))
    assert 0 < len(saved) < 6, saved  # some models finished before the disk filled
    assert not list(run_dir.rglob("*.tmp"))  # nothing half-written
    for f in saved:
        with np.load(f) as z:
            assert "logits" in z.files
    filler.unlink()
    again = subprocess.run([*CLI, "evaluate", "undefended", "--out", str(out), *ARGS], capture_output=True, text=True,
                           env=ENV, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"Resuming: {len(saved)} of 6 models already trained" in again.stdout
    assert (run_dir / "results.json").is_file()


def test_re_attacking_with_fewer_attacks_removes_their_curves(run_copy):
    """`harness attack RUN --set attack.names=[threshold]`: roc/ holds exactly the curves results.json
    describes, not the old RMIA ones beside them."""
    assert list((run_copy / "roc").glob("*__rmia__*.csv"))
    res = runner.invoke(app, ["attack", str(run_copy), "--set", "attack.names=[threshold]"])
    assert res.exit_code == 0, res.output
    results = json.loads((run_copy / "results.json").read_text())
    described = {f"{lv}__{a['name']}__{a['variant']}.csv" for lv in ("population",) for a in results[lv]["attacks"]}
    assert {f.name for f in (run_copy / "roc").glob("*.csv")} == described
    assert not list((run_copy / "roc").glob("*__rmia__*.csv"))


def test_a_run_given_with_dotdot_in_its_path_is_attacked_and_reported(run_copy, monkeypatch):
    """`harness attack ../RUN` and `harness report ../RUN --html` from a sibling folder: the commit
    journal's paths are normalized (they crashed with "is not in the subpath of"), and the results
    are written."""
    sibling = run_copy.parent / "elsewhere"
    sibling.mkdir()
    monkeypatch.chdir(sibling)
    dotted = Path("..") / run_copy.name
    before = (run_copy / "results.json").stat().st_mtime_ns
    res = runner.invoke(app, ["attack", str(dotted)])
    assert res.exit_code == 0, res.output
    assert (run_copy / "results.json").stat().st_mtime_ns > before
    assert not (run_copy / COMMIT_JOURNAL).exists()
    res = runner.invoke(app, ["report", str(dotted), "--html"])
    assert res.exit_code == 0, res.output
    assert (run_copy / "report.html").is_file()


class _Loading(types.ModuleType):
    """A module whose names are interrupted while they load (Ctrl-C during the seconds a command
    spends importing torch and the pipeline)."""

    def __getattr__(self, name: str):
        raise KeyboardInterrupt


@pytest.mark.parametrize("module, argv, line", [
    ("harness.api", ["attack", "RUN"], "interrupted: nothing was changed"),
    ("harness.api", ["evaluate", "undefended"], "interrupted: every finished model is saved"),
    ("harness.api", ["audit-one-run", "undefended"], "interrupted: nothing was saved"),
    ("leaderboard.submit", ["submit", "RUN"], "interrupted: nothing was written"),
])
def test_ctrl_c_while_a_command_loads_prints_its_interrupted_line(module, argv, line, tmp_path, monkeypatch):
    """Before the fix the imports ran before the guard: Ctrl-C there exited 130 with no line."""
    monkeypatch.setitem(sys.modules, module, _Loading(module))
    res = runner.invoke(app, [a.replace("RUN", str(tmp_path)) for a in argv])
    assert res.exit_code == 130 and line in res.output and "Traceback" not in res.output, res.output
