"""The audit bracket (docs/bounds.md, The audit bracket): the one-run f-DP bound, the GDP reading of a
ROC, their validation where the truth is known (a synthetic Gaussian mechanism, no training), the
bracket record, and ``harness audit-one-run``'s membership design (errors before training; a tiny
DP-SGD audit whose every lower bound stays below the accountant's epsilon)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from harness.bounds.bracket import build_bracket, claimed_record
from harness.bounds.fdp_one_run import (count_guesses, fdp_rejects, gdp_mu_lower, guess_sets, one_run_bounds,
                                        per_victim_bounds)
from harness.bounds.gdp import (blow_up, blow_up_inverse, gdp_delta, gdp_epsilon, gdp_lower_bound_roc,
                                gdp_mu_from_rates, tradeoff)
from harness.bounds.one_run import epsilon_lower, one_run_bound
from harness.cli import app

DELTA = 1e-5


def gaussian_runs(mu: float, m: int, runs: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``runs`` independent one-run audits of the mu-GDP mechanism: each canary's score is mu b + N(0, 1)
    with b its fair coin (exactly mu-GDP with respect to every canary, the other scores independent)."""
    rng = np.random.default_rng(seed)
    b = rng.random((runs, m)) < 0.5
    return mu * b + rng.standard_normal((runs, m)), b


def test_gdp_curve_and_its_epsilon():
    # the trade-off and the blow-up function are the two sides of one curve
    a = np.array([1e-4, 0.01, 0.3])
    assert np.allclose(blow_up(a, 1.5), 1 - tradeoff(a, 1.5))
    assert np.allclose(blow_up_inverse(blow_up(a, 1.5), 1.5), a)
    # mu = 1: delta(eps) of the Gaussian mechanism (docs/bounds.md: 4.37718 at delta 1e-5)
    eps = gdp_epsilon(1.0, DELTA)
    assert eps == pytest.approx(4.3771781, abs=1e-5)
    assert gdp_delta(1.0, eps) == pytest.approx(DELTA, rel=1e-6)
    assert gdp_epsilon(0.0, DELTA) == 0.0 and gdp_epsilon(0.01, 0.5) == 0.0
    # the (FPR, FNR) point of the mu-test at any threshold gives back mu
    t = 0.7
    fpr, fnr = 1 - 0.5 * math.erfc(-t / math.sqrt(2)), 0.5 * math.erfc(-(t - 1.2) / math.sqrt(2))
    assert gdp_mu_from_rates(fpr, fnr) == pytest.approx(1.2)
    with pytest.raises(ValueError):
        gdp_epsilon(1.0, 0.0)


def test_fdp_rejects_an_interval_of_mu_and_only_with_evidence():
    mus = np.linspace(0, 4, 81)
    for r, v in ((100, 100), (200, 180), (1000, 700), (60, 40)):
        rej = fdp_rejects(1000, [r], [v], mus, 0.05)[0]
        assert rej[0] and not rej[-1]
        first_accept = int(np.argmin(rej))
        assert not rej[first_accept:].any()  # [0, mu*) rejected, the rest not: the search's premise
    # chance-level guesses are no evidence at all; more correct guesses only raise the bound
    assert not fdp_rejects(1000, [100], [50], [0.0], 0.05)[0, 0]
    lo = gdp_mu_lower(1000, [200, 200, 200, 200], [120, 150, 180, 200], 0.05)
    assert lo[0] < lo[1] < lo[2] < lo[3]
    # a smaller level needs more evidence: the bound falls
    assert gdp_mu_lower(1000, [200], [180], 0.005)[0] < gdp_mu_lower(1000, [200], [180], 0.05)[0]


def test_the_fdp_bound_is_tighter_than_steinke_on_the_same_guesses():
    # the paper's point (Mahloujifar et al. 2025): the same counts read through the Gaussian
    # curve rule out a larger epsilon than Steinke et al.'s (eps, delta) analysis
    for r, v in ((100, 100), (200, 180), (1000, 700)):
        mu = gdp_mu_lower(1000, [r], [v], 0.05)[0]
        assert gdp_epsilon(mu, DELTA) > epsilon_lower(1000, r, v, 0.05, DELTA) > 0


