"""Stage: assemble (service load). Who holds the pending spans and their bytes.

    TraceAssembler (open traces) / Finishing (released, not finished) -> ServiceLoad ->
        AdmissionControl (``max_service_share`` of ``max_pending_spans``, ``max_pending_bytes``)

A span counts for the service.name of its own resource (``service_of``; "" when unknown:
the spans naming none share one entry), from when it is taken until its trace is finished,
as the pending budget counts it; a GenAI log record for its resource's while assembly holds
it (``max_pending_log_records``, ``max_pending_log_bytes``), and then, released with its trace
(``LogEvent.service``), until the trace is finished (``max_pending_log_records`` only, as that
budget counts it: a service whose runs ended while evaluation was behind held none and took
the whole budget). An entry at zero is deleted, so there are never more entries than pending
items.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from otel_eval.base.model import LogEvent, Span
from otel_eval.base.service_name import service_name

if TYPE_CHECKING:
    from otel_eval.decode.otlp_logs import HeldRecord


def service_of(item: Span | HeldRecord) -> str:
    """The service.name a span or log record (its resource's) holds a slot for; "" when
    unknown (the SDK's default ``unknown_service[:exe]`` too: ``base.service_name``)."""
    if not isinstance(item, Span):
        return item.service
    name = service_name(item.resource)
    return name if isinstance(name, str) else ""


class ServiceLoad:
    """Spans and their received bytes (``Span.nbytes``) per service.name."""

    def __init__(self) -> None:
        self.spans: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()

    def add(self, spans: Iterable[Span | HeldRecord], sign: int = 1) -> None:
        """Count ``spans`` (or held log records) in (``sign`` 1) or out (-1)."""
        for span in spans:
            self._count(service_of(span), sign, span.nbytes)

    def remove(self, spans: Iterable[Span | HeldRecord]) -> None:
        self.add(spans, -1)

    def add_released(self, records: Iterable[LogEvent], sign: int = 1) -> None:
        """Count a released trace's log records in (1) or out (-1), by ``LogEvent.service``;
        no bytes (``max_pending_log_bytes`` counts the records held only)."""
        for record in records:
            self._count(record.service, sign, 0)

    def _count(self, svc: str, sign: int, nbytes: int) -> None:
        self.spans[svc] += sign
        self.bytes[svc] += sign * nbytes
        if not self.spans[svc]:
            del self.spans[svc]
            del self.bytes[svc]


def load_of(spans: Iterable[Span | HeldRecord]) -> ServiceLoad:
    """What ``spans`` (or records) would add, per service."""
    load = ServiceLoad()
    load.add(spans)
    return load
