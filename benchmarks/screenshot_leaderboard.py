"""Build the leaderboard site from run directories, open every page in headless Chromium, screenshot the index.

    python benchmarks/screenshot_leaderboard.py RUNS... [--out site] [--png docs/leaderboard-{width}.png]
        [--widths 390,1280,1920]
    python benchmarks/screenshot_leaderboard.py --evaluate all [--preset quick] [--runs-root runs/leaderboard]
        [--data-dir PATH] [--workers 2] [--out site] [--png docs/leaderboard-{width}.png] [--chromium /usr/bin/chromium]

With ``--evaluate all`` (or a comma-separated list of defenses) it first runs ``harness evaluate
DEFENSE --preset PRESET`` for every built-in defense (``harness list``; finished runs resume at no
cost), timing each, and builds the site from those runs plus any RUNS given.

The index is opened in a window of each width (``--widths``) and screenshot in full to ``--png``
with ``{width}`` replaced. Needs the ``browser`` extra (``pip install -e ".[browser]"``) and a
Chromium binary (Debian's ``chromium``). Prints the number of entries, the table rows and plots
Chromium rendered on the index, its page width, the most lines a cell of each column wraps to,
and for every entry page its plots and console errors; any console error or network request fails
the run, as does an index without one row per run or without its privacy-utility figure, one
wider than its window, a cell wrapped to more than two lines, overlapping figure labels
(leaderboard.browser.layout_problems), or an entry page without its ROC figure.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from harness_cli import evaluate_into

from harness.plugins import available, resolve
from leaderboard.browser import layout_problems, render
from leaderboard.site import build_site


def evaluate(defense: str, args: argparse.Namespace) -> Path:
    """Run (or resume) ``harness evaluate DEFENSE`` at the preset; return its run directory."""
    extra = ["--data-dir", args.data_dir] if args.data_dir else []
    run_dir, wall = evaluate_into(args.runs_root / args.preset / defense, defense, "--preset", args.preset,
                                  "--workers", str(args.workers), *extra)
    print(f"evaluated {defense}: {wall:.0f} s -> {run_dir}", flush=True)
    return run_dir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", type=Path)
    ap.add_argument("--evaluate", default="", help="'all' built-in defenses or a comma-separated list")
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--runs-root", type=Path, default=Path("runs/leaderboard"))
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("site"))
    ap.add_argument("--png", default="docs/leaderboard-{width}.png", help="'{width}' is replaced by each width")
    ap.add_argument("--widths", default="390,1280,1920", help="window widths in px, comma-separated")
    ap.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    args = ap.parse_args()
    if not args.chromium:
        sys.exit("no Chromium found: install Debian's chromium or pass --chromium PATH")
    trainable = [d for d in available("defenses") if not resolve("defenses", d).trained_outside]  # not `external`
    defenses = trainable if args.evaluate == "all" else [d for d in args.evaluate.split(",") if d]
    unknown = sorted(set(defenses) - set(available("defenses")))
    if unknown:
        sys.exit(f"unknown defenses: {', '.join(unknown)} (see `harness list`)")
    runs = list(args.runs) + [evaluate(d, args) for d in defenses]
    if not runs:
        sys.exit("no runs: give RUNS or --evaluate")
    skipped: list[tuple[Path, str]] = []
    rows = build_site(runs, args.out, skipped)
    for path, why in skipped:
        print(f"skipped {path}: {why}")
    failures: list[str] = []
    for width in [int(w) for w in args.widths.split(",")]:
        png = Path(args.png.replace("{width}", str(width)))
        report = render(args.chromium, args.out / "index.html", png, width=width)
        print(f"{len(runs)} runs, {len(rows)} entries; index at {width} px: Chromium shows {report.table_rows} table "
              f"rows and {report.svg_boxes} plots, page {report.scroll_width:.0f} px wide in a "
              f"{report.viewport_width:.0f} px window, lines per cell at most {report.column_lines}, "
              f"{len(report.plot_labels)} figure labels; console errors: {report.console_errors or 'none'}; "
              f"screenshot: {png}")
        if report.table_rows != len(runs) or len(rows) != len(runs):
            failures.append(f"index shows {report.table_rows} rows for {len(runs)} runs")
        if report.svg_boxes < 1:
            failures.append("index shows no privacy-utility figure")
        failures += [f"index at {width} px: {e}" for e in report.console_errors + layout_problems(report)]
    narrowest = min(int(w) for w in args.widths.split(","))
    for entry in sorted((args.out / "entries").glob("*/index.html")):
        er = render(args.chromium, entry, None, width=narrowest)
        print(f"  entry {entry.parent.name}: {er.svg_boxes} plots, {er.scroll_width:.0f} px wide at {narrowest} px; "
              f"console errors: {er.console_errors or 'none'}")
        if er.svg_boxes < 1:
            failures.append(f"entry {entry.parent.name} shows no ROC figure")
        if er.scroll_width > er.viewport_width:
            failures.append(f"entry {entry.parent.name} is {er.scroll_width:.0f} px wide at {narrowest} px")
        failures += [f"entry {entry.parent.name}: {e}" for e in er.console_errors]
    if failures:
        sys.exit("FAILED: " + "; ".join(failures))
    print("all pages render with their figures, no console errors and no network requests")


if __name__ == "__main__":
    main()