def test_guess_sets_and_counts():
    sets = guess_sets(200)
    assert [g.label() for g in sets][:2] == ["top 2", "top 4"] and sets[-1].label() == "top 100 + bottom 100"
    scores = np.arange(10.0)
    member = np.array([0, 0, 1, 0, 0, 1, 0, 1, 1, 1], bool)
    from harness.bounds.fdp_one_run import GuessSet

    assert count_guesses(scores, member, [GuessSet("top", 3), GuessSet("both", 2)]) == [(3, 3), (4, 4)]
    assert count_guesses(scores, member, [GuessSet("both", 3)]) == [(6, 5)]


def test_steinke_in_the_pair_equals_the_existing_one_run_bound_on_top_k_guesses():
    s, b = gaussian_runs(2.0, 200, 8, seed=3)
    pair = one_run_bounds(s, b, delta=DELTA, sides=("top",))
    assert pair.epsilon_steinke == pytest.approx(one_run_bound(s, b, delta=DELTA).epsilon)
    assert pair.tests == 8 * 6 and pair.mu > 0


def test_every_lower_bound_covers_the_truth_of_a_gaussian_mechanism():
    """Known truth: 100 simulated runs of a mu = 2 Gaussian mechanism with 200 canaries. Every 95%
    bound (each run's own, at its own level) stays at or below the truth in at least 95% of them,
    while the uncorrected point estimate of the same reading does not (the check has power)."""
    mu, m, runs = 2.0, 200, 100
    eps_true = gdp_epsilon(mu, DELTA)
    s, b = gaussian_runs(mu, m, runs)
    mu_fdp, eps_steinke = per_victim_bounds(s, b, delta=DELTA)
    readings = [gdp_lower_bound_roc(s[i], b[i], delta=DELTA) for i in range(runs)]
    split = [gdp_lower_bound_roc(s[i], b[i], delta=DELTA, correction="split", seed=i) for i in range(runs)]
    allowed = int(0.05 * runs)
    assert (mu_fdp > mu).sum() <= allowed
    assert (eps_steinke > eps_true).sum() <= allowed
    assert sum(g.mu > mu for g in readings) <= allowed
    assert sum(g.mu > mu for g in split) <= allowed
    assert sum(g.epsilon > eps_true for g in readings) <= allowed
    # the bounds are not vacuous ...
    assert mu_fdp.mean() > 0.3 * mu and np.mean([g.mu for g in readings]) > 0.3 * mu
    # ... and a miscalibrated "bound" fails this very check: the best point estimate over thresholds
    assert sum(g.mu_point > mu for g in readings) > 3 * allowed


@pytest.mark.slow
def test_fdp_bound_at_1000_canaries_reaches_half_the_truth():
    """m = 1000 canaries of a mu = 2 Gaussian mechanism (40 runs): the f-DP bound's mean is at least
    45% of mu (measured: 50%, docs/bounds.md, benchmarks/bench_bracket.py) and its epsilon beats
    Steinke et al.'s on the same guesses in every run where both are positive."""
    mu, m = 2.0, 1000
    s, b = gaussian_runs(mu, m, 40, seed=1)
    mu_fdp, eps_steinke = per_victim_bounds(s, b, delta=DELTA)
    assert (mu_fdp <= mu).all()
    assert mu_fdp.mean() >= 0.45 * mu
    eps_fdp = np.array([gdp_epsilon(x, DELTA) for x in mu_fdp])
    assert (eps_fdp >= eps_steinke).all()


ATTACK = {"name": "x", "variant": "y", "level": "sample", "canary": "mislabeled", "victims": 1, "canaries": 400}


def _claimed_and_bounds() -> tuple[dict, dict, dict]:
    info = {"epsilon": 12.0, "accountant": "rdp", "delta": DELTA, "sample_rate": 1.0, "noise_multiplier": 1.0,
            "steps": 4}
    claimed = claimed_record(info, DELTA)
    s, b = gaussian_runs(1.0, 400, 1, seed=5)
    return claimed, one_run_bounds(s, b, delta=DELTA).to_json(), gdp_lower_bound_roc(s[0], b[0], delta=DELTA).to_json()


