"""``harness report RUN_DIR [--html]``: re-print a run's tables, re-export its CSVs (harness.api.report)."""

from __future__ import annotations

from pathlib import Path

import typer

from harness.cli.app import app
from harness.cli.common import WAIT_HELP, ProgressView, console, guard, table_console


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
            results = export(run_dir, html=html, wait=wait, progress=view)
        print_report(results.data, table_console(), details=details)
        if html:
            console.print(f"page: {run_dir / 'report.html'}", highlight=False)
