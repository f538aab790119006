"""Runs resume without losing or mixing models, and refuse foreign run directories."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.defense_config import build_config
from harness.run.runner import TrainJob, prepare_run, train_one
from harness.run.runstore import RunDir

from conftest import HANG_GUARD_S, gated_defense, tiny_overrides, wait_for

ARGS = ["--models", "6", "--audit-size", "60", "--epochs", "4", "--set", "train.width=64", "--set", "attack.bootstrap=50"]
runner = CliRunner()


def _numbers(results: dict) -> dict:
    out = {}
    for level in ("population", "sample"):
        for e in results[level]["attacks"]:
            out[(level, e["name"], e["variant"])] = (e["tpr_at_fpr"], e["tpr_ci"], e["auc"])
        out[(level, "acc")] = results[level]["test_accuracy"]["per_model"]
    return out


def _evaluate(out: Path, *extra: str) -> dict:
    res = runner.invoke(app, ["evaluate", "undefended", "--workers", "1", "--out", str(out), *ARGS, *extra])
    assert res.exit_code == 0, res.output
    (run_dir,) = out.iterdir()
    return json.loads((run_dir / "results.json").read_text())


@pytest.mark.slow
def test_partial_run_resumes_to_identical_results(tmp_path):
    full = _evaluate(tmp_path / "a")

    cfg = build_config("quick", {**tiny_overrides(), "run.out": str(tmp_path / "b")})
    prep = prepare_run(cfg)
    for level, idx in [("population", 0), ("population", 3), ("sample-mislabeled", 1)]:
        train_one(TrainJob(str(prep.run.path), level, idx))
    finished = {p: p.read_bytes() for p in prep.run.path.glob("*/signals/model_*.npz")}
    assert len(finished) == 3
    sig_dir = prep.run.path / "sample-mislabeled" / "signals"
    (sig_dir / ".model_0002.npz.abc.tmp").write_bytes(b"half-written")  # an interrupted write
    (sig_dir / "model_0004.npz").write_bytes(b"garbage")  # a corrupt file is not a finished model
    assert prep.run.finished_models("sample-mislabeled", 6) == [1]

    resumed = _evaluate(tmp_path / "b")
    assert _numbers(resumed) == _numbers(full)
    for p, data in finished.items():  # finished models were not retrained
        assert p.read_bytes() == data
    assert not list(sig_dir.glob(".*.tmp"))


def test_foreign_signals_are_not_taken_as_finished(tmp_path):
    a = build_config("quick", {**tiny_overrides(), "run.out": str(tmp_path)})
    b = build_config("quick", {**tiny_overrides(), "run.out": str(tmp_path), "seed": 1})
    pa, pb = prepare_run(a), prepare_run(b)
    assert pa.run.path != pb.run.path  # hashed run directories
    train_one(TrainJob(str(pa.run.path), "sample-mislabeled", 0))
    src = pa.run.signals_path("sample-mislabeled", 0)
    dst = pb.run.signals_path("sample-mislabeled", 0)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(src.read_bytes())  # a stale model with another membership design
    assert pb.run.finished_models("sample-mislabeled", 6) == []


def test_resuming_into_a_directory_of_another_run_is_refused(tmp_path):
    run_dir = tmp_path / "fixed"
    res = runner.invoke(app, ["evaluate", "undefended", "--run-dir", str(run_dir), "--level", "population",
                              "--models", "6", "--audit-size", "20", "--epochs", "1", "--workers", "1"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["evaluate", "undefended", "--run-dir", str(run_dir), "--level", "population",
                              "--models", "6", "--audit-size", "20", "--epochs", "2", "--workers", "1"])
    assert res.exit_code == 2
    assert "different run" in res.output and "never mixed" in res.output


@pytest.mark.slow
def test_attack_reruns_on_saved_signals_without_training(tmp_path):
    first = _evaluate(tmp_path / "a")
    (run_dir,) = (tmp_path / "a").iterdir()
    stamps = {p: p.stat().st_mtime_ns for p in run_dir.glob("*/signals/*.npz")}
    (run_dir / "results.json").unlink()
    res = runner.invoke(app, ["attack", str(run_dir)])
    assert res.exit_code == 0, res.output
    again = json.loads((run_dir / "results.json").read_text())
    assert _numbers(again) == _numbers(first)
    assert {p: p.stat().st_mtime_ns for p in run_dir.glob("*/signals/*.npz")} == stamps
    res = runner.invoke(app, ["attack", str(run_dir), "--set", "attack.names=[threshold]", "--set", "attack.fprs=[0.05]"])
    assert res.exit_code == 0, res.output
    changed = json.loads((run_dir / "results.json").read_text())
    # lira: the defense's own; lira-scaled: every run's per-model-scale read (issue 65)
    assert {e["name"] for e in changed["sample"]["attacks"]} == {"threshold", "lira", "lira-scaled"}
    assert set(changed["sample"]["attacks"][0]["tpr_at_fpr"]) == {"0.0", "0.05"}
    res = runner.invoke(app, ["attack", str(run_dir), "--set", "train.epochs=9"])
    assert res.exit_code == 2 and "only attack.*" in res.output
    res = runner.invoke(app, ["report", str(run_dir)])
    assert res.exit_code == 0 and "population level" in res.output
    for name in ("table.csv", "attacks.csv"):
        assert (run_dir / name).stat().st_size > 0
    assert any((run_dir / "roc").glob("sample-mislabeled__lira__*.csv"))


def _harness(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness.cli", *args]


@pytest.mark.slow
def test_killed_run_resumes_with_no_lost_model_and_the_same_numbers(tmp_path):
    """SIGKILL part-way, at a point the run itself reports: its training jobs pass a gate
    (conftest.GATED_DEFENSE) two at a time, so the kill comes when exactly 4 of the 16 models are
    saved and both workers wait at the gate, however fast or loaded the machine is."""
    defense, gate = gated_defense(tmp_path)
    # groups of 2 (stacked): a resumed run trains the rest in other groups, with the same numbers
    common = ["evaluate", defense, "--workers", "2", *ARGS, "--models", "8", "--set", "run.group_size=2"]
    subprocess.run(_harness(*common, "--out", str(tmp_path / "ref")), check=True, capture_output=True,
                   timeout=HANG_GUARD_S)
    (ref_dir,) = (tmp_path / "ref").iterdir()
    reference = json.loads((ref_dir / "results.json").read_text())

    out = tmp_path / "killed"
    proc = subprocess.Popen(_harness(*common, "--out", str(out)), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "TEST_GATE": str(gate), "TEST_GATE_PASS": "2"})
    try:
        # the first 2 jobs (4 models) pass; each worker then takes a job and waits at the gate, which it
        # reaches only after saving the models of its jobs before
        wait_for(lambda: len(list(gate.glob("blocked-*"))) == 2 or proc.poll() is not None,
                 "both workers to wait at the gate")
        assert proc.poll() is None, "the run ended before both workers reached the gate"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    saved = {p: p.read_bytes() for p in out.glob("*/*/signals/model_*.npz")}
    assert len(saved) == 4, f"{len(saved)} of 16 models saved when killed, not the 4 of the 2 jobs that passed"

    subprocess.run(_harness(*common, "--out", str(out)), check=True, capture_output=True, timeout=HANG_GUARD_S)
    (run_dir,) = out.iterdir()
    assert _numbers(json.loads((run_dir / "results.json").read_text())) == _numbers(reference)
    for p, data in saved.items():
        assert p.read_bytes() == data
    assert np.all([RunDir(run_dir).read_signals(lv, s) is not None for lv in ("population", "sample-mislabeled") for s in range(8)])