def test_bracket_record_ratio_divides_by_the_steinke_epsilon_alone():
    claimed, one, gdp = _claimed_and_bounds()
    assert claimed["epsilon_rdp"] == 12.0 and 0 < claimed["epsilon_pld"] <= 12.0
    assert claimed["tpr_curve"]["tpr"][-1] == pytest.approx(1.0)
    br = build_bracket(claimed=claimed, one_run=one, gdp=gdp, roc={"fpr": [0, 1], "tpr": [0, 1]}, attack=ATTACK)
    lo = {lb["key"]: lb for lb in br["lower"]}
    assert set(lo) == {"steinke", "fdp", "gdp"}
    # the kinds: one lower bound on the trainer's epsilon, two bounds on the Gaussian mu (the GDP one nominal)
    assert (lo["steinke"]["kind"], lo["fdp"]["kind"], lo["gdp"]["kind"]) == ("epsilon", "mu", "mu")
    assert [lo[k]["nominal"] for k in ("steinke", "fdp", "gdp")] == [False, False, True]
    assert lo["steinke"]["epsilon"] == one["epsilon_steinke"] > 0 and lo["steinke"]["mu"] is None
    assert lo["fdp"]["epsilon"] is None and lo["fdp"]["mu"] == one["mu"] > 0
    assert lo["fdp"]["epsilon_of_mu"] == one["epsilon_fdp"] and lo["gdp"]["epsilon_of_mu"] == gdp["epsilon"]
    assert all(lo[k]["ratio_pld"] is None and lo[k]["ratio_rdp"] is None for k in ("fdp", "gdp"))
    assert "nominal" in lo["gdp"]["name"] and "as independent trials, which they are not" in lo["gdp"]["valid"]
    assert "not a lower bound on the trainer's ε" in lo["fdp"]["valid"]
    assert br["epsilon_lower"] == {"key": "steinke", "epsilon": one["epsilon_steinke"]}
    assert "best_lower" not in br
    assert br["ratio_pld"] == pytest.approx(claimed["epsilon_pld"] / one["epsilon_steinke"])
    assert br["ratio_rdp"] == pytest.approx(12.0 / one["epsilon_steinke"])
    assert lo["steinke"]["ratio_pld"] == br["ratio_pld"]
    # the f-DP and GDP epsilons are larger than Steinke's here: the ratio still divides by Steinke's (the
    # old record took the largest of the three, 12 / 5 instead of 12 / 0.5)
    big = build_bracket(claimed=claimed, one_run={**one, "epsilon_steinke": 0.5, "epsilon_fdp": 3.0, "mu": 0.9},
                        gdp={**gdp, "epsilon": 5.0, "mu": 1.3}, roc={"fpr": [0, 1], "tpr": [0, 1]}, attack=ATTACK)
    assert big["ratio_rdp"] == pytest.approx(12.0 / 0.5) and big["epsilon_lower"]["epsilon"] == 0.5
    assert big["ratio_pld"] == pytest.approx(claimed["epsilon_pld"] / 0.5)
    # Steinke's at 0 with positive mu bounds: no epsilon lower bound, an infinite ratio
    none = build_bracket(claimed=claimed, one_run={**one, "epsilon_steinke": 0.0, "steinke_at": None},
                         gdp=gdp, roc={"fpr": [0, 1], "tpr": [0, 1]}, attack=ATTACK)
    assert none["ratio_pld"] == math.inf and none["ratio_rdp"] == math.inf
    assert claimed_record({"epsilon": 1.0}, DELTA) is None  # not a subsampled Gaussian's record


