"""Outputs that are wrong but well-formed (issue 46) and the import's smaller defects (issue 48, part 2).

Each bad output folder of the kinds a user makes (all-zero logits with a claimed accuracy, the same
outputs for every model, two models' files swapped, a model trained on another set, probabilities,
no test outputs, models at chance, the experiment folders swapped, the fingerprint saved as bytes)
is refused in one line before anything is written; ``--force`` imports a failed membership check
and marks it; ``--probabilities`` converts; two imports of the same outputs at once and a killed
import leave one complete run and no temp folder; ``harness plan`` warns of unresolvable FPRs and
refuses a file before building anything.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import wait_for
from test_external_models import (_import, _one_error, _plan, _publish, _rewrite, model_like_outputs, runner,
                                  synthetic_outputs)

from harness.cli import app

REPO = Path(__file__).resolve().parents[1]
#: 120 audit samples: about 30 per side of a pair of models, enough for the membership check to name a swap
#: among 6 models (its threshold, z > 4.2 over 2 x 36 tests, needs more than 10 a side)
BIG = {"audit.size": 120}


def fitting_outputs(plan: Path, out: Path, seed: int = 0, strength: float = 5.0,
                    membership: dict[str, np.ndarray] | None = None) -> Path:
    """Output files of models that fit their members: a made-up model's outputs (model_like_outputs),
    plus ``strength`` on the label of every audit sample a model holds (per the plan's membership,
    or ``membership``), at every view."""
    meta = json.loads((plan / "plan.json").read_text())
    rng = np.random.default_rng(seed)
    for name, e in meta["experiments"].items():
        with np.load(plan / e["files"]["train"]) as t, np.load(plan / e["files"]["query"]) as q:
            member = t["membership"] if membership is None else membership[name]
            y = q["y"][:member.shape[1]]
        for i in range(meta["num_models"]):
            logits, test_logits, acc = model_like_outputs(plan, name, rng)
            rows = np.flatnonzero(member[i])
            logits[rows, :, y[rows]] += strength
            f = out / name / f"model_{i:04d}.npz"
            f.parent.mkdir(parents=True, exist_ok=True)
            np.savez(f, logits=logits, plan_fingerprint=np.array(meta["fingerprint"]), experiment=np.array(name),
                     test_logits=test_logits, test_accuracy=np.array(acc))
    return out


@pytest.fixture(scope="module")
def big_plan(tmp_path_factory) -> Path:
    return _plan(tmp_path_factory.mktemp("plan") / "plan", **BIG)


def _swap(a: Path, b: Path) -> None:
    tmp = a.with_name("swap.tmp")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)


def _all(outputs: Path, change) -> None:
    for f in sorted(outputs.rglob("model_*.npz")):
        change(f)


def _zeros(outputs: Path, claim: bool) -> None:
    def zero(f: Path) -> None:
        with np.load(f) as z:
            _rewrite(f, logits=np.zeros_like(z["logits"]), test_logits=np.zeros_like(z["test_logits"]),
                     test_accuracy=np.array(0.972) if claim else None)
    _all(outputs, zero)


def _identical(outputs: Path) -> None:
    for e in outputs.iterdir():
        for f in sorted(e.glob("model_*.npz"))[1:]:
            shutil.copy(e / "model_0000.npz", f)


def _probabilities(outputs: Path) -> None:
    def soft(f: Path) -> None:
        with np.load(f) as z:
            p, t = (np.exp(a - a.max(-1, keepdims=True)) for a in (z["logits"], z["test_logits"]))
            _rewrite(f, logits=(p / p.sum(-1, keepdims=True)).astype(np.float32),
                     test_logits=(t / t.sum(-1, keepdims=True)).astype(np.float32))
    _all(outputs, soft)


def _at_chance(outputs: Path) -> None:
    rng = np.random.default_rng(3)

    def guess(f: Path) -> None:
        with np.load(f) as z:
            _rewrite(f, test_logits=rng.normal(size=z["test_logits"].shape).astype(np.float32), test_accuracy=None)
    for f in sorted((outputs / "population").glob("model_000[24].npz")):
        guess(f)


def _folders_swapped(outputs: Path) -> None:
    (outputs / "population").rename(outputs / "tmp")
    (outputs / "sample-mislabeled").rename(outputs / "population")
    (outputs / "tmp").rename(outputs / "sample-mislabeled")


def _fingerprint_bytes(outputs: Path) -> None:
    f = outputs / "population" / "model_0001.npz"
    with np.load(f) as z:
        _rewrite(f, plan_fingerprint=np.array(str(z["plan_fingerprint"]).encode()))


def _shuffled(plan: Path, outputs: Path) -> None:
    """Model 2 of the sample level trained on another set than the plan's (its outputs fit a
    random membership row)."""
    meta = json.loads((plan / "plan.json").read_text())
    member = {}
    for name, e in meta["experiments"].items():
        with np.load(plan / e["files"]["train"]) as t:
            member[name] = t["membership"].copy()
    member["sample-mislabeled"][2] = np.random.default_rng(7).permutation(member["sample-mislabeled"][2])
    other = fitting_outputs(plan, outputs.with_name("shuffled"), membership=member)
    shutil.copy(other / "sample-mislabeled" / "model_0002.npz", outputs / "sample-mislabeled" / "model_0002.npz")


def _copied_test_outputs(outputs: Path) -> None:
    """Every file's test outputs (and their claimed accuracy) copied from model 0 of its experiment."""
    for e in outputs.iterdir():
        with np.load(e / "model_0000.npz") as z:
            test, acc = z["test_logits"].copy(), z["test_accuracy"].copy()
        for f in sorted(e.glob("model_*.npz"))[1:]:
            _rewrite(f, test_logits=test, test_accuracy=acc)


