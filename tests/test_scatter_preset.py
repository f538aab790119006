"""The ``cifar10-scatter`` preset (issue 55): real CIFAR-10 images, fixed scattering features, a head per
model. Its refusals come before anything is written; a toy-scale run of it trains, attacks and finds
its mislabeled canaries."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from harness.cli import app

runner = CliRunner()


@pytest.mark.parametrize("defense, says", [("pate-fm", "FixMatch"), ("pate-fm-high", "FixMatch")])
def test_a_defense_that_does_not_apply_is_refused_in_one_line_before_anything_is_written(tmp_path, defense, says):
    res = runner.invoke(app, ["evaluate", defense, "--preset", "cifar10-scatter", "--out", str(tmp_path / "runs")])
    assert res.exit_code != 0
    assert f"{defense} does not apply to the cifar10-scatter preset" in res.output and says in res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "runs").exists()


def test_harness_list_names_what_does_not_apply_to_each_preset():
    res = runner.invoke(app, ["list"])
    assert res.exit_code == 0
    line = next(ln for ln in res.output.splitlines() if ln.startswith("Not in cifar10-scatter:"))
    assert "pate-fm (" in line
    for name in ("dfkd (", "ssl"):  # DFKD and SSL run in feature space there (issue 66)
        assert name not in line
    assert "Not in quick" not in res.output  # every defense runs on digits


def test_augmenting_a_scatter_head_is_refused(tmp_path):
    res = runner.invoke(app, ["evaluate", "undefended", "--preset", "cifar10-scatter", "--set", "train.augment=true",
                              "--out", str(tmp_path / "runs")])
    assert res.exit_code != 0 and "trains without augmentation" in res.output and "Traceback" not in res.output


def _small_cifar(src: Path, dst: Path, per_batch: int, test: int) -> Path:
    """A CIFAR-10 folder in the official format holding the first images of the subset's batches."""
    folder = dst / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name, n in [(f"data_batch_{i}", per_batch) for i in range(1, 6)] + [("test_batch", test)]:
        with open(src / "cifar-10-batches-py" / name, "rb") as f:
            d = pickle.load(f, encoding="latin1")
        with open(folder / name, "wb") as f:
            pickle.dump({"data": d["data"][:n], "labels": list(d["labels"][:n])}, f)
    return dst


