"""The results publisher while the broker is away: aiokafka refuses each record at ``send``
(no metadata within ``request_timeout_ms``), and each wrote a warning, a line per stored
evaluation for as long as the broker was away. Each is still dropped and counted
(``send_failed``); the log says one, then, after ``SEND_LOG_INTERVAL_S``, how many it left
out meanwhile."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiokafka.errors import KafkaTimeoutError
from support.clock import ManualClock

from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import KafkaStats
from otel_eval.outputs.kafka import SEND_LOG_INTERVAL_S, ResultsPublisher


class _Away:
    async def send(self, topic: str, value: bytes, key: bytes,
                   headers: list[tuple[str, bytes]] | None = None) -> None:
        raise KafkaTimeoutError("Failed to update metadata after 40.0 secs.")


async def _send(publisher: ResultsPublisher, ids: range) -> None:
    for n in ids:
        publisher._queue.append((f"{n + 1:032x}", b"{}", None, ()))
    await publisher._send_queued(_Away())  # type: ignore[arg-type]


def test_records_refused_while_the_broker_is_away_are_one_line_then_a_count(
        caplog: pytest.LogCaptureFixture) -> None:
    stats, clock = KafkaStats(), ManualClock()
    publisher = ResultsPublisher(KafkaConfig(results_topic="results"), stats, clock=clock)
    with caplog.at_level(logging.WARNING):
        asyncio.run(_send(publisher, range(20)))
        clock.advance(SEND_LOG_INTERVAL_S)
        asyncio.run(_send(publisher, range(20, 21)))
    assert stats.dropped == {("results", "send_failed"): 21}
    got = [r.getMessage() for r in caplog.records if "not published" in r.getMessage()]
    assert len(got) == 2, got
    assert got[0] == f"kafka results: trace {1:032x} not published (KafkaTimeoutError)", got
    assert got[1].endswith("(19 more failed publishes not logged since the last)"), got
