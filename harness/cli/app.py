"""The ``harness`` Typer application; every command module registers itself on :data:`app`."""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Evaluate membership-inference defenses honestly.")
