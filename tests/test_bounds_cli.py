"""The ``bound`` typer app: JSON keys and values, rich tables, one-line errors with exit code 2."""

import json
import math
import time

import pytest
from typer.testing import CliRunner

from harness.cli.bound import bound_app

runner = CliRunner()


def invoke_json(args: list[str]) -> dict:
    res = runner.invoke(bound_app, args + ["--json"])
    assert res.exit_code == 0, res.output
    lines = [line for line in res.stdout.splitlines() if line.strip()]
    assert len(lines) == 1  # exactly one JSON object
    return json.loads(lines[0])


def test_thudi_json():
    out = invoke_json(["thudi", "--epsilon", "2", "--delta", "0", "--p1", "0.01"])
    assert set(out) >= {"pos_acc_upper", "pos_acc_lower", "neg_acc_upper", "neg_acc_lower", "advantage_bounds"}
    assert set(out["advantage_bounds"]) == {"yeom", "erlingsson", "humphries", "sablayrolles", "mahloujifar"}
    assert out["pos_acc_upper"] == pytest.approx(0.0694532, rel=1e-5)
    assert out["pos_acc_lower"] <= out["pos_acc_upper"] and out["neg_acc_lower"] <= out["neg_acc_upper"]
    adv = out["advantage_bounds"]
    assert adv["yeom"] == 1.0  # e^2 - 1 clipped
    assert adv["humphries"] == pytest.approx(math.tanh(1.0), rel=1e-9)
    assert adv["mahloujifar"] == pytest.approx(math.tanh(1.0), rel=1e-9)  # 2 sigmoid(2) - 1
    assert all(0.0 <= v <= 1.0 for v in adv.values())


def test_thudi_with_delta_and_tpr():
    out = invoke_json(["thudi", "--epsilon", "3", "--delta", "1e-5", "--p1", "0.5", "--tpr", "0.01"])
    assert out["pos_acc_upper"] == pytest.approx(0.9526193, rel=1e-5)
    out = invoke_json(["thudi", "--epsilon", "3", "--delta", "1e-5", "--p1", "0.5"])
    assert out["pos_acc_upper"] == 1.0  # vacuous without a TPR floor


def test_thudi_table():
    res = runner.invoke(bound_app, ["thudi", "--epsilon", "1", "--p1", "0.3"])
    assert res.exit_code == 0
    assert "Thudi positive accuracy" in res.stdout and "Humphries" in res.stdout and "Pr[x in D" in res.stdout


def test_sgm_json_values_and_default_fprs():
    out = invoke_json(["sgm", "--q", "1", "--noise", "1", "--steps", "1"])
    assert set(out) >= {"advantage", "advantage_pinsker", "epsilon", "tpr_at_fpr"}
    assert out["advantage"] == pytest.approx(0.3829249, rel=1e-5)
    assert out["advantage_pinsker"] == pytest.approx(0.5, rel=1e-9)
    assert out["epsilon"] == pytest.approx(4.37718, rel=1e-5)
    assert set(out["tpr_at_fpr"]) == {"0.001", "0.01"}
    assert out["tpr_at_fpr"]["0.01"] == pytest.approx(0.0923622, rel=1e-5)
    assert out["tpr_at_fpr"]["0.001"] == pytest.approx(0.0182985, rel=1e-5)


@pytest.mark.slow
def test_sgm_custom_fprs_and_table():
    out = invoke_json(["sgm", "--q", "1", "--noise", "1", "--steps", "1", "--fpr", "0.1", "--fpr", "1e-3"])
    assert set(out["tpr_at_fpr"]) == {"0.1", "0.001"}
    assert out["tpr_at_fpr"]["0.1"] == pytest.approx(0.3891437, rel=1e-5)
    res = runner.invoke(bound_app, ["sgm", "--q", "0.5", "--noise", "1", "--steps", "1"])
    assert res.exit_code == 0 and "optimal advantage" in res.stdout and "0.1914625" in res.stdout


