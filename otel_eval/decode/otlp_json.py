"""Stage: decode. OTLP/JSON <-> the protobuf Export requests (traces and logs).

Promises:
- OTLP/JSON uses hex trace/span ids (not base64) and accepts camelCase and snake_case keys;
- an id that is not hex does not fail the request: its span is rejected with a reason by
  ``otlp.decode_request`` (a link's id too: ``invalid_link_id``);
- parsing raises ``ValueError`` with a clear message, whatever the content (the body is read
  through ``body.loads_bounded``: nesting depth and non-finite numbers bounded);
- ``request_to_json`` is the inverse of ``request_from_dict`` / ``message_from_dict``, and
  writes OTLP/JSON as the specification does (hex ids, enum fields as integers).
"""

from __future__ import annotations

import base64
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

from otel_eval.base.printable import clipped
from otel_eval.decode.body import loads_bounded

_ID_KEYS = {"traceId": 16, "spanId": 8, "parentSpanId": 8,
            "trace_id": 16, "span_id": 8, "parent_span_id": 8}


def _hex_ids_to_base64(obj: Any) -> Any:
    """OTLP/JSON carries ids as hex; protobuf's JSON parser expects base64 for bytes fields.
    Returns a converted copy.

    Ids that are not hex become one zero byte (a wrong length on purpose), so that the span is
    rejected with a reason by ``decode_request`` instead of failing the whole request.
    """
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k in _ID_KEYS and isinstance(v, str):
                try:
                    raw = bytes.fromhex(v)
                except ValueError:
                    raw = b"\x00"
                out[k] = base64.b64encode(raw).decode("ascii")
            else:
                out[k] = _hex_ids_to_base64(v) if isinstance(v, dict | list) else v
        return out
    if isinstance(obj, list):
        return [_hex_ids_to_base64(v) if isinstance(v, dict | list) else v for v in obj]
    return obj


def request_from_json(body: bytes | str) -> ExportTraceServiceRequest:
    """Parse an OTLP/JSON ExportTraceServiceRequest. Raises ValueError with a clear message."""
    return request_from_dict(loads_bounded(body))


def request_from_dict(data: Any) -> ExportTraceServiceRequest:
    return message_from_dict(data, ExportTraceServiceRequest(), "resourceSpans")


_M = TypeVar("_M", bound=Message)


def message_from_dict(data: Any, message: _M, top_key: str) -> _M:
    """OTLP/JSON (hex ids) parsed into ``message`` (a trace or logs Export request).
    Raises ValueError with a clear message, whatever the content."""
    name = type(message).__name__
    if not isinstance(data, dict):
        raise ValueError(f"OTLP/JSON body must be an object with {top_key}")
    try:
        json_format.ParseDict(_hex_ids_to_base64(data), message, ignore_unknown_fields=True)
    except json_format.ParseError as e:
        raise ValueError(f"not an OTLP {name}: {clipped(str(e))}") from e
    except (SystemError, OverflowError, UnicodeError, TypeError, RecursionError) as e:
        # what ParseDict raises instead of ParseError for a lone surrogate in a key
        # (SystemError from upb), Infinity in an enum/integer field (OverflowError), ...
        raise ValueError(f"not an OTLP {name}: {type(e).__name__}: {clipped(str(e))}") from e
    return message


def request_to_json(req: Message) -> dict[str, Any]:
    """Protobuf (a trace or logs Export request) -> OTLP/JSON dict with hex ids (the inverse
    of ``request_from_dict`` / ``message_from_dict``). Enum fields as integers: OTLP/JSON
    prohibits enum value names (what protobuf's printer writes by default)."""
    data = json_format.MessageToDict(req, use_integers_for_enums=True)

    def fix(obj: Any) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                if k in _ID_KEYS and isinstance(v, str):
                    obj[k] = base64.b64decode(v).hex()
                else:
                    fix(v)
        elif isinstance(obj, list):
            for v in obj:
                fix(v)

    fix(data)
    return data
