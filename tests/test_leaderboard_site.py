"""The static leaderboard site (leaderboard/site.py, plots.py) and `harness report --html`."""

from __future__ import annotations

import builtins
import copy
import errno
import html
import io
import json
import math
import os
import re
from html import escape
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
from typer.testing import CliRunner

from conftest import NEAREST_LABEL_PLUGIN
from harness.cli import app
from leaderboard.build import COLUMNS as MD_COLUMNS
from leaderboard.site import COLUMNS, entry_id, matched_baseline, rebuild

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


def _variant(results: dict, defense: str, acc: float, tpr: float, fingerprint: str, se: float | None = None) -> dict:
    """A copy of ``results`` as another defense's entry with the given accuracy and sample-level leak
    (the ranked figure; its SE 10% of it unless given)."""
    r = copy.deepcopy(results)
    r["defense"], r["fingerprint"] = defense, fingerprint
    for lv in ("population", "sample"):
        r[lv]["test_accuracy"]["mean"] = acc
    r["sample"]["figure"]["leak"].update(tpr=tpr, lower=0.8 * tpr, se=0.1 * tpr if se is None else se)
    return r


@pytest.fixture()
def site(results, tmp_path) -> Path:
    files = tmp_path / "in"
    for i, (name, acc, tpr) in enumerate([("undefended", 0.95, 0.9), ("dpsgd-high", 0.94, 0.08),
                                          ("dpsgd-medium", 0.92, 0.01), ("hamp", 0.93, 0.02),
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


def test_matched_baseline_interpolates_between_neighbouring_dpsgd_points_only():
    """Between two DP-SGD points at most 2 accuracy points apart the baseline is interpolated; across a
    wider gap, above or below the frontier it is "outside the frontier", never a line across the gap."""
    frontier = [(0.90, 0.01), (0.92, 0.08), (0.80, 0.001)]
    assert matched_baseline(0.91, frontier)[0] == pytest.approx(0.045)  # halfway from 1% to 8%
    assert matched_baseline(0.92, frontier)[0] == pytest.approx(0.08)
    value, why = matched_baseline(0.85, frontier)  # 80% and 90%: 10 points apart
    assert value is None and why.startswith("outside the frontier") and "10.0 points apart" in why
    assert matched_baseline(0.97, frontier)[0] is None  # above every DP-SGD accuracy
    assert matched_baseline(0.5, frontier)[0] is None
    assert matched_baseline(0.9, [])[0] is None


def test_index_has_a_row_per_entry_the_frontier_and_the_matched_baseline(site):
    page = (site / "index.html").read_text()
    assert len(re.findall(r"<tr[ >]", page)) == 1 + 6  # header + one row per entry
    assert 'class="sortable board"' in page and "data-sort=" in page and "addEventListener('click'" in page
    assert 'class="frontier"' in page and page.count('class="point') == 6
    # hamp at 93% sits between dpsgd-medium (92%, 1%) and dpsgd-high (94%, 8%): 4.5% (SE 0.4 points), and
    # 2% (SE 0.2) leaks less, told apart: the ratio 0.44x, its 95% box [0.29, 0.69]
    cells = _index_cells(page, "hamp")
    html, key, tip = cells["DP-SGD at same acc"]
    assert html.startswith("4.5% ") and "&#10003;" in html and key == "0.045000"
    assert "ratio 0.4x [0.3, 0.7]" in tip and "it leaks less than DP-SGD at its utility" in tip
    html, _, tip = _index_cells(page, escape(HOSTILE))["DP-SGD at same acc"]  # 50% at 93.5%: leaks more
    assert "&#10007;" in html and "it leaks more than DP-SGD" in tip
    html, key, tip = _index_cells(page, "relaxloss")["DP-SGD at same acc"]
    assert "outside" in html and "outside the frontier" in tip  # 97% is above every DP-SGD entry
    html, _, tip = _index_cells(page, "undefended")["DP-SGD at same acc"]  # 90% at 95%: above every DP-SGD entry
    assert "outside" in html
    # nothing from the network: the only URLs are the links of the defenses' papers (a click, never a load)
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert set(re.findall(r'"(https://[^"]*)"', page)) == set(re.findall(r'<a class="ref" href="(https://[^"]*)"', page))
    md = (site / "leaderboard.md").read_text()
    assert len([ln for ln in md.splitlines() if ln.startswith("| ")]) == 7
    html, key, tip = _index_cells(page, "relaxloss")["DP ε"]  # carries a label-DP record
    assert html == "label 8" and key == "8.000000" and "(labels only)" in tip
    assert page.count("(labels only)") == 1  # only the entry with a label-DP record
    # ranks follow the leak (1, 2, 5, 8, 50, 90%); every header is short, with a tooltip
    assert [_index_cells(page, d)["rank"][0] for d in ("dpsgd-medium", "hamp", "relaxloss", "dpsgd-high",
                                                        "undefended")] == ["1", "2", "3", "4", "6"]
    heads = re.findall(r'<th class="[^"]*" data-col="([^"]*)" title="([^"]+)">([^<]*)</th>', page)
    assert [h[0] for h in heads] == list(COLUMNS) and all(len(h[2]) <= 10 for h in heads)


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
    worst = max(max(e["max_pair_z"], e["max_own_z"]) for e in results["checks"]["membership"]["experiments"].values())
    assert f"membership consistency passed (largest z {worst:.1f}, threshold " in page  # the checks it passed
    assert "outputs not constant, not identical across models; accuracy above chance (12.1%)" in page
    assert results["data_fingerprint"] and results["data_fingerprint"] in page
    assert 'href="results.json" download' in page
    # the downloadable copy is the submitted file with the one absolute path it holds (the output
    # folder of the machine that ran it) cut to its last part
    original = json.loads((site.parent / "in" / "run0" / "results.json").read_text())
    published = json.loads((d / "results.json").read_text())
    assert Path(original["config"]["run"]["out"]).is_absolute()
    assert published["config"]["run"]["out"] == Path(original["config"]["run"]["out"]).name
    original["config"]["run"]["out"] = published["config"]["run"]["out"]
    assert published == original


def test_a_results_json_without_an_absolute_path_is_published_byte_for_byte(results, tmp_path):
    r = _variant(results, "hamp", 0.9, 0.1, f"{5:064x}")
    r["config"]["run"]["out"] = "runs"
    src = tmp_path / "in" / "results.json"
    src.parent.mkdir()
    src.write_text(json.dumps(r))
    assert runner.invoke(app, ["leaderboard", "build", str(src), "--out", str(tmp_path / "site")]).exit_code == 0
    (copy,) = (tmp_path / "site" / "entries").glob("*/results.json")
    assert copy.read_bytes() == src.read_bytes()


def test_a_level_without_a_figure_is_shown_as_text(results, tmp_path):
    r = copy.deepcopy(results)
    r["population"]["figure"].update(fpr=None, leak=None, declared=None, reason="too few")
    d = tmp_path / "entries" / entry_id(r)
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps(r))
    rows = rebuild(tmp_path)
    assert rows[0]["population leak TPR"] == "unresolved"
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


def _browser() -> str:
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium binary found (install Debian's `chromium`, or set PLAYWRIGHT_CHROMIUM or "
                    "CHROMIUM to one)")
    pytest.importorskip("playwright", reason="the browser extra is not installed (pip install -e '.[browser]')")
    return browser


def test_site_renders_in_headless_chromium_without_errors(site):
    browser = _browser()
    from leaderboard.browser import render

    shot = site / "index.png"
    report = render(browser, site / "index.html", shot)
    assert report.console_errors == [], report.console_errors
    assert report.table_rows == 6 and report.svg_boxes >= 1 and all(w > 100 and h > 100 for w, h in report.svg_sizes)
    assert shot.stat().st_size > 10_000
    # the rows start in rank order (accuracies 92, 93, 97, 94, 93.5, 95%): one click sorts them
    assert report.sorted_column == sorted(report.sorted_column) and len(report.sorted_column) == 6
    assert report.sorted_column != [0.92, 0.93, 0.97, 0.94, 0.935, 0.95]
    page = next(site.glob("entries/*/index.html"))
    entry = render(browser, page, None)
    assert entry.console_errors == [] and entry.svg_boxes >= 2


@pytest.mark.parametrize("width", [390, 1280, 1920])
def test_the_index_reads_without_scrolling_sideways_wrapped_cells_or_overlapping_labels(site, width):
    """issue 36: at 1280 px the table needed horizontal scrolling, the attack column wrapped to 4
    lines and the figure's labels overlapped; issue 48: at 390 px (a phone) the index was 1221 px
    wide. Measured here in Chromium's own layout (at 390 px each row is a card, one value a line)."""
    browser = _browser()
    from leaderboard.browser import layout_problems, render

    report = render(browser, site / "index.html", None, width=width)
    assert report.viewport_width == width and 0 < report.scroll_width <= width
    assert set(report.column_lines) == set(COLUMNS)
    assert report.column_lines["attack"] == 1 and report.column_lines["defense"] == 1, report.column_lines
    assert max(report.column_lines.values()) <= 2, report.column_lines
    assert len(report.plot_labels) == 6 and report.plot_title is not None
    assert layout_problems(report) == []  # labels disjoint, none on a marker, every text inside the figure


def test_layout_problems_finds_what_it_looks_for():
    from leaderboard.browser import PageReport, layout_problems

    bad = PageReport(scroll_width=1400, viewport_width=1280, column_lines={"attack": 4, "acc": 1},
                     plot_viewbox=(0, 0, 760, 440), plot_labels=[("a", (10, 10, 50, 22)), ("b", (40, 15, 80, 27))],
                     plot_markers=[(75, 20, 85, 30)], plot_texts=[("title", (-5, 2, 700, 18))])
    problems = layout_problems(bad)
    assert len(problems) == 5, problems
    assert any("1400 px wide" in p for p in problems) and any("'attack' cell wraps to 4" in p for p in problems)
    assert any("'a' and 'b' overlap" in p for p in problems) and any("'b' covers" in p for p in problems)
    assert any("'title' leaves the figure" in p for p in problems)


PLUGINS = NEAREST_LABEL_PLUGIN + """

class Twin(Memorize):
    name = "memorize-twin"
"""


def test_file_plugins_show_their_declared_names_and_no_path_of_the_machine(tmp_path):
    """issue 36: a file plugin was shown by the absolute path of the user's file (and two plugins of
    one file looked alike); the page now shows the name each declares, and no file of the site holds
    a path of the machine that ran it (results.json included: run.out, the plugin file)."""
    src = tmp_path / "home" / "someone" / "my-defenses.py"
    src.parent.mkdir(parents=True)
    src.write_text(PLUGINS)
    out = tmp_path / "home" / "someone" / "runs"
    for cls in ("Memorize", "Twin"):
        res = runner.invoke(app, ["evaluate", f"{src}:{cls}", "--out", str(out), "--models", "6", "--audit-size", "20",
                                  "--set", "attack.bootstrap=10", "--workers", "1"])
        assert res.exit_code == 0, res.output
    runs = sorted(out.iterdir())
    assert {json.loads((r / "results.json").read_text())["defense_name"] for r in runs} == {"memorize", "memorize-twin"}
    assert all(str(src) in (r / "results.json").read_text() for r in runs)  # the run itself records the path
    site = tmp_path / "site"
    res = runner.invoke(app, ["leaderboard", "build", str(out), "--out", str(site)])
    assert res.exit_code == 0, res.output
    page = (site / "index.html").read_text()
    for name in ("memorize", "memorize-twin"):
        html, _, _ = _index_cells(page, name)["defense"]
        assert f">{name}</a>" in html and ">plugin</span>" in html
    files = [f for f in site.rglob("*") if f.is_file()]
    assert len(files) == 2 + 2 * 2  # index.html, leaderboard.md; each entry's page and results.json
    for f in files + [p for p in site.rglob("*")]:
        text = f.read_text() if f.is_file() else ""
        for secret in (str(tmp_path), "/home/someone", "someone"):
            assert secret not in text and secret not in str(f.relative_to(site)), (f, secret)
    published = json.loads(next(site.glob("entries/*/results.json")).read_text())
    assert published["defense"] in ("my-defenses.py:Memorize", "my-defenses.py:Twin")
    assert published["config"]["run"]["out"] == "runs"  # the output folder keeps its last part only
    md = (site / "leaderboard.md").read_text()
    assert "| memorize | plugin |" in md and "| memorize-twin | plugin |" in md


def test_strip_paths_cuts_absolute_paths_and_nothing_else():
    from leaderboard.build import display_name, strip_paths

    assert strip_paths("/home/me/defs/mine.py:Mine") == "mine.py:Mine"
    assert strip_paths("C:\\Users\\me\\mine.py:Mine") == "mine.py:Mine"
    assert strip_paths("~/work/mine.py:Mine") == "mine.py:Mine"
    assert strip_paths("source /srv/data/ood.pt changed (see /tmp/x/y)") == "source ood.pt changed (see y)"
    for keep in ("mine.py:Mine", "digits/quick", "1/1000 guesses", "https://example.org/a/b", "lira (online-aug9)",
                 "runs/bench/hamp"):
        assert strip_paths(keep) == keep
    assert display_name({"defense": "/a/b/c.py:Cls"}) == "Cls"  # no declared name recorded: the class
    assert display_name({"defense": "/a/b/c.py:Cls", "defense_name": "mine"}) == "mine"
    assert display_name({"defense": "hamp", "defense_name": "undefended"}) == "hamp"  # a built-in: its own name


def _disjoint(boxes: list) -> bool:
    return not any(a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
                   for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_crowded_labels_never_overlap_each_other_a_point_or_the_legend():
    from leaderboard.plots import place_labels, text_width

    rng = __import__("random").Random(3)
    xy = [(300 + rng.uniform(-40, 40), 200 + rng.uniform(-30, 30)) for _ in range(40)]  # 40 points in 80 x 60 px
    texts = [f"defense-{i}" + "x" * (i % 7) for i in range(40)]
    area, legend = (60, 30, 700, 400), (600, 330, 700, 400)
    placed = place_labels(texts, xy, area, [legend])
    boxes = [lab.box for lab in placed if lab is not None]
    assert len(boxes) >= 20  # most of them find a spot ...
    assert _disjoint(boxes + [legend])  # ... and none overlaps another or the legend
    for lab in filter(None, placed):
        assert area[0] <= lab.box[0] and lab.box[2] <= area[2] and area[1] <= lab.box[1] and lab.box[3] <= area[3]
        assert lab.box[2] - lab.box[0] == pytest.approx(text_width(lab.text, 10))
        assert not any(lab.box[0] < x + 6 and x - 6 < lab.box[2] and lab.box[1] < y + 6 and y - 6 < lab.box[3]
                       for x, y in xy)  # covers no point
    frontier = [(200.0, 350.0, 420.0, 120.0)]  # a line through the crowd: no label crosses it
    placed = place_labels(texts, xy, area, [legend], lines=frontier)
    boxes = [lab.box for lab in placed if lab is not None]
    assert len(boxes) >= 15 and _disjoint(boxes + [legend])
    along = [(200 + 220 * t / 1000, 350 - 230 * t / 1000) for t in range(1001)]
    assert not any(b[0] <= x <= b[2] and b[1] <= y <= b[3] for b in boxes for x, y in along)
    lone = place_labels(["hamp"], [(100.0, 300.0)], area)[0]
    assert lone.x == 108.0 and not lone.lead  # a lone label sits right of its point, centred on it


def test_the_privacy_utility_figure_keys_labels_that_do_not_fit_and_fits_its_title():
    from leaderboard.plots import Point, privacy_utility_svg, text_width

    points = [Point(f"defense-number-{i}", 0.9 + 0.0004 * i, 0.3 + 0.001 * (i % 3), False) for i in range(30)]
    points += [Point("alibi", 0.8, 0.05, False), Point("alibi-high", 0.8, 0.05, False)]  # the same spot: one label
    title = "Privacy vs utility: " + "a very long setting name " * 10
    svg = privacy_utility_svg(points, {}, title)
    labels = re.findall(r'<text class="label" x="([\d.]+)" y="([\d.]+)" font-size="10">([^<]*)</text>', svg)
    keys = re.findall(r'<text class="key"[^>]*>([^<]*)<title>([^<]*)</title>', svg)
    assert ("alibi, alibi-high" in [t for _, _, t in labels]) and svg.count("alibi-high") == 2  # label + tooltip
    numbered = [t for _, _, t in labels if t.isdigit()]
    assert numbered  # crowded: some names became numbers, each explained in the key below the figure
    key = {}
    for _, full in keys:
        head, _, rest = full.partition(": ")
        key[head] = rest
    assert set(numbered) <= set(key)
    named = [n for _, _, t in labels if not t.isdigit() for n in t.split(", ")]
    named += [rest if head.isdigit() else head for head, rest in key.items()]
    assert sorted(named) == sorted({p.label for p in points})  # every entry named exactly once
    (shown,) = re.findall(r'<text class="title"[^>]*>([^<]*)</text>', svg)
    width = int(re.search(r'viewBox="0 0 (\d+) ', svg).group(1))
    assert shown.endswith("…") and text_width(shown, 13) <= width - 16  # cut to the figure, whole in <title>
    assert f"<title>{title}</title>" in svg


def test_an_entry_without_a_figure_is_ranked_last_and_drawn_at_its_upper_bound(results, tmp_path):
    r = _variant(results, "coarse", 0.93, 0.0, f"{9:064x}")
    r["sample"]["figure"].update(fpr=None, leak=None, declared=None, flag=None, reason="too few")
    ok = _variant(results, "fine", 0.95, 0.1, f"{8:064x}")
    for x in (r, ok):
        d = tmp_path / "entries" / entry_id(x)
        d.mkdir(parents=True)
        (d / "results.json").write_text(json.dumps(x))
    rows = rebuild(tmp_path)
    assert [x["defense"] for x in rows] == ["fine", "coarse"]  # no figure: ranked last
    page = (tmp_path / "index.html").read_text()
    html, _, tip = _index_cells(page, "coarse")["leak TPR"]
    assert html == "unresolved" and "no FPR with 3 expected false positives" in tip
    assert _index_cells(page, "coarse")["rank"][0] == "-"
    assert page.count('class="point') == 2 and "unresolved (upper bound)" in page
    assert "coarse: accuracy 93.0%, TPR at most 100.0%" in page


def test_each_setting_has_its_own_ranked_table_and_figure(results, tmp_path):
    """A setting fixes dataset, preset, models per level and audit size (fewer models weaken every
    attack): entries audited with another S are ranked in a table of their own; an entry whose
    attacks are not the preset's is listed apart, unranked, however low its figure (issue 46)."""
    for i, (name, models, tpr) in enumerate([("a", 6, 0.3), ("b", 6, 0.1), ("c", 8, 0.2), ("d", 8, 0.4),
                                             ("e", 6, 0.01)]):
        r = _variant(results, name, 0.9, tpr, f"{i:064x}")
        r["num_models"] = models
        if name == "e":  # audited with LiRA alone: its rank would depend on the attacks its author chose
            r["config"]["attack"]["names"] = ["lira"]
        d = tmp_path / "entries" / entry_id(r)
        d.mkdir(parents=True)
        (d / "results.json").write_text(json.dumps(r))
    rebuild(tmp_path)
    page = (tmp_path / "index.html").read_text()
    assert page.count('<table class="sortable board">') == 3 and page.count('class="plot privacy-utility"') == 2
    six, eight = "digits/quick: 6 models, 20 audit samples", "digits/quick: 8 models, 20 audit samples"
    apart = f"{six}: not ranked (attacks or canaries other than the preset&#x27;s)"
    assert page.index(f">{six}</h2>") < page.index(">b</a>") < page.index(">a</a>") < page.index(f">{apart}</h2>") < \
        page.index(">e</a>") < page.index(f">{eight}</h2>") < page.index(">c</a>") < page.index(">d</a>")
    assert [_index_cells(page, n)["rank"][0] for n in "cdbae"] == ["1", "2", "1", "2", "-"]  # ranks count per setting
    assert _index_cells(page, "e")["rank"][2] == ("not ranked: its attacks (attack.names lira) are not the preset&#x27;s "
                                                  "(lira, rmia, threshold)")
    assert f"Privacy vs utility: {six}" in page and f"Privacy vs utility: {eight}" in page
    (entry,) = [p for p in (tmp_path / "entries").iterdir() if p.name.startswith("e-")]
    assert "no: its attacks (attack.names lira) are not the preset" in (entry / "index.html").read_text()


def test_index_rows_each_have_an_upper_bound_only_where_unresolved(site):
    page = (site / "index.html").read_text()
    assert 'class="point bound"' not in page and "unresolved (upper bound)" not in page


def test_the_dpsgd_column_says_not_told_apart_where_the_ratios_interval_holds_1(results, tmp_path):
    """The DP-SGD column's verdict is the matched table's (harness.audit.matched.leak_ratio): 2% against 4.5%
    with wide SEs is neither a check nor a cross; an entry without the leak's SE is not compared."""
    files = tmp_path / "in"
    rows = [("dpsgd-high", 0.94, 0.08, None), ("dpsgd-medium", 0.92, 0.01, None), ("hamp", 0.93, 0.02, 0.02),
            ("relaxloss", 0.93, 0.03, None)]
    for i, (name, acc, tpr, se) in enumerate(rows):
        (files / f"run{i}").mkdir(parents=True)
        r = _variant(results, name, acc, tpr, f"{i:064x}", se)
        if name == "relaxloss":
            del r["sample"]["figure"]["leak"]["se"]
        (files / f"run{i}" / "results.json").write_text(json.dumps(r))
    res = runner.invoke(app, ["leaderboard", "build", str(files), "--out", str(tmp_path / "site")])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "site" / "index.html").read_text()
    html, _, tip = _index_cells(page, "hamp")["DP-SGD at same acc"]
    assert html.startswith("4.5% ") and "&#8776;" in html and "&#10003;" not in html and "&#10007;" not in html
    assert "it not told apart from DP-SGD" not in tip and "not told apart from DP-SGD at its utility" in tip
    html, _, tip = _index_cells(page, "relaxloss")["DP-SGD at same acc"]
    assert "?" in html and "not compared (no SE of the leak in this results.json)" in tip


def _index_cells(page: str, defense: str) -> dict[str, tuple[str, str, str]]:
    """The index row of ``defense``: column -> (its cell's HTML, its sort key, its tooltip)."""
    row = next(r for r in re.split(r"<tr[ >]", page) if f">{defense}</a>" in r)
    cells = re.findall(r'<td class="[^"]*" data-col="([^"]*)" data-label="[^"]*" data-sort="([^"]*)"'
                       r'(?: title="([^"]*)")?>(.*?)</td>', row)
    assert [c[0] for c in cells] == list(COLUMNS), row
    return {col: (html, key, tip) for col, key, tip, html in cells}


def _md_rows(md: str) -> list[dict[str, str]]:
    """leaderboard.md as rows of column -> cell text."""
    lines = [ln for ln in md.splitlines() if ln.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split(" | ")]
    return [dict(zip(head, (c.strip() for c in ln.strip("|").split(" | ")))) for ln in lines[1:]]


def test_a_beaten_declared_headline_gets_a_mark_naming_the_comparison_and_one_footnote(results, tmp_path):
    r = _variant(results, "declares-weak", 0.9, 0.2, f"{7:064x}")
    top = {"candidate": "sample-mislabeled/rmia:online-noaug", "name": "rmia", "variant": "online-noaug",
           "access": "black-box", "fpr": 0.05, "tpr": 0.777, "headline_tpr": 0.111, "statistic": 4.0}
    r["sample"]["figure"]["flag"] = {"flagged": True, "p_value": 0.004, "top": top}
    r["population"]["figure"]["flag"] = {"flagged": False, "p_value": 0.6, "top": None}
    d = tmp_path / "entries" / entry_id(r)
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps(r))
    rebuild(tmp_path)
    page = (tmp_path / "index.html").read_text()
    cells = _index_cells(page, "declares-weak")
    html, _, _ = cells["declared TPR"]  # the declared headline carries the mark, naming the comparison
    assert 'class="flag" href="#fn-flag"' in html and "rmia (online-noaug) finds 77.7% at 5% FPR" in html
    assert "where the declared headline finds 11.1% (adjusted p = 0.004" in html
    html, key, tip = cells["leak TPR"]  # the leak (ranked) has no mark: it does not depend on the declaration
    assert html.startswith('<span class="v">20.0%') and key == "0.200000" and "flag" not in html
    assert page.count('id="fn-flag"') == 1 and page.count("finds a candidate of the leak that beats") == 1
    (row,) = _md_rows((tmp_path / "leaderboard.md").read_text())
    assert row["declared TPR"].endswith(" ⚠") and row["leak TPR"] == "20.0%"
    entry = (d / "index.html").read_text()
    assert "rmia (online-noaug) finds 77.7% at 5% FPR vs 11.1%, adjusted p = 0.004" in entry


