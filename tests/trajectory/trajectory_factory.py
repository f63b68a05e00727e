"""Hand-written spans for trajectory tests: ids are derived from short names."""

from __future__ import annotations

import hashlib
from typing import Any

from otel_eval.base.model import Span, SpanEvent, Trace

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"


def sid(name: str) -> str:
    """A stable 16-hex span id for a short test name."""
    return hashlib.sha256(name.encode()).hexdigest()[:16]


def span(name: str, parent: str | None = None, start: int = 0, attrs: dict[str, Any] | None = None,
         *, status: str = "unset", message: str = "", end: int | None = None,
         events: list[SpanEvent] | None = None, resource: dict[str, Any] | None = None,
         span_id: str | None = None) -> Span:
    return Span(TRACE_ID, span_id or sid(name), sid(parent) if parent else None, name,
                start, start + 10 if end is None else end, status=status, status_message=message,
                attributes=dict(attrs or {}), events=events or [], resource=resource or {})


def trace(*spans: Span, status: str = "complete") -> Trace:
    return Trace(TRACE_ID, list(spans), status)  # type: ignore[arg-type]
