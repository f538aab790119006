"""Open a built page in a real headless Chromium (Playwright driving a local Chromium binary).

Used by the site's browser test and by ``benchmarks/screenshot_leaderboard.py``. Any request that
is not a ``file://`` or ``data:`` URL is blocked and recorded: the site must load nothing from the
network. Needs the ``browser`` extra (``pip install -e ".[browser]"``: Playwright) and a Chromium
binary (Debian's ``chromium``; Playwright's own download is not needed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


Box = tuple[float, float, float, float]  # x0, y0, x1, y1


@dataclass
class PageReport:
    console_errors: list[str] = field(default_factory=list)
    blocked_requests: list[str] = field(default_factory=list)
    table_rows: int = 0
    svg_boxes: int = 0
    svg_sizes: list[tuple[float, float]] = field(default_factory=list)
    #: after one click on the first table's test-accuracy header, the column's values in row order
    #: (ascending if sorting works)
    sorted_column: list[float] = field(default_factory=list)
    #: the page's width (document.documentElement.scrollWidth) and the window's: wider means a horizontal scrollbar
    scroll_width: float = 0.0
    viewport_width: float = 0.0
    #: index table column (its data-col) -> the most lines any of its cells wraps to
    column_lines: dict[str, int] = field(default_factory=dict)
    #: the privacy-utility figure as Chromium lays it out: its viewBox, the boxes of its title, labels,
    #: markers and every text (in viewBox units, transforms applied)
    plot_viewbox: Box | None = None
    plot_title: Box | None = None
    plot_labels: list[tuple[str, Box]] = field(default_factory=list)
    plot_markers: list[Box] = field(default_factory=list)
    plot_texts: list[tuple[str, Box]] = field(default_factory=list)
    #: index table column (its data-col) -> the widest of its cells, in px
    column_widths: dict[str, float] = field(default_factory=dict)
    #: the page's first heading overflows its box (its text is cut)
    title_cut: bool = False
    #: the narrowest value cell of an entry page's summary table, in px (0: no summary table)
    summary_value_width: float = 0.0
    #: the widest element of the page that reaches past the window's right edge (tag.class), for a message
    widest: str = ""


_LINES = """els => { const out = {}; for (const td of els) { const col = td.dataset.col; const range = document.createRange();
range.selectNodeContents(td); const rects = [...range.getClientRects()].filter(r => r.width > 0 && r.height > 0)
.sort((a, b) => a.top - b.top); let lines = 0, bottom = -Infinity; for (const r of rects) { if (r.top >= bottom - 2)
{ lines += 1; bottom = r.bottom; } else { bottom = Math.max(bottom, r.bottom); } } out[col] = Math.max(out[col] || 0,
lines); } return out; }"""

_PLOT = """svg => { const vb = svg.viewBox.baseVal, s = svg.getBoundingClientRect(), k = vb.width / s.width;
const box = e => { const b = e.getBoundingClientRect(); return [vb.x + (b.left - s.left) * k, vb.y + (b.top - s.top) * k,
vb.x + (b.right - s.left) * k, vb.y + (b.bottom - s.top) * k]; }; const title = svg.querySelector('text.title');
return { viewbox: [vb.x, vb.y, vb.x + vb.width, vb.y + vb.height], title: title ? box(title) : null,
labels: [...svg.querySelectorAll('text.label')].map(t => [t.textContent, box(t)]),
markers: [...svg.querySelectorAll('.point, g.legend')].map(box),
texts: [...svg.querySelectorAll('text')].map(t => [t.textContent, box(t)]) }; }"""


def render(chromium: str, page_file: Path, screenshot: Path | None, width: int = 1500,
           height: int = 1000) -> PageReport:
    """Load ``page_file`` in headless ``chromium`` in a ``width`` x ``height`` window; return what a
    reader would see and every error (the full page goes to ``screenshot`` when given)."""
    from playwright.sync_api import sync_playwright

    report = PageReport()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
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
            report.scroll_width = float(page.evaluate("document.documentElement.scrollWidth"))
            report.viewport_width = float(page.evaluate("window.innerWidth"))
            report.widest = str(page.evaluate(_WIDEST))
            report.title_cut = bool(page.evaluate(
                "(() => { const h = document.querySelector('h1'); return !!h && (h.scrollWidth > h.clientWidth + 1 || "
                "h.scrollHeight > h.clientHeight + 1); })()"))
            report.summary_value_width = float(page.evaluate(
                "Math.min(...[...document.querySelectorAll('table.summary td')].map(td => "
                "td.getBoundingClientRect().width), Infinity)") or 0.0)
            if report.summary_value_width == float("inf"):
                report.summary_value_width = 0.0
            report.column_lines = {str(k): int(v) for k, v in
                                   page.eval_on_selector_all("table.sortable tbody td[data-col]", _LINES).items()}
            report.column_widths = {str(k): float(v) for k, v in page.eval_on_selector_all(
                "table.sortable tbody td[data-col]", "els => { const out = {}; for (const td of els) { "
                "out[td.dataset.col] = Math.max(out[td.dataset.col] || 0, td.getBoundingClientRect().width); } "
                "return out; }").items()}
            if page.locator("svg.privacy-utility").count():
                plot = page.eval_on_selector("svg.privacy-utility", _PLOT)
                report.plot_viewbox = tuple(plot["viewbox"])
                report.plot_title = tuple(plot["title"]) if plot["title"] else None
                report.plot_labels = [(t, tuple(b)) for t, b in plot["labels"]]
                report.plot_markers = [tuple(b) for b in plot["markers"]]
                report.plot_texts = [(t, tuple(b)) for t, b in plot["texts"]]
            if screenshot is not None:  # before any click: the rows in rank order
                page.screenshot(path=str(screenshot), full_page=True)
            header = page.locator("table.sortable").first.locator('th[data-col="test acc"]')
            if report.table_rows and header.is_visible():  # a click on the test-accuracy header sorts the rows
                header.click()
                report.sorted_column = [float(v) for v in page.eval_on_selector(
                    "table.sortable", """t => [...t.querySelectorAll('tbody td[data-col="test acc"]')]
                    .map(c => c.dataset.sort)""")]
        finally:
            browser.close()
    report.console_errors += [f"blocked network request: {u}" for u in report.blocked_requests]
    return report


_WIDEST = """(() => { const w = window.innerWidth; let best = null, right = w;
for (const e of document.body.querySelectorAll('*')) { const r = e.getBoundingClientRect();
if (r.right > right + 0.5) { right = r.right; best = e; } }
return best ? `<${best.tagName.toLowerCase()} class="${best.getAttribute('class') || ''}"> reaches `
+ `${Math.round(right)} px` : ''; })()"""


def visible_rows(chromium: str, page_file: Path, uncheck: tuple[str, ...] = (), verified_only: bool = False,
                 width: int = 1280) -> list[str]:
    """The defense names of the index rows left visible after unticking the provenance filter's
    ``uncheck`` boxes (and ticking "verified only"), in a real headless Chromium."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.goto(page_file.resolve().as_uri())
            for prov in uncheck:
                page.locator(f'.filter input[data-prov="{prov}"]').uncheck()
            if verified_only:
                page.locator("#verified-only").check()
            return [str(t) for t in page.eval_on_selector_all(
                "table.board tbody tr", "rows => rows.filter(r => r.offsetParent !== null)"
                ".map(r => r.querySelector('a.dname').textContent)")]
        finally:
            browser.close()


