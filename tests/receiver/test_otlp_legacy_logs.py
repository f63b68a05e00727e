"""Log records of a pre-1.0 exporter's ``instrumentation_library_logs`` (ResourceLogs field
1000; OTLP/JSON ``instrumentationLibraryLogs``) are counted as rejected
(``instrumentation_library_logs``), as the spans of its ``instrumentation_library_spans``
are. Before, they were dropped unseen: received and rejected counters never saw them, the
answer was a full success, and the publishing front end copied the old field into the
resource header of every record it wrote to Kafka."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

from google.protobuf.unknown_fields import UnknownFieldSet
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.logs.v1 import logs_pb2
from support.harness import running_service

from otel_eval.decode.otlp_logs import parse_logs_json, parse_logs_request

TID, SID = bytes(range(1, 17)), bytes(range(1, 9))
NEWER = b"\xc2\x02\x05newer"  # field 40, a newer OTLP's: kept


def _record(name: str) -> logs_pb2.LogRecord:
    return logs_pb2.LogRecord(time_unix_nano=1, event_name=name, trace_id=TID, span_id=SID)


def _body() -> bytes:
    """One resource: a scope with one record, then a field 1000 entry with two."""
    old = logs_pb2.ScopeLogs(log_records=[_record("gen_ai.user.message")] * 2
                             ).SerializeToString()
    rl = logs_pb2.ResourceLogs(scope_logs=[logs_pb2.ScopeLogs(
        log_records=[_record("gen_ai.choice")])]).SerializeToString()
    rl += NEWER + b"\xc2\x3e" + _len(len(old)) + old  # field 1000, length-delimited
    return b"\x0a" + _len(len(rl)) + rl  # ExportLogsServiceRequest.resource_logs (1)


def _len(n: int) -> bytes:
    assert n < 1 << 14
    return bytes([n & 0x7F | 0x80, n >> 7]) if n > 0x7F else bytes([n])


def _json_record(name: str, time: str = "1") -> dict[str, Any]:
    return {"timeUnixNano": time, "eventName": name, "traceId": TID.hex(), "spanId": SID.hex()}


JSON_BODY = {"resourceLogs": [{
    # another record than the protobuf body's (the same one again is a duplicate_log_record)
    "scopeLogs": [{"logRecords": [_json_record("gen_ai.choice", "2")]}],
    "instrumentationLibraryLogs": [{"instrumentationLibrary": {"name": "old"},
                                    "logRecords": [_json_record("gen_ai.user.message")] * 2}],
}]}


def _fields(msg: Any) -> list[int]:
    fields = UnknownFieldSet(msg)
    return [fields[i].field_number for i in range(len(fields))]


def test_the_parse_counts_them_and_leaves_the_old_field_out() -> None:
    req, rejected = parse_logs_request(_body())
    assert rejected == {"instrumentation_library_logs": 2}
    [rl] = req.resource_logs
    assert _fields(rl) == [40]  # a newer OTLP's field kept, the old list gone
    assert [len(sl.log_records) for sl in rl.scope_logs] == [1]
    req, rejected = parse_logs_json(json.dumps(JSON_BODY).encode())
    assert rejected == {"instrumentation_library_logs": 2}


def _post(port: int, body: bytes, content_type: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/v1/logs", body, {"Content-Type": content_type})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_the_receivers_count_them_as_rejected(tmp_path: Path) -> None:
    with running_service(tmp_path) as h:
        assert h.svc.http is not None
        status, raw = _post(h.svc.http.port, _body(), "application/x-protobuf")
        assert status == 200
        answer = ExportLogsServiceResponse.FromString(raw)
        assert answer.partial_success.rejected_log_records == 2
        status, raw = _post(h.svc.http.port, json.dumps(JSON_BODY).encode(),
                            "application/json")
        assert status == 200
        assert json.loads(raw)["partialSuccess"]["rejectedLogRecords"] == "2"
        assert h.sample("otel_eval_receiver_log_records_received_total", protocol="http") == 6
        assert h.sample("otel_eval_receiver_log_records_rejected_total", protocol="http",
                        reason="instrumentation_library_logs") == 4


def test_a_request_without_them_is_left_as_it_came() -> None:
    sent = ExportLogsServiceRequest(resource_logs=[logs_pb2.ResourceLogs(scope_logs=[
        logs_pb2.ScopeLogs(log_records=[_record("gen_ai.choice")])])])
    req, rejected = parse_logs_request(sent.SerializeToString())
    assert rejected == {} and req == sent
