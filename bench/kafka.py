"""Benchmark: Kafka consumption throughput of 1, 2, ... worker processes, each with its own
SQLite store or all writing to one PostgreSQL store.

    python bench/kafka.py                              6000 traces x 4 spans, 3 rounds, ~2 min
    python bench/kafka.py --traces 2000 --rounds 1     quick look
    python bench/kafka.py --store postgresql --workers 1,2,4
                                                       one shared PostgreSQL (Debian's server,
                                                       started here on a temp dir, fsync on)

Setup: librdkafka's mock cluster (3 brokers, in this process) with a fresh 6-partition topic
per run; ``--traces`` synthetic agent traces (``tests/kafka/kafka_traces.py``: children first,
root last, spread over several records) produced first, as the collector's kafka exporter
writes them (one record per trace per request, keyed by trace id, fnv1a partitioner).
Then N worker processes (``tests/kafka/kafka_worker.py --engine real``: the service's
``Engine`` with its evaluator and its store, its own SQLite file or, with ``--store
postgresql``, a fresh database on one PostgreSQL server shared by all; static assignment,
worker i of N takes partitions p % N == i) are started, held at a gate until all are ready,
and released. Time = gate -> every trace stored (distinct trace ids, summed over the SQLite
files or counted in the shared database); spans/s = spans / time. The 0.2 s assembly grace
is part of that time.

Rounds cycle through the worker counts, each round in another order (the machine is shared
and noisy); the median per worker count is reported with the ratio to one worker. With a
shared store: "kept up" = spans per worker CPU-second against one worker's, i.e. whether a
consumer still turns a CPU-second into as many stored spans when N workers share the store
(>= 0.8 is the target); the PostgreSQL server's own CPU seconds (its backends) are reported
beside. Also reported: CPU seconds used by the workers and by this
process (mostly the mock brokers serving fetches) in the timed window, and spans per worker
CPU-second and the cores the workers got (CPU-s / wall s): other load on the machine
decides the second, hardly the first.
Prints one ``BENCH {json}`` line. Loopback only; every wait is time-bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import select
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests" / "kafka"
sys.path[:0] = [str(ROOT), str(TESTS), str(ROOT / "tests")]

from kafka_mock_cluster import MockCluster  # noqa: E402
from kafka_traces import requests_for, trace_ids  # noqa: E402
from support.postgresql_server import PostgresServer  # noqa: E402

from otel_eval.base.kafka.config import KafkaConfig  # noqa: E402
from otel_eval.receive.kafka.publisher import KafkaPublisher  # noqa: E402

PARTITIONS = 6
TICK_S = os.sysconf("SC_CLK_TCK")


async def produce(bootstrap: str, topic: str, n: int, spans: int) -> int:
    pub = KafkaPublisher(KafkaConfig(brokers=bootstrap, topic=topic))
    await pub.start()
    records = 0
    try:
        for req in requests_for(trace_ids(n), spans, traces_per_request=100):
            records += await pub.publish(req.SerializeToString())
    finally:
        await pub.stop()
    return records


class SharedCount:
    """Traces stored in the shared PostgreSQL database, over one polling connection (not a
    connection per poll: that would cost the server a process start every 20 ms)."""

    def __init__(self, url: str) -> None:
        import psycopg

        self._conn = psycopg.connect(url, autocommit=True, application_name="bench")

    def __call__(self) -> int:
        row = self._conn.execute("SELECT COUNT(*) FROM pg_tables WHERE tablename = "
                                 "'evaluations'").fetchone()
        if not row or not row[0]:  # no worker opened the store yet
            return 0
        row = self._conn.execute("SELECT COUNT(*) FROM evaluations").fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        self._conn.close()


def stored(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=10) as con:
            return int(con.execute("SELECT COUNT(DISTINCT trace_id) FROM evaluations")
                       .fetchone()[0])
    except sqlite3.OperationalError:  # store not created yet
        return 0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK_S  # utime + stime


def start_worker(bootstrap: str, topic: str, db: Path | str, index: int, count: int,
                 log: Path) -> subprocess.Popen[str]:
    with open(log, "ab") as err:
        return subprocess.Popen(
            [sys.executable, str(TESTS / "kafka_worker.py"), "--bootstrap", bootstrap,
             "--topic", topic, "--group", f"bench-{topic}", "--db", str(db), "--engine",
             "real", "--worker-index", str(index), "--worker-count", str(count), "--gate",
             "--commit-interval-s", "1.0"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)})


def wait_ready(proc: subprocess.Popen[str], log: Path) -> None:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    if not ready or proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"worker did not start:\n{log.read_text()[-2000:]}")


def postgres_cpu_s(pg: PostgresServer) -> float:
    """CPU seconds of the server's ended backends plus the postmaster's own (cumulative)."""
    pid = int((pg.dir / "data" / "postmaster.pid").read_text().split()[0])
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICK_S  # utime stime cutime cstime


def backends_gone(url: str) -> None:
    """Wait (bounded) until the workers' connections have ended, so their CPU is counted."""
    import psycopg

    deadline = time.monotonic() + 10
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT COUNT(*) FROM pg_stat_activity "
                               "WHERE application_name = 'otel-eval'").fetchone()
            if row is not None and row[0] == 0:
                return
            time.sleep(0.05)


