"""What ``serve --kafka-publish`` writes to the logs topic is the user's records, field for
field, in their order, each under its ResourceLogs and ScopeLogs as received, however the
request repeats a resource or scope apart (an SDK with one logger per module sends the
scopes of one trace interleaved; a collector's batch processor concatenates requests of
the same resource). Through the real encoder (``encode_logs_by_trace``), both encodings.
Before, the encoder grouped a trace's records by their origin, so a scope that came back
after another took its later records to its first place: the order of a trace's records
on the topic was not the order sent (a reader of the topic, otel-eval's own workers
included, reads a span's records stamped alike in the order received)."""

from __future__ import annotations

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from otel_eval.decode.otlp_logs import hold_logs, logs_request_from_json
from otel_eval.receive.kafka.publisher import encode_logs_by_trace

TRACE, SPAN = bytes(range(1, 17)), bytes(range(1, 9))


def _resource(service: str) -> Resource:
    attr = KeyValue(key="service.name")
    attr.value.string_value = service
    return Resource(attributes=[attr])


def _scope_logs(scope: str, texts: list[str]) -> logs_pb2.ScopeLogs:
    sl = logs_pb2.ScopeLogs(scope=InstrumentationScope(name=scope), schema_url=f"s/{scope}")
    for text in texts:
        record = sl.log_records.add(time_unix_nano=5, observed_time_unix_nano=5,
                                    event_name="gen_ai.user.message", trace_id=TRACE,
                                    span_id=SPAN)
        record.body.string_value = text
    return sl


def _request() -> ExportLogsServiceRequest:
    """One trace's records: scope ``a`` of resource ``agent`` comes back after ``b``, and
    resource ``agent`` after ``tools``; every record stamped alike."""
    return ExportLogsServiceRequest(resource_logs=[
        logs_pb2.ResourceLogs(resource=_resource("agent"), scope_logs=[
            _scope_logs("a", ["1", "2"]), _scope_logs("b", ["3"]), _scope_logs("a", ["4"])]),
        logs_pb2.ResourceLogs(resource=_resource("tools"), scope_logs=[
            _scope_logs("a", ["5"])]),
        logs_pb2.ResourceLogs(resource=_resource("agent"), scope_logs=[
            _scope_logs("a", ["6"]), _scope_logs("b", ["7"])]),
    ])


def _flat(req: ExportLogsServiceRequest) -> list[tuple[bytes, bytes, bytes]]:
    """Each record with its resource and scope entries, in the order written."""
    out = []
    for rl in req.resource_logs:
        rhead = logs_pb2.ResourceLogs(resource=rl.resource, schema_url=rl.schema_url)
        for sl in rl.scope_logs:
            shead = logs_pb2.ScopeLogs(scope=sl.scope, schema_url=sl.schema_url)
            out += [(rhead.SerializeToString(), shead.SerializeToString(),
                     r.SerializeToString()) for r in sl.log_records]
    return out


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_published_records_keep_their_order_when_a_scope_comes_back(encoding: str) -> None:
    sent = _request()
    held = hold_logs(sent, every=True).records
    [(tid, value)] = encode_logs_by_trace(held, encoding)
    assert tid == TRACE.hex()
    got = (ExportLogsServiceRequest.FromString(value) if encoding == "otlp_proto"
           else logs_request_from_json(value))
    texts = [logs_pb2.LogRecord.FromString(raw).body.string_value for *_, raw in _flat(got)]
    assert texts == list("1234567")
    assert _flat(got) == _flat(sent)
