"""What every command shares: the consoles, one-line failures, and progress shown with rich.

Commands are thin: they parse options, call :mod:`harness.api` and print. :func:`guard` turns a
user's mistake (ConfigError), a defense's failure (PluginFailure, with its own frames), an OS failure
(a read-only folder, a full disk) and Ctrl-C into one line and an exit code; :class:`ProgressView`
turns the API's :class:`~harness.api.Progress` events into rich status lines and progress bars.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from harness.core.errors import ConfigError

console = Console()
err_console = Console(stderr=True)

WAIT_HELP = "if another harness process is using the run directory, wait for it instead of stopping"


def fail(msg: str, code: int = 2) -> None:
    """Print ``error: msg`` on stderr and exit with ``code`` (2: a mistake the user can fix)."""
    err_console.print(f"[bold red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def plugin_failure(e: Any, debug: bool) -> None:
    """A defense's failure: one error line, its own frames (or the full traceback), exit 2."""
    err_console.print(f"[bold red]error:[/] {escape(e.message)}", highlight=False, soft_wrap=True)
    if debug and e.full:
        err_console.print(e.full.rstrip("\n"), highlight=False, markup=False)
    else:
        if e.frames:
            err_console.print("the defense's own frames (innermost last):", highlight=False)
            err_console.print(e.frames, highlight=False, markup=False)
        if e.full:
            err_console.print("(--debug prints the full traceback)", highlight=False, style="dim")
    raise typer.Exit(2)


@contextmanager
def guard(debug: bool = False, interrupted: str | None = None) -> Iterator[None]:
    """One ``error:`` line and exit 2 for config mistakes (incl. a locked or damaged run directory),
    a defense's failure (its own frames) and OS failures; Ctrl-C prints ``interrupted`` and exits 130
    (without it, the interrupt propagates)."""
    from harness.core.errors import os_error_message
    from harness.run.plugin_errors import PluginFailure

    try:
        yield
    except ConfigError as e:
        fail(str(e))
    except PluginFailure as e:
        plugin_failure(e, debug)
    except OSError as e:
        fail(os_error_message(e))
    except KeyboardInterrupt:
        if interrupted is None:
            raise
        err_console.print(f"[yellow]interrupted:[/] {interrupted}", highlight=False)
        raise typer.Exit(130)


class ProgressView:
    """A :data:`harness.api.ProgressFn` that shows the events with rich: ``status`` as a spinner,
    ``train`` as one bar per level, the other kinds as lines. Use as a context manager (it stops the
    live displays on exit)."""

    STYLES = {"note": "[yellow]note:[/] ", "repaired": "[yellow]repaired:[/] ", "waiting": ""}

    def __init__(self) -> None:
        self._status: Any = None
        self._bars: Progress | None = None
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> "ProgressView":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop()

    def _stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
        if self._bars is not None:
            self._bars.stop()
            self._bars, self._tasks = None, {}

    def __call__(self, event: Any) -> None:
        if event.kind == "status":
            self._stop()
            self._status = console.status(f"{event.message}...")
            self._status.start()
        elif event.kind == "train":
            if self._bars is None:
                self._stop()
                self._bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TimeRemainingColumn(), console=console)
                self._bars.start()
            if event.level not in self._tasks:
                self._tasks[event.level] = self._bars.add_task(f"train {event.level}", total=event.total)
            self._bars.update(self._tasks[event.level], completed=event.done)
        else:
            console.print(self.STYLES.get(event.kind, "") + escape(event.message), highlight=False)


def flag_overrides(**flags: Any) -> dict[str, Any]:
    """Dotted config overrides of the CLI's own flags (``--epochs 5`` is ``train.epochs=5``); a
    flag left out (None) is no override."""
    mapping = {"models": "audit.models", "audit_size": "audit.size", "canary": "audit.canary", "epochs": "train.epochs",
               "seed": "seed", "device": "run.device", "workers": "run.workers", "executor": "run.executor",
               "out": "run.out", "level": "run.level", "data_dir": "data.path", "inner": "defense_params.inner",
               "rate": "defense_params.rate", "save_models": "run.save_models"}
    return {mapping[k]: v for k, v in flags.items() if v is not None}
