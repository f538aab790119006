import json

import numpy as np
from typer.testing import CliRunner

from defenses.base import FitContext, LabeledImages
from defenses.subsample import Subsample
from harness.audit.label_flip import two_wrong_labels
from harness.cli import app
from harness.defense_config import build_config
from harness.core.data import load_digits


def test_two_wrong_labels_are_distinct_and_wrong():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, 5000)
    p = two_wrong_labels(y, 10, rng)
    assert (p[:, 0] != y).all() and (p[:, 1] != y).all() and (p[:, 0] != p[:, 1]).all()
    assert set(np.unique(p)) == set(range(10))


def test_subsample_trains_the_inner_defense_on_a_fraction_and_takes_its_preset_section():
    cfg = build_config("quick", {"defense": "subsample", "defense_params.inner": "relaxloss",
                                 "defense_params.rate": 0.3, "train.epochs": 2})
    assert cfg.train.batch_size == 128  # relaxloss's section of the quick preset
    d = load_digits(497, 0)
    train = LabeledImages(d.x_train, d.y_train, 10, d.mean, d.std, d.augment)
    served = Subsample(**cfg.defense_params).fit(train, FitContext(seed=3, device="cpu", train=cfg.train))
    info = served.info()
    assert info["subsample_total"] == 1300 and abs(info["subsample_kept"] / 1300 - 0.3) < 0.05
    assert served.query(d.x_test[:5]).shape == (5, 10)


def test_audit_one_run_finds_memorization_in_an_undefended_model(tmp_path):
    res = CliRunner().invoke(app, ["audit-one-run", "undefended", "--canaries", "60", "--epochs", "30",
                                   "--tau", "0.5", "--tau", "0.9", "--out", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    cp, w = out["clopper-pearson"], out["weighted"]
    assert out["game"] == "weighted" and [g["tau"] for g in cp["rows"]] == [0.5, 0.9] == w["taus"]
    # an undefended MLP memorizes its flipped labels: the auditor guesses nearly all of them right
    assert cp["rows"][0]["cgr"] > 0.9 and w["rows"][0]["acgr"] > 0.9 and out["best_epsilon_lo"] > 1.5
    # the weighted game plays all C - 2 = 8 alternatives of a canary: far more guesses than canaries
    assert w["rows"][0]["num_guesses"] > 4 * cp["rows"][0]["num_guesses"]
    assert out["best_epsilon_lo"] == w["best_epsilon_lo"] >= w["best_epsilon_lo_bonferroni"]
    assert list(tmp_path.glob("audit-one-run-undefended-quick-*.json"))
