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
items. ``RowLoad``: who holds the spool's bytes (``max_service_share`` of
``store.spool_max_bytes``), by the services of the traces each row still feeds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
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


@dataclass(slots=True)
class _Row:
    traces: dict[str, set[str]]  # trace -> its services in the row, while pending there
    pending: Counter[str]  # service -> its traces pending in the row (counts only fall)
    order: list[str]  # the row's services; those before ``alive`` hold no pending trace
    charged: Counter[str]  # what each service is charged for the row now
    alive: int = 0


class RowLoad:
    """The spool's bytes per service.name (its share of ``spool_max_bytes``). A request's row
    is charged to the services of its items, in proportion to their bytes; as a row stays
    until its last trace is done, a service none of whose traces in it is pending any more
    hands its charge to one that still has one (a gateway's batch kept by one service's
    long run becomes that service's; an evaluated run's rows waiting on a slow sink stay its
    service's). Linear in a row's items over its life. A row a previous process left is
    charged when its replay decodes it, to the services of its pending traces."""

    def __init__(self) -> None:
        self.bytes: Counter[str] = Counter()
        self._rows: dict[int, _Row] = {}

    def add(self, row: int, nbytes: int, items: Iterable[Span | HeldRecord]) -> None:
        traces: dict[str, set[str]] = {}
        weights: Counter[str] = Counter()
        for item in items:
            svc = service_of(item)
            traces.setdefault(item.trace_id, set()).add(svc)
            weights[svc] += max(item.nbytes, 1)
        if not traces:
            return
        total = sum(weights.values())
        charged = Counter({svc: nbytes * w // total for svc, w in weights.items()})
        # what integer division left, to the largest: the row's bytes exactly
        charged[max(weights, key=weights.__getitem__)] += nbytes - sum(charged.values())
        self._rows[row] = _Row(traces, Counter(s for v in traces.values() for s in v),
                               list(weights), charged)
        self.bytes.update(charged)

    def done(self, row: int, trace_ids: Iterable[str]) -> None:
        """These traces' pairs of ``row`` are gone (the row stays while others are not)."""
        r = self._rows.get(row)
        if r is None:
            return
        for tid in trace_ids:
            for svc in r.traces.pop(tid, ()):
                r.pending[svc] -= 1
                if r.pending[svc]:
                    continue
                while r.alive < len(r.order) and not r.pending[r.order[r.alive]]:
                    r.alive += 1
                if r.alive < len(r.order):  # to a service whose traces still hold the row
                    heir, amount = r.order[r.alive], r.charged.pop(svc, 0)
                    r.charged[heir] += amount
                    self.bytes[heir] += amount
                    self._take(svc, amount)
        if not r.traces:
            self.drop(row)

    def resize(self, row: int, nbytes: int) -> None:
        """The row now holds ``nbytes`` (thinned to its pending traces): each service's
        charge for it scaled so, the rest of the integer division to the largest."""
        r = self._rows.get(row)
        total = sum(r.charged.values()) if r is not None else 0
        if r is None or not total:
            return
        scaled = Counter({svc: n * nbytes // total for svc, n in r.charged.items()})
        scaled[max(r.charged, key=r.charged.__getitem__)] += nbytes - sum(scaled.values())
        for svc, n in r.charged.items():
            self._take(svc, n - scaled[svc])
        r.charged = scaled

    def drop(self, row: int) -> None:
        """The row is deleted."""
        r = self._rows.pop(row, None)
        if r is not None:
            for svc, amount in r.charged.items():
                self._take(svc, amount)

    def clear(self) -> None:
        self.bytes.clear()
        self._rows.clear()

    def _take(self, svc: str, amount: int) -> None:
        self.bytes[svc] -= amount
        if self.bytes[svc] <= 0:
            del self.bytes[svc]
