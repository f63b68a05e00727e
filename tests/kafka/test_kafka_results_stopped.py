"""The results publisher's ``export`` from an engine thread while the service loop is gone:
counted as dropped (``not_started``), never raised into the engine. One attempt, no check
before it: the loop may close between a check and the hand-over."""

from __future__ import annotations

import asyncio

from otel_eval.app.config import Config
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import KafkaStats
from otel_eval.base.model import Span, Trace
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.outputs.kafka import ResultsPublisher


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
