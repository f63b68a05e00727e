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
import math
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection

__all__ = ["ENTRY", "WorkerProcess", "WorkerStartError", "available_cores"]


def available_cores(root: str = "/sys/fs/cgroup", membership: str = "/proc/self/cgroup") -> int:
    """The cores this process may use: its CPU affinity, capped by the CPU quota of its
    cgroup (a container's CPU limit, a systemd unit's CPUQuota) when there is one: cgroup v2
    (``cpu.max`` of its own cgroup and of each above it: the smallest holds) or v1
    (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` of its ``cpu`` controller)."""
    cores = len(os.sched_getaffinity(0))
    quotas = [q for q in _cgroup_quotas(root, membership) if q > 0]
    return min(cores, *(max(1, math.ceil(q)) for q in quotas)) if quotas else cores


def _cgroup_quotas(root: str, membership: str) -> list[float]:
    """CPU quotas (cores, may be fractions) of this process's cgroups, from each level that
    sets one; the cgroup's own directory, else the mount's root (a container whose cgroup
    namespace shows its own cgroup as the root)."""
    try:
        with open(membership, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    out = []
    for line in lines:
        hier, controllers, path = [*line.split(":", 2), "", ""][:3]
        if hier == "0" and controllers == "":  # v2: cpu.max holds "quota period"
            out += _levels(root, path, _v2)
        elif "cpu" in controllers.split(","):  # v1: the cpu controller's own mount
            mount = next((os.path.join(root, name) for name in
                          (controllers, "cpu", "cpu,cpuacct", "cpuacct,cpu")
                          if os.path.isdir(os.path.join(root, name))), None)
            if mount is not None:
                out += _levels(mount, path, _v1)
    if not lines:  # nothing to locate it by: the mount's root (v2)
        out += [q for q in (_v2(root),) if q is not None]
    return out


def _levels(mount: str, path: str, read: Callable[[str], float | None]) -> list[float]:
    """``read`` of the cgroup at ``path`` under ``mount`` and of each above it (or of the
    mount's root alone when the path is not visible there)."""
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    if not os.path.isdir(os.path.join(mount, *parts)):
        parts = []
    found = []
    for n in range(len(parts), -1, -1):
        q = read(os.path.join(mount, *parts[:n]))
        if q is not None:
            found.append(q)
    return found


def _v2(directory: str) -> float | None:
    try:
        with open(os.path.join(directory, "cpu.max"), encoding="ascii") as f:
            quota, period = f.read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _v1(directory: str) -> float | None:
    try:
        with open(os.path.join(directory, "cpu.cfs_quota_us"), encoding="ascii") as f:
            quota = int(f.read())
        with open(os.path.join(directory, "cpu.cfs_period_us"), encoding="ascii") as f:
            period = int(f.read())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


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
