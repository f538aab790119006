"""The static leaderboard site (leaderboard/site.py, plots.py) and `harness report --html`."""

from __future__ import annotations

import builtins
import copy
import errno
import io
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest
from typer.testing import CliRunner

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


def _index_cells(page: str, defense: str) -> dict[str, tuple[str, str]]:
    """The index row of ``defense``: column -> (its cell's HTML, its sort key)."""
    row = next(r for r in page.split("<tr>") if f">{defense}<" in r)
    cells = re.findall(r'<td class="[^"]*" data-sort="([^"]*)">(.*?)</td>', row)
    assert len(cells) == len(COLUMNS), row
    return {c: (html, key) for c, (key, html) in zip(COLUMNS, cells)}


def _md_rows(md: str) -> list[dict[str, str]]:
    """leaderboard.md as rows of column -> cell text."""
    lines = [ln for ln in md.splitlines() if ln.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split(" | ")]
    return [dict(zip(head, (c.strip() for c in ln.strip("|").split(" | ")))) for ln in lines[1:]]


def test_population_strongest_figure_is_shown_beside_the_population_headline(results, tmp_path):
    r = _variant(results, "popleak", 0.9, 0.2, f"{7:064x}")
    for lv, tpr, beats in (("population", 0.777, True), ("sample", 0.333, False)):
        r[lv]["strongest"]["tpr_at_fpr"]["0.001"], r[lv]["strongest"]["resolved"]["0.001"] = tpr, True
        r[lv]["strongest"]["beats_headline"] = beats
    d = tmp_path / "entries" / entry_id(r)
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps(r))
    rebuild(tmp_path)
    assert COLUMNS.index("strongest population TPR") == COLUMNS.index("population TPR") + 1
    cells = _index_cells((tmp_path / "index.html").read_text(), "popleak")
    html, key = cells["strongest population TPR"]
    name = f'{r["population"]["strongest"]["name"]} ({r["population"]["strongest"]["variant"]})'
    assert html.startswith("77.7%") and key == "0.777000" and name in html
    assert "above the headline" in html  # the population level's own flag
    assert "33.3%" in cells["strongest sample TPR"][0] and "above the headline" not in cells["strongest sample TPR"][0]
    (row,) = _md_rows((tmp_path / "leaderboard.md").read_text())
    assert row["strongest population TPR"] == "77.7% ⚠" and row["strongest sample TPR"] == "33.3%"
    assert row["strongest population attack"] == name
    assert MD_COLUMNS.index("strongest population TPR") == MD_COLUMNS.index("population TPR") + 1


def test_models_column_is_the_per_level_count_of_the_report(site, results):
    assert results["num_models"] == 6 and "population" in results and "sample" in results  # 2 levels of 6
    rows = _md_rows((site / "leaderboard.md").read_text())
    assert len(rows) == 6 and {r["models"] for r in rows} == {"6"}
    html, key = _index_cells((site / "index.html").read_text(), "hamp")["models"]
    assert key == "6" and html.startswith("6 ") and "2 levels" in html
    page = next(site.glob("entries/*/index.html")).read_text()
    assert "6 per level, 12 trained" in page


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
