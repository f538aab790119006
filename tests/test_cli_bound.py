import json

from typer.testing import CliRunner

from harness.cli import app


def test_bound_is_a_subcommand_of_harness():
    res = CliRunner().invoke(app, ["bound", "sgm", "--q", "1", "--noise", "1", "--steps", "1", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert abs(out["advantage"] - 0.3829249) < 1e-5 and set(out["tpr_at_fpr"]) == {"0.001", "0.01"}
