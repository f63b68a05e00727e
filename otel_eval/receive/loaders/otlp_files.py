"""OTLP files: an ``ExportTraceServiceRequest`` as protobuf or OTLP/JSON, and the collector
file exporter's JSON lines (one request per line). Decoding is ``otel_eval.decode.otlp``'s, so a
file gives the same spans as the same request received over the network; spans the decoder
rejects are reported (with the decoder's reasons) and the good ones are kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_eval.base.model import Span
from otel_eval.decode.otlp import decode_request
from otel_eval.decode.otlp_json import request_from_dict
from otel_eval.receive.loaders.files import LoaderError

OnError = Callable[[LoaderError], None]


def is_otlp_json(doc: Any) -> bool:
    return isinstance(doc, dict) and ("resourceSpans" in doc or "resource_spans" in doc)


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


def from_json_lines(data: bytes, path: Path, on_error: OnError) -> list[Span]:
    spans: list[Span] = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError as e:  # JSONDecodeError and invalid UTF-8
            raise LoaderError(path, f"line {number}: not valid JSON: {e}") from e
        if not is_otlp_json(doc):
            raise LoaderError(path, f"line {number}: not an OTLP ExportTraceServiceRequest")
        spans.extend(from_json_doc(doc, path, on_error, f"line {number}: "))
    return spans


def from_protobuf(data: bytes, path: Path, on_error: OnError) -> list[Span]:
    req = ExportTraceServiceRequest()
    try:
        req.ParseFromString(data)
    except DecodeError as e:
        raise LoaderError(path, f"neither JSON nor an OTLP protobuf request: {e}") from e
    if not any(ss.spans for rs in req.resource_spans for ss in rs.scope_spans):
        raise LoaderError(path, "no spans: not a recognised trace file")
    return _decode(req, path, "", on_error)
