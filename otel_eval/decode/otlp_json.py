"""Stage: decode. OTLP/JSON <-> the protobuf Export requests (traces and logs).

Promises:
- OTLP/JSON uses hex trace/span ids (not base64) and accepts camelCase and snake_case keys;
- an id that is not hex does not fail the request: its span is rejected with a reason by
  ``otlp.decode_request`` (a link's id too: ``invalid_link_id``);
- nor does a time that is no unsigned 64-bit integer (``"-5"``, ``"soon"``, 2^64): it becomes
  one past int64 nanoseconds, so its span or log record is rejected (``invalid_timestamp``) as
  the protobuf path rejects the same value read as fixed64;
- parsing raises ``ValueError`` with a clear message, whatever the content (the body is read
  through ``body.loads_bounded``: nesting depth and non-finite numbers bounded);
- the spans of a pre-1.0 exporter's ``instrumentationLibrarySpans`` (the key OTLP 0.x had
  before ``scopeSpans``) are counted as rejected (``parse_request``), as the protobuf path
  counts its field 1000: never dropped unseen; so are the log records of its
  ``instrumentationLibraryLogs`` (``legacy_items``, ``otlp_logs.parse_logs_json``);
- a span (or log record) holding a lone surrogate (``"\\ud83d"``, the JSON spelling of text
  UTF-8 cannot carry: a JavaScript SDK cutting a value between the two halves of an emoji),
  or whose resource or scope holds one, is dropped and counted (``invalid_utf8``,
  ``without_lone_surrogates``), as the protobuf path drops a span with invalid UTF-8: the
  rest of the request is kept;
- ``request_to_json`` is the inverse of ``request_from_dict`` / ``message_from_dict``, and
  writes OTLP/JSON as the specification does (hex ids, enum fields as integers).
"""

from __future__ import annotations

import base64
import re
from collections import Counter
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_eval.base.printable import clipped
from otel_eval.decode.body import loads_bounded

_ID_KEYS = {"traceId": 16, "spanId": 8, "parentSpanId": 8,
            "trace_id": 16, "span_id": 8, "parent_span_id": 8}
_U64 = 2**64 - 1
# What a time that is no uint64 becomes: past int64 nanoseconds, so decode rejects its item.
_BAD_TIME = str(_U64)


_TIME_SUFFIXES = ("TimeUnixNano", "time_unix_nano")  # and "timeUnixNano" itself


def _time_ok(value: Any) -> bool:
    """Whether protobuf's JSON parser takes ``value`` for a fixed64 time."""
    if type(value) is int:
        return 0 <= value <= _U64
    if isinstance(value, str) and value.isascii() and value.isdigit():
        digits = value.lstrip("0")  # 20 at most: int() of a long one is refused, and slow
        return len(digits) <= 20 and int(digits or "0") <= _U64
    try:  # the rarer spellings it also takes ("1e3", 1.0), exactly as it does
        json_format.ParseDict({"startTimeUnixNano": value}, trace_pb2.Span())
    except (json_format.ParseError, ValueError, TypeError, OverflowError):
        return False
    return True


def _hex_ids_to_base64(obj: Any) -> Any:
    """OTLP/JSON carries ids as hex; protobuf's JSON parser expects base64 for bytes fields.
    Returns a converted copy.

    Ids that are not hex become one zero byte (a wrong length on purpose), and times that are
    no uint64 one past int64 nanoseconds, so that the span (or log record) is rejected with a
    reason by ``decode_request`` instead of failing the whole request.
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
            elif (k.endswith(_TIME_SUFFIXES) or k == "timeUnixNano") and not (
                    (type(v) is str and len(v) <= 19 and v.isascii() and v.isdigit())
                    or _time_ok(v)):  # up to 19 digits: a uint64 (no Python call per span)
                out[k] = _BAD_TIME
            else:
                out[k] = _hex_ids_to_base64(v) if isinstance(v, dict | list) else v
        return out
    if isinstance(obj, list):
        return [_hex_ids_to_base64(v) if isinstance(v, dict | list) else v for v in obj]
    return obj


_LONE = re.compile("[\ud800-\udfff]")  # after parsing, a surrogate in a str is a lone one


def _has_lone(value: Any) -> bool:
    """Whether ``value`` (parsed JSON) holds a lone surrogate in a string value (OTLP's
    strings, an attribute's key among them; a JSON object key that holds one is no OTLP
    field: the parser refuses the request, a 400)."""
    stack = [value]
    while stack:  # iterative: any depth loads_bounded lets through
        v = stack.pop()
        if isinstance(v, str):
            if not v.isascii() and _LONE.search(v):
                return True
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def _entries(parent: Any, key: str) -> tuple[str, list[Any]] | None:
    """(the key it is under, the list) of ``parent``'s ``key`` list, camelCase or snake_case."""
    if not isinstance(parent, dict):
        return None
    for k in (key, _snake(key)):
        if isinstance(parent.get(k), list):
            return k, parent[k]
    return None


