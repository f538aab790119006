"""The static leaderboard site (leaderboard/site.py, plots.py) and `harness report --html`."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
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
        r = _variant(results, name, acc, tpr, f"{i:064x}")
        if name == "relaxloss":  # stands in for a label-DP entry (ALIBI's record)
            r["sample"]["label_privacy"] = {"label_epsilon": 8.0, "delta": 0.0}
        (d / "results.json").write_text(json.dumps(r))
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
    label_row = next(r for r in page.split("<tr>") if ">relaxloss<" in r)  # carries a label-DP record
    assert "label 8 " in label_row and "(labels only)" in label_row
    assert page.count("(labels only)") == 1  # only the entry with a label-DP record


def test_hostile_names_render_as_text_everywhere(site):
    outputs = [site / "index.html", site / "leaderboard.md", *site.glob("entries/*/index.html")]
    assert len(outputs) == 2 + 6
    for f in outputs:
        text = f.read_text()
        assert "<script>alert" not in text, f  # neither as markup nor inside the sort script's data
        assert "</script>\"'&" not in text, f  # quotes and ampersands escaped too (attributes intact)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#x27;&amp;" in (site / "index.html").read_text()
    # the long name is cut visually (CSS) with the full, escaped text in a title attribute
    assert re.search(r'title="&lt;script&gt;alert\(1\)&lt;/script&gt;&quot;&#x27;&amp;x{500}"',
                     (site / "index.html").read_text())
    assert "text-overflow:ellipsis" in (site / "index.html").read_text()
    md_rows = [ln for ln in (site / "leaderboard.md").read_text().splitlines() if ln.startswith("| ")]
    assert {ln.count(" | ") for ln in md_rows} == {md_rows[0].count(" | ")}  # no cell broke the table
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in (site / "index.html").read_text()
    ids = [p.name for p in (site / "entries").iterdir()]
    assert all(re.fullmatch(r"[a-z0-9_-]+", i) and len(i) < 100 for i in ids)


def test_entry_page_has_roc_figures_tables_provenance_and_its_results(site, results):
    eid = entry_id(_variant(results, "undefended", 0.95, 0.9, f"{0:064x}"))
    d = site / "entries" / eid
    page = (d / "index.html").read_text()
    # one headline figure (population vs the canary) + one per experiment with a polyline per attack
    # variant (primary ones in the legend, the others thin)
    svgs = page.count("<svg")
    assert svgs == 1 + 2
    primaries = sum(a["primary"] for lv in ("population", "sample") for a in results[lv]["attacks"])
    variants = sum(len(results[lv]["attacks"]) for lv in ("population", "sample"))
    assert page.count('<polyline class="curve"') == 2 + primaries
    assert page.count('<polyline class="curve minor"') == variants - primaries > 0
    assert all(p.count(",") > 10 for p in re.findall(r'<polyline class="curve[^"]*"[^>]* points="([^"]*)"', page))
    for key in ("run fingerprint", "data fingerprint", "harness version", "seed", "created"):
        assert key in page
    assert results["data_fingerprint"] and results["data_fingerprint"] in page
    assert 'href="results.json" download' in page
    # the downloadable copy is the submitted file, byte for byte
    assert (d / "results.json").read_bytes() == (site.parent / "in" / "run0" / "results.json").read_bytes()


def test_unresolved_tpr_is_shown_as_text(results, tmp_path):
    r = copy.deepcopy(results)
    r["population"]["best"]["resolved"]["0.001"] = False
    d = tmp_path / "entries" / entry_id(r)
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps(r))
    rows = rebuild(tmp_path)
    assert rows[0]["population TPR"] == "unresolved"
    assert "unresolved" in (tmp_path / "index.html").read_text()


def test_build_without_a_usable_entry_is_one_error_line(tmp_path):
    (tmp_path / "runs" / "broken").mkdir(parents=True)
    (tmp_path / "runs" / "broken" / "results.json").write_text("{not json")
    res = runner.invoke(app, ["leaderboard", "build", str(tmp_path / "runs"), "--out", str(tmp_path / "site")])
    assert res.exit_code == 2, res.output
    assert "skipped:" in res.output and "error:" in res.output and "no usable" in res.output
    assert "Traceback" not in res.output


def test_rebuild_skips_an_entry_with_a_damaged_entry_json(results, tmp_path):
    for i, meta in enumerate(["{oops", json.dumps({"source": "submission", "verified": True, "verified_by": "x",
                                                   "submitted": "2026-01-01"})]):
        r = _variant(results, f"d{i}", 0.9, 0.1, f"{i:064x}")
        d = tmp_path / "entries" / entry_id(r)
        d.mkdir(parents=True)
        (d / "results.json").write_text(json.dumps(r))
        (d / "entry.json").write_text(meta)
    skipped: list = []
    rows = rebuild(tmp_path, skipped)
    assert [r["defense"] for r in rows] == ["d1"] and rows[0]["verified"]
    assert len(skipped) == 1 and "entry.json" in skipped[0][1]
    assert 'class="badge">verified<' in (tmp_path / "index.html").read_text()


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
    """A Chromium binary: $PLAYWRIGHT_CHROMIUM, $CHROMIUM, Debian's /usr/bin/chromium, or one on PATH."""
    for name in (os.environ.get("PLAYWRIGHT_CHROMIUM", ""), os.environ.get("CHROMIUM", ""), "/usr/bin/chromium",
                 "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def test_site_renders_in_headless_chromium_without_errors(site):
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium binary found (install Debian's `chromium`, or set PLAYWRIGHT_CHROMIUM or "
                    "CHROMIUM to one)")
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


def test_privacy_utility_labels_merge_identical_points_and_never_overlap():
    from leaderboard.plots import _place_labels

    points = [("alibi", 0.9, 0.3, False), ("alibi-high", 0.9, 0.3, False), ("dfkd", 0.901, 0.31, False),
              ("selena", 0.902, 0.29, False), ("hamp", 0.5, 0.01, False)]
    xy = [(100.0, 50.0), (100.0, 50.0), (101.0, 52.0), (102.0, 49.0), (10.0, 300.0)]
    placed = _place_labels(points, xy)
    assert placed[1] is None and placed[0] is not None and placed[0][2] == "alibi, alibi-high"
    boxes = [(x, x + 5.6 * min(len(t), 32), y) for x, y, t in filter(None, placed)]
    assert len(boxes) == 4
    for i, (a0, a1, ay) in enumerate(boxes):
        for b0, b1, by in boxes[i + 1:]:
            assert not (a0 < b1 and b0 < a1 and abs(ay - by) < 11), (boxes, i)
    assert placed[4] == (17.0, 294.0, "hamp")  # a lone label sits just above and right of its point
