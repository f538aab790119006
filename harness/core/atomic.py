"""Atomic file writes: a temp file beside the target, fsynced, then renamed over it.

Every file the harness writes goes through here (the run directory, the leaderboard, downloaded data
files): an interrupted or failed write (Ctrl-C, a full disk, a refused download) removes its temp file
and leaves the target as it was, and its ``OSError`` names the target (harness/core/errors.py turns
it into one line).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable

_UMASK = os.umask(0o022)
os.umask(_UMASK)


def _named(e: OSError, path: Path) -> OSError:
    """``e`` with ``path`` as its file name when it has none (a failed write() on a descriptor)."""
    if e.filename is None:
        return type(e)(e.errno, e.strerror, str(path)) if e.errno is not None else e
    return e


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to a temp file in the same folder, fsync, then rename over ``path``. On any
    failure (a full disk) the temp file is removed and ``path`` is as before; the OSError names it."""
    atomic_write_with(path, lambda f: f.write(data))


def atomic_write_with(path: Path, write: Callable[[BinaryIO], Any]) -> None:
    """:func:`atomic_write_bytes` for content that ``write`` streams into the open temp file (a
    tar.gz too large to hold in memory)."""
    tmp = temp_file(path, write)  # its OSErrors name the file
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def temp_file(path: Path, write: Callable[[BinaryIO], Any]) -> Path:
    """A temp file beside ``path`` (``.<name>.<random>.tmp``) that ``write`` filled, fsynced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600 files; give them the usual permissions
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise _named(e, path) from None
        raise
    return Path(tmp)