@pytest.mark.slow
def test_sgm_is_fast_enough():
    # CPU time of this process, not wall time: other processes on a loaded machine do not count
    # (about 1.5 s here; a quadratic-time regression would take minutes)
    t0 = time.process_time()
    out = invoke_json(["sgm", "--q", "0.01", "--noise", "1", "--steps", "5000"])
    assert time.process_time() - t0 < 10.0
    assert 0.3508 <= out["advantage"] <= 0.3509


@pytest.mark.slow
def test_dpsgd_derives_q_and_steps():
    out = invoke_json(["dpsgd", "--batch-size", "500", "--dataset-size", "50000", "--epochs", "1", "--noise", "1"])
    assert out["q"] == pytest.approx(0.01) and out["steps"] == 100
    assert out["advantage"] == pytest.approx(0.05067, abs=1e-5)
    direct = invoke_json(["sgm", "--q", "0.01", "--noise", "1", "--steps", "100"])
    assert direct["advantage"] == out["advantage"] and direct["tpr_at_fpr"] == out["tpr_at_fpr"]
    res = runner.invoke(bound_app, ["dpsgd", "--batch-size", "500", "--dataset-size", "50000", "--epochs", "1",
                                    "--noise", "1"])
    assert res.exit_code == 0 and "T = 100" in res.stdout


def test_tiny_noise_gives_vacuous_bounds():
    out = invoke_json(["sgm", "--q", "1", "--noise", "0.001", "--steps", "1", "--fpr", "0.5", "--fpr", "0"])
    assert out["advantage"] == pytest.approx(1.0) and out["tpr_at_fpr"]["0.5"] == pytest.approx(1.0)
    assert out["tpr_at_fpr"]["0.0"] == pytest.approx(1.0)
    assert out["epsilon"] > 1e5 and out["advantage_pinsker"] == 1.0


def test_non_finite_numbers_become_null():
    from harness.cli.bound import _finite_or_none

    obj = _finite_or_none({"epsilon": math.inf, "nested": {"x": math.nan, "y": 1.5}, "n": 3})
    assert json.loads(json.dumps(obj, allow_nan=False)) == {"epsilon": None, "nested": {"x": None, "y": 1.5}, "n": 3}


@pytest.mark.parametrize("args", [
    ["thudi", "--epsilon", "-1", "--p1", "0.5"],
    ["thudi", "--epsilon", "1", "--p1", "0"],
    ["thudi", "--epsilon", "1", "--p1", "1.2"],
    ["thudi", "--epsilon", "1", "--p1", "0.5", "--delta", "1"],
    ["thudi", "--epsilon", "1", "--p1", "0.5", "--tpr", "0"],
    ["thudi", "--epsilon", "nan", "--p1", "0.5"],
    ["sgm", "--q", "0", "--noise", "1", "--steps", "10"],
    ["sgm", "--q", "1.5", "--noise", "1", "--steps", "10"],
    ["sgm", "--q", "0.1", "--noise", "0", "--steps", "10"],
    ["sgm", "--q", "0.1", "--noise", "-1", "--steps", "10"],
    ["sgm", "--q", "0.1", "--noise", "1", "--steps", "0"],
    ["sgm", "--q", "0.1", "--noise", "1", "--steps", "10", "--fpr", "1.5"],
    ["sgm", "--q", "0.1", "--noise", "1", "--steps", "10", "--delta", "0"],
    ["dpsgd", "--batch-size", "0", "--dataset-size", "100", "--epochs", "1", "--noise", "1"],
    ["dpsgd", "--batch-size", "200", "--dataset-size", "100", "--epochs", "1", "--noise", "1"],
    ["dpsgd", "--batch-size", "10", "--dataset-size", "100", "--epochs", "0", "--noise", "1"],
])
@pytest.mark.parametrize("as_json", [False, True])
def test_bad_input_is_one_error_line_and_exit_2(args, as_json):
    res = runner.invoke(bound_app, args + (["--json"] if as_json else []))
    assert res.exit_code == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:")
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