def test_models_compute_and_epsilons_are_on_the_entry_page_and_in_the_markdown(site, results):
    assert results["num_models"] == 6 and "population" in results and "sample" in results  # 2 levels of 6
    rows = _md_rows((site / "leaderboard.md").read_text())
    assert len(rows) == 6 and {r["models"] for r in rows} == {"6"}
    assert "models" not in COLUMNS and "device-hours" not in COLUMNS  # the index leaves them to the entry page
    page = next(site.glob("entries/*/index.html")).read_text()
    assert "6 per level, 12 trained" in page and "6 per level × 2 levels" in page
    assert "device-hours" in page and "empirical ε ≥ (one-run, 95%)" in page


class _FillingFile:
    """A file opened for writing on a disk with ``left[0]`` bytes free (shared by every such file;
    None: no limit): a write stores what fits, then raises ENOSPC, as a full disk does."""

    def __init__(self, f: Any, left: list[int | None]) -> None:
        self._f, self._left = f, left

    def write(self, data: Any) -> int:
        room = self._left[0]
        if room is not None and len(data) > room:
            self._f.write(data[:room])
            self._f.flush()
            self._left[0] = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if room is not None:
            self._left[0] = room - len(data)
        return self._f.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)

    def __enter__(self) -> "_FillingFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._f.close()


