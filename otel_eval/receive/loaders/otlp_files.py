"""OTLP files: an ``ExportTraceServiceRequest`` as protobuf or OTLP/JSON, and the collector
file exporter's JSON lines (one request per line). Decoding is ``otel_eval.decode.otlp``'s, so a
file gives the same spans as the same request received over the network; spans the decoder
rejects are reported (with the decoder's reasons) and the good ones are kept.

One file exporter in the traces and the logs pipelines (and metrics) writes every signal to
the same file, a request per line: the ``ExportLogsServiceRequest`` lines (or an OTLP/JSON
logs document) give the GenAI event records, held as ``serve``'s receivers hold them
(``otlp_logs.hold_logs``) to join their spans; lines of the other signals (metrics,
profiles) are skipped, as ``serve`` takes none.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_eval.base.model import Span
from otel_eval.decode.otlp import decode_request
from otel_eval.decode.otlp_json import message_from_dict, request_from_dict
from otel_eval.decode.otlp_logs import HeldRecord, hold_logs
from otel_eval.receive.loaders.files import LoaderError

OnError = Callable[[LoaderError], None]
# The top keys of the OTLP/JSON requests of the signals ``serve`` does not take.
_OTHER_SIGNALS = ("resourceMetrics", "resource_metrics", "resourceProfiles",
                  "resource_profiles")


def is_otlp_json(doc: Any) -> bool:
    return isinstance(doc, dict) and ("resourceSpans" in doc or "resource_spans" in doc)


def is_otlp_logs_json(doc: Any) -> bool:
    return isinstance(doc, dict) and ("resourceLogs" in doc or "resource_logs" in doc)


# OTLP/JSON logs requests hold one of these keys (a JSON key is its text, escapes aside)
_LOGS_KEYS = (b'"resourceLogs"', b'"resource_logs"')


def may_hold_logs(data: bytes) -> bool:
    """Whether a file's content may hold log records (an OTLP/JSON logs request or lines of
    them), without parsing it: a file that does not is sure to hold none."""
    return data.lstrip()[:1] in (b"{", b"[") and any(k in data for k in _LOGS_KEYS)


def _other_signal(doc: Any) -> bool:
    return isinstance(doc, dict) and any(k in doc for k in _OTHER_SIGNALS)


def _decode(req: ExportTraceServiceRequest, path: Path, where: str, on_error: OnError,
            ) -> list[Span]:
    result = decode_request(req)
    if result.rejected:
        on_error(LoaderError(path, f"{where}{result.message}"))
    return result.spans


def from_json_doc(doc: Any, path: Path, on_error: OnError, where: str = "") -> list[Span]:
    try:
        req = request_from_dict(doc)
    except ValueError as e:
        raise LoaderError(path, f"{where}{e}") from e
    except (TypeError, SystemError, RecursionError) as e:
        # protobuf's json_format leaks these on some inputs (a key holding a lone UTF-16
        # surrogate raises SystemError from upb); they are bad input all the same
        raise LoaderError(path, f"{where}not an OTLP ExportTraceServiceRequest: {e!r}") from e
    return _decode(req, path, where, on_error)


def logs_from_json_doc(doc: Any, path: Path, on_error: OnError, where: str = "",
                       ) -> list[HeldRecord]:
    """The GenAI event records of an OTLP/JSON logs request, held as ``serve`` holds them;
    records with invalid ids or times are reported (the others, not GenAI events of a span,
    are not for us)."""
    try:
        req = message_from_dict(doc, ExportLogsServiceRequest(), "resourceLogs")
    except ValueError as e:
        raise LoaderError(path, f"{where}{e}") from e
    held = hold_logs(req)
    if held.rejected:
        reasons = ", ".join(f"{n} {r}" for r, n in sorted(held.rejected.items()))
        on_error(LoaderError(path, f"{where}{sum(held.rejected.values())} log record(s) "
                                   f"rejected: {reasons}"))
    return held.records


def from_json_lines(data: bytes, path: Path, on_error: OnError,
                    ) -> tuple[list[Span], list[HeldRecord]]:
    """The spans and the GenAI event records of the requests, one per line, of any signal."""
    spans: list[Span] = []
    logs: list[HeldRecord] = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError as e:  # JSONDecodeError and invalid UTF-8
            raise LoaderError(path, f"line {number}: not valid JSON: {e}") from e
        if is_otlp_json(doc):
            spans.extend(from_json_doc(doc, path, on_error, f"line {number}: "))
        elif is_otlp_logs_json(doc):
            logs.extend(logs_from_json_doc(doc, path, on_error, f"line {number}: "))
        elif not _other_signal(doc):
            raise LoaderError(path, f"line {number}: not an OTLP ExportTraceServiceRequest "
                                    "(nor another signal's request)")
    return spans, logs


def from_protobuf(data: bytes, path: Path, on_error: OnError) -> list[Span]:
    req = ExportTraceServiceRequest()
    try:
        req.ParseFromString(data)
    except DecodeError as e:
        raise LoaderError(path, f"neither JSON nor an OTLP protobuf request: {e}") from e
    if not any(ss.spans for rs in req.resource_spans for ss in rs.scope_spans):
        raise LoaderError(path, "no spans: not a recognised trace file")
    return _decode(req, path, "", on_error)
