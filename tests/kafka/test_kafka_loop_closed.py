"""Engine threads calling into Kafka stages whose loop is gone (serve stopping): never raised
into the engine. The results publisher's ``export`` counts a drop (``not_started``), in one
attempt, no check before it: the loop may close between a check and the hand-over. The
consumer's stored-callback leaves the records uncommitted (delivered again)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

from aiokafka import TopicPartition

from otel_eval.app.config import Config
from otel_eval.assemble.admission import Admission
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import KafkaStats
from otel_eval.base.model import Span, Trace
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.outputs.kafka import ResultsPublisher
from otel_eval.receive.ingest import Decoded
from otel_eval.receive.kafka.consumer import KafkaConsumerStage
from otel_eval.receive.kafka.offsets import Ticket
from otel_eval.receive.kafka.records import Record


def _evaluated() -> tuple[Trace, object]:
    tid = "a" * 32
    trace = Trace(tid, [Span(tid, "1" * 16, None, "invoke_agent", 1, 2)], "complete")
    return trace, Evaluator(Config()).evaluate(trace)


def test_export_before_start_and_after_the_loop_closed_is_a_counted_drop() -> None:
    stats = KafkaStats()
    publisher = ResultsPublisher(KafkaConfig(), stats)
    trace, evaluation = _evaluated()
    publisher.export(trace, evaluation)  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    loop.close()
    publisher._loop = loop  # started once, its loop since closed (serve stopping)
    publisher.export(trace, evaluation)  # type: ignore[arg-type]
    publisher._loop = _ClosesAfterTheCheck()  # type: ignore[assignment]
    publisher.export(trace, evaluation)  # type: ignore[arg-type]
    assert stats.dropped[("results", "not_started")] == 3


class _ClosesAfterTheCheck:
    """A loop the service closes between ``is_closed()`` and ``call_soon_threadsafe``."""

    def is_closed(self) -> bool:
        return False

    def call_soon_threadsafe(self, *_: object) -> None:
        raise RuntimeError("Event loop is closed")


class _Engine:
    """Takes every span and keeps the stored-callback, to call it as a worker thread would."""

    def __init__(self) -> None:
        self.on_stored: list[Callable[[], None]] = []

    def submit(self, spans: list[Span], source: str = "otlp", *,
               on_stored: Callable[[], None] | None = None, **_: object) -> Admission:
        assert on_stored is not None
        self.on_stored.append(on_stored)
        return Admission(accepted=len(spans))


def test_a_record_stored_after_the_consumers_loop_closed_is_not_raised_into_the_engine(
        ) -> None:
    engine = _Engine()
    stage = KafkaConsumerStage(KafkaConfig(), engine)  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    stage._loop = loop
    tp = TopicPartition("t", 0)
    tid = "b" * 32
    work = Decoded("traces", [Span(tid, "1" * 16, None, "invoke_agent", 1, 2)], Counter())
    record = Record(tp, Ticket(tp, 0, 0), None, work)
    assert stage._submit(tp, record) == ""  # taken: no refusal
    loop.close()  # the stage stopped before the engine stored the record
    engine.on_stored[0]()  # before: RuntimeError("Event loop is closed") in the engine
    assert stage.tracker.committable() == {}
