"""The checks of a run's saved outputs (harness.core.checks, issue 46), the machine record and the
verdict of ``harness compare`` (issue 46, part 2).

- the rank test equals scipy's Mann-Whitney U, ties included;
- the membership-consistency check stays quiet where the masks are right (no fit, a weak fit, fits
  that differ between models: simulated, false alarms counted) and names a swapped pair and a model
  trained on another set;
- constant and identical outputs, chance accuracy, probability rows;
- every run's results.json records the checks and the machines; a plugin whose models answer zeros
  fails the outputs and utility checks, and no leaderboard takes it;
- ``harness compare`` tells the same run on another machine (overlapping CIs) from a real difference.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import TINY_ARGS
from harness.core.checks import (LevelOutputs, at_chance, chance_accuracy, degenerate_outputs, membership_check,
                                  membership_stats, probability_rows, rank_sums, summary, threshold, utility_check)
from harness.cli import app

runner = CliRunner()


def _design(rng: np.random.Generator, s: int, c: int) -> np.ndarray:
    """Each sample a member of exactly half of the models (the harness's balanced design)."""
    m = np.zeros((s, c), bool)
    for j in range(c):
        m[rng.permutation(s)[: s // 2], j] = True
    return m


def _scores(rng: np.random.Generator, m: np.ndarray, shift: np.ndarray | float) -> np.ndarray:
    """Per-sample difficulty, per-model noise, and ``shift`` for each model's members."""
    s, c = m.shape
    return rng.normal(size=(1, c)) * 3 + rng.normal(size=(s, c)) + np.broadcast_to(shift, (s,))[:, None] * m


@pytest.mark.parametrize("ties", [True, False])
def test_rank_sums_is_scipys_mann_whitney(ties):
    """With ties (the tie-group path) and without (the path that counts ranks directly)."""
    from scipy.stats import mannwhitneyu, norm

    rng = np.random.default_rng(0)
    v = rng.normal(size=150)
    v = np.round(v, 1) if ties else v  # many ties, or none
    first = rng.random((6, 150)) < 0.3
    second = ~first & (rng.random((6, 150)) < 0.5)
    u, z = rank_sums(v, first, second)
    for r in range(6):
        want = mannwhitneyu(v[first[r]], v[second[r]], alternative="greater", method="asymptotic",
                            use_continuity=False)
        assert u[r] == want.statistic and z[r] == pytest.approx(norm.isf(want.pvalue), abs=1e-9)


@pytest.mark.parametrize("scenario", ["no fit", "weak fit", "unequal fits"])
def test_the_membership_check_is_quiet_where_the_masks_are_right(scenario):
    """200 simulated runs of 16 models, 120 audit samples, 2 experiments: no alarm (the family-wise
    rate is 0.001, so a rate far above it would show as alarms here)."""
    rng = np.random.default_rng({"no fit": 1, "weak fit": 2, "unequal fits": 3}[scenario])
    alarms = 0
    for _ in range(200):
        stats = []
        for e in range(2):
            m = _design(rng, 16, 120)
            shift = {"no fit": 0.0, "weak fit": 0.2, "unequal fits": rng.uniform(0, 0.5, 16)}[scenario]
            stats.append(membership_stats(f"e{e}", _scores(rng, m, shift), m))
        alarms += not membership_check(stats).passed
    assert alarms == 0


def test_models_that_fit_their_members_unequally_are_not_named_by_the_own_test():
    """Fits spread evenly from none to strong (as DP-SGD's or HAMP's models may differ): the weakest
    model's AUC is far below the median by sampling error, but not shown below half the median's fit."""
    rng = np.random.default_rng(6)
    m = _design(rng, 32, 200)
    st = membership_stats("sample-x", _scores(rng, m, np.linspace(0, 2, 32)), m)
    t = threshold(32 * 32)
    assert membership_check([st]).passed and st.own_z.max() < t
    n_in = m.sum(1)
    sampling_only = (np.median(st.own_auc) - st.own_auc) / np.sqrt(201 / (12 * n_in * (200 - n_in)) * (1 + np.pi / 62))
    assert sampling_only.max() > t  # a rule that compares each model with the median names the weakest models


def test_an_honest_outlier_that_fits_its_members_is_not_named_a_model_that_fits_nothing_is():
    """Honest fits have heavy tails (an undefended scattering head of 64 read AUC 0.85 where the others
    read 0.95-1.00, and the robust-spread rule this replaced named it): one model of 64 whose outputs
    stray far more from the others' (noise x 4) fits its members less cleanly than any other, by far,
    yet fits them; it is not named. The same model with its membership row shuffled is."""
    rng = np.random.default_rng(7)
    s, c = 64, 500
    m = _design(rng, s, c)
    noise = np.ones(s)
    noise[9] = 4.0
    scores = rng.normal(size=(1, c)) * 3 + rng.normal(size=(s, c)) * noise[:, None] + 3.0 * m
    st = membership_stats("population", scores, m)
    auc, med = st.own_auc, np.median(st.own_auc)
    assert 0.65 < auc[9] < med - 0.2 and np.sort(auc)[1] > med - 0.02  # an outlier by any robust spread
    n_in = m.sum(1)
    v = (c + 1) / (12 * n_in * (c - n_in))
    tau2 = max((1.4826 * np.median(np.abs(auc - med))) ** 2 - np.median(v), 0.0)
    assert (med - auc[9]) / np.sqrt(v[9] * (1 + np.pi / (2 * (s - 1))) + tau2) > threshold(s * s)  # the old rule
    assert membership_check([st]).passed
    other = m.copy()
    other[9] = rng.permutation(other[9])
    found = membership_check([membership_stats("population", scores, other)]).findings
    assert len(found) == 1 and "model 9 fit its members far less" in found[0] and "half the median's fit" in found[0]


def test_the_membership_check_names_a_swapped_pair_and_a_model_trained_on_another_set():
    """240 samples: the own test names a model that fits nothing where the median model's fit (AUC - 1/2)
    exceeds twice its threshold in standard errors (0.33 here; the median model reads 0.44)."""
    rng = np.random.default_rng(4)
    m = _design(rng, 16, 240)
    scores = _scores(rng, m, 2.0)  # models that fit their members
    assert membership_check([membership_stats("sample-x", scores, m)]).passed
    swapped = scores.copy()
    swapped[[3, 5]] = swapped[[5, 3]]
    found = membership_check([membership_stats("sample-x", swapped, m)]).findings
    assert len(found) == 1 and "the outputs of model 3 and model 5 each fit the other's members" in found[0]
    other = m.copy()
    other[7] = rng.permutation(other[7])  # model 7's outputs fit a set other than its design's
    found = membership_check([membership_stats("sample-x", scores, other)],
                             names={"sample-x": [f"f{i}.npz" for i in range(16)]}).findings
    assert len(found) == 1 and "the outputs of f7.npz fit its members far less than the other models" in found[0]
    assert threshold(256) == pytest.approx(4.47, abs=0.01)  # z > Phi^-1(1 - 0.001 / 256)


def test_constant_identical_chance_and_probability_outputs():
    rng = np.random.default_rng(5)
    outs = [rng.normal(size=(20, 3, 10)).astype(np.float32) for _ in range(4)]
    assert degenerate_outputs({"population": LevelOutputs.of(outs)}).passed
    outs[1] = np.zeros_like(outs[1])
    outs[3] = outs[2].copy()
    found = degenerate_outputs({"population": LevelOutputs.of(outs)}).findings
    assert found == ["population: model 1 answers every query image and view with the same output (all zeros): not "
                     "a trained model's outputs",
                     "population: model 2, model 3 have identical outputs (2 of 4 models): each model must be trained "
                     "on its own training set"]
    labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, (20, 3))] * 10  # served labels: two models may agree
    assert degenerate_outputs({"population": LevelOutputs.of([labels, labels.copy()])}).passed
    y = np.r_[np.zeros(60, int), np.arange(440) % 10]  # class 0: 104 of 500
    assert chance_accuracy(y) == pytest.approx(0.208)
    assert at_chance(0.21, 500, 0.208) and at_chance(0.23, 500, 0.208) and not at_chance(0.3, 500, 0.208)
    found = utility_check({"population": [0.9, 0.2, 0.95]}, y).findings
    assert len(found) == 1 and "model 1 is at chance accuracy (20.0% on 500 test images" in found[0]
    z = rng.normal(size=(50, 9, 10))
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    assert probability_rows(p.astype(np.float32)) and probability_rows(p.astype(np.float16))
    assert not probability_rows(z.astype(np.float32)) and not probability_rows(np.log(p).astype(np.float32))
    assert not probability_rows(np.eye(10, dtype=np.float32)[rng.integers(0, 10, 50)])  # served labels


def test_the_summary_line_names_the_largest_z_a_zero_included_and_each_check():
    mem = {"passed": True, "threshold_z": 4.9, "experiments": {"population": {"max_pair_z": -3.0, "max_own_z": 0.0},
                                                               "sample-ood": {"max_pair_z": None, "max_own_z": -0.5}}}
    line = summary({"membership": mem, "outputs": {"passed": True}, "utility": {"passed": False, "chance": 0.121}})
    assert line == ("membership consistency passed (largest z 0.0, threshold 4.9); outputs not constant, not identical "
                    "across models; accuracy AT chance (12.1%)")
    forced = summary({"membership": {**mem, "passed": False}, "forced": ["membership"]})
    assert forced == "membership consistency failed, imported with --force (largest z 0.0, threshold 4.9)"


def test_the_cpuinfo_of_a_linux_machine_names_its_model_and_vector_extensions():
    from harness.core.machine import _cpuinfo, describe, machine_record, numeric_identity

    text = ("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n"
            "flags\t\t: fpu sse4_2 avx fma avx2 bmi2 avx512f\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n")
    assert _cpuinfo(text) == ("AMD EPYC 7B13", ["sse4_2", "avx", "avx2", "fma", "avx512f"])
    rec = machine_record(3)
    assert rec["threads"] == 3 and rec["cpu"] and rec["numpy"] == np.__version__
    assert describe(rec).startswith(rec["cpu"]) and "3 threads" in describe(rec)
    assert numeric_identity(rec) != numeric_identity({**rec, "vector_extensions": ["avx2", "avx512f"]})
    assert numeric_identity(rec) == numeric_identity({**rec, "python": "3.0", "os": "other"})


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    res = runner.invoke(app, ["evaluate", "undefended", "--out", str(out), *TINY_ARGS[:-2], "--level", "both"])
    assert res.exit_code == 0, res.output
    (run,) = out.iterdir()
    return run


@pytest.mark.slow
def test_every_run_records_its_checks_and_machines_and_compare_tells_machine_from_difference(tiny_run):
    from harness.api import load_run
    from harness.audit.compare import compare_results
    from harness.audit.results import Results

    r = json.loads((tiny_run / "results.json").read_text())
    assert r["checks"]["passed"] and r["checks"]["forced"] == []
    assert set(r["checks"]["membership"]["experiments"]) == {"population", "sample-mislabeled"}
    assert r["checks"]["utility"]["test_size"] == 497 and r["checks"]["utility"]["at_chance"]["population"] == []
    (trained,) = r["machine"]["models"]  # one machine trained all 12 models
    assert trained["models"] == 12 and trained["cpu"] == r["machine"]["attack_phase"]["cpu"]
    assert "Machine: 12 models trained on" in runner.invoke(app, ["report", str(tiny_run)]).output.replace("\n", " ")
    a = load_run(tiny_run)
    assert compare_results(a, a, fpr=0.0).verdict.startswith("Same code, config, data and machine")
    other = copy.deepcopy(a.data)  # the same run on a CPU with AVX-512: its numbers a little off, CIs overlapping
    other["machine"]["models"][0]["vector_extensions"] = ["avx2", "avx512f"]
    other["machine"]["models"][0]["torch_cpu_capability"] = "AVX512"
    declared = other["sample"]["figure"]["declared"]  # the level figure the verdict compares (one variant: a CI)
    declared["tpr"] = declared["tpr"] * 0.99
    c = compare_results(a, Results(tiny_run, other), fpr=0.0)
    assert c.verdict.startswith("Same code, config and data, another machine") and "no real difference" in c.verdict
    assert "avx512f" in c.verdict
    declared["tpr"], declared["ci"] = 2.5, [2.0, 3.0]  # disjoint from the first run's
    c = compare_results(a, Results(tiny_run, other), fpr=0.0)
    assert "a real difference: the 95% CIs of the sample declared at 0% FPR are disjoint" in c.verdict
    res = runner.invoke(app, ["compare", str(tiny_run), str(tiny_run)])
    assert "Verdict: Same code, config, data and machine" in res.output.replace("\n", " ")


ZEROS = """
from defenses.base import Defense, ServedModel
import numpy as np


class Zeros(ServedModel):
    def __init__(self, k):
        self.k = k

    def query(self, x):
        return np.zeros((len(x), self.k), np.float32)


class Silent(Defense):
    name, description = "silent", "answers nothing"
    adaptive_attacks = ("lira",)

    def fit(self, train, ctx):
        return Zeros(train.num_classes)
"""


@pytest.mark.slow
def test_a_defense_whose_models_answer_zeros_fails_its_checks_and_no_leaderboard_takes_it(tmp_path):
    """The all-zero-logits entry of issue 46, ranked #1 at a claimed 97.2%, as a plugin the harness trains."""
    src = tmp_path / "silent.py"
    src.write_text(ZEROS)
    out = tmp_path / "runs"
    res = runner.invoke(app, ["evaluate", f"{src}:Silent", "--out", str(out), *TINY_ARGS[:-2], "--level", "both"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "warning: outputs check failed: population: model 0, model 1, model 2, model 3, model 4, model 5 answer " \
           "every query image and view with the same output (all zeros)" in text
    (run,) = out.iterdir()
    r = json.loads((run / "results.json").read_text())
    assert not r["checks"]["passed"] and not r["checks"]["outputs"]["passed"] and not r["checks"]["utility"]["passed"]
    assert r["checks"]["utility"]["at_chance"]["population"] == [0, 1, 2, 3, 4, 5]
    bundle = tmp_path / "entry.tar.gz"
    assert runner.invoke(app, ["submit", str(run), "-o", str(bundle)]).exit_code == 0
    res = runner.invoke(app, ["leaderboard", "add", str(bundle), "--site", str(tmp_path / "site"), "--trust-plugin"])
    assert res.exit_code == 2 and "refused: its run failed the checks of its outputs: outputs check: population: " \
        "model 0" in " ".join(res.output.split()), res.output
    assert not (tmp_path / "site" / "entries").exists()
    res = runner.invoke(app, ["leaderboard", "build", str(out), "--out", str(tmp_path / "site2")])
    assert res.exit_code == 2 and "skipped:" in res.output and "failed the checks of its outputs" in res.output


def test_trainers_check_size_power_and_ties():
    """One trainer: no finding on normal or heavy-tailed values at S = 8, 16, 64 (300 runs each, the
    check's level 1%); two trainers whose answers differ by a few spreads: named; values that tie (a
    deterministic trainer's) carry no evidence either way."""
    from harness.core.checks import trainers_check, two_groups_p

    rng = np.random.default_rng(0)
    flagged = 0
    for s in (8, 16, 64):
        for _ in range(300):
            flagged += not trainers_check({"e": {"scale": np.exp(rng.standard_t(3, s) * 0.05), "loss": rng.normal(1, 0.1, s)}}).passed
    assert flagged <= 9  # 900 runs at 1% would average 9; the Monte Carlo p-values are exact for the normal ones
    two = np.r_[rng.normal(1.0, 0.02, 8), rng.normal(1.3, 0.02, 8)]
    res = trainers_check({"sample": {"loss": two}}, {"sample": [f"m{i}" for i in range(16)]})
    assert not res.passed and "m8, m9, m10, m11 and 4 more" in res.findings[0] and "two groups" in res.findings[0]
    assert two_groups_p(np.r_[np.ones(8), 2 * np.ones(8)])[0] < 1e-3  # apart
    assert two_groups_p(np.ones(16))[0] == 1.0  # all equal: no spread, no evidence
