"""Processes for bench/ingest.py: ``otel-eval serve``, the baseline sink and the load generator
as subprocesses, and what the bench reads of them (admin ``/metrics``, ``/proc``).

A serve may be one process or a tree (``serve --workers N``): CPU and memory are summed over
the process and its descendants, read from ``/proc`` while it runs.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# the shared tools beside the checkout, else the workplace's (a helper's worktree)
TOOLS = next((d for d in (ROOT.parent / "shared" / "tools", Path("/work/shared/tools"))
              if d.is_dir()), ROOT.parent / "shared" / "tools")
PENDING = "otel_eval_assembly_pending_spans"
OPEN = "otel_eval_assembly_open_traces"
RELEASED = "otel_eval_assembly_traces_released_total"
REOPENED = "otel_eval_assembly_traces_reopened_total"
ACCEPTED = "otel_eval_receiver_spans_accepted_total"
THROTTLED = "otel_eval_receiver_requests_throttled_total"
ISSUES_RUNS = "otel_eval_issues_runs_total"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pinned(cores: str, argv: list[str]) -> list[str]:
    """``argv`` under ``taskset -c cores`` (e.g. "0", "0-1"), when taskset exists."""
    return ["taskset", "-c", cores, *argv] if shutil.which("taskset") else argv


class Proc:
    """A subprocess whose output lines are collected (with arrival times) by a thread."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env=env)
        self.lines: list[tuple[float, str]] = []
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.lines.append((time.perf_counter(), line.rstrip("\n")))

    def tagged(self, tag: str) -> tuple[float, dict[str, Any]] | None:
        for t, line in self.lines:
            if line.startswith(tag + " "):
                return t, json.loads(line[len(tag) + 1:])
        return None

    def finish(self, timeout_s: float) -> int:
        rc = self.p.wait(timeout_s)
        self._t.join(5)
        return rc

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)
        self._t.join(5)

    def tail(self, n: int = 20) -> str:
        return "\n".join(line for _, line in self.lines[-n:])


def wait_for(pred: Any, deadline_s: float, what: str, interval_s: float = 0.02) -> float:
    end = time.perf_counter() + deadline_s
    while time.perf_counter() < end:
        if pred():
            return time.perf_counter()
        time.sleep(interval_s)
    raise TimeoutError(f"timed out after {deadline_s:.0f}s waiting for {what}")