def _header_lone(entry: Any) -> bool:
    """A resource or scope entry's own fields (its lists set aside) hold a lone surrogate."""
    return isinstance(entry, dict) and _has_lone(
        {k: v for k, v in entry.items() if not isinstance(v, list)})


def _count(entry: Any, scopes: str, items: str) -> int:
    """The items under a resource entry (``scopes`` given) or a scope entry (``scopes`` "")."""
    if scopes:
        found = _entries(entry, scopes)
        return sum(_count(s, "", items) for s in found[1]) if found else 0
    found = _entries(entry, items)
    return len(found[1]) if found else 0


def without_lone_surrogates(body: bytes | str | None, data: Any, resources: str, scopes: str,
                            items: str) -> Counter[str]:
    """Drops from ``data`` (in place) each item (span, log record) that holds a lone
    surrogate, and every item of a resource or scope whose own fields hold one, counted as
    ``invalid_utf8`` (``otlp.parse_salvaged`` for protobuf: no empty scope is left behind).
    Looked for only when the body spells a surrogate (``\\ud...``): the usual body pays two
    substring searches (``body`` None, its text unknown: always looked for)."""
    bad: Counter[str] = Counter()
    spelled = body is None or ((b"\\ud" in body or b"\\uD" in body) if isinstance(body, bytes)
                               else ("\\ud" in body or "\\uD" in body))
    top = _entries(data, resources) if spelled else None
    if top is None:
        return bad
    kept = []
    for rs in top[1]:
        if _header_lone(rs):
            bad["invalid_utf8"] += _count(rs, scopes, items)
            continue
        kept.append(rs)
        found = _entries(rs, scopes)
        if found is not None:
            rs[found[0]] = [ss for ss in found[1] if _scope_kept(ss, items, bad)]
    data[top[0]] = kept
    return bad


def _scope_kept(ss: Any, items: str, bad: Counter[str]) -> bool:
    """Whether scope entry ``ss`` is kept; its items that hold a lone surrogate dropped."""
    if _header_lone(ss):
        bad["invalid_utf8"] += _count(ss, "", items)
        return False
    listed = _entries(ss, items)
    if listed is not None:
        good = [x for x in listed[1] if not _has_lone(x)]
        bad["invalid_utf8"] += len(listed[1]) - len(good)
        ss[listed[0]] = good
    return True


def request_from_json(body: bytes | str) -> ExportTraceServiceRequest:
    """Parse an OTLP/JSON ExportTraceServiceRequest. Raises ValueError with a clear message."""
    return request_from_dict(loads_bounded(body))


def parse_request(body: bytes | str) -> tuple[ExportTraceServiceRequest, Counter[str]]:
    """``request_from_json``, and the spans it leaves out, by reason (``otlp.parse_request``'s
    counterpart): those of a pre-1.0 exporter's ``instrumentationLibrarySpans``, a key the
    parser ignores as unknown (``instrumentation_library_spans``)."""
    data = loads_bounded(body)
    rejected = legacy_items(data, "resourceSpans", "instrumentationLibrarySpans", "spans",
                            "instrumentation_library_spans")
    rejected += without_lone_surrogates(body, data, "resourceSpans", "scopeSpans", "spans")
    return request_from_dict(data), rejected


def _snake(key: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in key)


def legacy_items(data: Any, resources: str, legacy: str, items: str,
                 reason: str) -> Counter[str]:
    """The items under each resource's ``legacy`` key (OTLP 0.x's instrumentation library
    list, before the scopes replaced it; or its snake_case spelling), which the parser
    ignores as unknown: counted under ``reason``, never dropped unseen."""
    rejected: Counter[str] = Counter()
    entries = data.get(resources, data.get(_snake(resources))) if isinstance(data, dict) \
        else None
    for entry in entries if isinstance(entries, list) else ():
        for key in (legacy, _snake(legacy)):
            scopes = entry.get(key) if isinstance(entry, dict) else None
            for scope in scopes if isinstance(scopes, list) else ():
                listed = scope.get(items) if isinstance(scope, dict) else None
                if isinstance(listed, list) and listed:
                    rejected[reason] += len(listed)
    return rejected


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
