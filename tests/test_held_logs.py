"""GenAI log records wait for their trace as their bytes, inside ``max_pending_log_bytes``
(issue 21): a flood of records for traces whose spans never come is refused
(``pending_log_bytes``), not held decoded outside every byte bound; what waits too long is
dropped and counted (``no_spans``). The budget is their own (issue 33, finding 14): before,
both signals shared ``max_pending_bytes`` and orphan records refused 25 of 60 span exports.
A record's time past int64 nanoseconds is rejected as a span's is.
Time by hand; the engine fed through the receivers' ``Ingest``, protobuf as gRPC hands it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from opentelemetry.proto.logs.v1 import logs_pb2
from prometheus_client import CollectorRegistry

from otel_eval.app.config import Config
from otel_eval.assemble.engine import Engine
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.model import LogEvent, Span
from otel_eval.decode import encode, otlp, otlp_logs
from otel_eval.decode.otlp_logs import HeldRecord
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import InProcess
from otel_eval.receive.ingest import Ingest
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics

IDLE = 60.0


def records(trace: str, n: int, text: str = "sunny in Paris") -> list[LogEvent]:
    return [LogEvent(trace, f"{i + 1:016x}", "gen_ai.choice", 1_000 + i,
                     {"gen_ai.system": "openai"},
                     {"index": 0, "message": {"role": "assistant", "content": f"{i} {text}"}})
            for i in range(n)]


def logs_body(recs: list[LogEvent]) -> bytes:
    return otlp_logs.encode_logs(recs).SerializeToString()


class Node:
    def __init__(self, tmp: Path, max_pending_log_bytes: int = 128 << 20,
                 max_pending_bytes: int = 512 << 20,
                 max_pending_log_records: int = 1_000_000, stored: bool = False) -> None:
        self.now = 0.0
        cfg = Config()
        cfg = replace(cfg, assembly=replace(cfg.assembly, idle_timeout_s=IDLE,
                                            max_pending_log_bytes=max_pending_log_bytes,
                                            max_pending_bytes=max_pending_bytes,
                                            max_pending_log_records=max_pending_log_records))
        self.metrics = Metrics(CollectorRegistry())
        self.store = Store(str(tmp / "store.db"))
        self.engine = Engine(InProcess(Evaluator(cfg), self.store),
                             StoreHealth(self.store.location, clock=lambda: self.now),
                             self.metrics, assembly=cfg.assembly, clock=lambda: self.now,
                             stored=self.store.get_stamped if stored else None)
        self.ingest = Ingest(self.engine, self.metrics)

    def sample(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


def test_records_wait_as_their_bytes_in_their_own_budget(tmp_path: Path) -> None:
    bodies = [logs_body(records(f"{t + 1:032x}", 50)) for t in range(4)]
    node = Node(tmp_path, max_pending_log_bytes=int(len(bodies[0]) * 3.2),
                max_pending_bytes=int(len(bodies[0]) * 3.2))
    asm = node.engine._assembler
    for body in bodies[:3]:  # the fourth would pass the bound
        assert node.ingest.handle_logs_bytes(body, "grpc").outcome == "ok"
    [held, *_] = asm.open_logs_of(f"{1:032x}")
    assert isinstance(held, HeldRecord)  # bytes, not decoded attributes and bodies
    assert held.decode() == records(f"{1:032x}", 50)[0]
    assert asm.open_log_bytes == sum(r.nbytes for t in range(3)
                                     for r in asm.open_logs_of(f"{t + 1:032x}")) > 0
    refused = node.ingest.handle_logs_bytes(bodies[3], "grpc")
    assert refused.outcome == "throttled" and "pending_log_bytes" in refused.message
    span = Span("f" * 32, "1" * 16, None, "agent", 1, 2,
                attributes={"input.value": "x" * len(bodies[0])})
    spans = node.ingest.handle_bytes(encode.encode_spans([span]).SerializeToString(), "grpc")
    assert spans.outcome == "ok"  # orphan records never refuse spans (a budget each)
    assert node.sample("otel_eval_receiver_requests_throttled_total",
                       protocol="grpc_logs", reason="pending_log_bytes") == 1
    assert node.sample("otel_eval_receiver_requests_throttled_total",
                       protocol="grpc", reason="pending_bytes") == 0

    node.now += IDLE + 1  # their spans never came: dropped, counted, the bytes given back
    node.engine.tick()
    assert node.sample("otel_eval_assembly_log_records_dropped_total", reason="no_spans") == 150
    assert asm.open_log_bytes == 0 and asm.open_logs == 0
    assert node.ingest.handle_logs_bytes(bodies[3], "grpc").outcome == "ok"


def test_held_records_are_decoded_when_their_trace_is_released(tmp_path: Path) -> None:
    node = Node(tmp_path)
    trace = "a" * 32
    recs = records(trace, 3)
    for r in recs:
        r.span_id = "1" * 16
    assert node.ingest.handle_logs_bytes(logs_body(recs), "grpc").accepted == 3
    span = Span(trace, "1" * 16, None, "chat gpt-4o", 1, 2,
                attributes={"gen_ai.operation.name": "chat"})
    node.engine.submit([span])
    node.now += 100
    [released] = node.engine._assembler.tick(node.now)
    assert released.logs == recs  # LogEvent values again, as decode_logs gives them
    assert node.engine._assembler.open_log_bytes == 0


def test_a_decoded_record_keeps_its_observed_time_as_held_and_spooled() -> None:
    """What orders a span's records stamped alike (their observed times) survives a record
    given decoded to the engine (``hold`` encodes it: what is spooled) and a re-encoded
    spool row; a row a version before it wrote (no observed time) still decodes, with 0."""
    [rec] = records("a" * 32, 1)
    rec.observed_time_unix_nano = 2_000
    assert otlp_logs.hold(rec).decode() == rec
    assert otlp_logs.decode_logs(otlp_logs.encode_logs([rec])).records == [rec]
    older = otlp_logs.encode_logs([rec])
    older.resource_logs[0].scope_logs[0].log_records[0].ClearField("observed_time_unix_nano")
    [read] = otlp_logs.decode_logs(older).records
    assert read.observed_time_unix_nano == 0 and read.time_unix_nano == rec.time_unix_nano


def test_a_record_time_past_int64_nanoseconds_is_rejected(tmp_path: Path) -> None:
    node = Node(tmp_path)
    req = otlp_logs.encode_logs(records("b" * 32, 3))
    lr = req.resource_logs[0].scope_logs[0].log_records
    lr[0].time_unix_nano = 2**64 - 1
    lr[1].time_unix_nano = 0
    lr[1].observed_time_unix_nano = 2**63  # one past int64
    res = node.ingest.handle_logs_bytes(req.SerializeToString(), "grpc")
    assert res.accepted == 1 and dict(res.rejected) == {"invalid_timestamp": 2}
    assert "2 invalid_timestamp" in res.message
    assert node.sample("otel_eval_receiver_log_records_rejected_total",
                       protocol="grpc", reason="invalid_timestamp") == 2
    ok = logs_pb2.LogRecord(time_unix_nano=0, observed_time_unix_nano=2**63 - 1)
    assert ok.observed_time_unix_nano == otlp.MAX_TIME_NS  # the bound itself is a time


def test_records_of_a_released_trace_are_pending_until_it_is_evaluated(
        tmp_path: Path) -> None:
    """max_pending_log_records and otel_eval_assembly_pending_log_records: records accepted
    and not yet evaluated, as for spans (open + released-but-queued). Once their trace was
    released they counted nowhere until it was evaluated: the gauge read 0 while the
    evaluation was behind (spans pending 1, records 0), and more records were taken past the
    bound."""
    node = Node(tmp_path, max_pending_log_records=3)
    trace = "a" * 32
    recs = records(trace, 3)
    for r in recs:
        r.span_id = "1" * 16
    assert node.ingest.handle_logs_bytes(logs_body(recs), "grpc").accepted == 3
    node.engine.submit([Span(trace, "1" * 16, None, "chat gpt-4o", 1, 2,
                             attributes={"gen_ai.operation.name": "chat"})])
    node.now += IDLE + 1
    assert node.engine.tick() == 1  # released, queued, not evaluated yet
    assert node.sample("otel_eval_assembly_pending_spans") == 1
    assert node.sample("otel_eval_assembly_pending_log_records") == 3
    more = logs_body(records("b" * 32, 1))
    refused = node.ingest.handle_logs_bytes(more, "grpc")
    assert refused.outcome == "throttled" and "pending_log_records" in refused.message
    assert node.engine.process() == 1
    assert node.sample("otel_eval_assembly_pending_spans") == 0
    assert node.sample("otel_eval_assembly_pending_log_records") == 0
    assert node.ingest.handle_logs_bytes(more, "grpc").outcome == "ok"


def test_a_record_delivered_again_is_a_duplicate_before_and_after_release(
        tmp_path: Path) -> None:
    """A client's retry of an acknowledged logs request (or a Kafka record redelivered): the
    records its trace holds already are refused as ``duplicate_log_record``, as spans are
    as ``duplicate_span``, and re-open nothing once released. Before, each was held again,
    and a GenAI event read twice is the run's twice (OpenAI's gen_ai.choice with a tool call:
    get_weather asked twice, a loop the run never made)."""
    node = Node(tmp_path)
    trace = "a" * 32
    recs = records(trace, 2)
    for r in recs:
        r.span_id = "1" * 16
    body = logs_body(recs)
    assert node.ingest.handle_logs_bytes(body, "grpc").accepted == 2
    again = node.ingest.handle_logs_bytes(body, "grpc")
    assert again.accepted == 0 and dict(again.rejected) == {"duplicate_log_record": 2}
    node.engine.submit([Span(trace, "1" * 16, None, "chat gpt-4o", 1, 2,
                             attributes={"gen_ai.operation.name": "chat"})])
    node.now += IDLE + 1
    assert node.engine.tick() == 1 and node.engine.process() == 1
    late = node.ingest.handle_logs_bytes(body, "grpc")  # within the reopen window
    assert late.accepted == 0 and dict(late.rejected) == {"duplicate_log_record": 2}
    assert node.engine._assembler.open_logs_of(trace) == []  # not re-opened
    assert node.sample("otel_eval_receiver_log_records_rejected_total",
                       protocol="grpc", reason="duplicate_log_record") == 4
    [stored] = node.store.latest(10)
    assert stored["revision"] == 0


def test_records_of_a_stored_run_that_no_span_joins_are_late_not_no_spans(
        tmp_path: Path) -> None:
    """A run's record that comes alone after its run was stored (a Kafka logs record replayed
    after a restart while its spans' records were skipped as done, or one past the re-open
    window) joins no span: its run was evaluated, so it is ``late`` (the stored run stands),
    as a straggler span is; before, it was counted ``no_spans``, the reason that says its
    spans never came (lost on the way: load balancing), which they did."""
    t = f"{7:032x}"
    root = Span(t, "1" * 16, None, "invoke_agent", 1, 2_000,
                attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"})
    first = Node(tmp_path)
    first.ingest.handle_bytes(encode.encode_spans([root]).SerializeToString(), "grpc")
    first.now += IDLE + 1
    first.engine.tick()
    assert first.engine.process() == 1
    first.engine.shutdown(5.0)
    first.store.close()

    second = Node(tmp_path, stored=True)  # the restart: assembly remembers nothing of it
    for trace in (t, f"{8:032x}"):  # the stored run's record, and one of a run never seen
        assert second.ingest.handle_logs_bytes(logs_body(records(trace, 1)),
                                               "grpc").outcome == "ok"
    second.now += IDLE + 1
    second.engine.tick()
    assert second.sample("otel_eval_assembly_log_records_dropped_total", reason="late") == 1
    assert second.sample("otel_eval_assembly_log_records_dropped_total",
                         reason="no_spans") == 1
    assert second.store.get(t)["revision"] == 0  # the stored run stands
