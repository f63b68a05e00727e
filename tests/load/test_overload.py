"""Overload: official SDK exporters offer ~3x what ``otel-eval serve`` can take for ~10 s.

What it can take follows from the admission bound, not from timing: every accepted span stays
pending (counted against ``max_pending_spans``) for at least ``grace_s`` after its trace's
root ended, so the service takes at most ``max_pending_spans / grace_s`` spans/s. The
exporters are paced at three times that. Checked from the service's own counters:
- it throttled (``requests_throttled_total`` > 0) and the exporters retried, honouring the
  RetryInfo delay;
- ``spans_received == spans_accepted + spans_rejected``, and nothing was rejected (the SDK
  exporter reports partial success as SUCCESS, so a rejection would hide from the client);
- once ``pending_spans`` is 0, every accepted span is in a stored evaluation
  (sum of ``counts.spans`` in the SQLite store == ``spans_accepted``), and every span an
  exporter saw acknowledged is, by id, in its trace's stored evaluation.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from support.poll import poll
from support.served import Served, exporter, ids, serve, stored, stored_span_ids

pytestmark = pytest.mark.slow

MAX_PENDING_SPANS = 300
GRACE_S = 1.0
RETRY_AFTER_S = 0.5
CAPACITY_SPANS_PER_S = MAX_PENDING_SPANS / GRACE_S  # upper bound, see the module docstring
EXPORTERS = 3
LOAD_S = 10.0
SPANS_PER_TRACE = 5  # an agent root and four steps
CONFIG = {
    "assembly": {"grace_s": GRACE_S, "idle_timeout_s": 2.0,
                 "max_pending_spans": MAX_PENDING_SPANS},
    "receiver": {"retry_after_s": RETRY_AFTER_S},
}
EXPORTER_LOGGER = "opentelemetry.exporter.otlp.proto.grpc.exporter"


class Counting(SpanExporter):
    """Records the spans the service acknowledged to this exporter (its batches that
    returned SUCCESS, retries included)."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.acked: set[tuple[str, str]] = set()
        self.failed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        if result == SpanExportResult.SUCCESS:
            self.acked |= ids(list(spans))
        else:
            self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()


class Retries(logging.Handler):
    """Collects the exporter's "Transient error ... retrying in Xs" warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "Transient error" in msg:
            self.messages.append(msg)


def _drive(counting: Counting, rate_spans_per_s: float, until: float) -> None:
    """An instrumented agent: paced runs of SPANS_PER_TRACE spans through the SDK pipeline."""
    bsp = BatchSpanProcessor(counting, max_queue_size=2048, max_export_batch_size=50,
                             schedule_delay_millis=200)
    provider = TracerProvider(resource=Resource.create({"service.name": "overload-agent"}))
    provider.add_span_processor(bsp)
    tracer = provider.get_tracer("tests.load")
    interval = SPANS_PER_TRACE / rate_spans_per_s
    start, k = time.monotonic(), 0
    while time.monotonic() < until:
        with tracer.start_as_current_span("invoke_agent overload",
                                          attributes={"gen_ai.operation.name": "invoke_agent"}):
            for i in range(SPANS_PER_TRACE - 1):
                with tracer.start_as_current_span(f"chat {i}",
                                                  attributes={"gen_ai.operation.name": "chat"}):
                    pass
        k += 1
        ahead = start + k * interval - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)  # pacing the offered load, not synchronisation
    # Bounded end: shutting the exporter down first abandons retries in flight and fails the
    # batches still queued (never acknowledged), so the processor's drain is quick.
    counting.inner.shutdown()
    bsp.shutdown()


def _offer_load(srv: Served) -> list[Counting]:
    rate = 3 * CAPACITY_SPANS_PER_S / EXPORTERS
    counters = [Counting(exporter(srv.grpc_target, timeout_s=5.0)) for _ in range(EXPORTERS)]
    until = time.monotonic() + LOAD_S
    threads = [threading.Thread(target=_drive, args=(c, rate, until))
               for c in counters]
    for t in threads:
        t.start()
    for t in threads:
        t.join(LOAD_S + 30)
        assert not t.is_alive(), "an exporter thread did not finish"
    return counters


def _drained(srv: Served) -> tuple[dict[str, float], dict[str, dict[str, Any]]] | None:
    """Counters and store once nothing is pending, and no span was taken while reading."""
    before = srv.metrics()
    if before["otel_eval_assembly_pending_spans"] != 0:
        return None
    bodies = stored(srv.store)
    after = srv.metrics()
    key = "otel_eval_receiver_spans_accepted_total"
    return (after, bodies) if after[key] == before[key] else None


def test_overload_throttles_exporters_and_evaluates_every_acked_span(tmp_path: Path) -> None:
    retries = Retries()
    log = logging.getLogger(EXPORTER_LOGGER)
    log.addHandler(retries)
    try:
        with serve(tmp_path, CONFIG) as srv:
            counters = _offer_load(srv)
            m, bodies = poll(lambda: _drained(srv), "pending spans to drain", timeout_s=60)
    finally:
        log.removeHandler(retries)
    accepted = m["otel_eval_receiver_spans_accepted_total"]
    assert m["otel_eval_receiver_requests_throttled_total"] > 0
    assert any("RESOURCE_EXHAUSTED" in r and f"retrying in {RETRY_AFTER_S:.2f}s" in r
               for r in retries.messages), retries.messages[:3]
    assert m.get("otel_eval_receiver_spans_rejected_total", 0.0) == 0
    assert m["otel_eval_receiver_spans_received_total"] == accepted
    assert sum(b["counts"]["spans"] for b in bodies.values()) == accepted
    acked = set().union(*(c.acked for c in counters))
    assert 0 < len(acked) <= accepted
    lost = acked - stored_span_ids(bodies)
    assert not lost, f"{len(lost)} acknowledged spans not evaluated, e.g. {sorted(lost)[:3]}"
