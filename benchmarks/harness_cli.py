"""Run the ``harness`` command line from a benchmark: the command as a user types it, timed.

Imported by the scripts beside it (``python benchmarks/NAME.py`` puts this folder on ``sys.path``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path


def run_cli(*args: str) -> tuple[str, float]:
    """Run ``python -m harness.cli ARGS``; return (stdout, wall seconds). A failure ends the benchmark
    with the command and the tail of its output."""
    return run_python("-m", "harness.cli", *args)


def run_python(*args: str) -> tuple[str, float]:
    """Run ``python ARGS`` (this interpreter), as :func:`run_cli` does."""
    cmd = [sys.executable, *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout, wall


def evaluate_into(out: Path, *args: str) -> tuple[Path, float]:
    """``harness evaluate ARGS --out OUT`` (a finished run resumes at no cost); return (the run
    directory, wall seconds). OUT must hold that one run."""
    _, wall = run_cli("evaluate", *args, "--out", str(out))
    (run_dir,) = [p for p in Path(out).iterdir() if (p / "results.json").is_file()]
    return run_dir, wall
