"""The import's output checks of issue 54 (harness.run.output_checks): each silent wrong result is
built from a good outputs folder and refused in one line naming its cause before anything is written.

- rows scrambled the same way in every model: (views, queries, classes) and (queries, classes, views)
  arrays reshaped to (queries, views, classes), each named with its fix; the audit rows permuted;
- near-copies of one model (within an experiment and across two);
- two training runs mixed in one folder (``run_id``), and the warning where no file has one;
- outputs of another plan stamped with this plan's fingerprint, and an experiment folder copied into
  another, each named as such;
- the cheap checks run across every file before any output is loaded (and before scipy or torch);
- the run directory carries the import's ``--name``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from test_external_models import _import, _one_error, _plan, _rewrite, model_like_outputs, synthetic_outputs

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory) -> Path:
    return _plan(tmp_path_factory.mktemp("plan") / "plan")


def _files(outputs: Path) -> list[Path]:
    return sorted(outputs.rglob("model_*.npz"))


def _each(outputs: Path, change) -> None:
    """Rewrite every output file with ``change(arrays) -> {name: new array}``."""
    for f in _files(outputs):
        with np.load(f) as z:
            arrays = {k: z[k] for k in z.files}
        _rewrite(f, **change(arrays))


def _reshaped(order: tuple[int, int, int]):
    """The logits computed as an array of axis order ``order`` (of the plan's (Q, A, K)) and then
    reshaped, not transposed, to (Q, A, K): the reshape bug."""
    def change(a: dict) -> dict:
        logits = a["logits"]
        return {"logits": np.ascontiguousarray(logits.transpose(order)).reshape(logits.shape)}
    return change


def _audit_permuted(a: dict) -> dict:
    logits = a["logits"].copy()
    perm = np.random.default_rng(0).permutation(40)  # one permutation of the 40 audit rows, in every model
    logits[:40] = logits[perm]
    return {"logits": logits}


SCRAMBLES = {
    "(views, queries, classes) reshaped": (_reshaped((1, 0, 2)),
                                           ["the views and queries axes of the logits look scrambled in every model",
                                            "an array of (views, queries, classes) = (9, 537, 10) reshaped",
                                            "np.transpose(a, (1, 0, 2))"]),
    "(queries, classes, views) reshaped": (_reshaped((0, 2, 1)),
                                           ["the classes and views axes of the logits look scrambled in every model",
                                            "an array of (queries, classes, views) = (537, 10, 9) reshaped",
                                            "np.transpose(a, (0, 2, 1))"]),
    "audit rows permuted": (_audit_permuted,
                            ["the audit rows look permuted or shifted (the population rows are right) in every model",
                             "of the 40 audit rows of population/model_000"]),
}


def test_the_good_folder_imports_and_every_check_passes(plan_dir, tmp_path):
    """The folder every damage below starts from (made-up models that answer like trained ones, one
    run_id) imports without a warning: the checks do not refuse outputs that are right."""
    outputs = synthetic_outputs(plan_dir, tmp_path / "outputs")
    _each(outputs, lambda a: {"run_id": np.array("trainer-1")})
    res = _import(plan_dir, outputs, tmp_path / "runs")
    assert res.exit_code == 0, res.output
    assert "run_id" not in res.output


@pytest.mark.parametrize("case", list(SCRAMBLES))
def test_rows_scrambled_the_same_way_in_every_model_are_refused_naming_the_axis(case, plan_dir, tmp_path):
    change, says = SCRAMBLES[case]
    outputs = synthetic_outputs(plan_dir, tmp_path / "outputs")
    _each(outputs, change)
    runs = tmp_path / "runs"
    err = _one_error(_import(plan_dir, outputs, runs))
    for words in says:
        assert words in err, err
    assert "population: " in err and not runs.exists()


def test_rows_of_one_model_scrambled_are_named_by_file(plan_dir, tmp_path):
    outputs = synthetic_outputs(plan_dir, tmp_path / "outputs")
    f = outputs / "sample-mislabeled" / "model_0004.npz"
    with np.load(f) as z:
        _rewrite(f, **_reshaped((1, 0, 2))({"logits": z["logits"]}))
    err = _one_error(_import(plan_dir, outputs, tmp_path / "runs"))
    assert "sample-mislabeled: the views and queries axes" in err and "in model_0004.npz (1 of 6 models)" in err, err


def _near_copies(outputs: Path, experiment: str, models: list[int], source: Path, sigma: float = 1e-3) -> None:
    """Files ``models`` of ``experiment``: copies of the file ``source`` plus N(0, sigma) noise."""
    rng = np.random.default_rng(1)
    with np.load(source) as z:
        logits, test_logits, claim = z["logits"], z["test_logits"], z["test_accuracy"]
    for i in models:
        _rewrite(outputs / experiment / f"model_{i:04d}.npz",
                 logits=(logits + rng.normal(0, sigma, logits.shape)).astype(np.float32),
                 test_logits=(test_logits + rng.normal(0, sigma, test_logits.shape)).astype(np.float32),
                 test_accuracy=claim)


def test_near_copies_of_one_model_are_refused(plan_dir, tmp_path):
    from harness.run.output_checks import MIN_DIFFERENCE

    outputs = synthetic_outputs(plan_dir, tmp_path / "outputs")
    good = tmp_path / "good"
    shutil.copytree(outputs, good)
    pop = outputs / "population"
    _near_copies(outputs, "population", [1, 2, 3, 4, 5], pop / "model_0000.npz")
    runs = tmp_path / "runs"
    err = _one_error(_import(plan_dir, outputs, runs))
    assert "population: 6 of 6 models are near-copies of one another" in err, err
    assert f"threshold {MIN_DIFFERENCE:g}" in err and not runs.exists()
    # two models of the sample level alike, the others independent: that pair is named
    shutil.rmtree(outputs)
    shutil.copytree(good, outputs)
    _near_copies(outputs, "sample-mislabeled", [4], outputs / "sample-mislabeled" / "model_0001.npz")
    err = _one_error(_import(plan_dir, outputs, runs))
    assert "sample-mislabeled: 2 of 6 models are near-copies" in err and "model_0001.npz and " \
           "sample-mislabeled/model_0004.npz differ by" in err, err
    # a sample-level model that is a near-copy of a population-level one (the query rows differ: read on the
    # population rows, the same test images in both experiments)
    shutil.rmtree(outputs)
    shutil.copytree(good, outputs)
    _near_copies(outputs, "sample-mislabeled", [2], outputs / "population" / "model_0002.npz")
    err = _one_error(_import(plan_dir, outputs, runs))
    assert "across experiments: 2 of 12 models are near-copies" in err, err
    assert not runs.exists()


def test_difference_matrix_is_zero_for_copies_one_for_unrelated_and_ignores_what_softmax_ignores():
    from harness.run.output_checks import difference_matrix

    rng = np.random.default_rng(0)
    base = rng.normal(size=(300, 10)) * 3
    copies = np.stack([base + rng.normal(0, 1e-3, base.shape) for _ in range(4)])
    d = difference_matrix(copies)
    assert np.isinf(np.diag(d)).all() and d[np.isfinite(d)].max() < 1e-6
    unrelated = difference_matrix(rng.normal(size=(4, 300, 10)))
    assert 0.8 < unrelated[np.isfinite(unrelated)].min() and unrelated[np.isfinite(unrelated)].max() < 1.2
    models = np.stack([base + rng.normal(size=base.shape) for _ in range(3)])
    shifted = models + rng.normal(size=(3, 300, 1)) * 50  # a constant per row and model: the same softmax
    assert np.allclose(difference_matrix(models), difference_matrix(shifted))
    assert np.allclose(difference_matrix(models), difference_matrix(models * 7))


def test_two_training_runs_mixed_in_one_folder_are_refused_and_a_missing_run_id_warns(plan_dir, tmp_path):
    outputs = synthetic_outputs(plan_dir, tmp_path / "outputs")
    runs = tmp_path / "runs"
    for i, f in enumerate(_files(outputs)):
        _rewrite(f, run_id=np.array("torch-old" if i % 2 else "sklearn-new"))
    err = _one_error(_import(plan_dir, outputs, runs))
    assert "mixes the outputs of 2 training runs (run_id 'sklearn-new' in 6 files, e.g. population/model_0000.npz; " \
           "run_id 'torch-old' in 6 files, e.g. population/model_0001.npz)" in err, err
    for f in _files(outputs)[:3]:
        _rewrite(f, run_id=None)  # a trainer that writes none, mixed with one that does
    err = _one_error(_import(plan_dir, outputs, runs))
    assert "mixes the outputs of 3 training runs" in err and "no run_id in 3 files" in err, err
    _rewrite(_files(outputs)[0], run_id=np.array(b"sklearn-new"))
    assert "run_id must be one string" in _one_error(_import(plan_dir, outputs, runs))
    assert not runs.exists()
    _each(outputs, lambda a: {"run_id": None})  # no file has one: imported, with a one-line warning
    res = _import(plan_dir, outputs, runs)
    assert res.exit_code == 0, res.output
    notes = [line for line in res.output.splitlines() if "run_id" in line]
    assert len(notes) == 1 and "no output file carries a run_id" in notes[0], res.output


def _other_plan_outputs(plan_dir: Path, tmp_path: Path, claim: bool) -> Path:
    """Outputs of made-up models trained for another plan (seed 1: another train/test split), with this
    plan's fingerprint written into them."""
    other = _plan(tmp_path / "other", seed=1)
    outputs = synthetic_outputs(other, tmp_path / "outputs")
    fp = json.loads((plan_dir / "plan.json").read_text())["fingerprint"]
    _each(outputs, lambda a: {"plan_fingerprint": np.array(fp), **({} if claim else {"test_accuracy": None})})
    return outputs


@pytest.mark.parametrize("claim", [True, False])
def test_another_plans_outputs_stamped_with_this_fingerprint_are_named_as_such(claim, plan_dir, tmp_path):
    outputs = _other_plan_outputs(plan_dir, tmp_path, claim)
    runs = tmp_path / "runs"
    err = _one_error(_import(plan_dir, outputs, runs))
    assert "population/model_0000.npz: its outputs fit none of this plan's labels" in err, err
    assert "outputs of a model trained and queried on another plan's files, stamped with this plan's " \
           "fingerprint?" in err
    assert ("and the file claims a test accuracy of" in err) == claim
    assert "test_accuracy is" not in err and "at chance accuracy" not in err and not runs.exists()


def test_a_model_at_chance_is_still_told_to_train_again(plan_dir, tmp_path):
    """Test outputs at chance whose query rows fit their labels: not another plan's outputs."""
    outputs = synthetic_outputs(plan_dir, tmp_path / "outputs")
    f = outputs / "population" / "model_0003.npz"
    with np.load(f) as z:
        _rewrite(f, test_logits=np.random.default_rng(0).normal(size=z["test_logits"].shape).astype(np.float32),
                 test_accuracy=None)
    err = _one_error(_import(plan_dir, outputs, tmp_path / "runs"))
    assert "model_0003.npz is at chance accuracy" in err and "train it again" in err, err


def test_a_copied_experiment_folder_is_named_not_called_a_swap(plan_dir, tmp_path):
    outputs = synthetic_outputs(plan_dir, tmp_path / "outputs")
    shutil.rmtree(outputs / "sample-mislabeled")
    shutil.copytree(outputs / "population", outputs / "sample-mislabeled")
    _each(outputs / "sample-mislabeled", lambda a: {"experiment": np.array("sample-mislabeled")})
    err = _one_error(_import(plan_dir, outputs, tmp_path / "runs"))
    assert "sample-mislabeled/model_0000.npz holds the very logits of population/model_0000.npz (6 of the 6 files " \
           "of sample-mislabeled are copies of population's): an experiment's folder copied into another" in err, err
    assert "swapped" not in err and "permuted" not in err


def test_cheap_checks_run_across_every_file_first_without_loading_outputs_scipy_or_torch(plan_dir, tmp_path):
    """A NaN in the first file and another plan's fingerprint in the last: the fingerprint is told (the
    cheap pass reads every file's headers before any file's outputs), by harness.run.external's
    precheck alone, which imports neither scipy.stats nor torch (what made a refusal take 14-73 s)."""
    outputs = synthetic_outputs(plan_dir, tmp_path / "outputs")
    first, last = _files(outputs)[0], _files(outputs)[-1]
    with np.load(first) as z:
        logits = z["logits"].copy()
    logits[0, 0, 0] = np.nan
    _rewrite(first, logits=logits)
    _rewrite(last, plan_fingerprint=np.array("0" * 64))
    err = _one_error(_import(plan_dir, outputs, tmp_path / "runs"))
    assert "sample-mislabeled/model_0005.npz was written for another plan" in err, err
    code = ("import sys\nfrom pathlib import Path\nfrom harness.core.errors import ConfigError\n"
            "from harness.run.external import precheck_import\n"
            f"try:\n    precheck_import(Path({str(plan_dir)!r}), Path({str(outputs)!r}))\n"
            "except ConfigError as e:\n    print(e)\n"
            "print(sorted(m for m in ('torch', 'scipy.stats') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 0 and "model_0005.npz was written for another plan" in lines[0], out.stderr
    assert lines[-1] == "[]"
    _rewrite(last, plan_fingerprint=np.array(json.loads((plan_dir / "plan.json").read_text())["fingerprint"]))
    assert "population/model_0000.npz: logits hold 1 NaN" in _one_error(_import(plan_dir, outputs, tmp_path / "r"))


def test_the_run_directory_carries_the_name(plan_dir, tmp_path):
    outputs = synthetic_outputs(plan_dir, tmp_path / "outputs")
    runs = tmp_path / "runs"
    res = _import(plan_dir, outputs, runs, "--name", "My ResNet/v2 (seed 0)")
    assert res.exit_code == 0, res.output
    (run,) = runs.iterdir()
    fp = json.loads((run / "results.json").read_text())["fingerprint"]
    assert run.name == f"external-My-ResNet-v2-seed-0-quick-{fp[:12]}"
    assert json.loads((run / "results.json").read_text())["external"]["name"] == "My ResNet/v2 (seed 0)"


def test_model_like_outputs_are_what_the_checks_take_for_a_trained_model(plan_dir):
    """The helper the tests build from: its population rows are its test outputs, its models differ."""
    from harness.run.output_checks import MIN_DIFFERENCE, difference_matrix

    rng = np.random.default_rng(0)
    runs = [model_like_outputs(plan_dir, "population", rng) for _ in range(3)]
    with np.load(plan_dir / "population" / "design.npz") as z:
        pop = z["population_indices"]
    for logits, test_logits, acc in runs:
        assert np.array_equal(logits[40:, 0], test_logits[pop]) and 0.7 < acc < 0.95
    d = difference_matrix(np.stack([logits[:, 0] for logits, _, _ in runs]))
    assert d[np.isfinite(d)].min() > 1000 * MIN_DIFFERENCE
