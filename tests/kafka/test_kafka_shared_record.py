"""A Kafka record holding several services' traces (the kafka exporter without
``partition_traces_by_id``, its default, writes a whole export batch as one record) over one
service's share (``assembly.max_service_share``): taken in part, as an OTLP request is, the
over-share service's new traces rejected for good (counted under protocol ``kafka``), the
record done once the rest is stored, never retried. docs/guide.md says so (it said only that
a refused record is retried, never skipped). Engine level, no broker: ``Ingest.admit`` is what
the consumer calls, and an ``ok`` outcome is a record it does not retry."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from prometheus_client import CollectorRegistry
from support.clock import ManualClock

from otel_eval.app.config import Config, replace
from otel_eval.assemble.engine import Engine
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.kafka.stats import KafkaStats
from otel_eval.base.model import Span
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import InProcess
from otel_eval.receive.ingest import Decoded, Ingest
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide.md"


def _trace(i: int, service: str) -> list[Span]:
    trace, resource = f"{i + 1:032x}", {"service.name": service}
    return [Span(trace, f"{1:016x}", None, "invoke_agent", 1, 0, resource=resource),
            Span(trace, f"{2:016x}", f"{1:016x}", "chat", 2, 3, resource=resource)]


def _record(spans: list[Span]) -> Decoded:
    return Decoded("traces", spans, Counter())


def test_a_shared_records_over_share_traces_are_rejected_not_retried_as_documented(
        tmp_path: Path) -> None:
    clock = ManualClock()
    cfg = replace(Config(), **{"assembly.max_open_traces": 10,
                               "assembly.max_service_share": 0.5})
    store = Store(str(tmp_path / "s.db"))
    engine = Engine(InProcess(Evaluator(cfg), store),
                    StoreHealth(store.location, clock=clock), Metrics(CollectorRegistry()),
                    assembly=cfg.assembly, clock=clock)
    door, stats = Ingest(engine), KafkaStats()
    flood = [s for i in range(5) for s in _trace(i, "noisy")]
    assert door.admit(_record(flood), stats, source="kafka").outcome == "ok"
    shared = door.admit(_record(_trace(5, "noisy") + _trace(6, "quiet")), stats,
                        source="kafka")
    assert shared.outcome == "ok"  # done once stored: committed, not retried
    assert stats.rejected == {"service_share": 2} and stats.throttles == {}
    # the guide's Kafka section says what such a record's traces get
    text = " ".join(GUIDE.read_text(encoding="utf-8").split())
    kafka = text[text.index("## Scaling out: Kafka"):]
    assert "partition_traces_by_id" in kafka
    assert re.search(r'rejected for good, counted in `otel_eval_receiver_spans_rejected_total'
                     r'\{protocol="kafka", reason="service_share"\}`', kafka)
    assert "they are not retried" in kafka