def overlaps(a: Box, b: Box) -> bool:
    """Whether two boxes share any area (touching edges do not count)."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def layout_problems(report: PageReport, max_lines: int = 2) -> list[str]:
    """What a reader of the index would trip over, from :func:`render`'s measurements: a page wider
    than the window (a horizontal scrollbar), a table cell wrapped to more than ``max_lines`` lines,
    figure labels that overlap each other or cover a marker, text outside the figure."""
    out = []
    if report.scroll_width > report.viewport_width:
        out.append(f"the page is {report.scroll_width:.0f} px wide in a {report.viewport_width:.0f} px window"
                   + (f" ({report.widest})" if report.widest else ""))
    if report.title_cut:
        out.append("the title is cut")
    out += [f"a {col!r} cell wraps to {n} lines" for col, n in report.column_lines.items() if n > max_lines]
    labels = report.plot_labels
    for i, (ta, a) in enumerate(labels):
        out += [f"figure labels {ta!r} and {tb!r} overlap" for tb, b in labels[i + 1:] if overlaps(a, b)]
        out += [f"figure label {ta!r} covers a marker or the legend" for m in report.plot_markers if overlaps(a, m)]
    if report.plot_viewbox is not None:
        vx0, vy0, vx1, vy1 = report.plot_viewbox
        out += [f"figure text {t!r} leaves the figure" for t, (x0, y0, x1, y1) in report.plot_texts
                if x0 < vx0 or y0 < vy0 or x1 > vx1 or y1 > vy1]
    return out
