"""The served-model contract is checked on every query of every model, not on a first probe: a
plugin whose outputs break it anywhere stops the run at that model, with one line naming the
model and the row (never a traceback after all training)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import TINY_ARGS
from harness.cli import app
from harness.run.plugin_errors import CheckedServed, PluginFailure

runner = CliRunner()
ARGS = TINY_ARGS

PLUGINS = textwrap.dedent('''
    import numpy as np
    from defenses.base import Defense, ServedModel

    FITS = [0]


    class Flawed(ServedModel):
        """Ten zero logits per image, except one value at ``row`` of any query longer than it."""

        def __init__(self, value, row=10, width=10, dtype=np.float64):
            self.value, self.row, self.width, self.dtype = value, row, width, dtype

        def query(self, x):
            out = np.zeros((len(x), self.width if len(x) > 4 else 10), self.dtype)
            if len(x) > self.row:
                out[self.row, 3] = self.value
            return out


    class NaNInRow10(Defense):
        name = "nan-row-10"
        description = "NaN in row 10 of every longer query"

        def fit(self, train, ctx):
            return Flawed(np.nan)


    class HugeInRow10(Defense):
        name = "huge-row-10"
        description = "1e300 (float64, beyond float32) in row 10"

        def fit(self, train, ctx):
            return Flawed(1e300)


    class ShapeChangesAfterTheProbe(Defense):
        name = "shape-later"
        description = "10 columns for up to 4 images, 9 beyond"

        def fit(self, train, ctx):
            return Flawed(0.0, width=9)


    class ThirdModelBreaks(Defense):
        name = "third-breaks"
        description = "the third model trained serves an infinite logit in row 12"

        def fit(self, train, ctx):
            FITS[0] += 1
            return Flawed(np.inf if FITS[0] == 3 else 0.0, row=12)
''')


@pytest.fixture()
def plugin(tmp_path) -> Path:
    f = tmp_path / "flawed_plugins.py"
    f.write_text(PLUGINS)
    return f


def _error_lines(output: str) -> list[str]:
    return [ln for ln in output.splitlines() if ln.startswith("error:")]


@pytest.mark.parametrize("cls, shown", [("NaNInRow10", "returned nan in row 10 of 20 images"),
                                        ("HugeInRow10", "returned 1e+300 in row 10 of 20 images")])
def test_a_bad_value_past_the_probe_stops_the_first_model_naming_model_and_row(tmp_path, plugin, cls, shown):
    out = tmp_path / "o"
    res = runner.invoke(app, ["evaluate", f"{plugin}:{cls}", "--out", str(out), *ARGS])
    assert res.exit_code == 2, res.output
    (error,) = _error_lines(res.output)
    assert shown in error and "population model 0" in error and "signal 'logits'" in error, error
    assert "Traceback" not in res.output
    assert not list(out.glob("*/population/signals/model_*.npz"))  # nothing of that model saved


def test_a_shape_that_changes_after_the_probe_is_caught(tmp_path, plugin):
    res = runner.invoke(app, ["evaluate", f"{plugin}:ShapeChangesAfterTheProbe", "--out", str(tmp_path / "o"), *ARGS])
    assert res.exit_code == 2, res.output
    (error,) = _error_lines(res.output)
    assert "query returned shape (20, 9) on 20 images" in error and "population model 0" in error


def test_the_run_stops_at_the_model_that_breaks_it_and_keeps_the_earlier_ones(tmp_path, plugin):
    out = tmp_path / "o"
    res = runner.invoke(app, ["evaluate", f"{plugin}:ThirdModelBreaks", "--out", str(out), *ARGS])
    assert res.exit_code == 2, res.output
    (error,) = _error_lines(res.output)
    assert "returned inf in row 12 of 20 images" in error and "population model 2" in error, error
    saved = sorted(p.name for p in out.glob("*/population/signals/model_*.npz"))
    assert saved == ["model_0000.npz", "model_0001.npz"]


def test_audit_one_run_checks_its_queries_too(tmp_path, plugin):
    res = runner.invoke(app, ["audit-one-run", f"{plugin}:NaNInRow10", "--canaries", "20", "--epochs", "1",
                              "--out", str(tmp_path)])
    assert res.exit_code == 2, res.output
    (error,) = _error_lines(res.output)
    assert "returned nan in row 10 of 20 images" in error and "the audited model" in error


class _Model:
    def __init__(self, logits=None, raw=None, feats=None, splitai=None):
        self.logits, self.raw, self.feats, self.splitai = logits, raw, feats, splitai

    def query(self, x):
        return self.logits

    def raw_query(self, x):
        return self.raw

    def features(self, x):
        return self.feats

    def splitai_query(self, x):
        return self.splitai


def test_checked_served_checks_raw_outputs_and_features_and_passes_good_ones():
    x = np.zeros((5, 1, 8, 8), np.uint8)
    good = np.zeros((5, 3), np.float32)
    feats = np.zeros((5, 7), np.float32)
    m = CheckedServed(_Model(good, good, feats), 3, "d", "population model 4")
    assert m.query(x) is good and m.raw_query(x) is good and m.features(x) is feats
    assert CheckedServed(_Model(good), 3, "d", "w").raw_query(x) is None  # not offered: fine
    bad = good.copy()
    bad[4, 0] = -np.inf
    with pytest.raises(PluginFailure, match=r"raw_query returned -inf in row 4 of 5 images \(population model 4"):
        CheckedServed(_Model(good, bad), 3, "d", "population model 4").raw_query(x)
    nan_feats = feats.copy()
    nan_feats[1, 6] = np.nan
    checked = CheckedServed(_Model(good, None, nan_feats), 3, "d", "w")
    checked.during = "signal 'contrastive_features'"
    with pytest.raises(PluginFailure, match=r"features returned nan in row 1 of 5 images \(w, signal 'contrastive"):
        checked.features(x)
    with pytest.raises(PluginFailure, match="dtype int64"):
        CheckedServed(_Model(np.zeros((5, 3), np.int64)), 3, "d", "w").query(x)
    assert CheckedServed(_Model(good, splitai=good), 3, "d", "w").splitai_query(x) is good
    assert CheckedServed(_Model(good), 3, "d", "w").splitai_query(x) is None
    with pytest.raises(PluginFailure, match=r"splitai_query returned shape \(5, 2\) on 5 images"):
        CheckedServed(_Model(good, splitai=np.zeros((5, 2), np.float32)), 3, "d", "w").splitai_query(x)


def test_float16_outputs_pass_without_an_overflow_warning():
    """float16 / float32 outputs cannot exceed float32's range: no comparison that overflows (it
    printed 'overflow encountered in cast' twice per model)."""
    import warnings

    from harness.run.plugin_errors import check_output

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_output(np.ones((5, 3), dtype=np.float16), 5, 3, "query", "d", "population model 0")
        with pytest.raises(PluginFailure, match="returned inf in row 2"):
            bad = np.ones((5, 3), dtype=np.float16)
            bad[2, 1] = np.inf
            check_output(bad, 5, 3, "query", "d", "population model 0")
