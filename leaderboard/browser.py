"""Open a built page in a real headless Chromium (Playwright driving a local Chromium binary).

Used by the site's browser test and by ``benchmarks/screenshot_leaderboard.py``. Any request that
is not a ``file://`` or ``data:`` URL is blocked and recorded: the site must load nothing from the
network. Needs the ``browser`` extra (``pip install -e ".[browser]"``: Playwright) and a Chromium
binary (Debian's ``chromium``; Playwright's own download is not needed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class PageReport:
    console_errors: list[str] = field(default_factory=list)
    blocked_requests: list[str] = field(default_factory=list)
    table_rows: int = 0
    svg_boxes: int = 0
    svg_sizes: list[tuple[float, float]] = field(default_factory=list)
    #: after one click on the "test acc" header, the column's values in row order (ascending if sorting works)
    sorted_column: list[float] = field(default_factory=list)


def render(chromium: str, page_file: Path, screenshot: Path | None, width: int = 1500) -> PageReport:
    """Load ``page_file`` in headless ``chromium``; return what a reader would see and every error."""
    from playwright.sync_api import sync_playwright

    report = PageReport()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": 1000})
            page.on("console", lambda m: report.console_errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: report.console_errors.append(str(e)))

            def route(r):  # type: ignore[no-untyped-def]
                if r.request.url.startswith(("file://", "data:")):
                    return r.continue_()
                report.blocked_requests.append(r.request.url)
                return r.abort()

            page.route("**/*", route)
            page.goto(page_file.resolve().as_uri())
            page.wait_for_load_state("load")
            report.table_rows = page.locator("table.sortable tbody tr").count()
            sizes = page.eval_on_selector_all(
                "svg", "els => els.map(e => { const b = e.getBoundingClientRect(); return [b.width, b.height]; })")
            report.svg_sizes = [(float(w), float(h)) for w, h in sizes]
            report.svg_boxes = sum(w > 0 and h > 0 for w, h in report.svg_sizes)
            if report.table_rows:  # a click on the test-accuracy header sorts the rows by it
                page.locator("table.sortable th", has_text="test acc").click()
                col = page.eval_on_selector_all("table.sortable th", "ths => ths.findIndex(t => t.textContent === 'test acc')")
                report.sorted_column = [float(v) for v in page.eval_on_selector_all(
                    "table.sortable tbody tr", f"rows => rows.map(r => r.cells[{int(col)}].dataset.sort)")]
            if screenshot is not None:
                page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    report.console_errors += [f"blocked network request: {u}" for u in report.blocked_requests]
    return report