def _classes(outputs: Path, change) -> None:
    """Every file's logits and test outputs changed along the classes (``change``), no claimed accuracy."""
    def one(f: Path) -> None:
        with np.load(f) as z:
            _rewrite(f, logits=change(z["logits"]), test_logits=change(z["test_logits"]), test_accuracy=None)
    _all(outputs, one)


def _constant_rows(outputs: Path) -> None:
    def one(f: Path) -> None:
        with np.load(f) as z:
            logits = z["logits"].copy()
        logits[:, 0] = logits[0, 0]
        _rewrite(f, logits=logits)
    for f in sorted((outputs / "sample-mislabeled").glob("model_*.npz"))[:2]:
        one(f)


def _complement(plan: Path, outputs: Path) -> None:
    """Model 2 of the sample level trained on the complement of its plan membership."""
    meta = json.loads((plan / "plan.json").read_text())
    member = {}
    for name, e in meta["experiments"].items():
        with np.load(plan / e["files"]["train"]) as t:
            member[name] = t["membership"].copy()
    member["sample-mislabeled"][2] = ~member["sample-mislabeled"][2]
    other = fitting_outputs(plan, outputs.with_name("complement"), membership=member)
    shutil.copy(other / "sample-mislabeled" / "model_0002.npz", outputs / "sample-mislabeled" / "model_0002.npz")


def _two_trainers(outputs: Path) -> None:
    """Half of every experiment's files from another trainer: its outputs at four times the scale."""
    for e in outputs.iterdir():
        for f in sorted(e.glob("model_*.npz"))[:3]:
            with np.load(f) as z:
                _rewrite(f, logits=z["logits"] * 4, test_logits=z["test_logits"] * 4)