def test_bracket_record_matches_the_results_schema():
    import jsonschema

    from harness.audit.report import SCHEMA_PATH
    from harness.core.jsonio import encode_nonfinite

    claimed, one, gdp = _claimed_and_bounds()
    schema = json.loads(SCHEMA_PATH.read_text())
    validator = jsonschema.Draft202012Validator({"$ref": "#/$defs/bracket", "$defs": schema["$defs"]})
    for rec in (build_bracket(claimed=claimed, one_run=one, gdp=gdp, roc={"fpr": [0, 1], "tpr": [0, 1]}, attack=ATTACK),
                build_bracket(claimed=claimed, one_run={**one, "epsilon_steinke": 0.0, "steinke_at": None}, gdp=gdp,
                              roc={"fpr": [0, 1], "tpr": [0, 1]}, attack=ATTACK)):
        validator.validate(encode_nonfinite(rec))
        old = encode_nonfinite({**rec, "best_lower": rec["epsilon_lower"]})
        del old["epsilon_lower"]
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(old)


def _big_bracket() -> dict:
    """A bracket whose f-DP and GDP epsilons (3 and 5) are above Steinke et al.'s (0.5)."""
    claimed, one, gdp = _claimed_and_bounds()
    return build_bracket(claimed=claimed, one_run={**one, "epsilon_steinke": 0.5, "epsilon_fdp": 3.0, "mu": 0.9},
                         gdp={**gdp, "epsilon": 5.0, "mu": 1.3}, roc={"fpr": [0, 0.001, 0.01, 0.1, 1],
                                                                     "tpr": [0, 0.01, 0.05, 0.3, 1]}, attack=ATTACK)


def test_bracket_text_ratio_to_steinke_mu_ruled_out_and_nominal_gdp():
    from io import StringIO

    from rich.console import Console

    from harness.audit.bracket_text import bracket_rows, print_bracket, summary_line

    br = _big_bracket()
    rows = {r["bound"].split(" [")[0]: r for r in bracket_rows(br)}
    steinke = rows["one-run ε (Steinke et al.)"]
    fdp = next(r for name, r in rows.items() if name.startswith("one-run f-DP"))
    gdp = next(r for name, r in rows.items() if name.startswith("GDP reading"))
    assert steinke["epsilon"] == "0.5" and steinke["ratio_rdp"] == "24x"
    # the f-DP row: the mu it rules out, no epsilon and no ratio; its epsilon only as an annotation
    assert (fdp["epsilon"], fdp["mu"], fdp["ratio_pld"], fdp["ratio_rdp"]) == ("-", "0.9", "n/a", "n/a")
    assert "rules out μ-GDP" in fdp["side"] and "not a lower bound on the trainer's ε" in fdp["assumes"]
    assert fdp["assumes"].endswith("(that 0.9-GDP mechanism's ε at δ = 1e-5: 3)")
    assert gdp["confidence"] == "95% nominal" and "nominal" in gdp["side"] and gdp["ratio_pld"] == "n/a"
    assert "as independent trials, which they are not" in gdp["assumes"]
    line = summary_line(br)
    assert line.startswith("Claimed / ε lower bound: ε ") and "/ 0.5 (Steinke et al.'s one-run ε) = " in line
    assert "the accountant's ε 12 / 0.5 = 24x" in line
    assert "rules out μ-GDP for μ < 0.9 (95%)" in line and "rules out μ-GDP for μ < 1.3 (95% nominal)" in line
    assert "the GDP reading (nominal: its Clopper-Pearson limits treat the guesses as independent trials" in line
    out = StringIO()
    print_bracket(Console(file=out, width=400, color_system=None), br, "DP audit bracket: test")
    text = out.getvalue()
    for words in ("μ <", "conf.", "GDP reading (Nasr et al. 2023), nominal [3]", "95% nominal",
                  "[3] Nasr, Hayes, Steinke, Balle, Tramèr, Jagielski, Carlini, Terzis, USENIX Security 2023",
                  "(that 0.9-GDP mechanism's ε at δ = 1e-5: 3)", "Claimed / ε lower bound"):
        assert words in text, words
    # the "PLD ε / this" column: Steinke's row alone has a ratio, the two mu rows "n/a"
    table = {line.split()[-1] for line in text.splitlines() if line.strip().startswith(("lower", "rules out"))}
    assert table == {f"{br['claimed']['epsilon_pld'] / 0.5:.3g}x", "n/a"}
    assert "Choquette-Choo" not in text


