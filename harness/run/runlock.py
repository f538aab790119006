"""One writer per run directory: an advisory lock on ``RUN_DIR/.harness.lock``.

``harness evaluate``, ``harness attack`` and ``harness report`` hold it exclusively while they
train or rewrite the run's files; ``harness submit`` holds it shared while it reads them. A second
process that wants a lock the first one holds stops with one line naming the holder (its PID,
host, command and start), or, with ``wait``, waits until the holder is done.

The lock is the operating system's (``flock`` on POSIX; ``msvcrt.locking`` on Windows), so it dies
with its process: the lock of a process that was killed (SIGKILL, a crashed node) is free, and the
next command takes it over, saying whose it was (the holder's record is still in the file, which a
clean release empties). No PID-liveness guesswork is needed, and a process reusing the dead one's
PID cannot keep the lock alive. On a network file system the lock is as good as its locking
support (NFSv4 passes ``flock`` to the server as a POSIX lock).

A run directory this process cannot write (an archived or shared run: a read-only mount, no write
permission) can still be read: a shared lock opens the lock file read-only (a shared ``flock``
needs no write access), or, where there is no lock file to open, takes no lock at all
(:attr:`RunLock.read_only`): no harness process has ever written the directory's lock then, so
none is writing it. An exclusive lock there raises :class:`ReadOnlyRunError` (one line).
"""

from __future__ import annotations

import errno
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from harness.core.errors import ConfigError

LOCK_NAME = ".harness.lock"
_WINDOWS_LOCK_OFFSET = 1 << 20  # Windows locks a byte range: one byte past the holder's record


class RunLockedError(ConfigError):
    """The run directory is locked by another process (the message names it)."""


class ReadOnlyRunError(ConfigError):
    """A command that writes a run directory was given one this process cannot write."""


#: what opening the lock file for writing raises in a directory this process cannot write
READ_ONLY_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a run directory's lock."""

    pid: int
    host: str
    command: str
    started: str

    def describe(self) -> str:
        return f"process {self.pid} on {self.host} (`{self.command}`, started {self.started})"


def _read_holder(fd: int) -> Holder | None:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        raw = os.read(fd, 64 * 1024).decode("utf-8", "replace").strip()
        d = json.loads(raw) if raw else None
        return Holder(int(d["pid"]), str(d["host"]), str(d["command"]), str(d["started"])) if isinstance(d, dict) \
            else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _try_lock(fd: int, shared: bool, block: bool) -> bool:
    """Take the OS lock on ``fd``; False when another process holds it (and ``block`` is False)."""
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        import msvcrt

        os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        mode = msvcrt.LK_LOCK if block else msvcrt.LK_NBLCK  # no shared mode: readers exclude each other too
        try:
            msvcrt.locking(fd, mode, 1)
        except OSError:
            if block:
                raise
            return False
        return True
    import fcntl

    flags = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if block else fcntl.LOCK_NB)
    try:
        fcntl.flock(fd, flags)
    except BlockingIOError:
        return False
    return True


def _unlock(fd: int) -> None:
    if sys.platform == "win32":  # pragma: no cover
        import msvcrt

        os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        return
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_UN)


class RunLock:
    """The lock of one run directory (module docstring). Use as a context manager::

        with RunLock(run_dir, command="harness evaluate undefended", wait=False) as lock:
            if lock.took_over: print(f"took over the lock of {lock.took_over.describe()}")

    ``acquire`` creates the directory when it does not exist (an ``OSError`` there, e.g. a
    read-only ``--out``, is the caller's to report). ``on_wait(holder)`` is called once before a
    waiting acquire blocks. In a directory this process cannot write, a shared lock is taken on
    the lock file opened read-only, or not at all where there is none (:attr:`read_only` is then
    True; module docstring), and an exclusive one raises :class:`ReadOnlyRunError`.
    """

    def __init__(self, run_dir: Path | str, *, command: str = "", shared: bool = False, wait: bool = False,
                 on_wait: Callable[[Holder | None], None] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.command = command or " ".join(["harness", *sys.argv[1:]])
        self.shared = shared
        self.wait = wait
        self.on_wait = on_wait
        self.fd: int | None = None
        #: the record of a holder that died without releasing the lock, when this acquire took it over
        self.took_over: Holder | None = None
        #: the directory cannot be written by this process (a shared lock only: module docstring)
        self.read_only = False

    def acquire(self) -> "RunLock":
        if self.run_dir.exists() and not self.run_dir.is_dir():
            raise ConfigError(f"{self.run_dir} is a file, not a run directory")
        if not (self.shared and self.run_dir.is_dir()):  # a reader never creates the directory
            self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            if e.errno not in READ_ONLY_ERRNOS or not self.run_dir.is_dir():
                raise
            if not self.shared:
                raise ReadOnlyRunError(
                    f"{self.run_dir} is read-only here ({e.strerror}) and this command writes to it; `harness "
                    "report`, `submit` and `compare` read it as it is; to change it, copy it to a writable folder "
                    "(cp -r) and run the command on the copy") from None
            self.read_only = True
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:  # never locked, so nobody is writing it: no lock to take
                return self
        try:
            if not _try_lock(fd, self.shared, block=False):
                holder = _read_holder(fd)
                if not self.wait:
                    who = holder.describe() if holder else "another process reading it (e.g. `harness submit`)"
                    raise RunLockedError(f"{self.run_dir} is in use by {who}; wait for it to finish, or run this "
                                         "command with --wait (the API: wait=True)")
                if self.on_wait is not None:
                    self.on_wait(holder)
                _try_lock(fd, self.shared, block=True)
            if not self.shared:
                previous = _read_holder(fd)
                if previous is not None:  # a clean release empties the record: its holder died holding it
                    self.took_over = previous
                record = {"pid": os.getpid(), "host": platform.node(), "command": self.command,
                          "started": time.strftime("%Y-%m-%d %H:%M:%S")}
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
                os.write(fd, (json.dumps(record) + "\n").encode())
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            if not self.shared:
                os.ftruncate(fd, 0)  # a clean release: no record left for the next holder to report
        except OSError:
            pass
        finally:
            try:
                _unlock(fd)
            finally:
                os.close(fd)

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()
