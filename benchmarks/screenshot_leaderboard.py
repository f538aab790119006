"""Build the leaderboard site from run directories and screenshot its index page in headless Chromium.

    python benchmarks/screenshot_leaderboard.py RUNS... [--out site] [--png docs/leaderboard.png]
        [--chromium /usr/bin/chromium]

Needs the ``browser`` extra (``pip install -e ".[browser]"``) and a Chromium binary (Debian's
``chromium``). Prints the number of entries, the table rows and plots Chromium rendered, and any
console error or network request (there must be none).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from leaderboard.browser import render
from leaderboard.site import build_site


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=Path("site"))
    ap.add_argument("--png", type=Path, default=Path("docs/leaderboard.png"))
    ap.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    args = ap.parse_args()
    if not args.chromium:
        sys.exit("no Chromium found: install Debian's chromium or pass --chromium PATH")
    skipped: list[tuple[Path, str]] = []
    rows = build_site(args.runs, args.out, skipped)
    for path, why in skipped:
        print(f"skipped {path}: {why}")
    report = render(args.chromium, args.out / "index.html", args.png)
    print(f"{len(rows)} entries; Chromium shows {report.table_rows} table rows and {report.svg_boxes} plots; "
          f"console errors: {report.console_errors or 'none'}; screenshot: {args.png}")
    entry = next((args.out / "entries").glob("*/index.html"))
    er = render(args.chromium, entry, None)
    print(f"entry page {entry.parent.name}: {er.svg_boxes} plots; console errors: {er.console_errors or 'none'}")
    if report.console_errors or er.console_errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