@pytest.fixture()
def disk_full(monkeypatch) -> Callable[[int | None], None]:
    """``fill(n)``: from then on every file opened for writing (open(), Path.write_text, os.fdopen,
    shutil's copies) has ``n`` bytes left in all, then each write fails with ENOSPC; ``fill(None)``
    lifts the limit."""
    real_open = io.open
    left: list[int | None] = [None]

    def opener(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = real_open(file, mode, *args, **kwargs)
        return _FillingFile(f, left) if set(mode) & set("wax+") else f

    monkeypatch.setattr(io, "open", opener)
    monkeypatch.setattr(builtins, "open", opener)
    monkeypatch.setattr(shutil, "_USE_CP_SENDFILE", False)  # copies go through write() as well

    def fill(n: int | None) -> None:
        left[0] = n

    return fill


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_full_disk_leaves_every_site_file_as_it_was_or_wholly_new(site, results, disk_full, tmp_path):
    # a new version of an entry (same id: its results.json is replaced, its page and the index change)
    changed = _variant(results, "undefended", 0.91, 0.3, f"{0:064x}")
    eid = entry_id(changed)
    new_in = tmp_path / "new"
    new_in.mkdir()
    (new_in / "results.json").write_text(json.dumps(changed, indent=1))
    before = _files(site)
    reference = tmp_path / "reference"
    shutil.copytree(site, reference)
    assert runner.invoke(app, ["leaderboard", "build", str(new_in), "--out", str(reference)]).exit_code == 0
    after = _files(reference)
    assert {f for f in after if after[f] != before.get(f)} == {
        "index.html", "leaderboard.md", f"entries/{eid}/index.html", f"entries/{eid}/results.json"}
    # the bytes a build writes: the new results.json, every entry page, the index and leaderboard.md
    total = sum(len(data) for f, data in after.items() if not f.endswith("results.json")) + len(
        after[f"entries/{eid}/results.json"])
    budgets = [0, 100, *(k * total // 6 for k in range(1, 6)), total - 10]
    for budget in budgets:  # the disk fills up at every stage of the build
        trial = tmp_path / f"site-{budget}"
        disk_full(None)
        shutil.copytree(site, trial)
        disk_full(budget)
        res = runner.invoke(app, ["leaderboard", "build", str(new_in), "--out", str(trial)])
        disk_full(None)
        assert res.exit_code == 2 and "No space left on device" in res.output, (budget, res.output)
        assert "Traceback" not in res.output
        now = _files(trial)
        assert set(now) == set(before), sorted(set(now) ^ set(before))  # no temp file left
        for f, data in now.items():
            assert data in (before[f], after[f]), f"{f} is half-written with {budget} bytes free"


def test_verify_on_a_full_disk_leaves_entry_json_as_it_was(results, disk_full, tmp_path):
    from leaderboard.submit import verify_entry

    site = tmp_path / "site"
    d = site / "entries" / entry_id(results)
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps(results))
    meta = json.dumps({"source": "submission", "verified": False, "verified_by": None, "submitted": "2026-01-01"})
    (d / "entry.json").write_text(meta)
    rerun = tmp_path / "rerun.json"
    rerun.write_text(json.dumps({**results, "seed": results["seed"] + 1}))
    disk_full(20)
    with pytest.raises(OSError) as err:
        verify_entry(site, d.name, rerun)
    assert err.value.errno == errno.ENOSPC
    assert (d / "entry.json").read_text() == meta
    assert sorted(p.name for p in d.iterdir()) == ["entry.json", "results.json"]  # no temp file


# --- issue 48: pages a second reader uses (phones, crowded boards, provenance, the paper's figures) ------


def _crowded(results: dict, folder: Path) -> list[dict]:
    """Entries whose every figure is resolved, with its CI, beaten (⚠) and a ratio, one of them with a
    100-character name trained outside and verified (two tags): the widest rows a board has."""
    out = []
    for i, (name, acc, tpr) in enumerate([("undefended", 0.95, 0.9), ("dpsgd-high", 0.94, 0.08),
                                          ("dpsgd-medium", 0.90, 0.01), ("hamp", 0.92, 0.02),
                                          ("relaxloss", 0.97, 0.05), ("outside", 0.935, 0.5)]):
        r = _variant(results, name, acc, tpr, f"{i + 20:064x}")
        r.pop("defense_reference")  # as a file from before the key: a built-in's is looked up
        for lv in ("population", "sample"):
            fig = r[lv]["figure"]
            fig["fpr"] = 0.001
            if lv == "population":
                fig["leak"]["tpr"] = 0.981
            fig["leak"]["lower"] = 0.887
            fig["declared"].update(tpr=0.5 * fig["leak"]["tpr"], ci=[0.387, 0.999], lower=None)
            fig["flag"] = {"flagged": True, "p_value": 0.004,
                           "top": {"name": "rmia", "variant": "online-noaug", "fpr": 0.001,
                                   "tpr": fig["leak"]["tpr"], "headline_tpr": 0.5 * fig["leak"]["tpr"]}}
        r["sample_population_ratio"] = {"ratio": 293.6, "ci": [50.0, 725.7]}
        r["sample"]["privacy"] = {"epsilon": 8.53e6}
        if name == "outside":
            r["provenance"], r["external"] = "external", {"name": "a-long-label-for-models-trained-elsewhere-" * 2}
        d = folder / f"run{i}"
        d.mkdir(parents=True)
        (d / "results.json").write_text(json.dumps(r))
        out.append(r)
    return out


@pytest.fixture()
def crowded_site(results, tmp_path) -> Path:
    rs = _crowded(results, tmp_path / "in")
    out = tmp_path / "site"
    assert runner.invoke(app, ["leaderboard", "build", str(tmp_path / "in"), "--out", str(out)]).exit_code == 0
    (out / "entries" / entry_id(rs[-1]) / "entry.json").write_text(
        json.dumps({"source": "submission", "verified": True, "verified_by": "the board"}))
    rebuild(out)
    return out


@pytest.mark.parametrize("width", [390, 1280, 1920])
def test_a_crowded_index_and_its_entry_pages_fit_the_window(crowded_site, width):
    """The widest rows (CIs everywhere, ⚠ marks, a long name with two tags) fit 390, 1280 and 1920 px:
    no sideways scrolling, the name cut and capped while its tags stay whole, at most two lines a
    cell; an entry page fits too, its title whole, its summary values in a column wide enough to read."""
    browser = _browser()
    from leaderboard.browser import layout_problems, render

    report = render(browser, crowded_site / "index.html", None, width=width)
    assert 0 < report.scroll_width <= width and layout_problems(report) == [], layout_problems(report)
    assert report.column_lines["defense"] == 1, report.column_lines
    if width > 720:  # a table (narrower windows get one card per row)
        assert report.column_widths["defense"] <= 320, report.column_widths
    for eid in ("undefended", "outside"):
        page = next(p for p in (crowded_site / "entries").glob(f"{eid}*/index.html"))
        entry = render(browser, page, None, width=width)
        assert entry.console_errors == [] and 0 < entry.scroll_width <= width, (eid, entry.widest)
        assert not entry.title_cut and entry.summary_value_width >= min(300, width - 60), entry.summary_value_width


def test_the_provenance_filter_hides_the_other_rows(crowded_site):
    browser = _browser()
    from leaderboard.browser import visible_rows

    page = crowded_site / "index.html"
    everyone = visible_rows(browser, page)
    assert len(everyone) == 6
    outside = visible_rows(browser, page, uncheck=("built-in",))
    assert len(outside) == 1 and outside[0].startswith("a-long-label")
    assert visible_rows(browser, page, uncheck=("trained outside",)) == [n for n in everyone if n != outside[0]]
    assert visible_rows(browser, page, verified_only=True) == outside
    assert visible_rows(browser, page, uncheck=("built-in",), width=390) == outside  # the cards too


def test_the_index_gives_date_s_and_c_a_paper_link_and_a_filter_per_provenance(crowded_site, results):
    page = (crowded_site / "index.html").read_text()
    cells = _index_cells(page, "hamp")
    assert cells["date"][0] == f'<span class="v">{results["created"][:10]}</span>'
    assert cells["setup"][0] == f'{results["num_models"]}×{results["audit_size"]}'
    assert '<a class="ref" href="https://arxiv.org/abs/2307.01610"' in cells["defense"][0]  # HAMP's paper
    assert 'class="ref"' not in _index_cells(page, "undefended")["defense"][0]  # no paper of its own
    boxes = re.findall(r'<input type="checkbox" data-prov="([^"]*)" checked> [^(]*\((\d+)\)', page)
    assert boxes == [("built-in", "5"), ("trained outside", "1")]  # the provenances on the board, counted
    assert 'id="verified-only"' in page and page.count('data-verified="1"') == 1
    assert re.findall(r'<tr data-prov="([^"]*)"', page).count("built-in") == 5


def test_only_https_references_become_links(results, tmp_path):
    from leaderboard.site import defense_reference

    for url, linked in (("https://example.org/paper", True), ("javascript:alert(1)", False),
                        ("http://example.org", False), ('https://x.org/"onmouseover=1', False), ("", False)):
        assert (defense_reference({**results, "defense_reference": url}) == url) is linked, url
    old = {k: v for k, v in results.items() if k != "defense_reference"}
    assert defense_reference({**old, "defense": "dfkd"}) == "https://arxiv.org/abs/1912.08795"  # a built-in's today
    assert defense_reference({**old, "defense": "x.py:Mine"}) is None
    assert results["defense_reference"] == ""  # undefended declares none


def test_the_paper_figures_are_drawn_where_the_board_is_at_the_papers_setting(results, tmp_path):
    """At cifar10/paper the figure draws the paper's Table 1 (hollow diamonds, its DP-SGD ones joined)
    and names it in the legend, and a built-in's row tooltip gives the paper's figure; at any other
    setting none of it."""
    folder = tmp_path / "in"
    for i, (name, acc, tpr) in enumerate([("hamp", 0.88, 0.3), ("dpsgd-high", 0.91, 0.1)]):
        for preset in ("paper", "quick"):
            r = _variant(results, name, acc, tpr, f"{i}{preset}".ljust(64, "0"))
            r["dataset"], r["preset"] = ("cifar10", preset) if preset == "paper" else (r["dataset"], preset)
            if preset == "paper":  # the paper preset's own attack settings, so that the entry ranks there
                r["config"]["attack"]["params"] = {}
            (folder / f"{name}-{preset}").mkdir(parents=True)
            (folder / f"{name}-{preset}" / "results.json").write_text(json.dumps(r))
    assert runner.invoke(app, ["leaderboard", "build", str(folder), "--out", str(tmp_path / "site")]).exit_code == 0
    page = (tmp_path / "site" / "index.html").read_text()
    svgs = re.findall(r"<svg[^>]*privacy-utility.*?</svg>", page, re.S)
    paper = next(g for g in svgs if "cifar10/paper" in g)
    other = next(g for g in svgs if "cifar10/paper" not in g)
    assert paper.count('class="ref"') == 10 and 'class="reference-frontier"' in paper
    assert "paper (Aerni et al. 2024, Table 1)" in paper and "HAMP, accuracy 88.0%, TPR 28.5%" in paper
    assert 'class="ref"' not in other and "Aerni" not in other
    tips = re.findall(r'data-col="leak TPR"[^>]* title="([^"]*)"', page)
    assert sum("the paper (Table 1, HAMP): 28.5% at 88.0% accuracy" in t for t in tips) == 1


def test_the_figure_legend_lists_only_what_the_figure_draws():
    from leaderboard.plots import Point, privacy_utility_svg

    def legend(svg: str) -> list[str]:
        group = re.search(r'<g class="legend">(.*?)</g>', svg, re.S).group(1)
        return re.findall(r"<title>([^<]*)</title>", group)

    others = [Point("hamp", 0.9, 0.1, False), Point("selena", 0.92, 0.3, False)]
    dp = [Point("dpsgd-high", 0.94, 0.08, True), Point("dpsgd-medium", 0.9, 0.01, True)]
    assert legend(privacy_utility_svg(others, {}, "t")) == ["other defenses"]
    assert legend(privacy_utility_svg(dp, {"s": [(0.94, 0.08), (0.9, 0.01)]}, "t")) == ["DP-SGD", "DP-SGD frontier"]
    assert legend(privacy_utility_svg(dp[:1] + others, {"s": [(0.94, 0.08)]}, "t")) == ["DP-SGD", "other defenses"]
    bound = [Point("coarse", 0.9, 0.2, False, bound=True)]
    assert legend(privacy_utility_svg(bound, {}, "t", bound_note="at most")) == ["at most"]
    # labels wider than the margin are wrapped, never cut: each drawn whole below the last
    from leaderboard.paper import SOURCE
    from leaderboard.plots import Reference

    svg = privacy_utility_svg(bound + dp, {"s": [(0.94, 0.08), (0.9, 0.01)]}, "t", bound_note="unresolved (upper bound)",
                              reference=Reference(SOURCE, [("HAMP", 0.88, 0.285)]))
    group = re.search(r'<g class="legend">(.*?)</g>', svg, re.S).group(1)
    texts = re.findall(r'<text x="[\d.]+" y="([\d.]+)"[^>]*><title>([^<]*)</title>(.*?)</text>', group, re.S)
    assert [t for _, t, _ in texts] == ["DP-SGD", "DP-SGD frontier", "unresolved (upper bound)", SOURCE]
    for _, title, spans in texts:
        assert " ".join(re.findall(r"<tspan[^>]*>([^<]*)</tspan>", spans)) == title
    assert max(len(re.findall("<tspan", spans)) for *_, spans in texts) == 2
    ys = [float(y) for y, *_ in texts]
    assert all(b - a >= 15 for a, b in zip(ys, ys[1:])) and ys[-1] <= 440 - 42  # no overlap, above the axis


def test_roc_legend_labels_are_whole_and_the_unresolved_fprs_shaded():
    from leaderboard.plots import LOG_MIN, roc_svg, wrap_label

    labels = ["sample-mislabeled: lira:online-logit-noaug-persample", "sample-mislabeled: lira:online-logit-noaug-global",
              "lira-averaged:online-logit-noaug-persample", "x" * 90]
    svg = roc_svg([(lb, [0.0, 1.0], [0.0, 1.0]) for lb in labels], "t", resolvable=1 / 3200)
    shown = ["".join(re.findall(r"<tspan[^>]*>([^<]*)</tspan>", t))
             for t in re.findall(r'<text class="legend-label".*?</text>', svg, re.S)]
    assert shown[:3] == labels[:3]  # whole, over several lines: the variants told apart
    assert shown[3].startswith("x") and shown[3].endswith("xxxx") and "…" in shown[3]  # too long: its end kept
    assert all(len(wrap_label(lb, 154, 10)) <= 3 for lb in labels)
    (x, w) = map(float, re.search(r'<rect class="unresolved" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', svg).groups())
    left, right = 60, 520 - 190
    import math

    assert w == pytest.approx((math.log10(1 / 3200) - math.log10(LOG_MIN)) / -math.log10(LOG_MIN) * (right - left), abs=0.1)
    assert 'class="unresolved"' not in roc_svg([("a", [0.0, 1.0], [0.0, 1.0])], "t")


def test_entry_pages_shade_below_the_designs_resolution_and_name_versions_and_accuracies(results, tmp_path):
    """The entry page: its ROC figures shaded below 1 / the experiment's non-member guesses; both
    levels' test accuracies (the board's acc is the sample level's); the models version named for
    what it is, for a run the harness trained and for imported outputs."""
    from leaderboard.site import entry_html

    r = copy.deepcopy(results)
    r["population"]["test_accuracy"]["mean"], r["sample"]["test_accuracy"]["mean"] = 0.963, 0.844
    page = entry_html(r, {"source": "run"})
    negs = {lv: r[lv]["attacks"][0]["num_neg"] for lv in ("population", "sample")}
    assert page.count('class="unresolved"') == 3  # the headline figure and one per experiment
    assert f"FPR below {1 / min(negs.values()):.2g}" in page and f"FPR below {1 / negs['population']:.2g}" in page
    assert "test accuracy, sample level</th><td class=\"wrap\">84.4%" in page
    assert "test accuracy, population level</th><td class=\"wrap\">96.3%" in page
    assert "trained with version" not in page and "models version (training code)" in page
    assert f"{r['trained_with_version']}: the version of the harness&#x27;s training code" in page
    r["provenance"], r["external"] = "external", {"name": "mine"}
    checked = "attacks re-run on the submitted outputs (the training cannot be re-run)"
    page = entry_html(r, {"source": "submission", "verified": False, "trained_outside": True, "checked": checked})
    assert "models version (of the importing harness)" in page and "trained outside the harness" in page
    assert f"submitted, not verified; checked: {checked}" in page  # as docs/external-models.md, section 4, says
    from leaderboard.site import INDEX_COLUMNS

    assert "sample-level models" in dict((k, t) for k, _, t in INDEX_COLUMNS)["test acc"]


def test_names_with_bidi_controls_are_refused_at_import_and_cut_on_the_pages(results, tmp_path):
    """U+202E reverses what follows it in terminals, titles and tooltips: `harness import --name`
    refuses it (one line, before anything is read), and a name from elsewhere that holds one is shown
    without it."""
    from leaderboard.build import display_name

    res = runner.invoke(app, ["import", str(tmp_path / "plan"), "--outputs", str(tmp_path / "out"),
                              "--name", "resnet\u202egnp.exe"])
    assert res.exit_code == 2 and "bidirectional control characters (U+202E)" in res.output, res.output
    assert "Traceback" not in res.output
    r = {**results, "provenance": "external", "external": {"name": "resnet\u202egnp.exe\u2066"}}
    assert display_name(r) == "resnetgnp.exe"
    from leaderboard.site import entry_html

    assert "\u202e" not in entry_html(r, {"source": "run"})


def test_the_privacy_utility_axis_names_the_figure_fpr_its_entries_are_read_at():
    """issue 54: the y axis said "TPR at 0.1% FPR" for a setting read at another FPR (8 models: 0.5%)."""
    from leaderboard.site import _figure_of

    def row(name: str, fpr: float) -> dict:
        return {"defense": name, "test acc": 0.9, "rank TPR": 0.2, "is_dpsgd": False, "figure FPR": fpr}

    def axis(svg: str) -> str:
        return html.unescape(re.findall(r'rotate\(-90[^>]*>([^<]*)</text>', svg)[0])

    assert axis(_figure_of("digits/quick-8", [row("a", 0.005), row("b", 0.005)], [])) == "sample-level TPR at 0.5% FPR"
    assert axis(_figure_of("digits/quick", [row("a", 0.001)], [])) == "sample-level TPR at 0.1% FPR"
    assert axis(_figure_of("mixed", [row("a", 0.001), row("b", 0.005)], [])) == "sample-level TPR at each entry's figure FPR"
