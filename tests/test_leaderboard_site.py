"""The static leaderboard site (leaderboard/site.py, plots.py) and `harness report --html`."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from leaderboard.site import entry_id, matched_baseline, rebuild

runner = CliRunner()
ARGS = ["--models", "6", "--audit-size", "20", "--epochs", "2", "--set", "train.width=32", "--set",
        "attack.bootstrap=20", "--workers", "1"]
HOSTILE = "<script>alert(1)</script>\"'&" + "x" * 500


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    """A real (tiny) two-level undefended run's results.json."""
    out = tmp_path_factory.mktemp("runs")
    res = runner.invoke(app, ["evaluate", "undefended", "--out", str(out), *ARGS])
    assert res.exit_code == 0, res.output
    (run_dir,) = out.iterdir()
    return json.loads((run_dir / "results.json").read_text())


def _variant(results: dict, defense: str, acc: float, tpr: float, fingerprint: str) -> dict:
    """A copy of ``results`` as another defense's entry with the given accuracy and sample TPR@0.1%."""
    r = copy.deepcopy(results)
    r["defense"], r["fingerprint"] = defense, fingerprint
    for lv in ("population", "sample"):
        r[lv]["test_accuracy"]["mean"] = acc
    r["sample"]["best"]["tpr_at_fpr"]["0.001"] = tpr
    r["sample"]["best"]["resolved"]["0.001"] = True
    return r


@pytest.fixture()
def site(results, tmp_path) -> Path:
    files = tmp_path / "in"
    for i, (name, acc, tpr) in enumerate([("undefended", 0.95, 0.9), ("dpsgd-high", 0.94, 0.08),
                                          ("dpsgd-medium", 0.90, 0.01), ("hamp", 0.92, 0.02),
                                          ("relaxloss", 0.97, 0.05), (HOSTILE, 0.935, 0.5)]):
        d = files / f"run{i}"
        d.mkdir(parents=True)
        (d / "results.json").write_text(json.dumps(_variant(results, name, acc, tpr, f"{i:064x}")))
    out = tmp_path / "site"
    res = runner.invoke(app, ["leaderboard", "build", str(files), "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


def test_matched_baseline_interpolates_between_bracketing_dpsgd_points():
    frontier = [(0.90, 0.01), (0.94, 0.08), (0.80, 0.001)]
    assert matched_baseline(0.92, frontier) == pytest.approx(0.045)  # halfway from 1% to 8%
    assert matched_baseline(0.85, frontier) == pytest.approx(0.0055)
    assert matched_baseline(0.94, frontier) == pytest.approx(0.08)
    assert matched_baseline(0.97, frontier) is None  # above every DP-SGD accuracy: no baseline
    assert matched_baseline(0.5, frontier) is None
    assert matched_baseline(0.9, []) is None


def test_index_has_a_row_per_entry_the_frontier_and_the_matched_baseline(site):
    page = (site / "index.html").read_text()
    assert page.count("<tr>") == 1 + 6  # header + one row per entry
    assert 'class="sortable"' in page and "data-sort=" in page and "addEventListener('click'" in page
    assert 'class="frontier"' in page and page.count('class="point') == 6
    # hamp at 92% sits between dpsgd-medium (90%, 1%) and dpsgd-high (94%, 8%): 4.5%, and 2% beats it
    hamp_row = next(r for r in page.split("<tr>") if ">hamp<" in r)
    assert "4.5%" in hamp_row and "beats it" in hamp_row
    relax_row = next(r for r in page.split("<tr>") if ">relaxloss<" in r)
    assert "no baseline" in relax_row  # 97% is above every DP-SGD entry
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in page
    md = (site / "leaderboard.md").read_text()
    assert len([ln for ln in md.splitlines() if ln.startswith("| ")]) == 7


def test_hostile_names_render_as_text_everywhere(site):
    for f in [site / "index.html", *site.glob("entries/*/index.html")]:
        text = f.read_text()
        assert "<script>alert(1)</script>" not in text, f
        assert "<script>alert" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in (site / "index.html").read_text()
    ids = [p.name for p in (site / "entries").iterdir()]
    assert all(re.fullmatch(r"[a-z0-9_-]+", i) and len(i) < 100 for i in ids)


def test_entry_page_has_roc_figures_tables_provenance_and_its_results(site, results):
    eid = entry_id(_variant(results, "undefended", 0.95, 0.9, f"{0:064x}"))
    d = site / "entries" / eid
    page = (d / "index.html").read_text()
    # one headline figure (population vs the canary) + one per experiment, one polyline per primary variant
    svgs = page.count("<svg")
    assert svgs == 1 + 2
    primaries = sum(a["primary"] for lv in ("population", "sample") for a in results[lv]["attacks"])
    assert page.count('class="curve"') == 2 + primaries
    for key in ("run fingerprint", "data fingerprint", "harness version", "seed", "created"):
        assert key in page
    assert results["data_fingerprint"] and results["data_fingerprint"] in page
    assert 'href="results.json" download' in page
    assert json.loads((d / "results.json").read_text())["sample"]["test_accuracy"]["mean"] == 0.95


def test_unresolved_tpr_is_shown_as_text(results, tmp_path):
    r = copy.deepcopy(results)
    r["population"]["best"]["resolved"]["0.001"] = False
    d = tmp_path / "entries" / entry_id(r)
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps(r))
    rows = rebuild(tmp_path)
    assert rows[0]["population TPR"] == "unresolved"
    assert "unresolved" in (tmp_path / "index.html").read_text()


def test_roc_curve_in_results_follows_the_tpr_at_fpr_rule(results):
    for lv in ("population", "sample"):
        for a in results[lv]["attacks"]:
            curve = dict(zip(a["roc_curve"]["fpr"], a["roc_curve"]["tpr"]))
            assert curve[0.0] == a["tpr_at_fpr"]["0.0"] and curve[1.0] == 1.0
            assert curve[0.01] == a["tpr_at_fpr"]["0.01"]
            assert a["roc_curve"]["tpr"] == sorted(a["roc_curve"]["tpr"])


def test_report_html_writes_the_entry_page_for_one_run(tmp_path):
    out = tmp_path / "o"
    res = runner.invoke(app, ["evaluate", "undefended", "--out", str(out), *ARGS, "--level", "population"])
    assert res.exit_code == 0, res.output
    (run_dir,) = out.iterdir()
    res = runner.invoke(app, ["report", str(run_dir), "--html"])
    assert res.exit_code == 0, res.output
    page = (run_dir / "report.html").read_text()
    assert "<svg" in page and "leaderboard</a>" not in page and 'href="results.json"' in page


def _chromium() -> str | None:
    for name in (os.environ.get("CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def test_site_renders_in_headless_chromium_without_errors(site):
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium found (install Debian's `chromium` or set CHROMIUM=/path/to/chrome)")
    pytest.importorskip("playwright", reason="the browser extra is not installed (pip install -e '.[browser]')")
    from leaderboard.browser import render

    shot = site / "index.png"
    report = render(browser, site / "index.html", shot)
    assert report.console_errors == [], report.console_errors
    assert report.table_rows == 6 and report.svg_boxes >= 1 and all(w > 100 and h > 100 for w, h in report.svg_sizes)
    assert shot.stat().st_size > 10_000
    # the rows start in order of sample TPR (accuracies 90, 92, 97, 94, 93.5, 95%): one click sorts them
    assert report.sorted_column == sorted(report.sorted_column) and len(report.sorted_column) == 6
    page = next(site.glob("entries/*/index.html"))
    entry = render(browser, page, None)
    assert entry.console_errors == [] and entry.svg_boxes >= 2