def run_once(mc: MockCluster, workers: int, n: int, spans: int, work: Path,
             timeout_s: float, pg: PostgresServer | None) -> dict[str, Any]:
    topic = f"bench_{workers}w_{time.monotonic_ns()}"
    mc.create_topic(topic, PARTITIONS)
    records = asyncio.run(produce(mc.bootstraps, topic, n, spans))
    dbs: list[Path | str] = ([work / f"{topic}_{i}.db" for i in range(workers)] if pg is None
                             else [pg.create_database()] * workers)
    shared = SharedCount(str(dbs[0])) if pg is not None else None
    count: Callable[[], int] = shared if shared is not None else (
        lambda: sum(stored(db) for db in dbs if isinstance(db, Path)))
    pg_cpu0 = postgres_cpu_s(pg) if pg is not None else 0.0
    procs: list[subprocess.Popen[str]] = []
    try:
        for i, db in enumerate(dbs):
            procs.append(start_worker(mc.bootstraps, topic, db, i, workers,
                                      work / f"{topic}_{i}.log"))
        for i, p in enumerate(procs):
            wait_ready(p, work / f"{topic}_{i}.log")
        cpu0 = [cpu_s(p.pid) for p in procs]
        self0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        while count() < n:
            if time.perf_counter() - t0 > timeout_s:
                raise RuntimeError(f"{workers} worker(s): not all stored in {timeout_s} s")
            time.sleep(0.02)
        elapsed = time.perf_counter() - t0
        self1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = [cpu_s(p.pid) - c for p, c in zip(procs, cpu0, strict=True)]
        per_worker = [stored(db) for db in dbs if isinstance(db, Path)]
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for i, p in enumerate(procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGUSR1)  # the worker dumps its stacks into its log
                time.sleep(1)
                log = (work / f"{topic}_{i}.log").read_text()[-6000:]
                raise RuntimeError(f"worker {i} did not stop on SIGTERM:\n{log}") from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
        if shared is not None:
            shared.close()
    self_cpu = (self1.ru_utime + self1.ru_stime) - (self0.ru_utime + self0.ru_stime)
    if pg is not None:
        backends_gone(pg.url)
    return {"store": "sqlite" if pg is None else "postgresql", "workers": workers,
            "traces": n, "spans": n * spans, "records": records,
            "seconds": round(elapsed, 3), "spans_per_s": round(n * spans / elapsed),
            "traces_per_worker": per_worker, "worker_cpu_s": [round(c, 2) for c in cpu],
            "spans_per_worker_cpu_s": round(n * spans / sum(cpu)) if sum(cpu) else None,
            "worker_cores": round(sum(cpu) / elapsed, 2),
            "bench_process_cpu_s": round(self_cpu, 2),
            "postgres_cpu_s": round(postgres_cpu_s(pg) - pg_cpu0, 2) if pg else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=int, default=6000)
    ap.add_argument("--spans", type=int, default=4, help="spans per trace")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", default="1,2", help="worker counts, comma separated")
    ap.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    ap.add_argument("--timeout-s", type=float, default=300.0)
    args = ap.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="otel-eval-bench-kafka-") as tmp, \
            MockCluster(brokers=3) as mc:
        pg = PostgresServer(durable=True).start() if args.store == "postgresql" else None
        try:
            for r in range(args.rounds):
                shift = r % len(counts)
                for workers in counts[shift:] + counts[:shift]:
                    run = run_once(mc, workers, args.traces, args.spans, Path(tmp),
                                   args.timeout_s, pg)
                    runs.append(run)
                    print(f"round {r + 1}: {workers} worker(s) {run['spans_per_s']:>7} spans/s "
                          f"({run['seconds']} s; traces per worker {run['traces_per_worker']}; "
                          f"worker CPU {run['worker_cpu_s']} s = {run['worker_cores']} cores; "
                          f"mock brokers {run['bench_process_cpu_s']} s; "
                          f"postgres {run['postgres_cpu_s']} s)", flush=True)
        finally:
            if pg is not None:
                pg.stop()
    report(runs, counts, args.store)


def report(runs: list[dict[str, Any]], counts: list[int], store: str) -> None:
    def median(key: str, w: int) -> float:
        return statistics.median(r[key] for r in runs if r["workers"] == w)

    med = {w: median("spans_per_s", w) for w in counts}
    per_cpu = {w: median("spans_per_worker_cpu_s", w) for w in counts}
    cores = {w: median("worker_cores", w) for w in counts}
    base = counts[0]
    ratio = {w: round(med[w] / med[base], 3) for w in counts}
    kept_up = {w: round(per_cpu[w] / per_cpu[base], 3) for w in counts}
    for w in counts:
        print(f"median: {w} worker(s) {med[w]:.0f} spans/s ({ratio[w]:.2f}x {base}) on "
              f"{cores[w]:.2f} cores; {per_cpu[w]:.0f} spans per worker CPU-second "
              f"({kept_up[w]:.2f}x {base})")
    print(f"store {store}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    print("BENCH " + json.dumps({"store": store, "median_spans_per_s": med, "ratio": ratio,
                                 "median_spans_per_worker_cpu_s": per_cpu,
                                 "median_worker_cores": cores, "kept_up": kept_up,
                                 "cpus": os.cpu_count(), "runs": runs}))


if __name__ == "__main__":
    main()
