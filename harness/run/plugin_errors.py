"""A defense's own mistakes, reported as such (not as harness tracebacks).

When a defense's ``fit`` or its served model's ``query`` raises, or breaks the served-model
contract, the job raises :class:`PluginFailure`: one line naming the defense, the model and the
exception, the defense's own stack frames only (files in the defense's folder, not the harness's,
torch's or the worker pool's), and the full traceback for ``--debug``. The contract is checked on
every trained model right after ``fit`` (:func:`check_served`: a few images) and then on *every*
query the harness makes of it (:class:`CheckedServed`: each signal, the test accuracy), so a broken
plugin stops the run at the model whose output broke it, naming the row:

- ``fit`` returns a :class:`~defenses.base.ServedModel`;
- ``query(x)``, ``raw_query(x)`` and ``splitai_query(x)`` return a floating-point array of shape
  (N, num_classes) whose values are finite and fit float32 (the signals' storage): no NaN, no
  infinity, no 1e300;
- ``features(x)``, when offered, returns a finite floating-point array of shape (N, D).
"""

from __future__ import annotations

import inspect
import traceback
from pathlib import Path
from typing import Any, Callable, TypeVar

import numpy as np

T = TypeVar("T")

#: at most this many of the defense's own frames are printed (the innermost ones)
MAX_FRAMES = 6


