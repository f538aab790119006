"""Signals at scale: float16 storage (audit.signal_dtype) and stacking a level's signals without a second copy."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.core.config import ConfigError
from harness.audit.attack_phase import load_level_signals
from harness.run.runstore import ModelSignals, RunDirError
from harness.run.signals import stored

ARGS = ["--models", "6", "--audit-size", "60", "--epochs", "4", "--set", "train.width=64", "--set", "attack.bootstrap=50",
        "--workers", "1", "--level", "sample"]
runner = CliRunner()


def test_stored_casts_floats_only_and_refuses_overflow():
    logits = np.array([[1.0, -2.5, 1 / 3]], np.float32)
    out = stored({"logits": logits, "index": np.arange(3)}, "float16")
    assert out["logits"].dtype == np.float16 and out["index"].dtype == np.arange(3).dtype
    assert np.abs(out["logits"].astype(np.float32) - logits).max() <= 2**-11 * np.abs(logits).max()
    assert stored({"logits": logits}, "float32")["logits"] is logits
    with pytest.raises(ConfigError, match="beyond float16's range"):
        stored({"logits": np.array([7e4], np.float32)}, "float16")
    assert stored({"logits": np.array([6e4, np.inf], np.float32)}, "float16")["logits"][0] == np.float16(6e4)


class _Folder:
    """RunDir's read_signals over a dict of per-model arrays (None: an unfinished model)."""

    def __init__(self, per_model: list[dict[str, np.ndarray] | None]) -> None:
        self.per_model = per_model

    def read_signals(self, level: str, index: int) -> ModelSignals | None:
        arrays = self.per_model[index]
        return None if arrays is None else ModelSignals(index=index, arrays=arrays, meta={"model_index": index})


def test_level_signals_stack_in_their_stored_dtype():
    rng = np.random.default_rng(0)
    per = [{"logits": rng.normal(size=(5, 2, 3)).astype(np.float16), "extra": np.ones(2)} for _ in range(4)]
    per[2] = {"logits": per[2]["logits"]}  # one model lacks "extra": it is not attackable
    got = load_level_signals(_Folder(per), "sample", 4)  # type: ignore[arg-type]
    assert set(got.signals) == {"logits"}
    assert got.signals["logits"].dtype == np.float16
    np.testing.assert_array_equal(got.signals["logits"], np.stack([p["logits"] for p in per]))
    assert [m["model_index"] for m in got.metas] == [0, 1, 2, 3]
    with pytest.raises(RunDirError, match="2 of 4 models have no finished signals"):
        load_level_signals(_Folder([per[0], None, per[1], None]), "sample", 4)  # type: ignore[arg-type]
    with pytest.raises(RunDirError, match="mixes runs"):
        load_level_signals(_Folder([per[0], {"logits": per[1]["logits"][:4]}]), "sample", 2)  # type: ignore[arg-type]


def _run(out: Path, *extra: str) -> tuple[dict, Path]:
    res = runner.invoke(app, ["evaluate", "undefended", "--out", str(out), *ARGS, *extra])
    assert res.exit_code == 0, res.output
    (run_dir,) = out.iterdir()
    return json.loads((run_dir / "results.json").read_text()), run_dir


@pytest.mark.slow
def test_float16_signals_halve_the_files_and_keep_the_attack(tmp_path):
    full, d32 = _run(tmp_path / "a")
    half, d16 = _run(tmp_path / "b", "--set", "audit.signal_dtype=float16")
    assert d32.name != d16.name  # the storage is part of the run's identity: never mixed on resume
    with np.load(next(d16.glob("sample*/signals/model_0000.npz"))) as z16, \
            np.load(next(d32.glob("sample*/signals/model_0000.npz"))) as z32:
        assert z16["logits"].dtype == np.float16 and z32["logits"].dtype == np.float32
        np.testing.assert_allclose(z16["logits"], z32["logits"], rtol=2**-11, atol=0)  # the same models
    assert any(d16.glob("sample*/signals/*.npz"))
    size = {d: sum(p.stat().st_size for p in d.glob("sample*/signals/*.npz")) for d in (d32, d16)}
    assert size[d16] < 0.6 * size[d32]
    for a, b in zip(full["sample"]["attacks"], half["sample"]["attacks"]):
        assert (a["name"], a["variant"]) == (b["name"], b["variant"])
        assert abs(a["auc"] - b["auc"]) < 0.01, (a["name"], a["variant"], a["auc"], b["auc"])


def test_default_storage_keeps_earlier_fingerprints_and_float16_changes_it():
    from harness.defense_config import build_config

    assert "signal_dtype" not in build_config("quick").model_determining()["audit"]  # runs made before the field resume
    half = build_config("quick", {"audit.signal_dtype": "float16"}).model_determining()
    assert half["audit"]["signal_dtype"] == "float16"


def test_a_signal_that_computes_nan_is_refused_before_it_is_saved():
    """A stored NaN reads as a damaged file (issue 36, defect 6), so a signal function that computes
    one (an attack plugin's) is refused at once, naming the signal, instead of being saved."""
    from harness.core.data import AugmentSpec
    from harness.core.signals import Signal
    from harness.run.signals import compute_signals

    def half_nan(served, x, spec, seed):
        out = np.zeros((len(x), 1, 2), np.float32)
        out[::2] = np.nan
        return out

    table = {"odd": Signal("odd", "a plugin's score", half_nan),
             "fine": Signal("fine", "zeros", lambda *a: np.zeros(3))}
    x = np.zeros((4, 1, 8, 8), np.uint8)
    assert compute_signals(["fine"], table, None, x, x[:0], AugmentSpec(flip=False, shift=1), 0)["fine"].shape == (3,)
    with pytest.raises(ConfigError, match=r"signal 'odd' \(a plugin's score\) computed 4 NaN values"):
        compute_signals(["odd"], table, None, x, x[:0], AugmentSpec(flip=False, shift=1), 0)


def test_nan_count_of_float16_reads_the_bits_as_isnan_does():
    """A float16 signal's NaN are counted from the bits: every one of the 65 536 bit patterns agrees
    with numpy's isnan (a stored NaN makes the file read as damaged)."""
    from harness.run.runstore import _nan_count

    every = np.arange(65536, dtype=np.uint16).view(np.float16)
    assert _nan_count(every) == int(np.isnan(every).sum()) == 2046
    assert _nan_count(every[np.isfinite(every)]) == 0
    assert _nan_count(np.array([np.nan, 1.0], np.float32)) == 1
