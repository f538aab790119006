"""A user's mistake on the command line is refused before torch is imported (issue 65: refusals took
13-23 s; torch and scipy.stats alone take 3-4 s on 2 cores): `harness evaluate` and `harness tune`
check the configuration and the data's place first, then import the training code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

RUNNER = """
import atexit, sys
atexit.register(lambda: print("torch imported" if "torch" in sys.modules else "no torch", file=sys.stderr))
from harness.cli import main
sys.argv = ["harness", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("args, message", [
    (["evaluate", "nosuch-defense"], "nosuch-defense"),
    (["evaluate", "undefended", "--set", "train.lr=-1"], "train.lr"),
    (["evaluate", "undefended", "--preset", "cifar10-scatter", "--data-dir", "no/such/folder"], "no such folder"),
    (["evaluate", "undefended", "--set", "data.name=npz", "--set", "data.path=missing.npz"], "does not exist"),
    (["tune", "hamp", "--preset", "cifar10-scatter", "--data-dir", "no/such/folder", "--min-accuracy", "0.5"],
     "no such folder"),
    (["tune", "hamp", "--min-accuracy", "55"], "fraction"),
])
def test_a_mistake_is_refused_in_one_line_before_torch_is_imported(tmp_path, args, message):
    proc = subprocess.run([sys.executable, "-c", RUNNER, *args], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert message in " ".join(out.split()), out
    assert "Traceback" not in out
    assert proc.stderr.strip().splitlines()[-1] == "no torch", out
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()  # nothing written, no download
