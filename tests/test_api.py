"""The Python API (harness.api): what the CLI calls, with the CLI's numbers; Results; progress
events; compare; and a CLI that only parses, calls the API and prints."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.core.errors import ConfigError

runner = CliRunner()
SMALL = {"audit.models": 8, "train.epochs": 6, "train.width": 32, "attack.bootstrap": 100, "run.workers": 1,
         "attack.fprs": [0.01]}  # 800 non-member guesses: 0.1% FPR would be unresolved
UNCOMPUTED = {"timings", "created"}  # what no two runs share, whoever starts them


def _numbers(results: dict) -> dict:
    """results.json without the keys that differ between any two runs (times, paths)."""
    def strip(x, path=""):
        if isinstance(x, dict):
            return {k: strip(v, f"{path}.{k}") for k, v in x.items()
                    if k not in UNCOMPUTED and not (k == "out" and path.endswith(".run"))
                    and k not in ("train_seconds_total", "query_seconds_total")}
        if isinstance(x, list):
            return [strip(v, path) for v in x]
        if isinstance(x, float) and x != x:
            return "NaN"  # as results.json writes it (harness.core.jsonio), so that NaN equals NaN
        return x
    return strip(results)


@pytest.fixture(scope="module")
def api_run(tmp_path_factory):
    from harness import evaluate

    events = []
    out = tmp_path_factory.mktemp("api")
    r = evaluate("undefended", overrides={**SMALL, "run.out": str(out)}, progress=events.append)
    return r, events


def test_evaluate_returns_results_equal_to_the_cli_for_the_same_config(api_run, tmp_path):
    r, _ = api_run
    args = ["--models", "8", "--epochs", "6", "--set", "train.width=32", "--set", "attack.bootstrap=100",
            "--workers", "1", "--set", "attack.fprs=[0.01]", "--out", str(tmp_path)]
    res = runner.invoke(app, ["evaluate", "undefended", *args])
    assert res.exit_code == 0, res.output
    (cli_dir,) = tmp_path.iterdir()
    cli = json.loads((cli_dir / "results.json").read_text())
    assert cli_dir.name == r.path.name  # the same config: the same fingerprint
    assert _numbers(cli) == _numbers(r.data)
    assert _numbers(json.loads((r.path / "results.json").read_text())) == _numbers(r.data)


def test_results_views(api_run):
    r, _ = api_run
    fig = r.data["sample"]["figure"]
    h, lk = r.headline("sample"), r.leak("sample")
    assert h.attack == fig["declared"]["name"] and h.tpr == fig["declared"]["tpr"] and h.fpr == fig["fpr"]
    assert lk.tpr == fig["leak"]["tpr"] and lk.lower <= lk.tpr and r.strongest("sample") == lk
    assert r.tpr("sample") == lk.tpr and r.tpr("population") == r.leak("population").tpr
    lo, hi = h.ci
    assert f": TPR {100 * h.tpr:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}] at {100 * h.fpr:g}% FPR" in str(h)
    with pytest.raises(ValueError, match="figures are read at"):  # a variant's TPR at another FPR: r.attacks
        r.tpr("sample", 0.0001)
    assert isinstance(r.attacks, pd.DataFrame) and {"experiment", "attack", "variant", "auc"} <= set(r.attacks.columns)
    assert list(r.summary["level"]) == ["population", "sample"]
    assert r.bounds is None and 0 < r.test_accuracy("sample") <= 1
    fpr, tpr = r.roc("population", "lira")  # the attack phase's own curve, in memory
    assert fpr[0] == 0 and fpr[-1] == 1 and np.all(np.diff(tpr) >= 0)
    from harness import load_run

    again = load_run(r.path)  # the same curve, from the run's roc/*.csv (thinned: straight segments dropped)
    f2, t2 = again.roc("population", "lira")
    assert np.interp(0.01, f2, t2) == pytest.approx(np.interp(0.01, fpr, tpr))
    assert "undefended" in repr(again) and str(r.path) in repr(again)
    with pytest.raises(KeyError, match="no variant"):
        r.roc("population", "lira", "no-such-variant")


def test_progress_events_reach_the_callback(api_run):
    _, events = api_run
    kinds = [e.kind for e in events]
    assert kinds[0] == "status" and "info" in kinds and kinds[-1] == "status"
    assert any(e.kind == "info" and e.message.startswith("Run directory:") for e in events)
    train = [e for e in events if e.kind == "train"]
    assert {e.level for e in train} == {"population", "sample-mislabeled"}
    last = {e.level: e.done for e in train}
    assert all(v == 8 for v in last.values()) and all(e.total == 8 for e in train)


def test_attack_through_the_api_changes_the_saved_settings_with_the_results(api_run, tmp_path):
    import shutil

    from harness import attack

    r, _ = api_run
    copy = tmp_path / "run"
    shutil.copytree(r.path, copy)
    events = []
    again = attack(copy, {"attack.bootstrap": 30}, progress=events.append)
    assert again.data["config"]["attack"]["bootstrap"] == 30
    assert json.loads((copy / "config.json").read_text())["attack"]["bootstrap"] == 30
    assert any("Changing the run's saved attack settings" in e.message for e in events)


def test_load_run_and_configure_refuse_with_one_line(tmp_path):
    from harness import configure, load_run

    with pytest.raises(ConfigError, match="does not exist"):
        load_run(tmp_path)
    with pytest.raises(ConfigError, match="is not a config override"):
        configure("undefended", overrides={"defense": "hamp"})
    with pytest.raises(ConfigError, match="name a DEFENSE"):
        configure()


def test_compare_lines_up_two_runs(api_run, tmp_path):
    from harness import compare, evaluate

    r, _ = api_run
    other = evaluate("undefended", overrides={**SMALL, "seed": 1, "run.out": str(tmp_path)})
    c = compare(r, other)
    assert c.config_differences["seed"] == (0, 1)
    assert list(c.headlines["figure"]) == ["leak", "declared", "leak", "declared"]
    row = c.headlines.iloc[3]  # sample declared headline: one variant, a two-sided CI
    assert row["difference"] == pytest.approx(row["tpr_b"] - row["tpr_a"])
    lo_a, hi_a = row["ci_a"]
    lo_b, hi_b = row["ci_b"]
    assert row["cis_overlap"] == (lo_a <= row["tpr_b"] <= hi_a and lo_b <= row["tpr_a"] <= hi_b)
    assert len(c.attacks) == len(r.attacks)  # the same attacks ran in both
    res = runner.invoke(app, ["compare", str(r.path), str(other.path)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "B - A" in res.output and "seed: 0 -> 1" in res.output


def test_the_bar_command_runs(tmp_path):
    """`python -c "from harness import evaluate; r = evaluate('undefended', overrides={'audit.models': 8})"`"""
    code = ("from harness import evaluate; r = evaluate('undefended', overrides={'audit.models': 8, "
            "'train.epochs': 2, 'attack.bootstrap': 20}); print(r.headline('sample'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "lira:" in proc.stdout and (tmp_path / "runs").is_dir()


def test_the_cli_orchestrates_nothing():
    """CLI modules import the API, the report printer, config parsing, error types and the
    leaderboard, never the runner, the executors, the run store or the attack phase."""
    import ast

    orchestration = ("harness.run.runner", "harness.run.executors", "harness.run.runstore", "harness.run.runlock",
                     "harness.run.teachers", "harness.audit.attack_phase", "harness.run.signals")
    for f in (Path(__file__).resolve().parents[1] / "harness" / "cli").glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith(orchestration), (f.name, node.module)


def test_figures_are_finite_where_resolved(api_run):
    r, _ = api_run
    for lv in r.levels:
        for fig in (r.headline(lv), r.leak(lv)):
            assert math.isfinite(fig.tpr) and math.isfinite(fig.lower) and fig.fpr == 0.01  # 8 models: 1% resolves


@pytest.mark.parametrize("how", ["file", "stdin"])
def test_a_script_calling_evaluate_at_top_level_runs_it_once(tmp_path, how):
    """The local pool's workers must not re-import the caller's __main__: an unguarded script (no
    `if __name__ == "__main__"`) would otherwise evaluate again in every worker, and a script read
    from stdin would crash them."""
    script = ("from pathlib import Path\n"
              "from harness import evaluate\n"
              "with open('ran.txt', 'a') as f: f.write('ran\\n')\n"
              "r = evaluate('undefended', overrides={'audit.models': 6, 'train.epochs': 2, 'attack.bootstrap': 20, "
              "'run.workers': 2, 'run.group_size': 1})\n"
              "print('done', r.path)\n")
    if how == "file":
        (tmp_path / "script.py").write_text(script)
        proc = subprocess.run([sys.executable, "script.py"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    else:
        proc = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, cwd=tmp_path,
                              timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "done" in proc.stdout and (tmp_path / "ran.txt").read_text() == "ran\n"


def test_python_dash_m_harness_cli_runs_once_with_a_pool(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "evaluate", "undefended", "--models", "6", "--epochs",
                           "2", "--set", "attack.bootstrap=20", "--workers", "2", "--set", "run.group_size=1",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("Results:") == 1


def test_an_unresolved_level_is_never_a_number_in_the_api():
    """A level that resolves no figure FPR (too few non-member guesses for 3 expected false positives)
    has no figure: the API's Figure prints "unresolved" and its TPR is NaN, never TPR at FPR 0."""
    from harness.audit.results import Results

    best = {"name": "lira", "variant": "v", "access": "black-box", "source": "sample-mislabeled/lira:v",
            "tpr_at_fpr": {"0.0": 0.5875, "0.001": 0.5875}, "tpr_ci": {"0.0": [0.56, 0.97], "0.001": [0.56, 0.97]},
            "resolved": {"0.0": True, "0.001": False}}
    fig = {"fpr": None, "leak": None, "declared": None, "reason": "..."}
    r = Results("run", {"defense": "undefended", "preset": "quick", "headline_fpr": 0.001,
                        "sample": {"best": best, "figure": fig}, "config": {"attack": {"fprs": [0.001]}}})
    h = r.headline("sample")
    assert "58.8%" not in str(h) and str(h).startswith("unresolved") and math.isnan(h.tpr)
    assert math.isnan(r.tpr("sample")) and "sample unresolved" in repr(r)
    with pytest.raises(ConfigError, match="read at no FPR"):
        r.tpr("sample", 0.001)


