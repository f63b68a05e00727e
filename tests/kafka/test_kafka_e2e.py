"""``collector-config/kafka.yaml`` end to end: the real OpenTelemetry Collector (built by
scripts/collector) writing to the suite's real Kafka broker, and a consumer group of two
``otel-eval serve`` workers, one of them killed with SIGKILL mid-stream; the group rebalances
and the survivor takes the dead worker's partitions over.

    agent (recorded OTLP/JSON, POSTed to the collector's OTLP/HTTP receiver) -> collector
        (kafka.yaml as shipped, endpoints rewritten: kafka exporter, partition_traces_by_id,
        partition_logs_by_trace_id) -> topics otlp_spans + otlp_logs (6 partitions each)
        -> workers A and B (group mode, range assignment, one SQLite store each);
        A is SIGKILLed mid-stream

The traces are the openai-v2-events conformance recordings (content only in log records),
each replayed many times under fresh trace ids. kafka.yaml compresses with zstd (aiokafka
decodes it with cramjam, from its codec extras). Counted, and asserted:
- **lost**: a sent trace with no stored evaluation in either store, or whose newest stored
  evaluation lacks its log records' content (``unrecorded``) or some of its spans: 0;
- **evaluated twice**: a trace with a stored evaluation in both workers' stores at the same
  revision (a higher revision in the survivor's store is a superseding re-evaluation, e.g.
  re-opened by late records, and is not counted). The consumer commits a record's offset only
  after its traces are stored, so the traces A stored after its last commit are replayed by B:
  at-least-once. Asserted: every trace evaluated twice is one A stored *and* one whose records
  the group's committed state (offsets and done-records metadata, read right after the kill)
  leaves to be replayed; nothing A had committed is evaluated again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import sqlite3
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from kafka_server import KafkaServer
from otel_collector import Collector, free_port, render

from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.receive.kafka.offsets import decode_done

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "load"))
from load_harness import poll, serve

pytestmark = [pytest.mark.slow, pytest.mark.kafka_broker]

RECORDINGS = (Path(__file__).resolve().parents[1] / "conformance" / "recordings"
              / "openai-v2-events")
SCENARIOS = ("clean", "distinct", "loop", "streaming", "tool_error")
COPIES = 24  # traces per scenario
PARTITIONS = 6


def _with_trace_ids(node: Any, new: dict[str, str]) -> Any:
    if isinstance(node, dict):
        return {k: (new[v] if k == "traceId" and v in new else _with_trace_ids(v, new))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_with_trace_ids(v, new) for v in node]
    return node


def traces() -> list[tuple[str, str, list[tuple[str, bytes]]]]:
    """(trace id, scenario, [(signal, OTLP/JSON body)]) for every copy of every scenario."""
    out = []
    for scenario in SCENARIOS:
        rec = json.loads((RECORDINGS / f"{scenario}.json").read_text("utf-8"))
        old = {s["traceId"] for item in rec["requests"] if item["signal"] == "traces"
               for rs in item["body"]["resourceSpans"] for ss in rs["scopeSpans"]
               for s in ss["spans"]}
        (tid,) = old
        for i in range(COPIES):
            fresh = hashlib.sha256(f"{scenario}/{i}".encode()).hexdigest()[:32]
            bodies = [(item["signal"], json.dumps(_with_trace_ids(item["body"], {tid: fresh}))
                       .encode()) for item in rec["requests"]]
            out.append((fresh, scenario, bodies))
    return out


def post(http_url: str, signal_name: str, body: bytes) -> None:
    req = urllib.request.Request(f"{http_url}/v1/{signal_name}", data=body,
                                 method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200


def stored(store: Path) -> dict[str, dict[str, Any]]:
    """trace id -> {revision, body} of a (possibly killed) worker's SQLite store."""
    if not store.exists():
        return {}
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=10) as db:
        rows = db.execute("SELECT trace_id, revision, body FROM evaluations").fetchall()
    db.close()
    return {t: {"revision": int(r), "body": json.loads(b)} for t, r, b in rows}


async def replayable(bootstrap: str, group: str, topics: tuple[str, str]) -> set[str]:
    """Trace ids (record keys) of the records the group's committed state does not mark done:
    what a new owner of their partitions replays."""
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await c.start()
    try:
        parts = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
        # the coordinator's fetch: ``committed()`` drops the metadata (as in the consumer)
        got = await c._coordinator.fetch_committed_offsets(parts)
        c.assign(parts)
        end = await c.end_offsets(parts)
        done: dict[TopicPartition, set[int]] = {}
        for tp in parts:
            meta = got.get(tp)
            pos = meta.offset if meta is not None and meta.offset >= 0 else 0
            done[tp] = decode_done(pos, meta.metadata or "") if meta is not None else set()
            c.seek(tp, pos)
        out: set[str] = set()
        while [tp for tp in parts if await c.position(tp) < end[tp]]:
            batch = await c.getmany(timeout_ms=1000)
            out |= {r.key.decode() for tp, recs in batch.items() for r in recs
                    if r.offset < end[tp] and r.offset not in done[tp] and r.key}
        return out
    finally:
        await c.stop()


