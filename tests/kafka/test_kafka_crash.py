"""Crash safety: kill -9 a worker process mid-stream, restart it, and every trace on the topic
ends up stored exactly once (one row per trace id, from all of its spans), none lost.

The worker is a real process (``kafka_worker.py``) so that SIGKILL is a real crash: no
shutdown, no final commit, the SQLite file left as the kill found it. Workers are killed in
the fixture's teardown whatever happens, and die with the test process (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from kafka_doubles import Topic, produce_traces
from support.poll import poll

WORKER = Path(__file__).with_name("kafka_worker.py")
ROOT = Path(__file__).resolve().parents[2]  # the worker imports this checkout's otel_eval


class Worker:
    def __init__(self, topic: Topic, db: Path, log: Path, *extra: str) -> None:
        self.log = log
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(WORKER), "--bootstrap", topic.bootstrap, "--topic",
                 topic.name, "--group", f"g-{topic.name}", "--db", str(db), *extra],
                stdout=subprocess.PIPE, stderr=err, text=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)})

    def wait_ready(self) -> None:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline().strip() if ready else ""
        assert line == "ready", f"worker did not start:\n{self.log.read_text()[-3000:]}"

    def stop(self, sig: int) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=30)


@pytest.fixture
def start_worker(topic: Topic, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """Start worker processes; teardown kills every one still running."""
    started: list[Worker] = []

    def start(db: Path, *extra: str) -> Worker:
        w = Worker(topic, db, tmp_path / f"worker{len(started)}.log", *extra)
        started.append(w)
        w.wait_ready()
        return w

    yield start
    for w in started:
        if w.proc.poll() is None:
            w.proc.kill()
        w.proc.wait(timeout=30)
        if w.proc.stdout is not None:
            w.proc.stdout.close()


def stored(db: Path) -> list[tuple[str, int, int]]:
    """(trace id, spans it was evaluated from, times stored) per stored row. The mini engine
    counts its stores; the real store keeps one row per trace id (a replay supersedes it),
    so there the count is 1."""
    if not db.exists():
        return []
    with sqlite3.connect(db, timeout=10) as con:
        try:
            cols = {r[1] for r in con.execute("PRAGMA table_info(evaluations)")}
            if "stores" in cols:
                return con.execute("SELECT trace_id, spans, stores FROM evaluations").fetchall()
            return con.execute("SELECT trace_id, json_extract(body, '$.counts.spans'), 1"
                               " FROM evaluations").fetchall()
        except sqlite3.OperationalError:  # tables not created yet
            return []


async def committed_total(topic: Topic) -> int:
    c = AIOKafkaConsumer(bootstrap_servers=topic.bootstrap, group_id=f"g-{topic.name}",
                         enable_auto_commit=False)
    await c.start()
    try:
        return sum([await c.committed(TopicPartition(topic.name, p)) or 0
                    for p in range(topic.partitions)])
    finally:
        await c.stop()


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["mini", "real"])
def test_kill_9_mid_stream_then_restart_stores_every_trace_exactly_once(
        topic: Topic, tmp_path: Path, start_worker: Callable[..., Worker], engine: str) -> None:
    """``mini``: a stand-in engine that counts how often each trace is stored; ``real``: the
    service's Engine and SQLite Store (the stored JSON says how many spans were evaluated)."""
    n_traces, spans = 3000, 3
    ids = asyncio.run(produce_traces(topic, n_traces, spans, traces_per_request=100))
    db = tmp_path / "stored.db"

    first = start_worker(db, "--commit-interval-s", "0.05", "--engine", engine)
    # Kill once some work is committed and some is stored but not yet committed.
    poll(lambda: len(stored(db)) >= n_traces // 4, "a quarter of the traces", timeout_s=60)
    assert first.stop(signal.SIGKILL) == -signal.SIGKILL
    at_kill = len(stored(db))
    assert at_kill < n_traces, "the worker finished before the kill: not mid-stream"
    replay_from = asyncio.run(committed_total(topic))
    assert replay_from < n_traces * spans

    second = start_worker(db, "--engine", engine)
    poll(lambda: len(stored(db)) == n_traces, "every trace stored", timeout_s=120)
    poll(lambda: asyncio.run(committed_total(topic)) == n_traces * spans,
         "every record committed", timeout_s=60)
    assert second.stop(signal.SIGTERM) == 0

    rows = stored(db)
    assert sorted(r[0] for r in rows) == sorted(ids)  # none lost, none invented
    partial = [r for r in rows if r[1] != spans]
    assert not partial, f"{len(partial)} trace(s) re-stored from a replayed tail: {partial[:3]}"
    replayed = sum(r[2] - 1 for r in rows)
    print(f"kill -9 at {at_kill}/{n_traces} stored, committed {replay_from} records; "
          f"{replayed} trace(s) re-evaluated on replay (superseded, one row each)")