def test_bracket_page_labels_the_gdp_reading_nominal_and_the_fdp_bound_by_mu():
    from leaderboard.bracket import bracket_section, lower_curves

    br = _big_bracket()
    html = bracket_section(br)
    assert "Claimed / ε lower bound" in html and "95% nominal" in html and "μ-GDP ruled out: μ &lt;" in html
    assert "GDP (nominal): rules out μ &lt; 1.3" in html and "f-DP (one run): rules out μ &lt; 0.9" in html
    assert "Steinke et al.: ε ≥ 0.5" in html and "which they are not" in html
    keys = [k for k, _, _ in lower_curves(br, np.logspace(-5, 0, 5))]
    assert keys == ["steinke", "fdp", "gdp"]


def test_a_bracket_written_before_the_change_is_shown_as_a_new_one():
    """An old results.json's bracket (``best_lower``, an ``epsilon`` on every bound, the ratio to the
    largest) is rebuilt from the bounds it holds: the page and the terminal show the new ratio."""
    from harness.audit.bracket_text import summary_line
    from harness.bounds.bracket import current_bracket
    from leaderboard.bracket import bracket_section

    new = _big_bracket()
    old = {**new, "best_lower": {"key": "gdp", "epsilon": 5.0}, "ratio_rdp": 12.0 / 5.0,
           "lower": [{k: v for k, v in lb.items() if k not in ("kind", "nominal", "epsilon_of_mu")}
                     | {"epsilon": e} for lb, e in zip(new["lower"], (0.5, 3.0, 5.0))]}
    del old["epsilon_lower"]
    assert current_bracket(old) == new and current_bracket(new) is new
    assert "the accountant's ε 12 / 0.5 = 24x" in summary_line(old)
    assert "95% nominal" in bracket_section(old)


@pytest.mark.parametrize("args,message", [
    (["--canaries", "5000"], "--canaries must be between 2 and the training pool size 1300"),
    (["--canaries", "0"], "--canaries must be between 2 and the training pool size 1300"),
    (["--canary", "near-duplicates"], "--canary must be one of mislabeled, blank, ood, uniform"),
    (["--shadows", "3"], "--shadows must be an even number"),
    (["--shadows", "2", "--attack", "lira"], "--attack lira needs --shadows >= 4"),
    (["--shadows", "4", "--attack", "loss"], "--attack loss reads the target alone"),
    (["--attack", "rmia"], "--attack rmia needs --shadows >= 2"),
    (["--tau", "0.6"], "--tau belong(s) to the label-flip design"),
    (["--design", "bogus"], "--design must be one of auto, label-flip, membership"),
    (["--gdp-correction", "none"], "--gdp-correction must be one of bonferroni, split"),
    (["--confidence", "0.3"], "--confidence must lie in (0.5, 1)"),
    (["--set", "audit.models=8"], "does not apply to audit-one-run's DP design"),
])
def test_membership_design_refuses_bad_input_before_training(tmp_path, args, message):
    res = CliRunner().invoke(app, ["audit-one-run", "dpsgd-medium", "--out", str(tmp_path), *args])
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())
    assert not any(tmp_path.rglob("model_*.npz"))


