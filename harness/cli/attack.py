"""``harness attack RUN_DIR``: re-run the attacks on saved signals (harness.api.attack)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from harness.cli.app import app
from harness.cli.common import WAIT_HELP, ProgressView, console, guard, table_console
from harness.core.config import parse_set_options


@app.command()
def attack(
    run_dir: Path = typer.Argument(..., help="a run directory made by `harness evaluate`"),
    details: bool = typer.Option(False, help="list every attack variant"),
    set_: list[str] = typer.Option([], "--set", help="change the run's saved attack settings: --set attack.names=\\[lira] "
                                   "(saved in RUN_DIR/config.json with the new results when the attacks finish)"),
    wait: bool = typer.Option(False, "--wait", help=WAIT_HELP),
) -> None:
    """Re-run the attacks on a run's saved signals (no retraining) and rewrite its reports."""
    # the imports (torch: seconds) inside the guard: Ctrl-C while they load prints its line too
    with guard(interrupted="nothing was changed: results.json and the run's saved attack settings (config.json) "
                           "are as before"):
        from harness.api import attack as run_attacks
        from harness.audit.report import print_report
        from harness.core.allocator import tune_for_large_arrays

        tune_for_large_arrays()  # an attack phase only: freed large arrays reused (harness/core/allocator.py)

        overrides = parse_set_options(set_)
        with ProgressView() as view:
            results = run_attacks(run_dir, overrides, wait=wait, progress=view)
        print_report(results.data, table_console(), details=details)
        console.print(f"Results: {escape(str(results.path / 'results.json'))}", highlight=False, soft_wrap=True)
