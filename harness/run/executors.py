"""Executors run independent jobs and yield their results as they finish.

``Executor.map(fn, jobs)`` is the only call the runner makes: ``fn`` is a module-level function,
every job a small picklable object, and results may arrive in any order. ``local`` is a process
pool; ``slurm`` (submitit, the ``slurm`` extra) and ``ray`` (the ``ray`` extra) run the same jobs
on a cluster. Every engine writes the same signals files into the run directory, so a run resumes
under any of them, and live progress reads the progress files the jobs write there.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from abc import ABC, abstractmethod
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar

from harness.core.errors import ConfigError

J = TypeVar("J")
R = TypeVar("R")


class Executor(ABC):
    """Runs ``fn(job)`` for every job; yields ``(job, result)`` pairs in completion order."""

    @abstractmethod
    def map(self, fn: Callable[[J], R], jobs: Iterable[J]) -> Iterator[tuple[J, R]]: ...

    @property
    def description(self) -> str:
        return type(self).__name__


def _init_worker(threads: int, parent: int | None = None) -> None:
    """A pool worker's set-up: torch's thread count, and (``parent``: the pool owner's PID) a watchdog
    that ends this worker within :data:`PARENT_POLL_S` of its owner's death. A killed ``harness
    evaluate`` (SIGKILL, an out-of-memory kill) must not leave workers training into a run directory
    whose lock the next process may take over."""
    import torch

    torch.set_num_threads(threads)
    if parent is not None:
        import threading

        threading.Thread(target=_exit_with, args=(parent,), name="harness-parent-watch", daemon=True).start()


#: how often a pool worker checks that the process that owns the pool is alive
PARENT_POLL_S = 0.5


def _exit_with(parent: int) -> None:
    """End this process as soon as process ``parent`` no longer exists."""
    while True:
        time.sleep(PARENT_POLL_S)
        try:
            os.kill(parent, 0)
        except ProcessLookupError:
            os._exit(70)
        except PermissionError:  # alive, under another user (a reused PID would be too: then it waits)
            pass


#: what the local pool's worker server imports once; every worker is a fork of it (docs/executors.md)
WORKER_PRELOAD = ("torch", "harness.run.runner")


def worker_context() -> Any:
    """The local pool's process start method: ``forkserver`` on Linux, else ``spawn``. The fork
    server is a fresh interpreter that imports :data:`WORKER_PRELOAD` and nothing else (no torch op
    has run in it, no thread pool, no CUDA), and each worker is a fork of it: as safe with torch and
    CUDA as ``spawn``, without each worker paying torch's import (about 2 s on this project's CPU).
    macOS keeps ``spawn``, its default: forking a process that loaded Apple's frameworks (torch's
    MPS backend) is not safe there."""
    if not sys.platform.startswith("linux") or "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(WORKER_PRELOAD))
    return ctx


def start_worker_server() -> None:
    """Start the local pool's fork server now, so that it imports torch while this process builds
    the config and prepares the run; the pool's first worker waits for it only if it is not done.
    Without ``forkserver`` (Windows) nothing is started. The server exits with this process."""
    ctx = worker_context()
    if ctx.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


@contextmanager
def main_module_hidden() -> Iterator[None]:
    """While worker processes start, hide the caller's ``__main__`` from multiprocessing, which
    otherwise has every ``spawn`` / ``forkserver`` worker import it again: a script or notebook
    calling :func:`harness.evaluate` at its top level (no ``if __name__ == "__main__"`` guard)
    would run the evaluation once more in each worker, and a script read from stdin would crash
    them. The jobs' functions all live in importable harness modules, so workers need nothing
    from ``__main__``."""
    main = sys.modules.get("__main__")
    saved = {k: getattr(main, k) for k in ("__file__", "__spec__") if main is not None and hasattr(main, k)}
    try:
        if main is not None:
            if hasattr(main, "__file__"):
                del main.__file__
            main.__spec__ = None
        yield
    finally:
        if main is not None:
            for k, v in saved.items():
                setattr(main, k, v)
            if "__spec__" not in saved and hasattr(main, "__spec__"):
                del main.__spec__


class LocalExecutor(Executor):
    """A process pool on this machine (``workers`` processes; 0 = one per core).

    With one worker the jobs run in this process, one after the other. Each worker process limits
    torch to ``cores // workers`` threads so the pool does not oversubscribe the CPU. Processes are
    started by :func:`worker_context` (forks of a server that imported torch, or ``spawn``). On an exception or Ctrl-C, pending jobs are
    cancelled and the pool is shut down; finished jobs have already returned.
    """

    def __init__(self, workers: int = 0) -> None:
        cores = os.cpu_count() or 1
        self.workers = workers if workers > 0 else cores
        self.threads = max(1, cores // self.workers)

    @property
    def description(self) -> str:
        return f"local ({self.workers} worker{'s' if self.workers > 1 else ''}, {self.threads} thread(s) each)"

    def map(self, fn: Callable[[J], R], jobs: Iterable[J]) -> Iterator[tuple[J, R]]:
        jobs = list(jobs)
        if self.workers == 1 or len(jobs) <= 1:
            _init_worker(self.threads)
            for job in jobs:
                yield job, fn(job)
            return
        pool = ProcessPoolExecutor(
            max_workers=min(self.workers, len(jobs)),
            mp_context=worker_context(),
            initializer=_init_worker,
            initargs=(self.threads, os.getpid()),
        )
        with main_module_hidden():  # workers start on submit; they must not re-import the caller's script
            futures: dict[Future[Any], J] = {pool.submit(fn, job): job for job in jobs}
        finished = False
        try:
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    yield futures[fut], fut.result()
            finished = True
        finally:
            if finished:  # every result is in: the workers exit while the caller goes on (~1 s)
                pool.shutdown(wait=False)
            else:  # error or Ctrl-C: drop queued jobs and stop the running ones now
                procs = list((getattr(pool, "_processes", None) or {}).values())
                pool.shutdown(wait=False, cancel_futures=True)
                for p in procs:
                    if p.is_alive():
                        p.terminate()


def _run_group(fn: Callable[[J], R], jobs: list[J], threads: int) -> list[tuple[bool, Any]]:
    """Run ``fn`` on each job in a remote worker with ``threads`` torch threads; return (ok, result
    or exception) per job, so that the exception's own type (a ConfigError, a defense's
    PluginFailure) reaches the caller intact, whatever the engine does with failures."""
    _init_worker(threads)
    out: list[tuple[bool, Any]] = []
    for job in jobs:
        try:
            out.append((True, fn(job)))
        except Exception as e:  # returned, not raised: re-raised by map() in the caller's process
            out.append((False, e))
            break
    return out


def _unpack(item: tuple[bool, Any]) -> Any:
    ok, value = item
    if not ok:
        raise value
    return value


#: pip extra that installs each optional engine
EXTRAS = {"slurm": ("submitit", "slurm"), "ray": ("ray", "ray")}


#: seconds the preflight waits for a Slurm controller (sinfo) or a Ray cluster (ray.init) to answer
PREFLIGHT_TIMEOUT = 20.0
#: seconds a TCP connection to a Ray address may take before it counts as nothing listening
CONNECT_TIMEOUT = 3.0


def check_engine(kind: str, run: Any = None) -> None:
    """Raise ConfigError (one line) unless ``kind``'s engine can run the jobs: its Python package is
    installed (naming the extra) and, given the run's ``RunConfig``, the cluster answers
    (:func:`check_slurm`, :func:`check_ray`). Called before anything is written, so a run that
    cannot start leaves no run directory; every check ends within about 30 s."""
    import importlib.util

    if kind in EXTRAS and importlib.util.find_spec(EXTRAS[kind][0]) is None:
        module, extra = EXTRAS[kind]
        raise ConfigError(f"{_named(kind)} needs {module}, which is not installed: pip install -e \".[{extra}]\" "
                          f"(or pip install {module})")
    if run is None:
        return
    if kind == "slurm" and run.slurm.cluster == "slurm":
        check_slurm(run.slurm.partition)
    if kind == "ray" and run.ray.address:
        check_ray(run.ray.address)


def _named(kind: str) -> str:
    """An executor as errors name it, for the API (``run.executor``) and the CLI (``--executor``) alike."""
    return f"run.executor={kind} (--executor {kind})"


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def check_slurm(partition: str | None) -> None:
    """Slurm's commands are on PATH and its controller answers ``sinfo`` (within
    :data:`PREFLIGHT_TIMEOUT`); a named partition exists. Raises ConfigError otherwise."""
    import shutil
    import subprocess

    missing = [c for c in ("sbatch", "sinfo") if shutil.which(c) is None]
    if missing:
        raise ConfigError(f"{_named('slurm')}: this machine has no Slurm ({' and '.join(missing)} not found on "
                          f"PATH); run from a Slurm login node, or use {_named('local')} (or run.slurm.cluster=local "
                          "to try the Slurm path with local subprocesses)")
    cmd = ["sinfo", "--noheader", "--format=%P"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PREFLIGHT_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"{_named('slurm')}: the Slurm controller did not answer `sinfo` within "
                          f"{PREFLIGHT_TIMEOUT:g} s") from None
    except OSError as e:
        raise ConfigError(f"{_named('slurm')}: `sinfo` cannot run ({e.strerror or e})") from None
    if proc.returncode != 0:
        raise ConfigError(f"{_named('slurm')}: `sinfo` failed (exit {proc.returncode}: "
                          f"{_first_line(proc.stderr) or 'no message'}); is the Slurm controller up?")
    partitions = [ln.strip().rstrip("*") for ln in proc.stdout.splitlines() if ln.strip()]
    if partition and partition not in partitions:
        raise ConfigError(f"{_named('slurm')}: partition {partition!r} does not exist (sinfo lists "
                          f"{', '.join(partitions) or 'none'}); set run.slurm.partition")


_RAY_PROBE = """
import logging, sys
import ray
ray.init(address=sys.argv[1], include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
ray.shutdown()
"""


def check_ray(address: str) -> None:
    """A Ray cluster answers at ``address``: for ``HOST:PORT`` (or ``ray://HOST:PORT``) something
    must accept a TCP connection within :data:`CONNECT_TIMEOUT`, then ``ray.init`` (in a child
    process, as Ray retries a silent address for minutes) must connect within
    :data:`PREFLIGHT_TIMEOUT`. Raises ConfigError otherwise."""
    import socket
    import subprocess

    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if sep and port.isdigit():
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT).close()
        except OSError as e:
            why = "refused" if isinstance(e, ConnectionRefusedError) else (e.strerror or type(e).__name__)
            raise ConfigError(f"{_named('ray')}: nothing answers at {address} (connection {why}); start the "
                              "cluster (`ray start --head` prints its address) or fix run.ray.address") from None
    try:
        proc = subprocess.run([sys.executable, "-c", _RAY_PROBE, address], capture_output=True, text=True,
                              timeout=PREFLIGHT_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"{_named('ray')}: no Ray cluster answered at {address} within "
                          f"{PREFLIGHT_TIMEOUT:g} s (is it a Ray head node's address?)") from None
    if proc.returncode != 0:
        raise ConfigError(f"{_named('ray')}: cannot connect to a Ray cluster at {address} "
                          f"({_first_line(proc.stderr) or f'exit {proc.returncode}'})")


class SlurmExecutor(Executor):
    """Slurm through submitit: the jobs are grouped ``models_per_job`` at a time into the tasks of
    one Slurm array (``run.slurm``: partition, time, GPUs, CPUs, memory, array parallelism, extra
    sbatch options). ``cluster`` local / debug are submitit's subprocess / in-process modes, for
    tests without Slurm. Results are yielded as tasks finish; on an error or Ctrl-C the remaining
    tasks are cancelled."""

    def __init__(self, cfg: Any, folder: Path) -> None:
        check_engine("slurm")
        self.cfg = cfg
        self.folder = Path(cfg.folder) if cfg.folder else folder

    @property
    def description(self) -> str:
        c = self.cfg
        where = f"partition {c.partition}" if c.partition else "the default partition"
        if c.cluster != "slurm":
            where = f"submitit's {c.cluster} mode"
        return (f"slurm via submitit ({where}; {c.models_per_job} model(s) per array task, {c.cpus_per_task} CPUs, "
                f"{c.gpus_per_job} GPU(s) per task)")

    def _executor(self) -> Any:
        import submitit

        c = self.cfg
        ex = submitit.AutoExecutor(folder=str(self.folder), cluster=c.cluster)
        params: dict[str, Any] = {"timeout_min": c.time_min, "cpus_per_task": c.cpus_per_task,
                                  "gpus_per_node": c.gpus_per_job, "mem_gb": c.mem_gb,
                                  "slurm_array_parallelism": c.array_parallelism, "name": "privacy-harness"}
        if c.partition:
            params["slurm_partition"] = c.partition
        if c.sbatch:
            params["slurm_additional_parameters"] = dict(c.sbatch)
        ex.update_parameters(**params)
        return ex

    def map(self, fn: Callable[[J], R], jobs: Iterable[J]) -> Iterator[tuple[J, R]]:
        import time

        jobs = list(jobs)
        if not jobs:
            return
        k = self.cfg.models_per_job
        groups = [jobs[i : i + k] for i in range(0, len(jobs), k)]
        ex = self._executor()
        handles = ex.map_array(_run_group, [fn] * len(groups), groups, [self.cfg.cpus_per_task] * len(groups))
        pending = dict(zip(handles, groups))
        finished = False
        try:
            while pending:
                done = [h for h in pending if h.done()]
                if not done:
                    time.sleep(0.5)
                    continue
                for h in done:
                    group = pending.pop(h)
                    for job, item in zip(group, h.result()):
                        yield job, _unpack(item)
            finished = True
        finally:
            if not finished:
                for h in pending:
                    h.cancel(check=False)


class RayExecutor(Executor):
    """Ray tasks, one per model (``run.ray``: the cluster ``address``, or a local Ray started here
    and stopped after the run; ``num_cpus`` and ``num_gpus`` per task, fractions of a GPU allowed
    so that several small models share one). Results are yielded as tasks finish; on an error or
    Ctrl-C the remaining tasks are cancelled."""

    def __init__(self, cfg: Any) -> None:
        check_engine("ray")
        self.cfg = cfg

    @property
    def description(self) -> str:
        c = self.cfg
        return (f"ray ({c.address or 'local'}; {c.num_cpus:g} CPU(s), {c.num_gpus:g} GPU(s) per model)")

    def map(self, fn: Callable[[J], R], jobs: Iterable[J]) -> Iterator[tuple[J, R]]:
        import ray

        jobs = list(jobs)
        if not jobs:
            return
        c = self.cfg
        started = not ray.is_initialized()
        if started:
            import logging

            ray.init(address=c.address, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                     **({} if c.address else {"num_cpus": os.cpu_count() or 1}))
        task = ray.remote(num_cpus=c.num_cpus, num_gpus=c.num_gpus, max_retries=0)(_run_group)
        threads = max(1, int(c.num_cpus))
        pending = {task.remote(fn, [job], threads): job for job in jobs}
        finished = False
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    job = pending.pop(ref)
                    (item,) = ray.get(ref)
                    yield job, _unpack(item)
            finished = True
        finally:
            if not finished:
                for ref in pending:
                    ray.cancel(ref, force=True)
            if started:
                ray.shutdown()


def make_executor(kind: str, workers: int, device: str = "cpu", run: Any = None,
                  run_path: Path | None = None) -> Executor:
    """The executor named in the config (``run.executor``; ``run`` is the config's ``RunConfig``,
    needed for slurm and ray).

    ``workers = 0`` means one job per CPU core on CPU, and one job per GPU on CUDA (several
    trainings sharing one GPU mostly contend for it).
    """
    if kind == "local":
        if workers == 0 and device.startswith("cuda"):
            import torch

            workers = max(1, torch.cuda.device_count())
        return LocalExecutor(workers)
    if kind == "slurm":
        return SlurmExecutor(run.slurm, (run_path or Path(".")) / "slurm_logs")
    if kind == "ray":
        return RayExecutor(run.ray)
    raise ValueError(f"unknown executor {kind!r}")
