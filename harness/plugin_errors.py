"""A defense's own mistakes, reported as such (not as harness tracebacks).

When a defense's ``fit`` or its served model's ``query`` raises, or breaks the served-model
contract, the job raises :class:`PluginError`: one line naming the defense, the model and the
exception, the defense's own stack frames only (files in the defense's folder, not the harness's,
torch's or the worker pool's), and the full traceback for ``--debug``. The contract
(:func:`check_served`) is checked on every trained model right after ``fit``, so a broken plugin
stops the run at its first model:

- ``fit`` returns a :class:`~defenses.base.ServedModel`;
- ``query(x)`` returns a finite floating-point array of shape (N, num_classes).
"""

from __future__ import annotations

import inspect
import traceback
from pathlib import Path
from typing import Any

import numpy as np

#: at most this many of the defense's own frames are printed (the innermost ones)
MAX_FRAMES = 6


class PluginError(Exception):
    """A defense (built-in or plugin) failed or broke the served-model contract."""

    def __init__(self, message: str, frames: str = "", full: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.frames = frames
        self.full = full

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across the worker pool
        return (PluginError, (self.message, self.frames, self.full))

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


def wrap(exc: BaseException, defense: object, defense_name: str, what: str, where: str) -> PluginError:
    """A :class:`PluginError` for ``exc`` raised by the defense's ``what`` (``fit`` / ``query``)."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    message = f"defense {defense_name!r} failed in {what} ({where}): {type(exc).__name__}" + (f": {text}" if text else "")
    full = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return PluginError(message, own_frames(exc, defense_folder(defense)), full)


def check_served(served: Any, x: np.ndarray, num_classes: int, defense_name: str, where: str) -> None:
    """Raise :class:`PluginError` unless ``served`` is a ServedModel whose ``query`` on a few audit
    images returns a finite float array of shape (n, num_classes)."""
    from defenses.base import ServedModel

    if not isinstance(served, ServedModel):
        raise PluginError(f"defense {defense_name!r}: fit returned {type(served).__name__} ({where}); it must return a "
                          "defenses.base.ServedModel (e.g. TorchClassifier(net, train.mean, train.std, ctx.device))")
    probe = x[: min(4, len(x))]
    try:
        out = served.query(probe)
    except Exception as e:  # the plugin's query itself failed
        raise wrap(e, served, defense_name, "query", where) from None
    expected = f"a finite float array of shape ({len(probe)}, {num_classes}) (one row of {num_classes} class scores per image)"
    if not isinstance(out, np.ndarray):
        raise PluginError(f"defense {defense_name!r}: query returned {type(out).__name__} ({where}); expected {expected}")
    if out.shape != (len(probe), num_classes):
        raise PluginError(f"defense {defense_name!r}: query returned shape {out.shape} on {len(probe)} images "
                          f"({where}); expected {expected}")
    if not np.issubdtype(out.dtype, np.floating):
        raise PluginError(f"defense {defense_name!r}: query returned dtype {out.dtype} ({where}); expected {expected}")
    if not np.all(np.isfinite(out)):
        raise PluginError(f"defense {defense_name!r}: query returned NaN or infinite values ({where}); "
                          f"expected {expected}")
