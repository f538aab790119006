"""The ``harness`` command line: thin commands over the Python API (:mod:`harness.api`).

    harness evaluate DEFENSE [--preset quick|cifar10|paper|FILE.yaml] [overrides]   train + attack + report
    harness attack RUN_DIR                                                            re-run attacks, no training
    harness report RUN_DIR [--html]                                                   re-print / re-export
    harness compare RUN_A RUN_B                                                       two runs side by side
    harness plan PLAN; harness import PLAN --outputs DIR                              models trained elsewhere
    harness submit RUN_DIR -o entry.tar.gz; harness leaderboard build|add|verify     the leaderboard
    harness tune DEFENSE --min-accuracy A                                             the most private setting at a utility target
    harness bound sgm|dpsgd|thudi; harness audit-one-run DEFENSE; harness list

One module per command (each registers itself on :data:`harness.cli.app.app`). User mistakes
(bad config, missing data, unknown plugin, foreign or locked run directory, OS failures) print one
``error:`` line and exit with code 2; Ctrl-C keeps every finished model and exits with 130.
"""

from __future__ import annotations

import os
import sys

from harness.cli import attack, audit_one_run, compare, evaluate, external, plugins, report, submit, tune  # noqa: F401 (register)
from harness.cli.app import app
from harness.cli.bound import bound_app
from harness.cli.leaderboard import leaderboard_app

app.add_typer(bound_app, name="bound", help="Provable MI bounds from DP parameters (no training).")
app.add_typer(leaderboard_app, name="leaderboard", help="The static leaderboard site: build, add, verify.")

__all__ = ["app", "main"]


def main() -> None:
    """The ``harness`` command. Once a command has finished, its output flushed and the atexit
    handlers run (the worker pool and its fork server gone, multiprocessing's temporary files
    removed), the process ends with ``os._exit``: the interpreter's own teardown of torch and the
    other modules writes nothing and took about 1 s of every run (measured on the quick preset)."""
    import atexit

    try:
        app()
        code = 0
    except SystemExit as e:  # typer ends every command with one
        if e.code is not None and not isinstance(e.code, int):
            raise
        code = e.code or 0
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    os._exit(code)