def test_label_flip_flags_are_refused_for_the_membership_design_and_back(tmp_path):
    res = CliRunner().invoke(app, ["audit-one-run", "undefended", "--shadows", "4", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "--shadows belong(s) to the membership design" in " ".join(res.output.split())


#: a DP-SGD target that trains in ~15 s and still memorizes mislabeled canaries (4 epochs at batch 32, so that
#: each canary is sampled ~4 times; at 2 epochs of batch 64 the loss threshold finds nothing and every bound is 0)
TINY = ["--epochs", "4", "--set", "defense_params.augmult=1", "--set", "defense_params.batch_size=32",
        "--set", "defense_params.lr=4", "--set", "train.width=64", "--set", "train.augment=false",
        "--set", "defense_params.physical_batch_size=256"]


@pytest.mark.slow
def test_tiny_dpsgd_one_run_audit_stays_below_the_accountant(tmp_path):
    """One DP-SGD target at noise 0.05 (a large epsilon, so that the lower bounds can be positive) with
    300 mislabeled canaries: the bracket is printed, every lower bound is at or below both the
    accountant's and the PLD epsilon, the best one positive, and report.html holds the bracket's figure."""
    res = CliRunner().invoke(app, ["audit-one-run", "dpsgd-medium", "--canaries", "300", "--out", str(tmp_path),
                                   "--set", "defense_params.noise_multiplier=0.05", *TINY])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    # the lower bounds' names wrap inside their table cells at 80 columns; their numbered notes do not split words
    for words in ("DP audit bracket", "accountant (rdp)", "PLD, same mechanism", "[1] Steinke, Nasr, Jagielski",
                  "[2] Mahloujifar, Melis, Chaudhuri", "[3] Nasr, Hayes, Steinke, Balle, Tramèr, Jagielski, Carlini, "
                  "Terzis, USENIX Security 2023", "95% nominal", "provable ≤", "Claimed / ε lower bound"):
        assert words in out, words
    (folder,) = tmp_path.glob("audit-one-run-dpsgd-medium-quick-*")
    r = json.loads((folder / "result.json").read_text())
    br = r["bracket"]
    rdp, pld = br["claimed"]["epsilon_rdp"], br["claimed"]["epsilon_pld"]
    assert 0 < pld <= rdp * 1.001
    for lb in br["lower"]:  # the epsilon lower bound and the epsilons of the mu-GDP ruled out
        assert 0.0 <= (lb["epsilon"] if lb["kind"] == "epsilon" else lb["epsilon_of_mu"]) <= pld, lb
    assert br["epsilon_lower"]["key"] == "steinke" and br["epsilon_lower"]["epsilon"] > 0  # not vacuous
    assert br["ratio_pld"] == pytest.approx(pld / br["epsilon_lower"]["epsilon"])
    assert len(br["one_run"]["sets"]) == 12 and br["one_run"]["num_victims"] == 1
    membership = json.loads((folder / "design.json").read_text())["membership"]
    assert len(membership) == 300 and 0.4 < np.mean(membership) < 0.6  # the target's independent fair coins
    html = (folder / "report.html").read_text()
    assert 'class="plot bracket"' in html and "Audit bracket" in html and "Claimed / ε lower bound" in html
    # the eight-column table scrolls in its own box: a phone-wide page stays as wide as the phone (the
    # leaderboard's DP entries were 687-754 px wide at 390 px without it: screenshot_leaderboard.py)
    assert '<div class="scroll"><table class="bracket">' in html
    again = CliRunner().invoke(app, ["audit-one-run", "dpsgd-medium", "--canaries", "300", "--out", str(tmp_path),
                                     "--set", "defense_params.noise_multiplier=0.05", *TINY])
    assert again.exit_code == 0 and "reused from model_000.npz" in again.output  # resumes, no retraining


@pytest.mark.slow
def test_cifar10_preset_one_run_audit_runs_end_to_end(cifar_subset, tmp_path):
    """The membership design at the cifar10 preset (the CIFAR-10 subset, cnn-gn DP-SGD), cut to one
    epoch without augmentation multiplicity: blank canaries, the bracket saved with the claim."""
    res = CliRunner().invoke(app, ["audit-one-run", "dpsgd-medium", "--preset", "cifar10", "--data-dir",
                                   str(cifar_subset), "--canaries", "200", "--canary", "blank", "--out", str(tmp_path),
                                   "--epochs", "1", "--set", "defense_params.augmult=1"])
    assert res.exit_code == 0, res.output
    (folder,) = tmp_path.glob("audit-one-run-dpsgd-medium-cifar10-*")
    r = json.loads((folder / "result.json").read_text())
    assert r["dataset"] == "cifar10" and r["spec"]["canary"] == "blank"
    assert r["bracket"]["claimed"]["epsilon_rdp"] > 0
    assert all((lb["epsilon"] if lb["kind"] == "epsilon" else lb["epsilon_of_mu"]) <= r["bracket"]["claimed"]["epsilon_pld"]
               for lb in r["bracket"]["lower"])