#: each kind of bad output folder of issue 46 and 48: (damage, what the error line says)
CASES = {
    "all-zero logits, claimed accuracy": (lambda p, o: _zeros(o, claim=True),
                                          "model_0000.npz: test_accuracy is 97.2%, but its test_logits give"),
    "all-zero logits": (lambda p, o: _zeros(o, claim=False), "answer every query image and view with the same output "
                                                             "(all zeros)"),
    "the same outputs for every model": (lambda p, o: _identical(o), "have identical outputs (6 of 6 models)"),
    "two models swapped": (lambda p, o: _swap(o / "sample-mislabeled" / "model_0003.npz",
                                              o / "sample-mislabeled" / "model_0005.npz"),
                           "model_0003.npz and "),
    # its membership ignores the plan: it answers canaries the plan says it never saw with their random label
    "a model trained on another set": (_shuffled, "model_0002.npz predicts the (random) canary label of canaries the "
                                                  "plan says it never trained on far above chance"),
    "probabilities": (lambda p, o: _probabilities(o), "its logits are probabilities (every row in [0, 1], summing to 1)"),
    "no test outputs": (lambda p, o: _all(o, lambda f: _rewrite(f, test_logits=None)), "lacks 'test_logits'"),
    "two models at chance": (lambda p, o: _at_chance(o), "model_0002.npz, "),
    "experiment folders swapped": (lambda p, o: _folders_swapped(o),
                                   "was written for experiment 'sample-mislabeled' but lies in the folder of "
                                   "'population'"),
    "test outputs copied from one model": (lambda p, o: _copied_test_outputs(o),
                                           "model_0001.npz's test_logits answer the 497 test images its logits query"),
    # the right cause of each (issue 65: the first two were told "another plan's files", the third "scrambled")
    "negated logits": (lambda p, o: _classes(o, lambda a: -a), "its logits look negated: its least likely class is"),
    "classes rolled by one": (lambda p, o: _classes(o, lambda a: np.roll(a, 1, axis=-1)),
                              "its classes look rolled by -1 (its class k is the dataset's class k - 1"),
    "constant query rows": (lambda p, o: _constant_rows(o), "answer every query row at view 0 with the same output"),
    "a model trained on the complement": (_complement, "it fits its plan non-members better than its plan members "
                                                       "(AUC 0.00): trained on the complement of its plan membership"),
    "two trainers in one folder": (lambda p, o: _two_trainers(o), "the models' scale falls in two groups"),
    "fingerprint saved as bytes": (lambda p, o: _fingerprint_bytes(o),
                                   "plan_fingerprint is the right value saved as bytes (dtype |S64)"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_each_bad_output_folder_is_refused_in_one_line_before_anything_is_written(case, big_plan, tmp_path):
    damage, says = CASES[case]
    outputs = fitting_outputs(big_plan, tmp_path / "outputs")
    damage(big_plan, outputs)
    runs = tmp_path / "runs"
    err = _one_error(_import(big_plan, outputs, runs))
    assert says in err, err
    assert not runs.exists()  # nothing written: no run directory, no temp folder
    if case == "two models swapped":
        assert "each fit the other's members better than their own" in err and "model_0005.npz" in err
        assert "--force" in err
    if case == "two models at chance":
        assert "model_0004.npz are at chance accuracy" in err and "most frequent class gives" in err


def test_the_correct_outputs_pass_every_check(big_plan, tmp_path):
    """The folder every damage above starts from imports, and its results.json says the checks passed."""
    outputs = fitting_outputs(big_plan, tmp_path / "outputs")
    res = _import(big_plan, outputs, tmp_path / "runs")
    assert res.exit_code == 0, res.output
    (run,) = (tmp_path / "runs").iterdir()
    checks = json.loads((run / "results.json").read_text())["checks"]
    assert checks["passed"] and checks["forced"] == [] and checks["membership"]["threshold_z"] > 4
    assert checks["membership"]["experiments"]["sample-mislabeled"]["median_auc"] == 1.0


@pytest.mark.slow
def test_force_imports_a_failed_membership_check_and_the_leaderboard_shows_it(big_plan, tmp_path):
    outputs = fitting_outputs(big_plan, tmp_path / "outputs")
    _swap(outputs / "sample-mislabeled" / "model_0003.npz", outputs / "sample-mislabeled" / "model_0005.npz")
    runs = tmp_path / "runs"
    res = _import(big_plan, outputs, runs, "--force", "--name", "swapped")
    assert res.exit_code == 0, res.output
    assert "--force: the membership-consistency check failed" in res.output
    assert "warning: membership check failed (imported with --force): sample-mislabeled: the outputs of model 3 and " \
           "model 5 each fit the other's members" in " ".join(res.output.split())
    (run,) = runs.iterdir()
    r = json.loads((run / "results.json").read_text())
    assert r["external"]["forced_checks"] == ["membership"] and r["checks"]["forced"] == ["membership"]
    assert not r["checks"]["membership"]["passed"] and not r["checks"]["passed"]
    res, site, entry = _publish(run, tmp_path)
    assert "forced" in res.output, res.output
    assert ">forced</span>" in (site / "index.html").read_text()
    page = (entry / "index.html").read_text()
    assert "membership consistency failed, imported with --force" in page


@pytest.mark.slow
def test_probabilities_are_converted_only_when_asked_and_give_the_log_probabilities_numbers(big_plan, tmp_path):
    logs = fitting_outputs(big_plan, tmp_path / "logs")

    def log_softmax(f: Path) -> None:
        with np.load(f) as z:
            _rewrite(f, **{k: (a - np.log(np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True))
                               - a.max(-1, keepdims=True)).astype(np.float32)
                           for k, a in (("logits", z["logits"]), ("test_logits", z["test_logits"]))})
    _all(logs, log_softmax)
    probs = tmp_path / "probs"
    shutil.copytree(logs, probs)
    def exp(f: Path) -> None:
        with np.load(f) as z:
            _rewrite(f, logits=np.exp(z["logits"]), test_logits=np.exp(z["test_logits"]))
    _all(probs, exp)
    assert "pass --probabilities" in _one_error(_import(big_plan, probs, tmp_path / "r0"))
    err = _one_error(_import(big_plan, logs, tmp_path / "r0", "--probabilities"))
    assert "--probabilities, but its logits are not probabilities" in err
    res = _import(big_plan, probs, tmp_path / "r1", "--probabilities")
    assert res.exit_code == 0 and "--probabilities: every model's outputs were probabilities" in res.output
    assert _import(big_plan, logs, tmp_path / "r2").exit_code == 0
    (a,), (b,) = (tmp_path / "r1").iterdir(), (tmp_path / "r2").iterdir()
    ra, rb = (json.loads((d / "results.json").read_text()) for d in (a, b))
    assert ra["external"]["probabilities_converted"] is True and rb["external"]["probabilities_converted"] is False
    for lv in ("population", "sample"):
        assert ra[lv]["test_accuracy"] == rb[lv]["test_accuracy"]
        for x, y in zip(ra[lv]["attacks"], rb[lv]["attacks"]):
            assert x["auc"] == pytest.approx(y["auc"], abs=1e-4), (x["name"], x["variant"])


# --- issue 48, part 2 -------------------------------------------------------------------------------


def test_a_second_import_that_loses_the_race_returns_the_first_ones_run(big_plan, tmp_path, monkeypatch):
    """Two imports of the same outputs at once: the one that publishes second finds the run complete
    (the same run fingerprint) and returns it, exit 0, one line saying so, no temp folder left."""
    import harness.run.external as external

    outputs = synthetic_outputs(big_plan, tmp_path / "outputs")
    runs = tmp_path / "runs"
    assert _import(big_plan, outputs, runs).exit_code == 0
    (run,) = runs.iterdir()
    finished = tmp_path / "finished"
    run.rename(finished)  # the winner's run, published while the loser attacks (below)
    original = external.write_import

    def meanwhile(job, folder):
        original(job, folder)
        finished.rename(run)

    monkeypatch.setattr(external, "write_import", meanwhile)
    res = _import(big_plan, outputs, runs)
    assert res.exit_code == 0, res.output
    assert "was completed meanwhile by another import of these outputs" in " ".join(res.output.split())
    assert [p.name for p in runs.iterdir()] == [run.name]  # no temp folder, no second run


def test_a_killed_import_leaves_a_temp_folder_that_the_next_import_removes(big_plan, tmp_path):
    from harness.run.external import remove_stale_temps

    outputs = synthetic_outputs(big_plan, tmp_path / "outputs")
    runs = tmp_path / "runs"
    flag = tmp_path / "attacking"
    code = ("import sys, time, pathlib\n"
            "import harness.api as api\n"
            f"def hang(*a, **k):\n    pathlib.Path({str(flag)!r}).touch()\n    time.sleep(600)\n"
            "api._attack_phase = hang\n"
            f"api.import_outputs({str(big_plan)!r}, {str(outputs)!r}, overrides={{'run.out': {str(runs)!r}}})\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: flag.exists() or proc.poll() is not None, "the import to reach its attack phase")
        assert proc.poll() is None, proc.stderr.read().decode()
        (tmp,) = [p for p in runs.iterdir() if ".import-" in p.name]
        dest = runs / tmp.name.split(".import-")[0].lstrip(".")
        assert remove_stale_temps(dest) == [] and tmp.is_dir()  # a live import's folder is left alone
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert tmp.is_dir()  # kill -9: nothing cleaned up
    res = _import(big_plan, outputs, runs)
    assert res.exit_code == 0, res.output
    assert f"removed {tmp}, the temp folder of an import that was killed" in " ".join(res.output.split())
    assert [p.name for p in runs.iterdir()] == [dest.name]


def test_plan_warns_before_training_of_fprs_its_design_cannot_resolve(tmp_path):
    res = runner.invoke(app, ["plan", str(tmp_path / "p8"), "--models", "8"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "note: S = 8 models x 100 non-members each give N_neg = 800 non-member guesses" in text
    assert ("at 0.1% FPR every TPR is unresolved (it needs FPR x N_neg >= 3 expected false positives, "
            "N_neg >= 3000: --models 30)") in text
    assert "the level figures (leak, declared headline, test) are read at 0.5% FPR instead" in text


def test_plan_into_a_regular_file_is_refused_before_the_plan_is_built(tmp_path, monkeypatch):
    import harness.run.external as external

    def never(cfg):
        raise AssertionError("the plan was built")

    monkeypatch.setattr(external, "build_plan", never)
    f = tmp_path / "plan"
    f.write_text("a file")
    err = _one_error(runner.invoke(app, ["plan", str(f)]))
    assert "the plan folder" in err and "is a file" in err and f.read_text() == "a file"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    assert "holds no intact plan" in _one_error(runner.invoke(app, ["plan", str(tmp_path / "full")]))