@pytest.mark.slow
def test_a_toy_run_of_the_preset_fits_and_finds_its_mislabeled_canaries(cifar_subset, tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_FEATURE_CACHE", str(tmp_path / "features"))
    data = _small_cifar(cifar_subset, tmp_path / "cifar", per_batch=80, test=120)
    res = runner.invoke(app, ["evaluate", "undefended", "--preset", "cifar10-scatter", "--data-dir", str(data),
                              "--models", "6", "--audit-size", "40", "--set", "audit.population_samples=40",
                              "--set", "data.validation_size=40", "--level", "sample", "--set",
                              "attack.bootstrap=20", "--workers", "1", "--out", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    assert "Fixed features of" in res.output  # computed before training, once, in the run's process
    (run_dir,) = (tmp_path / "runs").iterdir()
    results = json.loads((run_dir / "results.json").read_text())
    level = results["sample"]
    assert level["test_accuracy"]["mean"] > 0.2  # ten classes: chance is 0.1
    lira = next(r for r in level["attacks"] if r["name"] == "lira" and r["primary"])
    assert lira["auc"] > 0.8  # the head memorizes its mislabeled members
    assert any((tmp_path / "features").rglob("*.values.npy"))  # the features were cached on disk


@pytest.mark.slow
def test_tune_dpsgd_on_the_preset_meets_its_target_on_validation_and_on_test(cifar_subset, tmp_path, monkeypatch):
    """Issue 64's done-when at toy scale: `harness tune dpsgd --preset cifar10-scatter --min-accuracy A`
    picks the noisiest setting whose validation accuracy meets A, and its evaluation (`--from-tune`, the
    tune's models reused) meets A on the test images within two of its SEs; the tune never reads them."""
    monkeypatch.setenv("HARNESS_FEATURE_CACHE", str(tmp_path / "features"))
    data = _small_cifar(cifar_subset, tmp_path / "cifar", per_batch=160, test=300)
    out = tmp_path / "tune"
    common = ["--set", "audit.size=40", "--set", "audit.population_samples=40", "--set", "data.validation_size=200",
              "--set", "audit.canary=mislabeled", "--set", "attack.bootstrap=20", "--workers", "1"]
    res = runner.invoke(app, ["tune", "dpsgd", "--preset", "cifar10-scatter", "--data-dir", str(data), "--models", "6",
                              "--min-accuracy", "0.3", "--grid", "noise_multiplier=0.2,2,20", "--out", str(out),
                              *common])
    assert res.exit_code == 0, res.output
    tune = json.loads((out / "tune.json").read_text())
    by = {s["params"]["defense_params.noise_multiplier"]: s["validation_accuracy"]["mean"] for s in tune["settings"]}
    chosen = tune["choice"]["params"]["defense_params.noise_multiplier"]
    assert by[chosen] >= 0.3 and all(by[v] < 0.3 for v in by if v > chosen), by
    assert by[0.2] > by[20] + 0.1  # the noise costs accuracy
    res = runner.invoke(app, ["evaluate", "--from-tune", str(out / "tune.json"), "--level", "sample"])
    assert res.exit_code == 0, res.output
    assert "Resuming: " in res.output  # the tune's models of that setting
    results = json.loads(Path(tune["choice"]["run_dir"], "results.json").read_text())
    test = results["sample"]["test_accuracy"]
    assert test["mean"] >= 0.3 - 2 * test["se"]


def test_the_dpsgd_frontier_recipe_and_the_levels_by_utility_share_one_recipe():
    """`dpsgd` (the frontier, any noise) and the three levels defined by utility train one recipe; the
    levels differ only in their tuned noise (harness/presets/cifar10-scatter.yaml)."""
    from harness.defense_config import build_config

    recipe = {"max_grad_norm": 0.1, "batch_size": 256, "epochs": 30, "lr": 4.0, "augmult": 1, "ema_decay": 0.999}
    frontier = build_config("cifar10-scatter", {"defense": "dpsgd"}).defense_params
    assert {k: frontier[k] for k in recipe} == recipe and "noise_multiplier" not in frontier
    noises = {}
    for level in ("dpsgd-medium", "dpsgd-high", "dpsgd-veryhigh"):
        p = build_config("cifar10-scatter", {"defense": level}).defense_params
        assert {k: p[k] for k in recipe} == recipe
        noises[level] = p["noise_multiplier"]
    assert noises["dpsgd-medium"] > noises["dpsgd-high"] > noises["dpsgd-veryhigh"]  # less utility: more noise


@pytest.mark.slow
def test_dfkd_in_feature_space_distills_a_student_that_never_sees_a_real_feature(cifar_subset, tmp_path, monkeypatch):
    """DFKD on the preset (issue 66): the teacher is a head with BatchNorm over the scattering channels;
    the synthesized features bring its BatchNorm loss down and the student, trained on them alone,
    agrees with the teacher on them and beats chance on real test images; the record says how far the
    synthetic features sit from real ones; the generator's parameters are refused there."""
    import torch

    from defenses.base import FitContext, LabeledImages
    from defenses.dfkd import DFKD
    from harness.core.data import load_cifar10
    from harness.defense_config import build_config

    monkeypatch.setenv("HARNESS_FEATURE_CACHE", str(tmp_path / "features"))
    data = load_cifar10(_small_cifar(cifar_subset, tmp_path / "cifar", per_batch=120, test=200), download=False)
    cfg = build_config("cifar10-scatter", {"defense": "dfkd", "data.path": str(tmp_path / "cifar")})
    train = LabeledImages(data.x_train, data.y_train, 10, data.mean, data.std, data.augment)
    torch.set_num_threads(1)
    fit = DFKD(**{**cfg.defense_params, "rounds": 6}).fit_all(train, FitContext(seed=2, device="cpu", train=cfg.train))
    info = fit.student.info()
    assert info["space"] == "features" and info["bank_size"] == 6 * 128 and fit.bank.shape[1:] == (243, 8, 8)
    assert fit.synth_losses[0] < 2.0 and info["student_teacher_agreement_on_bank"] > 0.9
    assert 0.5 < info["synthetic_to_real_distance"] < 5.0
    acc = float((fit.student.query(data.x_test).argmax(1) == data.y_test).mean())
    assert acc > 0.2  # chance: 0.1
    res = runner.invoke(app, ["evaluate", "dfkd", "--preset", "cifar10-scatter", "--data-dir", str(tmp_path / "cifar"),
                              "--set", "defense_params.generator_lr=0.01", "--out", str(tmp_path / "runs")])
    assert res.exit_code == 2 and "generator_lr is not read here" in res.output
