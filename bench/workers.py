"""``otel-eval serve --workers N``: end-to-end throughput for 1 and N evaluation workers.

    python bench/workers.py                          --workers 1,2, 3 alternating rounds
    python bench/workers.py --workers 1,2 --reps 1 --traces 2000      quick look

Per round: a fresh ``serve --workers N`` (store and spool on, ``grace_s`` 0.5, HTTP off, not
pinned: serve and its worker processes may use every core), a warm-up load (``--warmup-traces``,
waited for until stored: module imports and first-use tables in each worker), then
``../shared/tools/otlp_load.py raw --no-repeat`` sends ``--traces`` agent traces (each span
once) and the time runs from its first request until every trace is stored in SQLite and
``otel_eval_assembly_pending_spans`` is 0 (acknowledged -> stored).

Reported per round: spans/s; the cores the run really got = CPU seconds of serve and its
children (worker processes, multiprocessing's resource tracker) over the wall seconds; spans
per CPU-second; the load average; VmRSS of serve and each child, idle and after the load
(serve's first). The load generator runs on the same machine (its CPU is
reported too). Rounds alternate the worker counts; medians and the ratio to 1 worker are
printed with one ``BENCH {json}`` line. Loopback only; every wait is time-bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ingest_procs import PENDING, ROOT, TOOLS, free_port, metrics, ready, wait_for

TICK = os.sysconf("SC_CLK_TCK")


def tree(pid: int) -> tuple[float, list[int]]:
    """CPU seconds of ``pid`` and its live descendants (user + system), and their VmRSS in
    MB (``pid`` first)."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        cpu[int(entry.name)] = (int(fields[11]) + int(fields[12])) / TICK
    found, frontier = [pid], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p and c not in found]
        found += kids
        frontier += kids
    return sum(cpu.get(p, 0.0) for p in found), [_rss_mb(p) for p in found]


def _rss_mb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def stored(store: Path) -> int:
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5) as db:
            return int(db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet
        return 0


@contextmanager
def serve(tmp: Path, workers: int, grace_s: float) -> Iterator[tuple[subprocess.Popen[bytes],
                                                                    int, int, Path]]:
    cfg = tmp / f"serve-{time.monotonic_ns()}.yaml"
    cfg.write_text(json.dumps({"assembly": {"grace_s": grace_s, "idle_timeout_s": 60.0},
                               "receiver": {"http_endpoint": ""}}))
    grpc_port, admin = free_port(), free_port()
    store = tmp / f"store-{time.monotonic_ns()}.db"
    log = (tmp / f"serve-{workers}-{time.monotonic_ns()}.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_eval", "serve", "--config", str(cfg), "--workers",
         str(workers), "--grpc-endpoint", f"127.0.0.1:{grpc_port}", "--admin-endpoint",
         f"127.0.0.1:{admin}", "--store", str(store)],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        wait_for(lambda: proc.poll() is not None or ready(admin), 120, "serve ready", 0.1)
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited early, see {log.name}")
        yield proc, grpc_port, admin, store
    finally:
        proc.terminate()
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def load(args: argparse.Namespace, port: int, traces: int) -> tuple[float, dict[str, Any]]:
    """Run the load generator; (perf_counter of its first request, its RESULT)."""
    argv = [sys.executable, str(TOOLS / "otlp_load.py"), "raw", "--target", f"127.0.0.1:{port}",
            "--traces", str(traces), "--steps", str(args.steps), "--spans-per-request", "100",
            "--payload-bytes", str(args.payload_bytes), "--concurrency", "8",
            "--duration", "600", "--warmup", "0", "--no-repeat"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=True)
    end = time.perf_counter()
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    res = json.loads(line[len("RESULT "):])
    return end - res["elapsed_s"], res


def one_round(args: argparse.Namespace, tmp: Path, workers: int) -> dict[str, Any]:
    with serve(tmp, workers, args.grace_s) as (proc, port, admin, store):
        idle_rss = tree(proc.pid)[1]
        load(args, port, args.warmup_traces)
        wait_for(lambda: stored(store) >= args.warmup_traces, 300, "warm-up stored")
        cpu0, load0 = tree(proc.pid)[0], os.getloadavg()[0]
        t_first, res = load(args, port, args.traces)
        total = args.warmup_traces + args.traces
        wait_for(lambda: stored(store) >= total, 600, f"{total} stored", 0.02)
        t_done = wait_for(lambda: metrics(admin).get(PENDING, 0.0) == 0,
                          120, "pending spans 0", 0.05)
        cpu, rss = tree(proc.pid)
        cpu -= cpu0
    wall = t_done - t_first
    spans = res["ok_spans_incl_warmup"]
    return {"workers": workers, "spans_per_s": round(spans / wall), "seconds": round(wall, 2),
            "cores": round(cpu / wall, 2), "spans_per_cpu_s": round(spans / cpu),
            "load_avg": [round(load0, 2), round(os.getloadavg()[0], 2)],
            "client_cpu_s": res.get("client_cpu_s"), "spans": spans,
            "p99_ms": res["p99_ms"], "errors": res["errors"],
            "rss_mb_idle": idle_rss, "rss_mb_after": rss}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--traces", type=int, default=4000)
    p.add_argument("--warmup-traces", type=int, default=300)
    p.add_argument("--steps", type=int, default=5, help="chat+tool steps per trace")
    p.add_argument("--payload-bytes", type=int, default=2048)
    p.add_argument("--grace-s", type=float, default=0.5)
    args = p.parse_args(argv)
    counts = [int(x) for x in args.workers.split(",")]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="otel-eval-workers-") as d:
        for rep in range(args.reps):
            for n in counts:
                row = one_round(args, Path(d), n)
                rows.append(row)
                print(f"round {rep + 1} workers {n}: {row}", file=sys.stderr)
    summary: dict[str, Any] = {}
    for n in counts:
        mine = [r for r in rows if r["workers"] == n]
        summary[str(n)] = {
            "spans_per_s": statistics.median(r["spans_per_s"] for r in mine),
            "rounds": [r["spans_per_s"] for r in mine],
            "cores": [r["cores"] for r in mine],
            "spans_per_cpu_s": statistics.median(r["spans_per_cpu_s"] for r in mine)}
    base = summary[str(counts[0])]["spans_per_s"]
    for n in counts:
        s = summary[str(n)]
        s["ratio"] = round(s["spans_per_s"] / base, 2)
        print(f"workers {n}: {s['spans_per_s']:.0f} spans/s (rounds {s['rounds']}), "
              f"x{s['ratio']} of {counts[0]}; cores got {s['cores']}; "
              f"{s['spans_per_cpu_s']:.0f} spans per CPU-s")
    print("BENCH " + json.dumps({"summary": summary, "rounds": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
