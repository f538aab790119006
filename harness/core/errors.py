"""The user's mistakes and the environment's failures, as one line each.

:class:`ConfigError` is every mistake the user can fix (a bad config, missing data, an unknown
plugin, a foreign or locked run directory, ...): the CLI prints its message after ``error:`` and
exits 2. Operating-system failures (a read-only or missing folder, a file where a folder should be,
a full disk): the commands print :func:`os_error_message` after ``error:`` and exit 2. Files are written atomically (temp file,
fsync, rename; several files through one journaled commit), so such a failure leaves every file
as it was, and the same command resumes once the cause is fixed.
"""

from __future__ import annotations

import errno


class ConfigError(ValueError):
    """A user mistake in the configuration (bad preset, unknown key, impossible value), or anything
    else the user can fix; its message is one line."""


_HINTS = {
    errno.ENOSPC: "free some space and run the same command again: every finished model and file is kept",
    errno.EDQUOT: "free some space (disk quota exceeded) and run the same command again: every finished model "
                  "and file is kept",
    errno.EROFS: "choose a writable folder (--out, --run-dir, -o / --out of the command)",
    errno.EACCES: "choose a folder you may write to (--out, --run-dir, -o / --out of the command)",
    errno.EPERM: "choose a folder you may write to (--out, --run-dir, -o / --out of the command)",
    errno.ENOTDIR: "a path in it names a file where a folder is needed",
    errno.EISDIR: "a folder is where a file is needed",
}


def os_error_message(e: OSError) -> str:
    """``<path>: <reason> (<hint>)`` for an OSError, e.g. ``runs/x: Read-only file system
    (choose a writable folder ...)``."""
    what = e.strerror or str(e) or type(e).__name__
    paths = [str(p) for p in (e.filename, e.filename2) if p is not None]
    where = " -> ".join(paths)
    hint = _HINTS.get(e.errno or -1)
    return (f"{where}: {what}" if where else what) + (f" ({hint})" if hint else "")
