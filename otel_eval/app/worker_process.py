"""One worker interpreter of ``serve --workers N`` (``workers.WorkerPool`` runs them), and
how many cores there are to give them.

Each process is a fresh interpreter (``ENTRY`` through ``subprocess``), never a fork of this
process's threads (gRPC's among them), so restarting a worker while serving is safe. Not
multiprocessing's ``spawn`` or ``forkserver``: both start a resource tracker process (8 MB
PSS, 15 MB RSS idle) for semaphores and shared memory, and nothing here uses either: a
worker is a socket pair (``multiprocessing.connection.Connection``, its pickler) and a pid.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from multiprocessing.connection import Connection

__all__ = ["ENTRY", "WorkerProcess", "WorkerStartError", "available_cores"]


def available_cores() -> int:
    """The cores this process may use: its CPU affinity, capped by a cgroup v2 CPU quota
    (a container's CPU limit) when there is one."""
    cores = len(os.sched_getaffinity(0))
    try:
        with open("/sys/fs/cgroup/cpu.max", encoding="ascii") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return cores


class WorkerStartError(RuntimeError):
    """A worker process did not come up (said why, exited, or timed out)."""


# A worker interpreter's first statements: the pipe from its fd, the parent's sys.path from
# the pipe (before otel_eval is imported), then the spec, and ``worker.run``.
ENTRY = ("import sys\n"
         "from multiprocessing.connection import Connection\n"
         "conn = Connection(int(sys.argv[1]))\n"
         "sys.path[:] = conn.recv()\n"
         "from otel_eval.app.worker import run\n"
         "run(conn, conn.recv(), int(sys.argv[2]))\n")


class WorkerProcess:
    """One worker interpreter (``ENTRY``) and this end of its socket pair (``conn``): the
    subset of ``multiprocessing.Process`` the pool uses (pid, join, is_alive, kill,
    exitcode: negative for the signal that ended it)."""

    def __init__(self, index: int) -> None:
        ours, theirs = socket.socketpair()
        try:
            self._popen = subprocess.Popen(
                [sys.executable, "-c", ENTRY, str(theirs.fileno()), str(index)],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()  # only the child holds it now: its exit shows here as EOF
        self.conn = Connection(ours.detach())
        self.pid = self._popen.pid

    def join(self, timeout: float | None = None) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout)

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    def kill(self) -> None:
        self._popen.kill()

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll()