class PluginFailure(Exception):
    """A defense (built-in or plugin) failed or broke the served-model contract."""

    def __init__(self, message: str, frames: str = "", full: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.frames = frames
        self.full = full

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across the worker pool
        return (PluginFailure, (self.message, self.frames, self.full))

    def __str__(self) -> str:
        return self.message


def defense_folder(defense: object) -> Path:
    """The folder of the file that defines the defense's class: its frames are the plugin's own."""
    try:
        return Path(inspect.getfile(type(defense))).resolve().parent
    except (TypeError, OSError):
        return Path("/nonexistent")


def own_frames(exc: BaseException, folder: Path, limit: int = MAX_FRAMES) -> str:
    """The traceback entries of ``exc`` in files under ``folder`` (the innermost ``limit``), in the
    usual ``File "...", line N, in f`` form."""
    entries = [fs for fs in traceback.extract_tb(exc.__traceback__)
               if _under(Path(fs.filename), folder)]
    return "".join(traceback.format_list(entries[-limit:])).rstrip("\n")


def _under(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder)
    except (ValueError, OSError):
        return False
    return "site-packages" not in path.parts


def wrap(exc: BaseException, defense: object, defense_name: str, what: str, where: str) -> PluginFailure:
    """A :class:`PluginFailure` for ``exc`` raised by the defense's ``what`` (``fit`` / ``query``)."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    message = f"defense {defense_name!r} failed in {what} ({where}): {type(exc).__name__}" + (f": {text}" if text else "")
    full = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return PluginFailure(message, own_frames(exc, defense_folder(defense)), full)


def call_defense(call: Callable[[], T], obj: object, defense_name: str, what: str, where: str) -> T:
    """``call()`` (a defense's ``fit``, or queries of its served model ``obj``) with the plugin's own
    failure reported as a :class:`PluginFailure` (:func:`wrap`, ``what``: ``fit`` or ``query``) and a
    user mistake, a plugin failure already reported or Ctrl-C passed on as they are."""
    from harness.core.errors import ConfigError

    try:
        return call()
    except (ConfigError, PluginFailure, KeyboardInterrupt):
        raise
    except Exception as e:  # the defense's own failure, with its own frames
        raise wrap(e, obj, defense_name, what, where) from None


def check_served(served: Any, x: np.ndarray, num_classes: int, defense_name: str, where: str) -> "CheckedServed":
    """Raise :class:`PluginFailure` unless ``served`` is a ServedModel whose ``query`` on a few audit
    images keeps the contract (:func:`check_output`); return it wrapped in :class:`CheckedServed`,
    which checks every later query."""
    from defenses.base import ServedModel

    if not isinstance(served, ServedModel):
        raise PluginFailure(f"defense {defense_name!r}: fit returned {type(served).__name__} ({where}); it must return a "
                          "defenses.base.ServedModel (e.g. TorchClassifier(net, train.mean, train.std, ctx.device))")
    probe = x[: min(4, len(x))]
    try:
        out = served.query(probe)
    except Exception as e:  # the plugin's query itself failed
        raise wrap(e, served, defense_name, "query", where) from None
    check_output(out, len(probe), num_classes, "query", defense_name, where, "first check after fit")
    return CheckedServed(served, num_classes, defense_name, where)


#: the largest magnitude a stored signal can hold (signals are saved as float32 or smaller)
FLOAT32_MAX = float(np.finfo(np.float32).max)


def _bad_rows(out: np.ndarray) -> np.ndarray:
    """Rows holding a value that is NaN, infinite, or beyond float32's range."""
    if out.dtype.itemsize <= 4:  # float16 / float32: every finite value fits float32
        bad = ~np.isfinite(out)
    else:
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(out) | (np.abs(out) > FLOAT32_MAX)
    return np.flatnonzero(bad.reshape(len(out), -1).any(axis=1))


def check_output(out: Any, n: int, width: int | None, method: str, defense_name: str, where: str,
                 during: str = "") -> None:
    """Raise :class:`PluginFailure` unless ``out`` (what ``method`` returned for ``n`` images) is a
    floating-point array of shape (n, width) (any width when None) whose values are finite and fit
    float32; the message names the first bad row."""
    ctx = f"{where}{', ' + during if during else ''}"
    shape = f"({n}, {width if width is not None else 'D'})"
    expected = f"a float array of shape {shape} with finite values that fit float32 (|v| <= 3.4e38)"
    if not isinstance(out, np.ndarray):
        raise PluginFailure(f"defense {defense_name!r}: {method} returned {type(out).__name__} ({ctx}); expected "
                          f"{expected}")
    if out.ndim != 2 or out.shape[0] != n or (width is not None and out.shape[1] != width):
        raise PluginFailure(f"defense {defense_name!r}: {method} returned shape {out.shape} on {n} images ({ctx}); "
                          f"expected {expected}")
    if not np.issubdtype(out.dtype, np.floating):
        raise PluginFailure(f"defense {defense_name!r}: {method} returned dtype {out.dtype} ({ctx}); expected {expected}")
    rows = _bad_rows(out)
    if len(rows):
        row = out[rows[0]]
        value = next(v for v in row.ravel().astype(np.float64) if not (np.isfinite(v) and abs(v) <= FLOAT32_MAX))
        raise PluginFailure(f"defense {defense_name!r}: {method} returned {float(value):g} in row {rows[0]} of {n} images "
                          f"({ctx}; {len(rows)} bad row(s)); expected {expected}")


class CheckedServed:
    """A served model whose every ``query``, ``raw_query``, ``features`` and ``splitai_query`` output is
    checked (:func:`check_output`) before the harness uses it; ``during`` names what the harness is
    computing (set by :func:`harness.run.signals.compute_signals`), for the message. Exceptions of the
    wrapped model pass through unchanged (the runner reports them as the defense's)."""

    def __init__(self, served: Any, num_classes: int, defense_name: str, where: str) -> None:
        self.inner = served
        self.num_classes = num_classes
        self.defense_name = defense_name
        self.where = where
        self.during = ""

    def _check(self, out: Any, x: np.ndarray, method: str, width: int | None) -> Any:
        check_output(out, len(x), width, method, self.defense_name, self.where, self.during)
        return out

    def query(self, x: np.ndarray) -> np.ndarray:
        return self._check(self.inner.query(x), x, "query", self.num_classes)

    def raw_query(self, x: np.ndarray) -> np.ndarray | None:
        out = self.inner.raw_query(x)
        return None if out is None else self._check(out, x, "raw_query", self.num_classes)

    def features(self, x: np.ndarray) -> np.ndarray | None:
        out = self.inner.features(x)
        return None if out is None else self._check(out, x, "features", None)

    def splitai_query(self, x: np.ndarray) -> np.ndarray | None:
        out = self.inner.splitai_query(x)
        return None if out is None else self._check(out, x, "splitai_query", self.num_classes)

    def view_augmentation(self) -> Any:
        return self.inner.view_augmentation()

    def info(self) -> dict[str, Any]:
        return self.inner.info()

    def model_state(self) -> dict[str, Any] | None:
        return self.inner.model_state()