@pytest.fixture
def topics(kafka_server: KafkaServer) -> Iterator[tuple[str, str]]:
    """kafka.yaml's topics (its exporter's defaults), co-partitioned, deleted afterwards."""
    spans, logs = "otlp_spans", "otlp_logs"
    kafka_server.create_topic(spans, PARTITIONS)
    kafka_server.create_topic(logs, PARTITIONS)
    yield spans, logs
    kafka_server.delete_topic(spans)
    kafka_server.delete_topic(logs)


def test_kafka_yaml_group_of_two_workers_one_killed_mid_stream_loses_no_trace(
        kafka_server: KafkaServer, otelcol_bin: Path, topics: tuple[str, str],
        tmp_path: Path) -> None:
    # otel-eval's defaults are kafka.yaml's topics and encodings: only the brokers are set
    defaults = KafkaConfig()
    assert (defaults.topic, defaults.logs_topic) == topics
    assert defaults.encoding == defaults.logs_encoding == "otlp_proto"
    kafka = {"brokers": kafka_server.bootstrap, "group_id": f"g-{uuid.uuid4().hex[:8]}",
             "commit_interval_s": 0.2, "session_timeout_s": 6.0}
    worker_cfg = {"kafka": kafka, "assembly": {"grace_s": 0.5, "idle_timeout_s": 5.0}}
    sent = traces()
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    http_port = free_port()
    collector = Collector(otelcol_bin, render("kafka.yaml", {
        "0.0.0.0:4317": f"127.0.0.1:{free_port()}", "0.0.0.0:4318": f"127.0.0.1:{http_port}",
        "kafka:9092": kafka_server.bootstrap}), tmp_path)
    front = f"http://127.0.0.1:{http_port}"
    with serve(tmp_path / "a", worker_cfg) as a, serve(tmp_path / "b", worker_cfg) as b, \
            collector:
        half = len(sent) // 2
        for _tid, _n, bodies in sent[:half]:
            for sig, body in bodies:
                post(front, sig, body)
        # Mid-stream: both members store, and the rest is still to come.
        poll(lambda: stored(a.store) and stored(b.store), 120, "both workers to store traces")
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(10)
        a_stored = stored(a.store)
        # before B takes A's partitions over (after session_timeout_s): A's last commits
        to_replay = asyncio.run(replayable(kafka_server.bootstrap, kafka["group_id"], topics))
        for _tid, _n, bodies in sent[half:]:
            for sig, body in bodies:
                post(front, sig, body)
        want = {tid for tid, _, _ in sent}
        poll(lambda: want <= set(a_stored) | set(stored(b.store)), 240,
             "every trace stored by one of the workers")
        b_stored = stored(b.store)
        b_metrics = b.metrics()
    lost, twice = [], []
    newest = {tid: max((s[tid] for s in (a_stored, b_stored) if tid in s),
                       key=lambda e: e["revision"])["body"] for tid, _, _ in sent}
    steps = {sc: max(len(newest[t]["steps"]) for t, s, _ in sent if s == sc) for sc in SCENARIOS}
    for tid, scenario, _ in sent:
        ev = newest[tid]
        if "unrecorded" in ev or len(ev["steps"]) < steps[scenario]:  # content or spans lost
            lost.append(tid)
        if tid in a_stored and tid in b_stored \
                and a_stored[tid]["revision"] == b_stored[tid]["revision"]:
            twice.append(tid)
    print(f"\nkafka.yaml e2e: sent {len(sent)} traces, stored by A {len(a_stored)} (killed), "
          f"by B {len(b_stored)}, lost {len(lost)}, evaluated twice {len(twice)} (of "
          f"{len(to_replay & set(a_stored))} A stored after its last commit); "
          f"B took {b_metrics.get('otel_eval_receiver_log_records_accepted_total', 0):.0f} "
          "log records", file=sys.stderr)
    assert not lost, lost[:5]
    # at-least-once: only what A stored after its last commit is evaluated again
    assert set(twice) <= to_replay & set(a_stored), set(twice) - to_replay
