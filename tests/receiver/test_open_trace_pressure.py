"""Issue 11 (open-trace slots and bytes): 50,000 never-ending one-span traces used to lock out
every new trace for the idle timeout; one service could hold every slot; open traces had no
byte bound. Now one-span idle traces give way first, a service's share is capped, and bytes
held are bounded; each refusal is a retryable throttle with a counted reason."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2 as ls
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from support.harness import Harness, running_service
from test_receivers import _raw_export

from otel_eval.base.model import Span
from otel_eval.decode import encode

LOGS_EXPORT = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"


def _trace(i: int, n: int = 1, service: str = "agents", payload: str = "") -> list[Span]:
    trace = f"{i + 1:032x}"
    resource = {"service.name": service}
    spans = [Span(trace, f"{1:016x}", None, "invoke_agent", 1, 0, resource=resource,
                  attributes={"p": payload} if payload else None)]
    spans += [Span(trace, f"{k + 2:016x}", f"{1:016x}", "chat", 2, 3, resource=resource)
              for k in range(n - 1)]
    return spans


def _send(h: Harness, spans: list[Span]) -> grpc.StatusCode | None:
    _, err = _raw_export(h, encode.encode_spans(spans).SerializeToString())
    return None if err is None else err.code()


def _throttled(h: Harness, reason: str) -> float:
    return h.sample("otel_eval_receiver_requests_throttled_total", protocol="grpc",
                    reason=reason)


def test_one_span_idle_traces_give_way_to_new_traces(tmp_path: Path) -> None:
    with running_service(tmp_path, **{"assembly.max_open_traces": 100,
                                      "assembly.pressure_idle_s": 30.0}) as h:
        flood = [s for i in range(100) for s in _trace(i)]  # never-ending one-span traces
        assert _send(h, flood) is None
        assert _send(h, _trace(1000, 3)) == grpc.StatusCode.RESOURCE_EXHAUSTED  # not idle yet
        h.clock.now += 31
        assert _send(h, _trace(1001, 3)) is None  # one flood trace gave way
        assert h.svc.engine.open_traces() == 100
        assert h.sample("otel_eval_assembly_traces_released_total", status="truncated",
                        reason="pressure") == 1
        assert h.svc.engine.process() == 1  # the pushed-out trace is evaluated, not dropped
        assert _throttled(h, "open_traces") == 1


def test_multi_span_traces_do_not_give_way(tmp_path: Path) -> None:
    with running_service(tmp_path, **{"assembly.max_open_traces": 10}) as h:
        assert _send(h, [s for i in range(10) for s in _trace(i, 2)]) is None
        h.clock.now += 60
        assert _send(h, _trace(100, 2)) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert h.svc.engine.open_traces() == 10


def test_one_service_holds_at_most_its_share(tmp_path: Path) -> None:
    with running_service(tmp_path, **{"assembly.max_open_traces": 10,
                                      "assembly.max_service_share": 0.5}) as h:
        assert _send(h, [s for i in range(5) for s in _trace(i, 2, "noisy")]) is None
        assert _send(h, _trace(5, 2, "noisy")) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _send(h, _trace(6, 2, "quiet")) is None
        assert _send(h, _trace(0, 3, "noisy")[2:]) is None  # more spans of an open trace: fine
        assert _throttled(h, "service_share") == 1
        assert h.svc.engine.open_traces() == 6


def test_bytes_held_are_bounded(tmp_path: Path) -> None:
    with running_service(tmp_path, **{"assembly.max_pending_bytes": 100_000}) as h:
        assert _send(h, _trace(0, 1, payload="x" * 60_000)) is None
        assert _send(h, _trace(1, 1, payload="x" * 60_000)) == \
            grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _throttled(h, "pending_bytes") == 1
        assert h.release(after_s=h.svc.config.assembly.idle_timeout_s + 1) == 1
        assert _send(h, _trace(1, 1, payload="x" * 60_000)) is None  # evaluated: room again


def test_a_gateway_batch_over_one_services_share_takes_the_others(tmp_path: Path) -> None:
    """A gateway collector batches every service into one export: a flooding service is in
    every batch, so refusing a batch whole for its share locked the others out too. The
    over-share service's new traces are rejected (partial success, counted); the rest is
    taken, and only that is spooled (a restart replays the quiet trace, not the noisy one)."""
    share = {"assembly.max_open_traces": 10, "assembly.max_service_share": 0.5}
    with running_service(tmp_path, **share) as h:
        assert _send(h, [s for i in range(5) for s in _trace(i, 2, "noisy")]) is None
        batch = _trace(5, 2, "noisy") + _trace(6, 3, "quiet") + _trace(0, 3, "noisy")[2:]
        resp, err = _raw_export(h, encode.encode_spans(batch).SerializeToString())
        assert err is None and resp is not None
        assert resp.partial_success.rejected_spans == 2
        assert "2 service_share" in resp.partial_success.error_message
        assert h.sample("otel_eval_receiver_spans_rejected_total", protocol="grpc",
                        reason="service_share") == 2
        assert h.sample("otel_eval_receiver_spans_accepted_total", protocol="grpc") == 14
        assert _throttled(h, "service_share") == 0
        assert h.svc.engine.open_traces() == 6
        assert _send(h, _trace(5, 2, "noisy")) == grpc.StatusCode.RESOURCE_EXHAUSTED  # alone
    with running_service(tmp_path, **share) as h:  # the spool holds what was taken
        assert h.svc.engine.open_traces() == 6
        assert _send(h, _trace(6, 3, "quiet")[:1]) is None  # open: a duplicate, not a new one
        assert h.sample("otel_eval_receiver_spans_rejected_total", protocol="grpc",
                        reason="duplicate_span") == 1


def test_a_request_of_one_trace_over_a_share_is_throttled_not_rejected(
        tmp_path: Path) -> None:
    """A run that calls another service (its spans under that service's resource) in a
    request of that trace only (a Kafka record with partition_traces_by_id, or a gateway's
    batch when one run is in flight): its opener past its share rejected every span of it
    for good (partial success: the exporter drops it, the Kafka record is committed), though
    nothing else was taken and no other trace waited. Throttled whole, it is sent again."""
    share = {"assembly.max_open_traces": 10, "assembly.max_service_share": 0.5}
    with running_service(tmp_path, **share) as h:
        assert _send(h, [s for i in range(5) for s in _trace(i, 2, "noisy")]) is None
        tool = Span(f"{6:032x}", f"{9:016x}", f"{1:016x}", "tool", 2, 3,
                    resource={"service.name": "tools"})
        trace = [*_trace(5, 2, "noisy"), tool]
        assert _send(h, trace) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _throttled(h, "service_share") == 1
        assert h.sample("otel_eval_receiver_spans_rejected_total", protocol="grpc",
                        reason="service_share") == 0


def test_a_run_is_its_roots_services_whatever_span_comes_first(tmp_path: Path) -> None:
    """A gateway's batch holding a run of one service whose call to another (its tool span,
    under the other's resource) comes first: the run was the first span's service's, so
    with that one past its share the whole run was rejected for good, though its own
    service was within its share; and had it been taken, its slot counted for the other.
    A run opened with its root (a span with no parent) is its root's service's."""
    share = {"assembly.max_open_traces": 10, "assembly.max_service_share": 0.5}
    with running_service(tmp_path, **share) as h:
        assert _send(h, [s for i in range(5) for s in _trace(i, 2, "noisy")]) is None
        tool = Span(f"{6:032x}", f"{9:016x}", f"{1:016x}", "execute_tool", 2, 3,
                    resource={"service.name": "noisy"})
        batch = [tool, *_trace(5, 2, "quiet"), *_trace(6, 2, "quiet")]
        resp, err = _raw_export(h, encode.encode_spans(batch).SerializeToString())
        assert err is None and resp is not None
        assert resp.partial_success.rejected_spans == 0
        assert h.svc.engine.open_traces() == 7
        assert h.svc.engine._assembler.service_open("quiet") == 2


def test_with_pass_through_a_gateway_batch_over_a_share_is_throttled_whole(
        tmp_path: Path) -> None:
    """Pass-through owes the backend every span: none is rejected for good for a share."""
    with running_service(tmp_path, **{"assembly.max_open_traces": 10,
                                      "assembly.max_service_share": 0.5,
                                      "export.forward_endpoint": "127.0.0.1:9"}) as h:
        assert _send(h, [s for i in range(5) for s in _trace(i, 2, "noisy")]) is None
        batch = _trace(5, 2, "noisy") + _trace(6, 3, "quiet")
        assert _send(h, batch) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _throttled(h, "service_share") == 1
        assert h.svc.engine.open_traces() == 5


def _send_logs(h: Harness, spans: list[Span], service: str) -> None:
    """A GenAI event record for each trace of ``spans`` (its root span), ahead of them: an
    instrumentation's log exporter flushes apart from (often before) its span exporter."""
    roots = [s for s in spans if s.parent_span_id is None]
    records = [logs_pb2.LogRecord(trace_id=bytes.fromhex(s.trace_id),
                                  span_id=bytes.fromhex(s.span_id), time_unix_nano=5,
                                  event_name="gen_ai.user.message") for s in roots]
    resource = resource_pb2.Resource(attributes=[common_pb2.KeyValue(
        key="service.name", value=common_pb2.AnyValue(string_value=service))] if service
        else [])  # "": a resource naming no service
    body = ls.ExportLogsServiceRequest(resource_logs=[logs_pb2.ResourceLogs(
        resource=resource, scope_logs=[logs_pb2.ScopeLogs(log_records=records)])])
    with grpc.insecure_channel(h.grpc_target) as ch:
        ch.unary_unary(LOGS_EXPORT)(body.SerializeToString(), timeout=10)


def test_traces_whose_log_records_came_first_count_in_their_services_share(
        tmp_path: Path) -> None:
    """A trace opened by its GenAI log records (here naming no service) was held under no
    service for good, even once its spans said whose it is: a service whose records reach
    otel-eval before its spans (log and span exporters flush apart) was never held to
    max_service_share and could take every slot, locking the other services out."""
    with running_service(tmp_path, **{"assembly.max_open_traces": 10,
                                      "assembly.max_service_share": 0.5}) as h:
        for i in range(5):
            _send_logs(h, _trace(i, 2, "noisy"), "")
            assert _send(h, _trace(i, 2, "noisy")) is None
        assert h.svc.engine.open_traces() == 5
        _send_logs(h, _trace(5, 2, "noisy"), "")  # opens a slot, its service unknown
        assert _send(h, _trace(5, 2, "noisy")) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _send(h, _trace(6, 2, "noisy")) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _throttled(h, "service_share") == 2
        assert _send(h, _trace(7, 2, "quiet")) is None


def test_traces_of_log_records_whose_spans_never_come_give_way_to_new_traces(
        tmp_path: Path) -> None:
    """GenAI event records whose spans never come (their traces sampled out, or spans sent
    elsewhere) each hold an open-trace slot until idle_timeout_s. Only one-span traces gave
    way under slot pressure, so such records took every slot and refused the spans of every
    new run for 3 minutes, though log records must never refuse spans. Now a trace holding
    records and no span gives way as a one-span trace does: its records dropped, counted."""
    with running_service(tmp_path, **{"assembly.max_open_traces": 10,
                                      "assembly.pressure_idle_s": 30.0}) as h:
        for i in range(10):
            _send_logs(h, _trace(i), "orphans")
        assert h.svc.engine.open_traces() == 10
        assert _send(h, _trace(100, 3)) == grpc.StatusCode.RESOURCE_EXHAUSTED  # not idle yet
        h.clock.now += 31
        assert _send(h, _trace(101, 3)) is None  # one orphan trace gave way
        assert h.svc.engine.open_traces() == 10
        h.svc.engine.tick()
        assert h.sample("otel_eval_assembly_log_records_dropped_total",
                        reason="no_spans") == 1
        assert _throttled(h, "open_traces") == 1


def test_log_records_open_no_more_traces_than_their_services_share(tmp_path: Path) -> None:
    """Log records open traces too, and their resource names the service: a service whose
    records come ahead of its spans opened every slot with them (held under no service,
    past its share), and the other services' spans were throttled (`open_traces`)."""
    with running_service(tmp_path, **{"assembly.max_open_traces": 10,
                                      "assembly.max_service_share": 0.5}) as h:
        for i in range(5):
            _send_logs(h, _trace(i), "noisy")
        with pytest.raises(grpc.RpcError) as refused:
            _send_logs(h, _trace(5), "noisy")
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert h.sample("otel_eval_receiver_requests_throttled_total", protocol="grpc_logs",
                        reason="service_share") == 1
        assert h.svc.engine.open_traces() == 5
        assert _send(h, [s for i in range(6, 11) for s in _trace(i, 2, "quiet")]) is None


_SPANS_SHARE = {"assembly.max_open_traces": 100, "assembly.max_service_share": 0.5,
                "assembly.max_pending_spans": 100}


def test_a_flood_of_long_traces_cannot_fill_the_pending_spans_of_the_others(
        tmp_path: Path) -> None:
    """max_service_share capped only the slots: three long runs of one service (3 of 100
    slots, 90 of 100 pending spans) throttled every other service's run (`pending_spans`).
    A service past its share of the pending spans is refused (`service_share`), not others."""
    with running_service(tmp_path, **_SPANS_SHARE) as h:
        flood = [_send(h, _trace(i, 30, "noisy")) for i in range(3)]
        assert _send(h, _trace(9, 20, "quiet")) is None
        assert _throttled(h, "pending_spans") == 0
        exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED
        assert flood == [None, exhausted, exhausted]  # holding nothing, a request is taken
        assert _throttled(h, "service_share") == 2
        idle = h.svc.config.assembly.idle_timeout_s + 1
        assert h.release(after_s=idle) == 2  # evaluated: the noisy service has room again
        assert _send(h, _trace(1, 30, "noisy")) is None


def test_a_flood_of_large_spans_cannot_fill_the_pending_bytes_of_the_others(
        tmp_path: Path) -> None:
    with running_service(tmp_path, **{"assembly.max_service_share": 0.5,
                                      "assembly.max_pending_bytes": 100_000}) as h:
        assert _send(h, _trace(0, 1, "noisy", payload="x" * 30_000)) is None
        assert _send(h, _trace(1, 1, "noisy", payload="x" * 30_000)) == \
            grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _send(h, _trace(2, 1, "quiet", payload="x" * 30_000)) is None
        assert _throttled(h, "service_share") == 1
        assert _throttled(h, "pending_bytes") == 0


def test_spans_released_and_not_evaluated_count_in_their_services_share(
        tmp_path: Path) -> None:
    with running_service(tmp_path, **_SPANS_SHARE) as h:
        assert _send(h, _trace(0, 40, "noisy")) is None
        h.clock.now += h.svc.config.assembly.idle_timeout_s + 1
        h.svc.engine.tick()  # released, queued for evaluation: still pending
        assert _send(h, _trace(1, 40, "noisy")) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _throttled(h, "service_share") == 1
        assert h.svc.engine.process() == 1  # evaluated: no longer held against its share
        assert _send(h, _trace(1, 40, "noisy")) is None


def test_a_gateway_batch_over_one_services_share_of_spans_takes_the_others(
        tmp_path: Path) -> None:
    """In a batch of several services, the new runs of the one past its share of the
    pending spans are rejected whole (partial success, counted), the others' taken; the
    later spans of its runs already open are taken too: rejected, they cut a run that was
    then evaluated as if whole (a false non-termination, a missed tool call)."""
    with running_service(tmp_path, **_SPANS_SHARE) as h:
        assert _send(h, _trace(0, 45, "noisy")) is None
        batch = _trace(0, 55, "noisy")[45:] + _trace(2, 10, "noisy") + _trace(1, 10, "quiet")
        resp, err = _raw_export(h, encode.encode_spans(batch).SerializeToString())
        assert err is None and resp is not None
        assert resp.partial_success.rejected_spans == 10
        assert h.sample("otel_eval_receiver_spans_rejected_total", protocol="grpc",
                        reason="service_share") == 10
        assert _throttled(h, "service_share") == 0
        assert h.svc.engine.pending_spans() == 65
        assert _send(h, _trace(0, 60, "noisy")[55:]) is None  # its own run, alone: taken
        assert _send(h, _trace(2, 10, "noisy")) == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_with_pass_through_a_batch_over_a_share_of_spans_is_throttled_whole(
        tmp_path: Path) -> None:
    with running_service(tmp_path, **_SPANS_SHARE,
                         **{"export.forward_endpoint": "127.0.0.1:9"}) as h:
        assert _send(h, _trace(0, 45, "noisy")) is None
        batch = _trace(0, 55, "noisy")[45:] + _trace(2, 10, "noisy") + _trace(1, 10, "quiet")
        assert _send(h, batch) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _throttled(h, "service_share") == 1


def test_a_lone_service_still_uses_the_whole_pending_budget(tmp_path: Path) -> None:
    """Without a share (1.0, the default) one service fills every bound; with one, a
    request larger than the share is still taken while its service holds nothing."""
    with running_service(tmp_path, **{"assembly.max_pending_spans": 100}) as h:
        for i in range(5):
            assert _send(h, _trace(i, 20, "only")) is None
        assert _send(h, _trace(5, 1, "only")) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _throttled(h, "pending_spans") == 1
        assert _throttled(h, "service_share") == 0
    (tmp_path / "share").mkdir()
    with running_service(tmp_path / "share", **_SPANS_SHARE) as h:
        assert _send(h, _trace(0, 80, "only")) is None


def _export_logs(h: Harness, first: int, n: int, service: str, size: int
                 ) -> tuple[ls.ExportLogsServiceResponse | None, grpc.StatusCode | None]:
    """``n`` GenAI records of ``size`` bytes of body, one per trace from ``first``."""
    records = [logs_pb2.LogRecord(trace_id=bytes.fromhex(f"{first + i + 1:032x}"),
                                  span_id=bytes.fromhex(f"{1:016x}"), time_unix_nano=5,
                                  event_name="gen_ai.user.message",
                                  body=common_pb2.AnyValue(string_value="x" * size))
               for i in range(n)]
    resource = resource_pb2.Resource(attributes=[common_pb2.KeyValue(
        key="service.name", value=common_pb2.AnyValue(string_value=service))])
    body = ls.ExportLogsServiceRequest(resource_logs=[logs_pb2.ResourceLogs(
        resource=resource, scope_logs=[logs_pb2.ScopeLogs(log_records=records)])])
    with grpc.insecure_channel(h.grpc_target) as ch:
        try:
            raw = ch.unary_unary(LOGS_EXPORT)(body.SerializeToString(), timeout=10)
        except grpc.RpcError as e:
            return None, e.code()
    return ls.ExportLogsServiceResponse.FromString(raw), None


def test_one_services_log_records_cannot_fill_the_log_budget_of_the_others(
        tmp_path: Path) -> None:
    """The records of one service's runs (a few slots) filled max_pending_log_bytes and
    every other service's records were throttled (`pending_log_bytes`); its share of the
    held records and their bytes holds as for spans."""
    with running_service(tmp_path, **{"assembly.max_service_share": 0.5,
                                      "assembly.max_pending_log_bytes": 100_000}) as h:
        flood = [_export_logs(h, i, 1, "noisy", 30_000)[1] for i in range(3)]
        assert _export_logs(h, 10, 1, "quiet", 30_000)[1] is None
        exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED
        assert flood == [None, exhausted, exhausted]
        assert h.sample("otel_eval_receiver_requests_throttled_total", protocol="grpc_logs",
                        reason="service_share") == 2


def _export_two(h: Harness, batches: list[tuple[int, str]]) -> ls.ExportLogsServiceResponse:
    """One request holding a 30,000-byte record per (trace, service), as a gateway's batch."""
    rls = [logs_pb2.ResourceLogs(
        resource=resource_pb2.Resource(attributes=[common_pb2.KeyValue(
            key="service.name", value=common_pb2.AnyValue(string_value=svc))]),
        scope_logs=[logs_pb2.ScopeLogs(log_records=[logs_pb2.LogRecord(
            trace_id=bytes.fromhex(f"{i + 1:032x}"), span_id=bytes.fromhex(f"{1:016x}"),
            time_unix_nano=5, event_name="gen_ai.user.message",
            body=common_pb2.AnyValue(string_value="x" * 30_000))])])
        for i, svc in batches]
    body = ls.ExportLogsServiceRequest(resource_logs=rls)
    with grpc.insecure_channel(h.grpc_target) as ch:
        raw = ch.unary_unary(LOGS_EXPORT)(body.SerializeToString(), timeout=10)
    return ls.ExportLogsServiceResponse.FromString(raw)


def test_a_gateway_batch_over_one_services_share_of_log_bytes_takes_the_others(
        tmp_path: Path) -> None:
    with running_service(tmp_path, **{"assembly.max_service_share": 0.5,
                                      "assembly.max_pending_log_bytes": 100_000}) as h:
        assert _export_logs(h, 0, 1, "noisy", 30_000)[1] is None
        resp = _export_two(h, [(1, "noisy"), (2, "quiet")])
        assert resp.partial_success.rejected_log_records == 1
        assert h.sample("otel_eval_receiver_log_records_rejected_total", protocol="grpc",
                        reason="service_share") == 1
        assert h.svc.engine.open_traces() == 2


def test_records_of_a_service_past_its_share_for_an_open_run_are_taken(
        tmp_path: Path) -> None:
    """A run's GenAI records sent by another service past its share of the log bytes (a
    downstream service's events, in a gateway's batch) were rejected and the run evaluated
    without them as if whole; a run open already is never cut for a share."""
    with running_service(tmp_path, **{"assembly.max_service_share": 0.5,
                                      "assembly.max_pending_log_bytes": 100_000}) as h:
        assert _export_logs(h, 0, 1, "noisy", 30_000)[1] is None
        assert _send(h, _trace(5, 2, "quiet")) is None
        resp = _export_two(h, [(5, "noisy"), (7, "quiet"), (8, "noisy")])
        assert resp.partial_success.rejected_log_records == 1  # the noisy one's new trace
        assert h.svc.engine.open_traces() == 3


def test_a_services_load_is_given_back_when_its_runs_are_done(tmp_path: Path) -> None:
    """What counts against a service's share leaves with its runs: released, re-opened by
    late spans and records, released again and evaluated, nothing stays held against it."""
    with running_service(tmp_path, **_SPANS_SHARE) as h:
        _export_logs(h, 0, 1, "noisy", 100)
        assert _send(h, _trace(0, 30, "noisy")) is None
        idle = h.svc.config.assembly.idle_timeout_s + 1
        assert h.release(after_s=idle) == 1
        assert _send(h, _trace(0, 35, "noisy")[30:]) is None  # late: re-opens the run
        _export_logs(h, 0, 1, "noisy", 200)
        assert h.release(after_s=idle) == 1
        asm, fin = h.svc.engine._assembler, h.svc.engine.finishing
        assert not asm.load.spans and not asm.load.bytes and not asm.log_load.spans
        assert not fin.queued_load.spans and not fin.queued_load.bytes


def test_a_run_calling_a_service_past_its_share_is_taken_whole(tmp_path: Path) -> None:
    """A run of one service holding spans of another (a distributed agent: its tool spans
    under the tool service's resource) in a gateway's batch: the spans of the one past its
    share of the pending spans were rejected and cut out of the run, which was taken and
    evaluated without them as if whole. The share is decided per run, by the service that
    opens it: the run is taken whole, and so it is after a restart."""
    with running_service(tmp_path, **_SPANS_SHARE) as h:
        assert _send(h, _trace(0, 60, "noisy")) is None
        run = _trace(1, 6, "quiet")
        for s in run[1:]:
            s.resource = {"service.name": "noisy"}  # a downstream service's spans
        resp, err = _raw_export(h, encode.encode_spans(run + _trace(2, 3, "noisy"))
                                .SerializeToString())
        assert err is None and resp is not None
        assert resp.partial_success.rejected_spans == 3  # the noisy service's own new run
        assert h.svc.engine.pending_spans() == 66
    with running_service(tmp_path, **_SPANS_SHARE) as h:  # the spool holds what was taken
        assert h.svc.engine.pending_spans() == 66


def test_a_services_rejected_spans_do_not_fill_the_spool(tmp_path: Path) -> None:
    """A gateway's batches each hold a flooding service's new runs, rejected for its share,
    and another service's small run, taken. Each request was spooled whole, its rejected
    spans kept on disk as long as the other's run stayed open: 4 such batches filled
    spool_max_bytes and every service's exports were refused (`spool_full`)."""
    with running_service(tmp_path, **{"assembly.max_open_traces": 20,
                                      "assembly.max_service_share": 0.5,
                                      "store.spool_max_bytes": 200_000}) as h:
        assert _send(h, [s for i in range(10) for s in _trace(i, 1, "noisy")]) is None
        for k in range(6):
            batch = _trace(100 + k, 1, "noisy", payload="x" * 50_000) + \
                _trace(200 + k, 1, "quiet")
            resp, err = _raw_export(h, encode.encode_spans(batch).SerializeToString())
            assert err is None and resp is not None
            assert resp.partial_success.rejected_spans == 1
        assert _throttled(h, "spool_full") == 0
        assert h.svc.engine.open_traces() == 16


def test_log_records_released_and_not_evaluated_count_in_their_services_share(
        tmp_path: Path) -> None:
    """The records of a released trace still count in max_pending_log_records until it is
    evaluated, but no longer in their service's share of it: a service whose runs ended
    while evaluation was behind took the whole budget, and every other service's records
    were throttled (`pending_log_records`). They count under their service until evaluated,
    as a released trace's spans do."""
    with running_service(tmp_path, **{"assembly.max_service_share": 0.5,
                                      "assembly.max_pending_log_records": 10}) as h:
        for i in range(4):
            assert _send(h, _trace(i, 1, "noisy")) is None
        assert _export_logs(h, 0, 4, "noisy", 10)[1] is None
        h.clock.now += h.svc.config.assembly.idle_timeout_s + 1
        h.svc.engine.tick()  # released, queued for evaluation: still pending
        assert h.sample("otel_eval_assembly_pending_log_records") == 4
        assert _export_logs(h, 4, 4, "noisy", 10)[1] == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _export_logs(h, 10, 4, "quiet", 10)[1] is None
        throttled = {r: h.sample("otel_eval_receiver_requests_throttled_total",
                                 protocol="grpc_logs", reason=r)
                     for r in ("service_share", "pending_log_records")}
        assert throttled == {"service_share": 1, "pending_log_records": 0}
        assert h.svc.engine.process() == 4  # evaluated: no longer held against its share
        assert _export_logs(h, 4, 4, "noisy", 10)[1] is None


def test_a_run_whose_callee_span_was_refused_for_a_share_is_not_judged_whole(
        tmp_path: Path) -> None:
    """A gateway's batch holding a called service's tool span before its run's root: the
    callee past its share, the span was rejected as that service's new trace; the root,
    arriving later, opened the run without it, judged `complete` as if whole. The run now
    knows it lost spans: released `truncated` (reason `service_share`), never complete."""
    share = {"assembly.max_open_traces": 10, "assembly.max_service_share": 0.5}
    with running_service(tmp_path, **share) as h:
        assert _send(h, [s for i in range(5) for s in _trace(i, 2, "noisy")]) is None
        tool = Span(f"{7:032x}", f"{9:016x}", f"{1:016x}", "execute_tool", 2, 3,
                    resource={"service.name": "noisy"})
        resp, err = _raw_export(h, encode.encode_spans(
            [tool, *_trace(5, 2, "quiet")]).SerializeToString())
        assert err is None and resp is not None
        assert resp.partial_success.rejected_spans == 1  # the callee's span, for good
        run = [Span(f"{7:032x}", f"{1:016x}", None, "invoke_agent", 1, 5,
                    resource={"service.name": "quiet"})]
        assert _send(h, run) is None  # the run's root, later (ended: a run over)
        assert h.release() == 1
        stored = h.svc.store.get(f"{7:032x}")
        assert stored is not None
        assert stored["status"] == "truncated"
        assert h.sample("otel_eval_assembly_traces_released_total", status="truncated",
                        reason="service_share") == 1


def test_one_service_cannot_fill_the_spool_for_the_others(tmp_path: Path) -> None:
    """The spool had no share: one service's runs, within their shares of the slots and of
    the pending spans and bytes, held every byte of `spool_max_bytes` (open, or evaluated
    and waiting on a slow sink), and every other service's exports were refused
    (`spool_full`). Past its share of the spool a service opens no new trace
    (`service_share`); the others' runs are still taken."""
    with running_service(tmp_path, **{"assembly.max_service_share": 0.5,
                                      "store.spool_max_bytes": 200_000}) as h:
        for i in range(12):
            _send(h, _trace(i, 1, "noisy", payload="x" * 20_000))
        assert _throttled(h, "service_share") > 0
        assert _send(h, _trace(50, 1, "quiet", payload="x" * 20_000)) is None
        assert _throttled(h, "spool_full") == 0
        batch = _trace(60, 1, "noisy", payload="x" * 20_000) + _trace(61, 1, "quiet")
        resp, err = _raw_export(h, encode.encode_spans(batch).SerializeToString())
        assert err is None and resp is not None
        assert resp.partial_success.rejected_spans == 1  # the noisy one's new run only


def test_a_run_otel_eval_cut_for_room_is_no_run_that_did_not_end(tmp_path: Path) -> None:
    """A one-span run that gave way under slot pressure (reason `pressure`) was released
    `truncated` with `non_termination/truncated`, a kind of ``NOT_ENDED_KINDS``: counted in
    `otel_eval_traces_non_terminated_total`, so otel-eval running out of room paged for the
    agent (OtelEvalNonTerminationRateHigh), and its stored result did not say why it was
    cut. Now it is the note `evaluation/run_cut` (info, not counted as not ended) and the
    result carries `release_reason`."""
    with running_service(tmp_path, **{"assembly.max_open_traces": 100,
                                      "assembly.pressure_idle_s": 30.0}) as h:
        assert _send(h, [s for i in range(100) for s in _trace(i)]) is None
        h.clock.now += 31
        assert _send(h, _trace(1001, 3)) is None  # one flood trace gave way
        assert h.svc.engine.process() == 1
        stored = h.svc.store.get(f"{1:032x}")
        assert stored is not None
        assert (stored["status"], stored["release_reason"]) == ("truncated", "pressure")
        kinds = {(f["detector"], f["kind"], f["severity"]) for f in stored["findings"]}
        assert ("evaluation", "run_cut", "info") in kinds
        assert not any(f["detector"] == "non_termination" for f in stored["findings"])
        labels = {"service": "agents", "agent": stored["agent"] or "unknown"}
        assert h.sample("otel_eval_traces_completed_total", status="truncated", **labels) == 1
        assert h.sample("otel_eval_detector_findings_total", detector="evaluation",
                        kind="run_cut", severity="info", **labels) == 1
        assert h.sample("otel_eval_traces_non_terminated_total", **labels) == 0


def test_the_rest_of_a_run_cut_for_room_makes_it_whole_and_counts_it_once(
        tmp_path: Path) -> None:
    """A run pushed out by ``release_oldest`` (reason ``overflow``) before its last calls and
    its root came: the rest, within ``reopen_window_s``, re-opens it. The stored result (API,
    ``show``) is then the whole run's (``complete``, its loop, failed); the run metrics keep
    the one count of its first evaluation, the cut, and the whole run counts only as
    superseded (docs/evaluation-limits.md): nothing counted twice."""
    trace, root = "a" * 32, f"{1:016x}"

    def tool(i: int, query: str = "x") -> Span:
        return Span(trace, f"{i:016x}", root, "execute_tool search", 1_000 * i, 1_000 * i + 10,
                    resource={"service.name": "agents"},
                    attributes={"gen_ai.operation.name": "execute_tool",
                                "gen_ai.tool.name": "search",
                                "gen_ai.tool.call.arguments": f'{{"q": "{query}"}}'})
    agent = Span(trace, root, None, "invoke_agent a", 500, 20_000,
                 resource={"service.name": "agents"},
                 attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"})
    with running_service(tmp_path, **{"assembly.max_open_traces": 1,
                                      "assembly.overflow_policy": "release_oldest"}) as h:
        assert _send(h, [tool(2, "a"), tool(3, "b")]) is None  # two calls, not the root
        assert _send(h, _trace(100, 1, "other")) is None  # no slot: the run is pushed out
        assert h.svc.engine.process() == 1
        cut = h.svc.store.get(trace)
        assert cut is not None
        assert (cut["status"], cut["release_reason"], cut["verdict"]["passed"]) == (
            "truncated", "overflow", True)
        assert _send(h, [tool(4), tool(5), tool(6), agent]) is None  # the rest: re-opened
        h.release()
        whole = h.svc.store.get(trace)
        assert whole is not None
        assert (whole["status"], whole.get("release_reason"), whole["revision"]) == (
            "complete", None, 1)
        assert whole["verdict"]["passed"] is False
        assert any(f["detector"] == "loop" for f in whole["findings"])
        counted = {"service": "agents", "agent": "unknown"}  # no agent span before the cut
        assert h.sample("otel_eval_traces_completed_total", status="truncated", **counted) == 1
        assert h.sample("otel_eval_traces_completed_total", status="complete", **counted) == 0
        assert h.sample("otel_eval_traces_verdicts_total", verdict="passed", **counted) == 1
        assert h.sample("otel_eval_traces_with_loop_total", **counted) == 0
        assert h.sample("otel_eval_traces_superseded_total", service="agents", agent="a") == 1
