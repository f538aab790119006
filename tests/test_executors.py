"""Slurm (submitit) and Ray executors train the same models as the local pool, resume the same
way, keep a defense's errors intact, and ask for their extra when it is missing.

The engines run through the real command line in a subprocess (as a user runs them): in-process,
click's test runner swaps sys.stderr, which the engines' own logging and subprocesses outlive."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.defense_config import build_config
from harness.run.runner import TrainJob, prepare_run, train_one

from conftest import HANG_GUARD_S, tiny_overrides, wait_for

runner = CliRunner()
ARGS = ["--models", "6", "--audit-size", "20", "--epochs", "2", "--set", "train.width=32", "--set",
        "attack.bootstrap=20", "--level", "population"]
SAME_THREADS = {"local": ["--workers", "1"],  # one worker: all 2 cores' threads, as each remote task below
                "slurm": ["--executor", "slurm", "--set", "run.slurm.cluster=local", "--set", "run.slurm.cpus_per_task=2",
                          "--set", "run.slurm.models_per_job=1", "--set", "run.group_size=3"],
                "ray": ["--executor", "ray", "--set", "run.ray.num_cpus=2"]}
needs = {k: pytest.mark.skipif(importlib.util.find_spec(m) is None, reason=f"{m} is not installed (pip install -e \".[{k}]\")")
         for k, m in (("slurm", "submitit"), ("ray", "ray"))}


def _numbers(run_dir: Path) -> dict:
    r = json.loads((run_dir / "results.json").read_text())
    out = {(e["name"], e["variant"]): (e["tpr_at_fpr"], e["auc"]) for e in r["population"]["attacks"]}
    out["acc"] = r["population"]["test_accuracy"]["per_model"]
    return out


def _cli(*args: str) -> tuple[int, str]:
    """``harness ARGS`` in a subprocess: (exit code, stdout + stderr)."""
    proc = subprocess.run([sys.executable, "-c", "from harness.cli import main; main()", *args],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    return proc.returncode, proc.stdout + proc.stderr


def _evaluate(out: Path, kind: str, *extra: str) -> Path:
    code, output = _cli("evaluate", "undefended", "--out", str(out), *ARGS, *SAME_THREADS[kind], *extra)
    assert code == 0, output
    (run_dir,) = out.iterdir()
    return run_dir


@pytest.fixture(scope="module")
def local_numbers(tmp_path_factory) -> dict:
    return _numbers(_evaluate(tmp_path_factory.mktemp("local"), "local"))


@pytest.mark.slow
@pytest.mark.parametrize("kind", [pytest.param("slurm", marks=needs["slurm"]), pytest.param("ray", marks=needs["ray"])])
def test_cluster_executors_give_the_local_numbers(tmp_path, local_numbers, kind):
    run_dir = _evaluate(tmp_path / kind, kind)
    assert _numbers(run_dir) == local_numbers
    if kind == "slurm":  # 6 models in array tasks of 3
        assert len(list((run_dir / "slurm_logs").glob("*_result.pkl"))) == 2


@pytest.mark.slow
@needs["ray"]
def test_a_run_started_locally_resumes_under_ray(tmp_path, local_numbers):
    cfg = build_config("quick", {**tiny_overrides(), "audit.size": 20, "train.epochs": 2, "train.width": 32,
                                 "attack.bootstrap": 20, "run.level": "population", "run.out": str(tmp_path / "o")})
    prep = prepare_run(cfg)
    for idx in (0, 4):
        train_one(TrainJob(str(prep.run.path), "population", idx))
    code, output = _cli("evaluate", "undefended", "--run-dir", str(prep.run.path), *ARGS, *SAME_THREADS["ray"])
    assert code == 0, output
    assert "Resuming: 2 of 6 models already trained" in output
    assert _numbers(prep.run.path) == local_numbers


@pytest.mark.slow
@needs["ray"]
def test_a_defense_error_keeps_its_one_line_report_under_ray(tmp_path):
    f = tmp_path / "crash.py"
    f.write_text(textwrap.dedent('''
        from defenses.undefended import Undefended

        class Crash(Undefended):
            name = "crash"

            def fit(self, train, ctx):
                raise RuntimeError("broken on purpose")
    '''))
    code, output = _cli("evaluate", f"{f}:Crash", "--out", str(tmp_path / "o"), *ARGS, *SAME_THREADS["ray"])
    assert code == 2
    assert "failed in fit (population model" in output and "broken on purpose" in output
    assert "crash.py" in output and len(output.splitlines()) < 25, output


@pytest.mark.parametrize("kind, extra", [("ray", "ray"), ("slurm", "slurm")])
def test_a_missing_engine_names_its_extra_before_anything_is_written(tmp_path, monkeypatch, kind, extra):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("ray", "submitit") else real(name, *a))
    res = runner.invoke(app, ["evaluate", "undefended", "--out", str(tmp_path / "o"), "--executor", kind])
    assert res.exit_code == 2
    assert f'pip install -e ".[{extra}]"' in res.output
    assert not (tmp_path / "o").exists()


def _parent_pid(_: int) -> int:
    return os.getppid()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the local pool forks from a server on Linux only")
def test_local_pool_workers_are_forks_of_the_server():
    """The local pool's workers are forked by the fork server (which imported torch and
    harness.run.runner once), not spawned by this process: their parent is the server."""
    from harness.run.executors import LocalExecutor, worker_context

    assert worker_context().get_start_method() == "forkserver"
    parents = {r for _, r in LocalExecutor(2).map(_parent_pid, [0, 1, 2])}
    assert len(parents) == 1 and os.getpid() not in parents


def test_the_command_ends_after_its_atexit_handlers_with_its_exit_code(tmp_path):
    """main() ends the process with os._exit once the command is done: the output is complete,
    atexit handlers registered before it still run, and the exit code is the command's."""
    code = ("import atexit, sys; atexit.register(lambda: print('atexit ran', flush=True)); "
            "from harness.cli import main; main()")
    ok = subprocess.run([sys.executable, "-c", code, "list"], capture_output=True, text=True)
    assert ok.returncode == 0 and "undefended" in ok.stdout and ok.stdout.rstrip().endswith("atexit ran")
    bad = subprocess.run([sys.executable, "-c", code, "evaluate", "no-such-defense", "--out", str(tmp_path)],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown defense" in bad.stderr and "atexit ran" in bad.stdout


# --- engines that cannot start: one error line from the preflight, exit 2, no run directory ---------
# (the preflight's own time limit, PREFLIGHT_TIMEOUT, is tested with a silent port below; the
# command's wall time is not asserted: on a loaded machine its start alone can take most of a minute)

def _cli_failing(args: list[str], path: str | None = None) -> tuple[int, str, str]:
    """``harness ARGS`` in a subprocess with ``PATH`` replaced by ``path``: (exit code, stdout, stderr)."""
    env = {**os.environ, "COLUMNS": "300"}
    if path is not None:
        env["PATH"] = path
    proc = subprocess.run([sys.executable, "-c", "from harness.cli import main; main()", *args], capture_output=True,
                          text=True, env=env, timeout=HANG_GUARD_S)
    return proc.returncode, proc.stdout, proc.stderr


def _fake_slurm(folder: Path, sinfo: str) -> str:
    """A PATH holding a no-op ``sbatch`` and a ``sinfo`` running the given shell lines."""
    folder.mkdir()
    for name, body in (("sbatch", "exit 0"), ("sinfo", sinfo)):
        f = folder / name
        f.write_text(f"#!/bin/sh\n{body}\n")
        f.chmod(0o755)
    return str(folder)


@needs["slurm"]
@pytest.mark.parametrize("sinfo, extra, message", [
    (None, [], "this machine has no Slurm (sbatch and sinfo not found on PATH)"),
    ("echo 'slurm_load_partitions: Unable to contact slurm controller (connect failure)' >&2; exit 1", [],
     "`sinfo` failed (exit 1: slurm_load_partitions: Unable to contact slurm controller (connect failure))"),
    ("printf 'debug*\\ngpu\\n'", ["--set", "run.slurm.partition=big"],
     "partition 'big' does not exist (sinfo lists debug, gpu)"),
])
def test_slurm_that_cannot_run_is_one_line_before_the_run_directory(tmp_path, sinfo, extra, message):
    path = str(tmp_path / "empty") if sinfo is None else _fake_slurm(tmp_path / "bin", sinfo)
    out = tmp_path / "runs"
    code, stdout, stderr = _cli_failing(["evaluate", "undefended", "--executor", "slurm", "--out", str(out), *ARGS,
                                         *extra], path)
    assert code == 2, stdout + stderr
    assert stderr.startswith("error: run.executor=slurm (--executor slurm): ") and len(stderr.strip().splitlines()) == 1, \
        stderr
    assert message in stderr
    assert not out.exists()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs["ray"]
def test_ray_with_nothing_listening_is_one_line_before_the_run_directory(tmp_path):
    out = tmp_path / "runs"
    address = f"127.0.0.1:{_free_port()}"
    code, stdout, stderr = _cli_failing(["evaluate", "undefended", "--executor", "ray", "--set",
                                         f"run.ray.address={address}", "--out", str(out), *ARGS])
    assert code == 2, stdout + stderr
    assert stderr.strip() == (f"error: run.executor=ray (--executor ray): nothing answers at {address} (connection "
                              "refused); start the cluster (`ray start --head` prints its address) or fix run.ray.address")
    assert not out.exists()


@needs["ray"]
def test_ray_address_that_accepts_but_is_no_ray_cluster_times_out(monkeypatch):
    """A port that accepts connections but never speaks Ray: ray.init would retry for minutes; the
    preflight gives up after its timeout (shortened here) with one line."""
    import socket

    from harness.run import executors
    from harness.core.config import ConfigError

    monkeypatch.setattr(executors, "PREFLIGHT_TIMEOUT", 4.0)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        address = f"127.0.0.1:{server.getsockname()[1]}"
        with pytest.raises(ConfigError, match=f"no Ray cluster answered at {address} within 4 s"):
            executors.check_ray(address)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork-server pool and /proc are Linux's")
def test_pool_workers_end_when_the_process_that_owns_them_is_killed(tmp_path):
    """SIGKILL of a `harness evaluate` (or an out-of-memory kill) must not leave its pool workers
    training into the run directory: each worker ends (the watchdog polls every PARENT_POLL_S)
    instead of finishing its hour-long job. The test waits for both workers to report in, and for
    their end, with a hang guard only."""
    import signal

    (tmp_path / "slowjob.py").write_text(textwrap.dedent('''
        import os, time
        from pathlib import Path

        def job(i):
            Path(os.environ["PIDS"], str(os.getpid())).write_text("")
            time.sleep(3600)
    '''))
    pids = tmp_path / "pids"
    pids.mkdir()
    code = "from harness.run.executors import LocalExecutor; import slowjob; list(LocalExecutor(2).map(slowjob.job, [0, 1]))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "PIDS": str(pids)}
    owner = subprocess.Popen([sys.executable, "-c", code], env=env)

    def running(w: int) -> bool:
        try:
            return Path(f"/proc/{w}/stat").read_text().split()[2] != "Z"
        except OSError:
            return False

    try:
        wait_for(lambda: len(list(pids.iterdir())) >= 2 or owner.poll() is not None, "both pool workers to start")
        workers = [int(p.name) for p in pids.iterdir()]
        assert len(workers) == 2
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        wait_for(lambda: not any(running(w) for w in workers), f"the workers {workers} to end with their owner",
                 timeout=120)  # they end within PARENT_POLL_S (0.5 s); a hang guard, far below their job's hour
    finally:
        owner.kill()
        for w in [int(p.name) for p in pids.iterdir()]:
            try:
                os.kill(w, signal.SIGKILL)
            except ProcessLookupError:
                pass


@needs["slurm"]
def test_the_api_names_the_executor_by_its_config_key(tmp_path, monkeypatch):
    """From Python there is no --executor flag: the error names run.executor (the CLI flag beside it)."""
    from harness import evaluate
    from harness.core.errors import ConfigError

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match=r"^run\.executor=slurm \(--executor slurm\): this machine has no Slurm"):
        evaluate("undefended", overrides={**tiny_overrides(), "run.out": str(tmp_path / "runs"),
                                          "run.executor": "slurm"})
    assert not (tmp_path / "runs").exists()
