"""``collector-config/kafka.yaml`` end to end: the real OpenTelemetry Collector (built by
scripts/collector) writing to the suite's real Kafka broker, and a consumer group of two
``otel-eval serve`` workers sharing one PostgreSQL store (the Kafka deployment the guide and
the helm example recommend), one of them killed with SIGKILL mid-stream; the group rebalances
and the survivor takes the dead worker's partitions over.

    agent (recorded OTLP/JSON, POSTed to the collector's OTLP/HTTP receiver) -> collector
        (kafka.yaml as shipped, endpoints rewritten: kafka exporter, partition_traces_by_id,
        partition_logs_by_trace_id) -> topics otlp_spans + otlp_logs (6 partitions each)
        -> workers A and B (group mode, range assignment, one shared PostgreSQL store);
        A is SIGKILLed mid-stream

The traces are the openai-v2-events conformance recordings (content only in log records),
each replayed many times under fresh trace ids. kafka.yaml compresses with zstd (aiokafka
decodes it with cramjam, from its codec extras). Every write of an evaluation row is recorded
by a trigger the test adds to the store (trace id, revision, content digest, and the writer:
each worker connects as its own database role), so each evaluation stored by either worker,
the killed one included, is counted. Asserted:
- **lost**: a sent trace with no stored evaluation, or whose stored evaluation lacks its log
  records' content (``unrecorded``) or some of its spans: 0;
- **evaluated twice**: a trace stored twice from the same content (same content digest, by
  either worker): 0. The consumer commits a record's offset only after its traces are stored,
  so the records of the traces A stored after its last commit are redelivered to B; B finds
  their evaluation in the store and skips them (``otel_eval_evaluation_skipped_total{reason=
  "already_evaluated"}``), committing their offsets all the same: every redelivered trace
  that A had stored from the content B assembles again (A's last digest is the final one)
  is skipped by B, never written again. A trace A stored from other content (released
  before some of its records came through the logs topic) is evaluated again by B and
  supersedes: no evaluation of the same content twice, and not counted here. Which of A's
  traces were whole is timing (in one run on a quiet machine none of its 28 were), so the
  skips expected are computed from the writes, not assumed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from support.kafka_server import KafkaServer
from support.otel_collector import Collector, render
from support.poll import poll
from support.ports import free_port
from support.postgresql_server import PostgresServer
from support.served import serve

from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.receive.kafka.offsets import decode_done

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


# Every row the workers write to ``evaluations``, in the order written (the killed worker's
# too: a row count no store snapshot can give once rows are replaced).
_AUDIT = """
CREATE TABLE evaluation_writes (trace_id TEXT, revision INTEGER, content_digest TEXT,
                                body TEXT, writer TEXT);
CREATE FUNCTION record_evaluation_write() RETURNS trigger AS $$
BEGIN
    INSERT INTO evaluation_writes VALUES (NEW.trace_id, NEW.revision, NEW.content_digest,
                                          NEW.body, session_user);
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER evaluation_writes AFTER INSERT OR UPDATE ON evaluations
    FOR EACH ROW EXECUTE FUNCTION record_evaluation_write();
