"""``harness report RUN_DIR [--html]``: re-print a run's tables, re-export its CSVs (harness.api.report)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from harness.cli.app import app
from harness.cli.common import WAIT_HELP, ProgressView, console, guard
from harness.core.errors import ConfigError


def _page(results: dict[str, Any]) -> str:
    """The run's leaderboard page (leaderboard.site.entry_html), self-contained."""
    from leaderboard.site import entry_html

    try:
        return entry_html(results, {"source": "run"}, results_href="results.json", index_href=None)
    except (KeyError, TypeError, IndexError, StopIteration) as e:
        raise ConfigError(f"results.json lacks what the page needs ({type(e).__name__}: {e}); `harness attack` "
                          "rewrites it") from None


@app.command()
def report(
    run_dir: Path = typer.Argument(..., help="a run directory with results.json"),
    details: bool = typer.Option(False, help="list every attack variant"),
    html: bool = typer.Option(False, "--html", help="also write RUN_DIR/report.html: the run's leaderboard page "
                              "(ROC figures, attack table, config, provenance), self-contained"),
    wait: bool = typer.Option(False, "--wait", help=WAIT_HELP),
) -> None:
    """Re-print the tables of a finished run and re-export table.csv / attacks.csv."""
    from harness.api import report as export
    from harness.audit.report import print_report

    with guard():
        with ProgressView() as view:
            results = export(run_dir, html=_page if html else None, wait=wait, progress=view)
        print_report(results.data, console, details=details)
        if html:
            console.print(f"page: {run_dir / 'report.html'}", highlight=False)
