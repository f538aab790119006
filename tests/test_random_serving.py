"""Randomized serving and global RNG state (issue 36, defect 2): a served model that answers the same
image differently on every query is detected and attacked with averaged repeated queries; a plugin
that draws from the global RNGs trains the same models on every run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from harness.cli import app

runner = CliRunner()

PLUGINS = Path(__file__).resolve().parents[1] / "benchmarks" / "serving_plugins.py"
TINY = ["--models", "6", "--audit-size", "20", "--epochs", "2", "--set", "train.width=32", "--set",
        "attack.bootstrap=20", "--workers", "1", "--level", "population"]


def _evaluate(out: Path, cls: str, *args: str) -> tuple[Path, str]:
    res = runner.invoke(app, ["evaluate", f"{PLUGINS}:{cls}", "--out", str(out), *args], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    (run_dir,) = out.iterdir()
    return run_dir, res.output


def _signals(run_dir: Path, level: str, index: int) -> dict[str, np.ndarray]:
    with np.load(run_dir / level / "signals" / f"model_{index:04d}.npz") as z:
        return {k: z[k] for k in z.files if k != "meta"}


def test_a_plugin_that_trains_from_the_global_torch_rng_gives_the_same_models_twice(tmp_path):
    """GlobalRNGInit initializes its network from torch's global RNG: the same run evaluated twice in
    one process (two directories, the same fingerprint) trains the same models, because the harness
    seeds the global RNGs from each model's seed right before fit; and two models of a run differ."""
    a, _ = _evaluate(tmp_path / "a", "GlobalRNGInit", *TINY)
    b, _ = _evaluate(tmp_path / "b", "GlobalRNGInit", *TINY)
    assert a.name == b.name  # the same fingerprint
    for s in range(6):
        sa, sb = _signals(a, "population", s), _signals(b, "population", s)
        assert sa.keys() == sb.keys()
        for k in sa:
            np.testing.assert_array_equal(sa[k], sb[k], err_msg=f"model {s}, signal {k}")
    assert not np.array_equal(_signals(a, "population", 0)["logits"], _signals(a, "population", 1)["logits"])
