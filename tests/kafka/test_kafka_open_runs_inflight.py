"""Records in flight because their runs are still open do not pause the topic: they finish
only once the rest of their runs is read, so pausing for them left every run's end unread
(cut idle as non-terminated, idle_timeout_s later) and every other record locked out."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from pathlib import Path

from aiokafka import AIOKafkaProducer
from kafka_doubles import FakeEngine, Topic, WatchedStats
from kafka_traces import span_pb, trace_ids
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client import CollectorRegistry
from test_kafka_clean_stop import agent_run

from otel_eval.app.config import Config, replace
from otel_eval.assemble.engine import Engine
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.model import Span
from otel_eval.decode import otlp
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import InProcess
from otel_eval.receive.kafka.consumer import KafkaConsumerStage
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics

RUNS = 10


class RunsEngine(FakeEngine):
    """A run stays open until its root span (``invoke_agent``) comes; then every record of
    it is stored."""

    def __init__(self) -> None:
        super().__init__()
        self.ended: set[str] = set()

    def submit(self, spans: list[Span], source: str = "otlp",
               on_stored: Callable[[], None] | None = None, *,
               signal: str = "traces") -> object:
        adm = super().submit(spans, source, on_stored, signal=signal)
        self.ended |= {s.trace_id for s in spans if s.name == "invoke_agent"}
        self.release(lambda ids: ids <= self.ended)
        return adm

    def open_runs(self, ids: Collection[str]) -> set[str]:
        held = set().union(*(i for i, _ in self.held)) if self.held else set()
        return {t for t in ids if t in held and t not in self.ended}


async def produce_runs(topic: Topic, ids: list[str]) -> None:
    """Every run's first span, then every run's root, one record each, on partition 0 (as
    the exporter writes concurrent runs, a batch a second)."""
    producer = AIOKafkaProducer(bootstrap_servers=topic.bootstrap)
    await producer.start()
    try:
        for index in range(2):
            for t in ids:
                req = ExportTraceServiceRequest()
                req.resource_spans.add().scope_spans.add().spans.append(span_pb(t, index, 2))
                await producer.send_and_wait(topic.name, req.SerializeToString(),
                                             key=t.encode(), partition=0)
    finally:
        await producer.stop()


def test_records_of_open_runs_do_not_pause_the_topic_their_ends_are_on(topic: Topic) -> None:
    async def scenario() -> None:
        ids = trace_ids(RUNS)
        await produce_runs(topic, ids)
        engine, stats = RunsEngine(), WatchedStats()
        stage = KafkaConsumerStage(topic.config(max_inflight_records=RUNS // 2,
                                                max_poll_records=1), engine, stats)
        await stage.start()
        try:
            # every run's end is read, every run stored, every record committed
            await stats.until(lambda s: s.commits.get(0) == 2 * RUNS)
        finally:
            await stage.shutdown(5.0)
        assert engine.ended == set(ids)

    asyncio.run(scenario())


def test_the_engine_names_the_runs_it_holds_open(tmp_path: Path) -> None:
    clock = [1000.0]
    cfg = replace(Config(), **{"assembly.idle_timeout_s": 60.0})
    store = Store(str(tmp_path / "s.db"))
    engine = Engine(InProcess(Evaluator(cfg), store),
                    StoreHealth(store.location, clock=lambda: clock[0]),
                    Metrics(CollectorRegistry()), assembly=cfg.assembly,
                    clock=lambda: clock[0])
    (tid, spans), (ended, whole) = agent_run(2), agent_run(2)
    engine.submit(otlp.decode_request(encode_spans(spans[:3])).spans, source="kafka")
    engine.submit(otlp.decode_request(encode_spans(whole)).spans, source="kafka")
    clock[0] += 30.0  # past grace: the ended run is released, the open one idles on
    assert engine.tick() == 1
    assert engine.open_runs([tid, ended, "8d" * 16]) == {tid}