def metrics(admin: int) -> dict[str, float]:
    """Sum every sample of each metric name over its labels (enough for these counters)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            base = name.split("{", 1)[0]
            out[base] = out.get(base, 0.0) + float(value)
    return out


# --- /proc: a process and its descendants -------------------------------------------------

def tree(pid: int) -> list[int]:
    """``pid`` and its live descendants (``/proc/<pid>/task/*/children``)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += [int(c) for c in task.read_text().split()]
            except OSError:
                continue
    return out


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process tree has used: what it cost, whatever the
    neighbours on a shared machine left it (exited workers are counted by their parent once
    reaped)."""
    total = 0
    for p in tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    return total / os.sysconf("SC_CLK_TCK")


def status_kb(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` field (VmRSS, VmHWM), summed over the process tree."""
    total = 0
    for p in tree(pid):
        try:
            lines = Path(f"/proc/{p}/status").read_text().splitlines()
        except OSError:
            continue
        total += next((int(x.split()[1]) for x in lines if x.startswith(field + ":")), 0)
    return total


# --- servers -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Variant:
    """One serve configuration of the table: pass-through flags of ``serve``."""

    workers: int | None  # serve --workers N; None: the flag is not passed (serve's default)
    # serve --store: "sqlite" (a fresh file per run), "postgresql" (a fresh database per run
    # on a server the bench starts) or a postgresql:// URL used as is
    store: str
    # the checkout serve runs from (PYTHONPATH): this one, or a snapshot of another commit
    tree: Path = ROOT
    name: str = ""  # the other commit's name, for the label

    @property
    def label(self) -> str:
        w = "default" if self.workers is None else str(self.workers)
        at = f"{self.name} " if self.name else ""
        return f"{at}workers={w} store={'sqlite' if self.store == 'sqlite' else 'postgresql'}"

    def cores(self) -> str:
        """serve's cores: core 0 for one evaluating process (the load generator has core 1);
        every core for more (then serve and the load generator share one)."""
        n = os.cpu_count() or 1
        return "0" if self.workers is None or self.workers <= 1 or n == 1 else f"0-{n - 1}"


_PG: list[Any] = []  # the PostgreSQL server this bench started, if any


def postgresql() -> Any:
    """A PostgreSQL server for ``--store postgresql`` (Debian's binaries, a temp dir, a free
    loopback port, fsync on: ``tests/support/postgresql_server.py``), started on first use and
    stopped at exit; each serve run gets a fresh database of it."""
    if not _PG:
        sys.path.insert(0, str(ROOT / "tests"))
        from support.postgresql_server import PostgresServer

        _PG.append(PostgresServer(durable=True).start())
    return _PG[0]


def store_cpu_s(variant: Variant) -> float | None:
    """CPU seconds of the PostgreSQL server this bench started (postmaster, live backends,
    ended ones), for a ``postgresql`` variant: part of what storing costs; else None."""
    if variant.store != "postgresql" or not _PG:
        return None
    pid = int((_PG[0].dir / "data" / "postmaster.pid").read_text().split()[0])
    return cpu_s(pid)


@dataclass
class Served:
    proc: Proc
    grpc_port: int
    admin: int
    store: str  # SQLite path or the URL


@contextmanager
def serve(tmp: Path, variant: Variant, config: dict[str, Any] | None,
          extra: list[str] | None = None) -> Iterator[Served]:
    """``otel-eval serve`` on free loopback ports. ``config``: a YAML (JSON) file's content,
    None for none (every default)."""
    argv = [sys.executable, "-m", "otel_eval", "serve"]
    if config is not None:
        cfg = tmp / f"serve-{time.monotonic_ns()}.yaml"
        cfg.write_text(json.dumps(config))  # JSON is YAML
        argv += ["--config", str(cfg)]
    grpc_port, admin = free_port(), free_port()
    store = (str(tmp / f"store-{time.monotonic_ns()}.db") if variant.store == "sqlite"
             else postgresql().create_database() if variant.store == "postgresql"
             else variant.store)
    argv += ["--grpc-endpoint", f"127.0.0.1:{grpc_port}", "--admin-endpoint",
             f"127.0.0.1:{admin}", "--store", store, *(extra or [])]
    if variant.workers is not None:
        argv += ["--workers", str(variant.workers)]
    proc = Proc(pinned(variant.cores(), argv),
                env={**os.environ, "PYTHONPATH": str(variant.tree)})
    try:
        wait_for(lambda: proc.p.poll() is not None or ready(admin), 90, "serve ready", 0.1)
        if proc.p.poll() is not None:
            raise RuntimeError(f"serve exited early:\n{proc.tail()}")
        yield Served(proc, grpc_port, admin, store)
    finally:
        proc.kill()


def ready(admin: int) -> bool:
    """serve's admin ``/readyz`` answers 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def stored_rows(store: str) -> int:
    """Rows in the store's ``evaluations`` table (read from this process: rendering /metrics
    costs the server ~20 ms of CPU, too much for a tight loop)."""
    if store.startswith(("postgresql:", "postgres:")):
        import psycopg  # only for a PostgreSQL store (pgstore's dependency)

        with psycopg.connect(store) as db:
            row = db.execute("SELECT COUNT(*) FROM evaluations").fetchone()
            return int(row[0]) if row else 0
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5) as db:
        return int(db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0])


def sink(port: int, max_s: float) -> Proc:
    """The baseline: ``otlp_sink.py --server sync --mode walk`` pinned to core 0."""
    return Proc(pinned("0", [sys.executable, str(TOOLS / "otlp_sink.py"), "--server", "sync",
                             "--mode", "walk", "--port", str(port), "--max-seconds",
                             str(max_s)]))


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def load(port: int, traces: int, opts: dict[str, Any], seed: int, max_s: float,
         rate: float = 0.0) -> tuple[float, dict[str, Any]]:
    """Run ``otlp_load.py raw --no-repeat`` (pinned to core 1) to completion; returns (time
    of its first request, its RESULT). ``rate``: spans/s paced (0: as fast as acknowledged)."""
    argv = [sys.executable, str(TOOLS / "otlp_load.py"), "raw", "--target", f"127.0.0.1:{port}",
            "--traces", str(traces), "--steps", str(opts["steps"]), "--spans-per-request",
            str(opts["spans_per_request"]), "--payload-bytes", str(opts["payload_bytes"]),
            "--concurrency", str(opts["concurrency"]), "--duration", str(max_s),
            "--warmup", "0", "--no-repeat", "--seed", str(seed), "--rate", str(rate)]
    gen = Proc(pinned("1", argv))
    try:
        gen.finish(max_s + 120)
        got = gen.tagged("RESULT")
        if got is None:
            raise RuntimeError(f"load generator printed no RESULT:\n{gen.tail()}")
        t_result, res = got
        return t_result - res["elapsed_s"], res
    finally:
        gen.kill()


@contextmanager
def snapshot(ref: str) -> Iterator[Path]:
    """The tree of commit ``ref`` of this repository (``git archive``) in a temp dir, for the
    same measurement against another commit in one run."""
    with tempfile.TemporaryDirectory(prefix="otel-eval-at-") as d:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref],
                                 capture_output=True, timeout=120, check=True).stdout
        subprocess.run(["tar", "-x", "-C", d], input=archive, timeout=120, check=True)
        yield Path(d)


def short(ref: str) -> str:
    """``ref`` as an abbreviated commit id."""
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref],
                          capture_output=True, text=True, timeout=10, check=True).stdout.strip()


def commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=True)
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "otel_eval"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
