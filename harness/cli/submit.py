"""``harness submit RUN_DIR -o entry.tar.gz``: bundle a finished run for the leaderboard."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from harness.cli.app import app
from harness.cli.common import WAIT_HELP, console, fail, guard


@app.command()
def submit(
    run_dir: Path = typer.Argument(..., help="a finished run directory"),
    out: Path = typer.Option(Path("entry.tar.gz"), "-o", "--out", help="the bundle to write"),
    wait: bool = typer.Option(False, "--wait", help=WAIT_HELP),
) -> None:
    """Bundle a finished run for the leaderboard: results, design, signals and their hashes.

    The bundle appears at OUT only when complete; a failure or Ctrl-C leaves OUT as it was."""
    # Ctrl-C: the bundle is written to a temp file renamed over OUT at the end, so nothing changed
    with guard(interrupted=f"nothing was written ({escape(str(out))} is as it was)"):
        from leaderboard.submit import SubmissionError, make_bundle

        try:
            hashes = make_bundle(run_dir, out, wait=wait)
        except SubmissionError as e:
            fail(str(e))
    console.print(f"{escape(str(out))}: {len(hashes)} files with their SHA-256; add it with "
                  f"`harness leaderboard add {escape(str(out))} --site SITE`", highlight=False)