def test_load_run_takes_the_results_file_and_names_a_missing_directory(api_run, tmp_path):
    from harness import load_run

    r, _ = api_run
    assert load_run(r.path / "results.json").path == r.path
    with pytest.raises(ConfigError, match=r"^run directory '.*nope' does not exist$"):
        load_run(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is not a run directory"):
        load_run(tmp_path / "file")


# --- compare: unresolved FPRs, --fpr, what one run lacks, either run's primary variant, DP bounds ---------------

def _results_dir(tmp_path: Path, name: str, data: dict) -> Path:
    """A run directory holding only ``data`` as its results.json (what compare reads)."""
    d = tmp_path / name
    d.mkdir()
    (d / "results.json").write_text(json.dumps(data))
    return d


def _records(data: dict):
    """Every record with TPRs at the reported FPRs in a results dict: each level's best, every attack entry."""
    from harness.audit.report import experiments

    for lv in ("population", "sample"):
        yield data[lv]["best"]
    for _, res in experiments(data):
        yield from res["attacks"]


def _compare_cli(a: Path, b: Path, *options: str):
    return runner.invoke(app, ["compare", str(a), str(b), *options], env={"COLUMNS": "250"})


def test_compare_into_a_file_keeps_every_cell_whole(api_run, tmp_path):
    """issue 48: piped or redirected, `harness compare A B` was cut to rich's 80 columns ("populat...",
    "lira:on..."); not on a terminal, no width limit applies (CliRunner's output is not a terminal,
    and no COLUMNS is set here)."""
    r, _ = api_run
    b = _results_dir(tmp_path, "b-" + "x" * 60, r.data)
    res = runner.invoke(app, ["compare", str(r.path), str(b)])
    assert res.exit_code == 0, res.output
    assert "…" not in res.output and str(b) in res.output and "population" in res.output
    variant = next(e["variant"] for e in r.data["population"]["attacks"] if e["name"] == "lira" and e["primary"])
    assert variant in res.output and max(len(line) for line in res.output.splitlines()) > 80


def test_report_into_a_pipe_keeps_every_cell_whole(api_run):
    """issue 54: `harness report RUN | cat` (and attack, evaluate) cut the report's cells to rich's 80
    columns ("online-log..."); not on a terminal, no width limit applies."""
    r, _ = api_run
    res = runner.invoke(app, ["report", str(r.path)])
    assert res.exit_code == 0, res.output
    variant = next(e["variant"] for e in r.data["population"]["attacks"] if e["name"] == "lira" and e["primary"])
    assert "…" not in res.output and variant in res.output


def test_compare_prints_an_unresolved_fpr_as_unresolved(api_run, tmp_path):
    """At 8 models the 0.1% FPR is unresolved: every TPR there, and every difference with it, reads
    'unresolved' (as the report says), never a bare '-' nor TPR at FPR 0."""
    import copy

    from harness import compare
    from harness.audit.results import Results

    r, _ = api_run
    k = repr(r.headline_fpr)
    b = copy.deepcopy(r.data)
    for rec in _records(b):  # B cannot resolve the headline FPR (too few non-member guesses)
        rec["resolved"][k] = False
    c = compare(r, Results(r.path, b))
    assert c.attacks["resolved_b"].eq(False).all() and c.attacks["tpr_b"].isna().all()
    assert c.attacks["resolved_a"].eq(True).all() and c.attacks["difference"].isna().all()
    res = _compare_cli(r.path, _results_dir(tmp_path, "b", b))
    assert res.exit_code == 0, res.output
    rows = [line.split() for line in res.output.splitlines() if line.split()[:1] == ["sample-mislabeled"]]
    assert len(rows) == len(c.attacks[(c.attacks["primary"]) & (c.attacks["experiment"] == "sample-mislabeled")])
    for row in rows:  # A's TPR, then B's and the difference: unresolved
        assert row[-2:] == ["unresolved", "unresolved"] and "-" not in row, row
    assert "fewer than 3 expected false positives" in res.output


def test_compare_at_another_reported_fpr_and_refuses_one_not_reported(api_run, tmp_path):
    from harness import compare

    r, _ = api_run  # attack.fprs [0.01]: TPRs at 0 and 0.01
    c = compare(r, r, fpr=0)
    assert c.fpr == 0.0 and c.fprs == [0.0, 0.01]
    best = r.data["sample"]["best"]
    row = c.attacks[(c.attacks["experiment"] == "sample-mislabeled") & (c.attacks["attack"] == best["name"])
                    & (c.attacks["variant"] == best["variant"])].iloc[0]  # the declared variant, at FPR 0
    assert row["tpr_a"] == best["tpr_at_fpr"]["0.0"] and row["difference"] == 0
    for bad in (0.001, 0.05, -1.0, float("nan")):
        with pytest.raises(ConfigError, match=r"both runs report TPRs only at 0, 0\.01"):
            compare(r, r, fpr=bad)
    res = _compare_cli(r.path, r.path, "--fpr", "0")
    assert res.exit_code == 0, res.output
    assert "A TPR@0% FPR" in res.output and "TPR@1% FPR" not in res.output
    res = _compare_cli(r.path, r.path, "--fpr", "0.001")
    assert res.exit_code == 2 and res.output.startswith("error: --fpr 0.001:") and len(res.output.splitlines()) == 1


def test_compare_lists_experiments_and_attacks_only_one_run_has(api_run, tmp_path):
    """A DP-SGD run (mislabeled, ood and blank canaries) against an undefended one (mislabeled): the
    experiments of one run only are listed, not dropped; so is an attack only one run ran."""
    import copy

    from harness import compare
    from harness.audit.results import Results

    r, _ = api_run
    a, b = copy.deepcopy(r.data), copy.deepcopy(r.data)
    for canary in ("ood", "blank"):
        b["sample_by_canary"][canary] = {**copy.deepcopy(b["sample"]), "canary": canary}
    a["population"]["attacks"] = [e for e in a["population"]["attacks"] if e["name"] != "threshold"]
    c = compare(Results(r.path, a), Results(r.path, b))
    assert c.only_in_a == [] and c.only_in_b == ["sample-ood", "sample-blank", "population/threshold"]
    assert set(c.attacks["experiment"]) == {"population", "sample-mislabeled"}
    res = _compare_cli(_results_dir(tmp_path, "a", a), _results_dir(tmp_path, "b", b))
    assert res.exit_code == 0, res.output
    assert "only in B: sample-ood, sample-blank, population/threshold" in res.output and "only in A" not in res.output


def test_compare_shows_the_primary_variant_of_either_run(api_run, tmp_path):
    """DP-SGD's primary LiRA variant is aug9, the undefended run's noaug: without --details both are
    shown, each marked with the run it is primary in."""
    import copy

    from harness import compare
    from harness.audit.results import Results

    r, _ = api_run
    b = copy.deepcopy(r.data)
    lira = [e for e in b["population"]["attacks"] if e["name"] == "lira"]
    was = next(e for e in lira if e["primary"])
    now = next(e for e in lira if not e["primary"])
    was["primary"], now["primary"] = False, True
    c = compare(r, Results(r.path, b))
    pop = c.attacks[(c.attacks["experiment"] == "population") & (c.attacks["attack"] == "lira")].set_index("variant")
    assert pop.loc[now["variant"], "primary"] and pop.loc[now["variant"], "primary_b"]
    assert not pop.loc[now["variant"], "primary_a"] and pop.loc[was["variant"], "primary"]
    res = _compare_cli(r.path, _results_dir(tmp_path, "b", b))
    assert res.exit_code == 0, res.output
    lines = [line for line in res.output.splitlines() if line.split()[:2] == ["population", "lira"]]
    assert any(f"{now['variant']} *B" in line for line in lines) and any(f"{was['variant']} *A" in line
                                                                          for line in lines)


def test_compare_shows_the_bounds_of_a_dp_run(api_run, tmp_path):
    import copy

    from harness import compare
    from harness.audit.attack_phase import _bounds_json
    from harness.audit.results import Results

    r, _ = api_run
    b = copy.deepcopy(r.data)
    b["bounds"] = _bounds_json({"sample_rate": 0.04, "noise_multiplier": 1.0, "steps": 300}, [0.001, 0.01])
    c = compare(r, Results(r.path, b))
    assert c.bounds == {"B": b["bounds"]}
    res = _compare_cli(r.path, _results_dir(tmp_path, "b", b))
    assert res.exit_code == 0, res.output
    (line,) = [ln for ln in res.output.splitlines() if ln.startswith("B: DP ε")]
    eps, tpr = b["bounds"]["epsilon"], b["bounds"]["tpr_at_fpr"]["0.01"]
    assert f"DP ε = {eps:.3g}" in line and f"TPR@1% ≤ {100 * tpr:.1f}%" in line and "TPR@0.1% ≤" in line
    assert not any(ln.startswith("A: DP ε") for ln in res.output.splitlines())


def test_the_preset_help_names_every_preset():
    """`--preset`'s help lists the presets that `harness list` and the API offer (fast was missing)."""
    import re

    import typer

    from harness.core.config import preset_names

    evaluate = typer.main.get_command(app).commands["evaluate"]
    text = next(p.help for p in evaluate.params if p.name == "preset")
    assert "fast" in preset_names() and text.startswith("quick (default) | ")
    for name in preset_names():
        assert re.search(rf"(^|\| ){re.escape(name)}( \(default\))?( \||, or a YAML file$)", text), (name, text)
    res = runner.invoke(app, ["evaluate", "--help"], env={"COLUMNS": "250"})
    assert res.exit_code == 0 and "fast" in next(line for line in res.output.splitlines() if "--preset" in line)


def test_ratio_is_a_typed_figure(api_run):
    """Results.ratio is a Ratio (value, CI, the two leaks), not results.json's raw dict (issue 36, 9)."""
    from harness import Ratio

    r, _ = api_run
    raw = r.data["sample_population_ratio"]
    q = r.ratio
    assert isinstance(q, Ratio) and q.fpr == raw["fpr"] == r.figure_fpr("sample")
    assert q.sample == r.leak("sample").tpr and q.population == r.leak("population").tpr
    if raw["ratio"] is not None:
        assert q.value == raw["ratio"] == q.sample / q.population
        assert q.ci == tuple(raw["ci"]) and f"{q.value:.1f}x" in str(q)
    else:
        assert not math.isfinite(q.value) and "no point ratio" in str(q)


def test_ratio_reads_a_record_without_a_point_ratio():
    from harness import Ratio

    low = Ratio.from_json({"fpr": 0.001, "population": 0.0, "sample": 0.5, "ratio": None, "ci": None, "lower": 12.5})
    assert math.isnan(low.value) and low.ci is None and low.lower == 12.5
    assert str(low) == "no point ratio (sample 50.0% / population 0.0% at 0.1% FPR; ratio >= 12.5)"
    none = Ratio.from_json({"fpr": None, "population": None, "sample": None, "ratio": None, "ci": None, "lower": None})
    assert math.isnan(none.value) and math.isnan(none.fpr)


def test_roc_takes_the_level_names_that_headline_takes(api_run):
    """r.roc("sample") reads the sample headline's experiment, attack and variant, as r.headline("sample")
    does; an unknown experiment names those the run has (issue 36, 9)."""
    r, _ = api_run
    h = r.headline("sample")
    f1, t1 = r.roc("sample")
    f2, t2 = r.roc(h.experiment, h.attack, h.variant)
    assert h.experiment.startswith("sample-") and np.array_equal(f1, f2) and np.array_equal(t1, t2)
    f3, t3 = r.roc("sample", h.attack)  # the attack's primary variant
    assert f3[0] == 0 and f3[-1] == 1
    fp, tp = r.roc("population")
    hp = r.headline("population")
    assert np.array_equal(tp, r.roc("population", hp.attack, hp.variant)[1])
    with pytest.raises(KeyError, match="it has population, sample, sample-"):
        r.roc("samples")


def test_report_html_true_writes_the_run_page(api_run):
    """harness.report(path, html=True) writes report.html as `harness report --html` does (it raised
    TypeError); a non-callable, non-bool html is one ConfigError."""
    from harness import report
    from harness.core.errors import ConfigError

    r, _ = api_run
    report(r.path, html=True)
    page = (r.path / "report.html").read_text()
    assert page.lstrip().lower().startswith("<!doctype html") and r.data["defense"] in page
    with pytest.raises(ConfigError, match="html= takes True, False or a function"):
        report(r.path, html="yes")