"""


def writes(url: str) -> list[tuple[str, int, str | None, str]]:
    """(trace id, revision, content digest, writer: the worker's database role) of every
    evaluation row written, in order."""
    with psycopg.connect(url) as conn:
        return [(str(t), int(r), d, str(w)) for t, r, d, w in conn.execute(
            "SELECT trace_id, revision, content_digest, writer FROM evaluation_writes")]


def as_role(url: str, role: str) -> str:
    """``url`` connecting as ``role`` (created by the test; trust authentication)."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{role}@{rest.partition('@')[2]}"


def stored(url: str) -> dict[str, dict[str, Any]]:
    """trace id -> the stored per-trace object in the shared store."""
    with psycopg.connect(url) as conn:
        return {str(t): json.loads(b) for t, b in conn.execute(
            "SELECT trace_id, body FROM evaluations")}


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


def test_kafka_yaml_group_of_two_workers_one_killed_mid_stream_evaluates_each_trace_once(
        kafka_server: KafkaServer, otelcol_bin: Path, topics: tuple[str, str],
        postgresql_server: PostgresServer, tmp_path: Path) -> None:
    # otel-eval's defaults are kafka.yaml's topics and encodings: only the brokers are set
    defaults = KafkaConfig()
    assert (defaults.topic, defaults.logs_topic) == topics
    assert defaults.encoding == defaults.logs_encoding == "otlp_proto"
    url = postgresql_server.create_database()
    with psycopg.connect(url, autocommit=True) as conn:  # one role per worker: who wrote
        for role in ("worker_a", "worker_b"):
            conn.execute(f"DO $$ BEGIN CREATE ROLE {role} LOGIN SUPERUSER; EXCEPTION WHEN "
                         "duplicate_object THEN NULL; END $$")  # roles are the server's
    kafka = {"brokers": kafka_server.bootstrap, "group_id": f"g-{uuid.uuid4().hex[:8]}",
             # long enough that A holds stored, uncommitted traces when it is killed
             "commit_interval_s": 3.0, "session_timeout_s": 6.0}
    worker_cfg = {"kafka": kafka, "assembly": {"grace_s": 0.5, "idle_timeout_s": 5.0}}
    sent = traces()
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    http_port = free_port()
    collector = Collector(otelcol_bin, render("kafka.yaml", {
        "0.0.0.0:4317": f"127.0.0.1:{free_port()}", "0.0.0.0:4318": f"127.0.0.1:{http_port}",
        "kafka:9092": kafka_server.bootstrap}), tmp_path)
    front = f"http://127.0.0.1:{http_port}"
    with serve(tmp_path / "a", worker_cfg, store_url=as_role(url, "worker_a")) as a, \
            serve(tmp_path / "b", worker_cfg, store_url=as_role(url, "worker_b")) as b, \
            collector:
        with psycopg.connect(url, autocommit=True) as conn:  # the workers migrated it
            conn.execute(_AUDIT)
        # Both members in the group before the first half goes out: a member that joined late
        # (a slow host) found every record of the first half stored by the other.
        poll(lambda: all("Setting newly assigned partitions" in w.log.read_text(errors="replace")
                         for w in (a, b)), "both workers to be assigned partitions",
             timeout_s=120)
        half = len(sent) // 2
        for _tid, _n, bodies in sent[:half]:
            for sig, body in bodies:
                post(front, sig, body)
        # Mid-stream: both members store, and the rest is still to come.
        poll(lambda: {w[3] for w in writes(url)} == {"worker_a", "worker_b"},
             "both workers to store traces", timeout_s=120)
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(10)
        a_stored = {w[0] for w in writes(url) if w[3] == "worker_a"}
        # before B takes A's partitions over (after session_timeout_s): A's last commits
        to_replay = asyncio.run(replayable(kafka_server.bootstrap, kafka["group_id"], topics))
        for _tid, _n, bodies in sent[half:]:
            for sig, body in bodies:
                post(front, sig, body)
        want = {tid for tid, _, _ in sent}
        poll(lambda: want <= set(stored(url)), "every trace stored", timeout_s=240)
        # and every record done (committed): a redelivered one evaluated again would show now
        poll(lambda: not asyncio.run(replayable(kafka_server.bootstrap, kafka["group_id"],
                                                topics)),
             "every record committed", timeout_s=120)
        final, rows = stored(url), writes(url)
        b_metrics = b.metrics()
    lost = []
    steps = {sc: max(len(final[t]["steps"]) for t, s, _ in sent if s == sc) for sc in SCENARIOS}
    for tid, scenario, _ in sent:
        ev = final[tid]
        if "unrecorded" in ev or len(ev["steps"]) < steps[scenario]:  # content or spans lost
            lost.append(tid)
    per_content: dict[tuple[str, str | None], int] = {}
    for tid, _rev, digest, _writer in rows:
        per_content[tid, digest] = per_content.get((tid, digest), 0) + 1
    twice = sorted({tid for (tid, _), n in per_content.items() if n > 1})
    skipped = b_metrics.get("otel_eval_evaluation_skipped_total", 0)
    print(f"\nkafka.yaml e2e (shared PostgreSQL store): sent {len(sent)} traces, "
          f"{len(rows)} evaluations stored, {len(a_stored)} by A before it was killed "
          f"({len(to_replay & a_stored)} after its last commit: redelivered), lost {len(lost)}, "
          f"evaluated twice {len(twice)}, skipped by B as already evaluated {skipped:.0f}; "
          f"B took {b_metrics.get('otel_eval_receiver_log_records_accepted_total', 0):.0f} "
          "log records", file=sys.stderr)
    assert not lost, lost[:5]
    assert all(d is not None for _, _, d, _ in rows)  # every row records its content
    assert not twice, twice[:5]
    # the redelivered traces A had stored from their whole content were found in the store,
    # not evaluated again
    last = {tid: (d, w) for tid, _r, d, w in rows}  # rows are in write order
    last_by_a = {tid: d for tid, _r, d, w in rows if w == "worker_a"}
    written_by_b = {tid for tid, _r, _d, w in rows if w == "worker_b"}
    whole = {tid for tid in to_replay & a_stored if last_by_a[tid] == last[tid][0]}
    print(f"redelivered traces A had stored whole: {len(whole)} of "
          f"{len(to_replay & a_stored)}", file=sys.stderr)
    assert not whole & written_by_b, sorted(whole & written_by_b)[:5]
    assert skipped >= len(whole)
    assert len({tid for tid, *_ in rows}) == len(sent)
