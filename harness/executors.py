"""Executors run independent jobs and yield their results as they finish.

``Executor.map(fn, jobs)`` is the only call the runner makes, so a distributed engine (Ray,
Slurm via submitit) plugs in by implementing it: ``fn`` is a module-level function and every job is
a small picklable object, and results may arrive in any order.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from abc import ABC, abstractmethod
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Callable, Iterable, Iterator, TypeVar

J = TypeVar("J")
R = TypeVar("R")


class Executor(ABC):
    """Runs ``fn(job)`` for every job; yields ``(job, result)`` pairs in completion order."""

    @abstractmethod
    def map(self, fn: Callable[[J], R], jobs: Iterable[J]) -> Iterator[tuple[J, R]]: ...

    @property
    def description(self) -> str:
        return type(self).__name__


def _init_worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


class LocalExecutor(Executor):
    """A process pool on this machine (``workers`` processes; 0 = one per core).

    With one worker the jobs run in this process, one after the other. Each worker process limits
    torch to ``cores // workers`` threads so the pool does not oversubscribe the CPU. Processes are
    started with ``spawn`` (safe with torch and CUDA). On an exception or Ctrl-C, pending jobs are
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
            mp_context=mp.get_context("spawn"),
            initializer=_init_worker,
            initargs=(self.threads,),
        )
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
            if finished:
                pool.shutdown(wait=True)
            else:  # error or Ctrl-C: drop queued jobs and stop the running ones now
                procs = list((getattr(pool, "_processes", None) or {}).values())
                pool.shutdown(wait=False, cancel_futures=True)
                for p in procs:
                    if p.is_alive():
                        p.terminate()


def make_executor(kind: str, workers: int, device: str = "cpu") -> Executor:
    """The executor named in the config (``run.executor``).

    ``workers = 0`` means one job per CPU core on CPU, and one job per GPU on CUDA (several
    trainings sharing one GPU mostly contend for it).
    """
    if kind == "local":
        if workers == 0 and device.startswith("cuda"):
            import torch

            workers = max(1, torch.cuda.device_count())
        return LocalExecutor(workers)
    raise ValueError(f"unknown executor {kind!r}")
