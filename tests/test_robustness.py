"""Damaged runs heal or fail with one line; bad parameters, data and plugins fail before (or at the
first) training, with the defense's own frames only."""

import json
import re
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from conftest import TINY_ARGS
from harness.cli import app
from harness.core.config import ConfigError
from harness.defense_config import build_config
from harness.core.data import DataError, load_npz
from harness.run.runner import make_defense

runner = CliRunner()
ARGS = TINY_ARGS


def _numbers(results: dict) -> dict:
    return {(e["name"], e["variant"]): (e["tpr_at_fpr"], e["auc"]) for e in results["population"]["attacks"]}


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


def _nan_inside(path: Path) -> None:
    """Rewrite a signals file as a valid npz whose logits hold one NaN (issue 36, defect 6)."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["logits"] = arrays["logits"].copy()
    arrays["logits"].flat[5] = np.nan
    with open(path, "wb") as f:
        np.savez(f, **arrays)


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated", "nan-inside"])
def test_damaged_signals_file_is_one_line_then_retrained_and_others_untouched(run_copy, damage):
    """A truncated file, or a valid one holding a NaN (which gave a traceback), reads as damaged:
    `harness attack` names it and the repair in one line; `evaluate --run-dir` retrains that model."""
    before = _numbers(json.loads((run_copy / "results.json").read_text()))
    sig = run_copy / "population" / "signals"
    damaged = sig / "model_0003.npz"
    if damage == "truncated":
        with open(damaged, "r+b") as f:
            f.truncate(1000)
    else:
        _nan_inside(damaged)
    others = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sig.glob("model_*.npz") if p != damaged}

    res = runner.invoke(app, ["attack", str(run_copy)])
    assert res.exit_code == 2, res.output
    errors = _error_lines(res.output)
    assert len(errors) == 1 and "model_0003.npz is damaged" in errors[0] and "harness evaluate --run-dir" in errors[0]
    assert "Traceback" not in res.output and (damage != "nan-inside" or "holds 1 NaN value" in errors[0])
    res = runner.invoke(app, ["submit", str(run_copy), "-o", str(run_copy.parent / "entry.tar.gz")])
    assert res.exit_code == 2 and "model_0003.npz is damaged" in res.output and "Traceback" not in res.output

    res = runner.invoke(app, ["evaluate", "--run-dir", str(run_copy)])
    assert res.exit_code == 0, res.output
    assert "model_0003.npz was damaged" in res.output and "Training 1 models" in res.output
    assert (sig / "model_0003.npz.damaged").is_file()
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sig.glob("model_*.npz")
            if p.name != "model_0003.npz"} == others
    assert _numbers(json.loads((run_copy / "results.json").read_text())) == before


@pytest.mark.slow
@pytest.mark.parametrize("name", ["manifest.json", "config.json", "population/design.npz", "data.npz"])
def test_damaged_run_files_fail_attack_clearly_and_evaluate_rebuilds_them(run_copy, name):
    before = _numbers(json.loads((run_copy / "results.json").read_text()))
    (run_copy / name).write_bytes(b"{garbage")
    res = runner.invoke(app, ["attack", str(run_copy)])
    assert res.exit_code == 2
    errors = _error_lines(res.output)
    assert len(errors) == 1 and name in errors[0] and "is damaged" in errors[0], res.output
    res = runner.invoke(app, ["evaluate", "undefended", "--run-dir", str(run_copy), *ARGS])
    assert res.exit_code == 0, res.output
    assert f"{name} was damaged" in res.output and "Resuming: 6 of 6 models already trained" in res.output
    assert _numbers(json.loads((run_copy / "results.json").read_text())) == before


def test_damaged_results_json_fails_report_and_names_the_repair(run_copy):
    (run_copy / "results.json").write_text('{"population": ')
    res = runner.invoke(app, ["report", str(run_copy)])
    assert res.exit_code == 2
    (error,) = _error_lines(res.output)
    assert "results.json is damaged" in error and f"harness attack {run_copy}" in error


def _edit_json(path: Path, edit) -> None:
    from harness.core import jsonio

    obj = jsonio.loads(path.read_text())
    edit(obj)
    path.write_text(jsonio.dumps(obj, indent=2))


def test_a_hand_edited_training_setting_in_config_json_is_refused_on_every_read(run_copy, tmp_path):
    """issue 36, defect 5: config.json with train.lr 0.1 -> 0.3 was accepted by `harness attack`,
    whose results.json then claimed lr 0.3 for models trained at 0.1."""
    results_before = (run_copy / "results.json").read_bytes()
    lr = json.loads((run_copy / "config.json").read_text())["train"]["lr"]
    _edit_json(run_copy / "config.json", lambda c: c["train"].__setitem__("lr", lr * 3))
    for args in (["attack", str(run_copy)], ["evaluate", "--run-dir", str(run_copy)],
                 ["submit", str(run_copy), "-o", str(tmp_path / "e.tgz")]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and "Traceback" not in res.output, res.output
        (error,) = _error_lines(res.output)
        assert "config.json was edited after training" in error and \
            f"train.lr is {lr * 3!r} there but the models were trained with {lr!r}" in error, error
    assert (run_copy / "results.json").read_bytes() == results_before and not (tmp_path / "e.tgz").exists()
    # settings outside the fingerprint may change by hand too: the attacks run with them
    _edit_json(run_copy / "config.json", lambda c: (c["train"].__setitem__("lr", lr),
                                                    c["attack"].__setitem__("bootstrap", 9)))
    res = runner.invoke(app, ["attack", str(run_copy)])
    assert res.exit_code == 0, res.output
    assert json.loads((run_copy / "results.json").read_text())["config"]["attack"]["bootstrap"] == 9


def test_a_run_from_before_the_recorded_config_is_checked_by_its_fingerprint(run_copy):
    _edit_json(run_copy / "manifest.json", lambda m: (m.pop("trained_config", None), m.pop("plumbing_params", None)))
    assert runner.invoke(app, ["attack", str(run_copy)]).exit_code == 0
    _edit_json(run_copy / "config.json", lambda c: c["train"].__setitem__("epochs", 3))
    res = runner.invoke(app, ["attack", str(run_copy)])
    assert res.exit_code == 2, res.output
    (error,) = _error_lines(res.output)
    assert "config.json does not describe the run's models" in error and "re-computed" in error


def test_a_hand_edited_results_json_is_refused_on_every_read_until_attack_rewrites_it(run_copy, tmp_path):
    """issue 36, defect 5: a results.json with edited numbers was printed by `report`."""
    from harness import load_run

    before = json.loads((run_copy / "results.json").read_text())
    k = "0.001"
    _edit_json(run_copy / "results.json",
               lambda r: r["population"]["best"]["tpr_at_fpr"].__setitem__(k, (r["population"]["best"]["tpr_at_fpr"][k]
                                                                               + 0.25) % 1.0))
    line = "results.json was edited after the attack phase wrote it"
    for args in (["report", str(run_copy)], ["submit", str(run_copy), "-o", str(tmp_path / "e.tgz")],
                 ["compare", str(run_copy), str(run_copy)]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, res.output
        (error,) = _error_lines(res.output)
        assert line in error and f"`harness attack {run_copy}` rewrites it" in error, error
    with pytest.raises(ConfigError, match=line):
        load_run(run_copy)
    res = runner.invoke(app, ["leaderboard", "build", str(run_copy), "--out", str(tmp_path / "site")])
    assert res.exit_code == 2 and line in " ".join(res.output.split()), res.output  # skipped, named
    assert runner.invoke(app, ["attack", str(run_copy)]).exit_code == 0  # the repair the line names
    res = runner.invoke(app, ["report", str(run_copy)])
    assert res.exit_code == 0, res.output
    assert json.loads((run_copy / "results.json").read_text())["population"]["best"] == before["population"]["best"]
    # the digest is of the content, not the layout: a re-indented file (or an older one's) still reads
    (run_copy / "results.json").write_text(json.dumps(json.loads((run_copy / "results.json").read_text()), indent=4))
    assert runner.invoke(app, ["report", str(run_copy)]).exit_code == 0


def test_resume_without_defense_refuses_model_changing_flags(run_copy):
    res = runner.invoke(app, ["evaluate", "--run-dir", str(run_copy), "--epochs", "3"])
    assert res.exit_code == 2 and "train.epochs" in res.output
    res = runner.invoke(app, ["evaluate"])
    assert res.exit_code == 2 and "--run-dir" in res.output


# --- validated before any training ------------------------------------------------------------


def test_unknown_attack_fails_fast_without_training(tmp_path, monkeypatch):
    def too_late(*a, **k):  # fast = before the data are loaded, whatever the machine's speed
        raise AssertionError("the data were loaded (or models trained) before the attack names were checked")

    monkeypatch.setattr("harness.run.runner.load_dataset", too_late)
    monkeypatch.setattr("harness.run.runner.train_all", too_late)
    res = runner.invoke(app, ["evaluate", "undefended", "--out", str(tmp_path / "o"), "--set",
                              "attack.names=[nosuch]"])
    assert res.exit_code == 2 and "unknown attack 'nosuch'" in res.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("defense, setting, message", [
    ("relaxloss", "defense_params.target_loss=abc", "target_loss must be a number"),
    ("hamp", "defense_params.entropy_threshold=2", "entropy_threshold must be in (0, 1]"),
    ("hamp", "defense_params.regularization=-1", "regularization must be >= 0"),
    ("dpsgd-high", "defense_params.accountant=5", "accountant must be a string"),
    ("ssl-simclr", "defense_params.width=2.5", "width must be an integer"),
    ("alibi", "defense_params.prior=soon", "prior must be 'batch'"),
])
def test_bad_defense_parameters_fail_before_anything_is_written(tmp_path, defense, setting, message):
    res = runner.invoke(app, ["evaluate", defense, "--out", str(tmp_path / "o"), "--set", setting])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output
    assert not (tmp_path / "o").exists()


def test_parameter_kinds_follow_the_defaults_for_plugins_too(tmp_path):
    f = tmp_path / "plug.py"
    f.write_text(textwrap.dedent('''
        from defenses.undefended import Undefended

        class Tuned(Undefended):
            name = "tuned"
            param_defaults = {"alpha": 0.5, "rounds": 3, "mode": "fast", "flag": False, "anything": None}
    '''))
    ok = build_config("quick", {"defense": f"{f}:Tuned", "defense_params.alpha": 2, "defense_params.anything": [1]})
    assert make_defense(ok).params["alpha"] == 2  # an integer is a number
    for key, value, want in [("alpha", "abc", "a number"), ("rounds", 1.5, "an integer"), ("mode", 3, "a string"),
                             ("flag", 1, "true or false"), ("alpha", float("nan"), "a number")]:
        cfg = build_config("quick", {"defense": f"{f}:Tuned", f"defense_params.{key}": value})
        with pytest.raises(ConfigError, match=f"{key} must be {want}"):
            make_defense(cfg)


@pytest.mark.parametrize("y_test, message", [
    ([0, 1, 2, -1], "negative label -1"),
    ([0, 1, 2, 3], "y_test holds label 3"),
    ([0.5, 1, 2, 0], "integer class indices"),
])
def test_npz_labels_are_checked(tmp_path, y_test, message):
    _check_npz_labels(tmp_path, np.array([0, 1, 2, 0, 1, 2]), np.array(y_test), message)


@pytest.mark.parametrize("y_train, message", [
    (np.array([0, 1, 2, 0, 1, 2**64 - 1], dtype=np.uint64), "holds label 18446744073709551615"),  # no wrap to -1
    (np.array([0, 1, 2, 0, 1, 10**9]), "holds label 1000000000"),  # not a billion-way classifier
    (np.array([0, 1, 5, 0, 1, 5]), "leaves 3 class(es) without a training image (first: 2)"),
])
def test_npz_labels_too_large_or_with_empty_classes_are_refused_before_training(tmp_path, y_train, message):
    _check_npz_labels(tmp_path, y_train, np.array([0, 1, 0, 1]), message)


def _check_npz_labels(tmp_path, y_train, y_test, message):
    rng = np.random.default_rng(0)
    path = tmp_path / "d.npz"
    np.savez(path, x_train=rng.integers(0, 255, (6, 8, 8, 3), dtype=np.uint8), y_train=y_train,
             x_test=rng.integers(0, 255, (4, 8, 8, 3), dtype=np.uint8), y_test=y_test)
    with pytest.raises(DataError, match=re.escape(message)):
        load_npz(path)


# --- a plugin's own mistakes -------------------------------------------------------------------

PLUGINS = textwrap.dedent('''
    import numpy as np
    from defenses.base import Defense, ServedModel


    class Three(ServedModel):
        def query(self, x):
            return np.zeros((len(x), 3), np.float32)


    class ThreeOutputs(Defense):
        name = "three"
        description = "serves 3 scores on a 10-class task"

        def fit(self, train, ctx):
            return Three()


    def helper_that_fails(n):
        raise ZeroDivisionError(f"the plugin divided {n} by zero")


    class Crashes(Defense):
        name = "crashes"
        description = "fit raises"

        def fit(self, train, ctx):
            return helper_that_fails(len(train))


    class ReturnsArray(Defense):
        name = "array"
        description = "fit returns the wrong type"

        def fit(self, train, ctx):
            return np.zeros(3)
''')


@pytest.fixture()
def plugin_file(tmp_path) -> Path:
    f = tmp_path / "broken_plugins.py"
    f.write_text(PLUGINS)
    return f


def test_wrong_output_shape_stops_after_the_first_model(tmp_path, plugin_file):
    out = tmp_path / "o"
    res = runner.invoke(app, ["evaluate", f"{plugin_file}:ThreeOutputs", "--out", str(out), *ARGS])
    assert res.exit_code == 2, res.output
    (error,) = _error_lines(res.output)
    assert "population model 0" in error and "shape (4, 3)" in error and "shape (4, 10)" in error
    assert not list(out.glob("*/population/signals/model_*.npz"))  # nothing saved, no model after the first


def test_fit_failure_prints_one_line_and_the_plugins_frames_only(tmp_path, plugin_file):
    res = runner.invoke(app, ["evaluate", f"{plugin_file}:Crashes", "--out", str(tmp_path / "o"), *ARGS])
    assert res.exit_code == 2
    lines = res.output.splitlines()
    assert len(lines) < 25, res.output
    (error,) = _error_lines(res.output)
    assert "failed in fit (population model 0): ZeroDivisionError: the plugin divided" in error
    assert "broken_plugins.py" in res.output and "helper_that_fails" in res.output
    assert "harness/run/runner.py" not in res.output and "concurrent" not in res.output
    debug = runner.invoke(app, ["evaluate", f"{plugin_file}:Crashes", "--out", str(tmp_path / "o"), *ARGS, "--debug"])
    assert debug.exit_code == 2 and "Traceback" in debug.output and "runner.py" in debug.output


def test_fit_must_return_a_served_model(tmp_path, plugin_file):
    res = runner.invoke(app, ["evaluate", f"{plugin_file}:ReturnsArray", "--out", str(tmp_path / "o"), *ARGS])
    assert res.exit_code == 2
    (error,) = _error_lines(res.output)
    assert "fit returned ndarray" in error and "ServedModel" in error


def test_help_shows_bracketed_examples_literally():
    res = runner.invoke(app, ["attack", "--help"], env={"COLUMNS": "250", "TERMINAL_WIDTH": "250"})
    assert res.exit_code == 0
    assert "attack.names=[lira]" in res.output, res.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: --device cuda would start")
def test_failed_start_leaves_no_run_directory(tmp_path):
    res = runner.invoke(app, ["evaluate", "undefended", "--out", str(tmp_path / "o"), "--device", "cuda"])
    assert res.exit_code == 2 and "no CUDA device" in res.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("flag", [["--canary", ""], ["--canary", "ood,"], ["--data-dir", "somewhere"]])
def test_ignored_or_empty_inputs_are_errors(tmp_path, flag):
    res = runner.invoke(app, ["evaluate", "undefended", "--out", str(tmp_path / "o"), *flag])
    assert res.exit_code == 2, res.output
    assert ("data.name=npz" in res.output) == (flag[0] == "--data-dir")
    assert not (tmp_path / "o").exists()


def test_leaderboard_skips_and_names_a_broken_results_json(finished_run, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(finished_run, runs / "good")
    (runs / "broken").mkdir()
    (runs / "broken" / "results.json").write_text('{"population": {"attacks": [')
    (runs / "foreign").mkdir()
    (runs / "foreign" / "results.json").write_text('{"hello": 1}')
    res = runner.invoke(app, ["leaderboard", "build", str(runs), "--out", str(tmp_path / "site")])
    assert res.exit_code == 0, res.output
    assert "1 entries" in res.output
    skipped = [line for line in res.output.splitlines() if line.startswith("skipped:")]
    assert len(skipped) == 2 and any("broken" in s for s in skipped) and any("foreign" in s for s in skipped)


# --- one headline, marked the same everywhere; unresolved never printed as a number -------------


def test_a_tie_in_a_figure_goes_to_the_earlier_candidate():
    """The declared attacks come first in the leak's pool, in run order: equal TPRs at the figure
    FPR keep the earlier one (no replicates: the plain maximum, which then has no selection to adjust)."""
    from harness.core.figure import best_of

    assert best_of(np.array([0.2, 0.3]), np.zeros((2, 0)), 16, 0.95).source == 1  # the larger TPR
    assert best_of(np.array([0.3, 0.3, 0.1]), np.zeros((3, 0)), 16, 0.95).source == 0  # a tie: the earlier
    reps = np.random.default_rng(0).normal(0.3, 0.02, (1, 500))
    assert best_of(np.array([0.3, 0.3]), np.vstack([reps, reps]), 16, 0.95).source == 0  # twins: the earlier


def test_report_tables_and_csv_mark_the_same_headline_and_blank_unresolved(finished_run):
    from rich.console import Console

    from harness.audit.report import attacks_frame, print_report, summary_frame
    from harness.audit.results import Results

    results = Results.load(finished_run).data
    pop = results["population"]
    # make every primary variant tie at the headline FPR: the marked row must still be the headline
    for e in pop["attacks"]:
        e["tpr_at_fpr"]["0.001"] = 0.25
    frame = attacks_frame(results)
    marked = frame[frame["headline"]]
    assert len(marked) == 1
    assert (marked["attack"].item(), marked["variant"].item()) == (pop["best"]["name"], pop["best"]["variant"])
    console = Console(record=True, width=250)
    print_report(results, console)
    text = console.export_text()
    headline_rows = [line for line in text.splitlines() if "(headline)" in line and line.strip().startswith("population")]
    assert len(headline_rows) == 1 and pop["best"]["name"] in headline_rows[0].split()
    # 6 models x 20 samples: 60 negatives, so TPR at 0.1% FPR is unresolved: no number anywhere
    assert not pop["best"]["resolved"]["0.001"]
    assert frame["tpr@0.001"].isna().all() and not frame["tpr@0.001_resolved"].any()
    assert frame["tpr@0.001_ci_low"].isna().all()
    assert (summary_frame(results)["figure_fpr"] == 0.05).all()  # the figures are read where 3 false positives are
    assert frame["tpr@0.0"].notna().all()  # resolved figures stay
    assert "25.0%" not in text  # the unresolved reading is printed nowhere; the figures read at 5% FPR instead
    assert re.search(r"figure FPR \(expected FP\)\s+5% \(3\.0\)", text), text


LABELS_ONLY = textwrap.dedent('''
    import numpy as np
    from defenses.base import ServedModel
    from defenses.undefended import Undefended


    class OneHot(ServedModel):
        def __init__(self, inner):
            self.inner = inner

        def query(self, x):
            z = self.inner.query(x)
            out = np.zeros_like(z, dtype=np.float32)
            out[np.arange(len(z)), z.argmax(1)] = 1.0
            return out


    class LabelsOnly(Undefended):
        name = "labels-only"
        description = "serves the predicted label only"
        adaptive_attacks = ("lira",)

        def fit(self, train, ctx):
            return OneHot(super().fit(train, ctx))
''')


def test_one_hot_outputs_get_the_label_only_attack_with_a_note(tmp_path, finished_run):
    from harness.audit.attack_phase import LABEL_ONLY_NOTE, is_one_hot

    assert is_one_hot(np.eye(3)[[0, 2, 1]]) and not is_one_hot(np.array([[0.9, 0.1, 0.0]]))
    assert not is_one_hot(np.array([[1.0, 1.0, 0.0]])) and not is_one_hot(np.zeros((0, 3)))
    f = tmp_path / "labels_only.py"
    f.write_text(LABELS_ONLY)
    out = tmp_path / "o"
    res = runner.invoke(app, ["evaluate", f"{f}:LabelsOnly", "--out", str(out), *ARGS])
    assert res.exit_code == 0, res.output
    results = json.loads(next(out.glob("*/results.json")).read_text())
    assert results["notes"] == [LABEL_ONLY_NOTE]
    assert any(e["name"] == "label-only" for e in results["population"]["attacks"])
    # an adaptation: one of the leak's candidates, not a declared one
    assert any(c.startswith("population/label-only:") for c in results["population"]["figure"]["leak"]["labels"])
    assert results["attack_roles"]["adapted"] == ["label-only", "lira-scaled"]
    assert "label-only" in results["population"]["ranked_attacks"]
    assert "label-only attack was added automatically" in " ".join(res.output.split())
    assert "notes" not in json.loads((finished_run / "results.json").read_text())  # real scores: no note
