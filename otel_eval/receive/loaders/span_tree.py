"""OpenInference span-tree JSON (the TRAIL dataset's shape; Patronus/Phoenix exports).

``{"trace_id", "spans": [root, ...]}`` where each span has ``span_id``, ``parent_span_id``,
``span_name``, ``span_kind``, ``timestamp`` (ISO-8601), ``duration`` (ISO-8601, e.g.
``PT1M1.95S``), ``status_code`` (Ok / Error / Unset), ``span_attributes``,
``resource_attributes``, ``scope_name``, ``events`` (``Timestamp`` / ``Name`` /
``Attributes``) and nested ``child_spans``. Ids are kept exactly as in the file.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from otel_eval.base.model import Span, SpanEvent
from otel_eval.base.printable import quoted
from otel_eval.decode.otlp import MAX_SPAN_DURATION_NS, MAX_TIME_NS
from otel_eval.receive.loaders.files import LoaderError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)
_DURATION = re.compile(
    r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)(?:\.(\d+))?S)?)?$")


def is_span_tree(doc: Any) -> bool:
    roots = doc.get("spans") if isinstance(doc, dict) else doc
    if isinstance(doc, dict) and "child_spans" in doc:
        return True
    return (isinstance(roots, list) and bool(roots) and isinstance(roots[0], dict)
            and "span_id" in roots[0] and ("child_spans" in roots[0] or "span_name" in roots[0]))


def iso_to_ns(text: str) -> int:
    """ISO-8601 timestamp -> Unix ns (naive timestamps are UTC). Raises ValueError."""
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return (dt - _EPOCH) // _MICRO * 1000


# The longest duration a span can say, in ns: OTLP's time fields are fixed64 (584 years).
# Past it a duration is no span's: refused with the file, as a malformed one is (before, a
# 400-digit one made an end time that the trace's duration in seconds could not hold).
MAX_DURATION_NS = 2**64 - 1


def duration_to_ns(text: str) -> int:
    """ISO-8601 duration (``PT1M1.95S``, ``P1DT2H``) -> ns, at most ``MAX_DURATION_NS``.
    Raises ValueError."""
    m = _DURATION.match(text)
    if not m or text in ("P", "PT"):
        raise ValueError(f"not an ISO-8601 duration: {quoted(text)}")
    days, hours, minutes, seconds, frac = m.groups()
    whole = ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60
    whole += int(seconds or 0)
    ns = whole * 1_000_000_000 + int((frac or "0")[:9].ljust(9, "0"))
    if ns > MAX_DURATION_NS:
        raise ValueError(f"duration out of range (over 584 years): {quoted(text)}")
    return ns


def _code(value: Any, prefix: str, default: str) -> str:
    text = str(value or default).lower()
    return text[len(prefix):] if text.startswith(prefix) else text


def _event(raw: Any) -> SpanEvent:
    get = raw.get
    ts = get("Timestamp", get("timestamp"))
    attrs = get("Attributes", get("attributes"))
    return SpanEvent(str(get("Name", get("name", ""))), iso_to_ns(ts) if ts else 0,
                     dict(attrs) if isinstance(attrs, dict) else {})


class _Interner:
    """One shared dict per distinct resource, so re-encoding groups spans by resource."""

    def __init__(self) -> None:
        self.seen: dict[str, dict[str, Any]] = {}

    def get(self, resource: Any) -> dict[str, Any]:
        if not isinstance(resource, dict):
            return {}
        key = repr(sorted(resource.items(), key=lambda kv: str(kv[0])))
        return self.seen.setdefault(key, resource)


def _span(raw: dict[str, Any], trace_id: str, resources: _Interner) -> Span:
    start = iso_to_ns(raw.get("timestamp") or raw["start_time"])
    if raw.get("duration"):
        end = start + duration_to_ns(raw["duration"])
    else:
        end = iso_to_ns(raw["end_time"]) if raw.get("end_time") else 0
    attrs = raw.get("span_attributes", raw.get("attributes"))
    events = [_event(e) for e in raw.get("events") or [] if isinstance(e, dict)]
    return Span(
        str(raw.get("trace_id") or trace_id), str(raw["span_id"]),
        str(raw["parent_span_id"]) if raw.get("parent_span_id") else None,
        str(raw.get("span_name", raw.get("name", ""))), start, end,
        kind=_code(raw.get("span_kind"), "span_kind_", "internal"),
        status=_code(raw.get("status_code"), "status_code_", "unset"),
        status_message=str(raw.get("status_message") or ""),
        attributes=dict(attrs) if isinstance(attrs, dict) else {},
        events=events,
        resource=resources.get(raw.get("resource_attributes")),
        scope=str(raw.get("scope_name") or ""),
        unevaluable=_unevaluable(start, end, events),
    )


def _unevaluable(start: int, end: int, events: list[SpanEvent]) -> str | None:
    """``invalid_timestamp`` for the times ``serve`` cannot take (``decode.otlp``): before
    1970 or past int64 ns (the span's or an event's: OTLP's are fixed64, serve rejects
    those past int64), or a span longer than a year; assembly then refuses the span with
    that reason (reported), the rest of its run evaluated, as ``serve`` evaluates it."""
    times = [start, end, *(e.time_unix_nano for e in events)]
    if min(times) < 0 or max(times) > MAX_TIME_NS or end - start > MAX_SPAN_DURATION_NS:
        return "invalid_timestamp"
    return None


def from_doc(doc: Any, path: Path) -> list[Span]:
    """All spans of the tree(s), parents before children."""
    roots: Any = [doc] if isinstance(doc, dict) and "child_spans" in doc else (
        doc.get("spans") if isinstance(doc, dict) else doc)
    if not isinstance(roots, list):
        raise LoaderError(path, "span tree: expected a list of root spans")
    trace_id = str(doc.get("trace_id", "")) if isinstance(doc, dict) else ""
    resources = _Interner()
    spans: list[Span] = []
    stack = list(reversed(roots))
    while stack:
        raw = stack.pop()
        if not isinstance(raw, dict):
            raise LoaderError(path, f"span tree: expected a span object, got {type(raw).__name__}")
        try:
            spans.append(_span(raw, trace_id, resources))
        except (KeyError, TypeError, ValueError) as e:
            raise LoaderError(path, f"span {raw.get('span_id')!r}: bad or missing field: {e!r}",
                              ) from e
        children = raw.get("child_spans") or []
        stack.extend(reversed(children if isinstance(children, list) else []))
    if any(not s.trace_id for s in spans):
        raise LoaderError(path, "span tree: a span has no trace_id")
    return spans
