"""One serve per store: an exclusive lock on a file beside each local file serve owns.

Two serves on one SQLite store or one spool corrupt each other's work: the second replays the
first's pending spool entries (storing fragments of traces the first still assembles) and
deletes them. ``InstanceLock`` takes ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``<file>.lock`` and
writes the holder's pid into it; a second process is refused with a ``StartupError`` naming
the file and that pid. The kernel drops the lock when the holder exits, however it exits
(kill -9 included), so a stale lock file never blocks a restart. The lock file itself stays:
deleting it would let two processes lock two different files of the same name. A pid that
cannot be written (a full disk at start) is logged: the lock is held without it. The lock file
sits beside the file's real path (symlinks resolved): the same store reached through a symlink
(a mounted volume's alias) is the same store. A hard link or a second bind mount of one file
is not recognised.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from pathlib import Path
from typing import IO

from otel_eval.base.configcheck import StartupError

log = logging.getLogger(__name__)


class InstanceLock:
    """The exclusive lock of one file (``<path>.lock``); ``acquire`` in serve's process only
    (its evaluation workers open the store without it)."""

    def __init__(self, path: str, what: str, setting: str = "store.path") -> None:
        self.name = path  # as configured: how the refusal names the file
        self.setting = setting  # the setting that gives this serve a file of its own
        self.path = os.path.realpath(path) + ".lock"
        self.what = what  # "store", "spool", "judge journal"
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock, or raise ``StartupError`` naming the file and the holder's pid."""
        if self._file is not None:
            return
        try:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            f = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 (held until release)
        except OSError as e:
            raise StartupError(f"{self.what} {self.name}: cannot create "
                               f"its lock file {self.path}: {_why(e, self.path)}") from None
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.seek(0)
            holder = f.read(32).strip() or "unknown"
            f.close()
            raise StartupError(
                f"{self.what} {self.name} is in use by another otel-eval "
                f"serve (pid {holder}, lock {self.path}); stop it, or give this one its own "
                f"{self.setting}") from None
        self._file = f  # held from here on, whether or not the pid can be written
        try:
            f.seek(0)
            f.truncate()
            f.write(f"{os.getpid()}\n")
            f.flush()
        except OSError as e:  # a full disk: the pid only names the holder in a refusal
            log.warning("%s %s: cannot write its pid into %s (%s); locked without it",
                        self.what, self.name, self.path, e.strerror or e)

    def release(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
            with contextlib.suppress(OSError):  # a pid a full disk left unwritten
                f.close()


def _why(e: OSError, path: str) -> str:
    """Why a file cannot be made at ``path``: a part of it that is a file, not a directory
    (``mkdir`` says "File exists" of it, which reads as a stale lock), else the error."""
    if isinstance(e, FileExistsError | NotADirectoryError):
        for parent in Path(path).parents:
            if parent.exists():
                if not parent.is_dir():
                    return f"{parent} is not a directory"
                break
    return e.strerror or str(e)
