"""What every command shares: the consoles, one-line failures, and progress shown with rich.

Commands are thin: they parse options, call :mod:`harness.api` and print. :func:`guard` turns a
user's mistake (ConfigError), a defense's failure (PluginFailure, with its own frames), an OS failure
(a read-only folder, a full disk) and Ctrl-C into one line and an exit code; :class:`ProgressView`
turns the API's :class:`~harness.api.Progress` events into rich status lines and progress bars on
a terminal, and into plain lines in a log (a line whenever models finish).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterator

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from harness.core.errors import ConfigError

console = Console()
err_console = Console(stderr=True)


def table_console() -> Console:
    """The console a command's tables go to: :data:`console` on a terminal (its width); where stdout is
    a pipe or a file, one without a width limit, so that no cell is cut to rich's 80-column default
    (``harness compare A B > file`` keeps every name and figure whole)."""
    return console if console.is_terminal else Console(width=100_000)

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
    """A :data:`harness.api.ProgressFn` that shows the events with rich. On a terminal: ``status``
    as a spinner, ``train`` as one bar per level, the other kinds as lines. Elsewhere (a log file,
    nohup, Slurm, a pipe: ``console.is_terminal`` false), where bars and spinners would show nothing
    until they stop, every event is a plain line: ``status`` as ``<step>...`` (printed when the next
    event arrives or the view closes without an error, so that a user error found during the step
    stays the command's one line; a step that keeps updating its status, such as the features computed
    before training, prints its latest status every :attr:`HEARTBEAT_S` seconds), and ``train`` as
    ``train <level>: <finished>/<total> models done, <elapsed> elapsed`` whenever a level's count of
    finished models changes (the API reports every second) and, while one of its models trains and
    reports its progress, at least every :attr:`HEARTBEAT_S` seconds (then with the running models'
    fractions). ``live`` overrides the terminal check. Use as a context manager (it stops the live
    displays on exit)."""

    STYLES = {"note": "[yellow]note:[/] ", "repaired": "[yellow]repaired:[/] ", "waiting": ""}
    #: seconds after which a log gets a line about a level whose models are training, though none finished
    HEARTBEAT_S = 60.0

    def __init__(self, live: bool | None = None) -> None:
        self.live = console.is_terminal if live is None else live
        self._status: Any = None
        self._bars: Progress | None = None
        self._tasks: dict[str, Any] = {}
        self._t0: float | None = None  # the first train event (plain lines' elapsed time)
        self._printed: dict[str, tuple[int, float]] = {}  # level -> (finished, time) of its last plain line
        self._pending: str | None = None  # a plain status line, printed when the next event arrives
        self._pending_since = 0.0  # when the first of the statuses not printed yet arrived

    def __enter__(self) -> "ProgressView":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None and self._pending is not None:  # the last step finished: say it ran
            console.print(self._pending, highlight=False, soft_wrap=True)
        self._pending = None
        self._stop()

    def _stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
        if self._bars is not None:
            self._bars.stop()
            self._bars, self._tasks = None, {}

    def __call__(self, event: Any) -> None:
        if not self.live:
            self._plain(event)
        elif event.kind == "status":
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

    def _plain(self, event: Any) -> None:
        """One plain line per event, without rich's live displays (the class docstring)."""
        if event.kind == "status":
            now = time.monotonic()
            if self._pending is None:
                self._pending_since = now
            self._pending = escape(f"{event.message}...")
            if now - self._pending_since >= self.HEARTBEAT_S:  # a long step's updates: one line a heartbeat
                console.print(self._pending, highlight=False, soft_wrap=True)
                self._pending = None
            return
        if event.kind == "train":
            line = self._train_line(event)
            if line is None:
                return
        else:
            line = self.STYLES.get(event.kind, "") + escape(event.message)
        if self._pending is not None:
            console.print(self._pending, highlight=False, soft_wrap=True)
            self._pending = None
        console.print(line, highlight=False, soft_wrap=True)

    def _train_line(self, event: Any) -> str | None:
        """The line for a ``train`` event, or None when the level has nothing new to say."""
        now = time.monotonic()
        if self._t0 is None:
            self._t0 = now
        last = self._printed.get(event.level)
        running = event.done - event.finished > 1e-6
        quiet = last is None or now - last[1] >= self.HEARTBEAT_S
        if last is not None and event.finished == last[0] and not (running and quiet):
            return None
        self._printed[event.level] = (event.finished, now)
        fractions = f" ({event.done:.1f} with the running ones)" if running else ""
        t = int(now - self._t0)
        elapsed = f"{t // 3600}:{t % 3600 // 60:02d}:{t % 60:02d}"
        return (f"train {escape(str(event.level))}: {event.finished}/{event.total} models done{fractions}, "
                f"{elapsed} elapsed")


def flag_overrides(**flags: Any) -> dict[str, Any]:
    """Dotted config overrides of the CLI's own flags (``--epochs 5`` is ``train.epochs=5``); a
    flag left out (None) is no override."""
    mapping = {"models": "audit.models", "audit_size": "audit.size", "canary": "audit.canary", "epochs": "train.epochs",
               "seed": "seed", "device": "run.device", "workers": "run.workers", "executor": "run.executor",
               "out": "run.out", "level": "run.level", "data_dir": "data.path", "inner": "defense_params.inner",
               "rate": "defense_params.rate", "save_models": "run.save_models"}
    return {mapping[k]: v for k, v in flags.items() if v is not None}
