"""``--kafka-publish`` while Kafka is down: every exporter request is throttled
(``kafka_unavailable``) and wrote a warning, a line per request for as long as Kafka was
down. Every request is still throttled; the log says one, then, after
``PUBLISH_LOG_INTERVAL_S``, how many it left out meanwhile."""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from types import SimpleNamespace
from typing import Any

import pytest
from support.clock import ManualClock

from otel_eval.base.model import LogEvent, Span
from otel_eval.receive.kafka.frontend import PUBLISH_LOG_INTERVAL_S, PublishingEngine


class _Down:
    """A publisher whose broker does not answer, on a loop that times out."""

    config = SimpleNamespace(logs_topic="logs")

    async def publish(self, data: bytes) -> None:
        raise AssertionError("never awaited")

    async def publish_logs(self, records: Any) -> None:
        raise AssertionError("never awaited")

    def run(self, coro: Coroutine[Any, Any, Any], timeout_s: float) -> Any:
        coro.close()
        raise TimeoutError


def _spans(n: int) -> list[Span]:
    return [Span(f"{n + 1:032x}", "a" * 16, None, "chat", 1, 2)]


def _logs(n: int) -> list[LogEvent]:
    return [LogEvent(f"{n + 1:032x}", "e" * 16, "gen_ai.user.message", 5, {}, {})]


def test_requests_while_kafka_is_down_are_one_line_then_a_count(
        caplog: pytest.LogCaptureFixture) -> None:
    down, clock = _Down(), ManualClock()
    engine = PublishingEngine(down, down, clock=clock)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        adms = [engine.submit(_spans(n)) for n in range(10)]
        adms += [engine.submit(_logs(n), signal="logs") for n in range(10)]
        clock.advance(PUBLISH_LOG_INTERVAL_S)
        adms.append(engine.submit(_spans(20)))
    assert [a.throttled for a in adms] == ["kafka_unavailable"] * 21
    got = [r.getMessage() for r in caplog.records if "kafka publish" in r.getMessage()]
    assert len(got) == 2, got
    assert got[0] == "kafka publish failed (TimeoutError: ); throttling the exporter", got
    assert got[1].endswith("(19 more failed kafka publishes not logged since the last)"), got
