"""The Kafka consumer decodes its records within the receivers' decoding budget
(``receive.decoding.DecodeBudget``, ``receiver.max_decoding_bytes``): a record is charged
before it is parsed, waits (its partition paused, never dropped) while the budget is held by
others, and is skipped as poison (``too_large``) when its charge alone passes the budget."""

from __future__ import annotations

import asyncio

from kafka_doubles import FakeEngine, Topic, WatchedStats, produce_traces
from kafka_traces import requests_for, trace_ids

from otel_eval.receive.decoding import DecodeBudget
from otel_eval.receive.kafka.consumer import KafkaConsumerStage
from otel_eval.receive.kafka.records import decode_value

BUDGET = 1 << 20


def test_a_record_waits_while_the_budget_is_held_then_is_taken(topic: Topic) -> None:
    async def scenario() -> None:
        await produce_traces(topic, 4, spans_per_trace=2, traces_per_request=4)
        engine, stats = FakeEngine(), WatchedStats()
        engine.auto_release = True
        budget = DecodeBudget(BUDGET)
        budget.held = BUDGET  # a receiver's requests being decoded hold it all
        stage = KafkaConsumerStage(topic.config(), engine, stats, decoding=budget)
        await stage.start()
        try:
            await stats.until(lambda s: s.throttles["decoding"] >= 1 and s.is_paused)
            assert engine.spans == [] and not stats.poison  # waiting, not decoded nor dropped
            assert sum(stats.commits.values()) == 0  # the position stays at the records
            budget.held = 0  # given back
            await engine.until(lambda e: len(e.spans) == 8)
            await stats.until(lambda s: sum(s.commits.values()) == 8 and not s.is_paused)
        finally:
            await stage.shutdown(5.0)
        assert budget.held == 0  # every charge given back once the engine took its record
        assert not stats.poison

    asyncio.run(scenario())


def test_a_record_past_the_whole_budget_is_skipped_as_too_large(topic: Topic) -> None:
    async def scenario() -> None:
        ids = await produce_traces(topic, 3, spans_per_trace=2, traces_per_request=3)
        engine, stats = FakeEngine(), WatchedStats()
        engine.auto_release = True
        # a budget smaller than a record of 2 spans: never decoded, never stalls
        budget = DecodeBudget(64)
        stage = KafkaConsumerStage(topic.config(), engine, stats, decoding=budget)
        await stage.start()
        try:
            # each record skipped and committed (a producer's retry may write one twice)
            await stats.until(lambda s: s.poison["too_large"] >= len(ids)
                              and sum(s.commits.values()) == s.poison["too_large"])
        finally:
            await stage.shutdown(5.0)
        assert engine.spans == [] and budget.held == 0

    asyncio.run(scenario())


def test_the_charge_is_the_receivers_for_the_same_bytes() -> None:
    """One mechanism: a record is charged what a gRPC/HTTP request of its bytes is."""
    body = next(iter(requests_for(trace_ids(2), 3, 2))).SerializeToString()
    budget = DecodeBudget(BUDGET)
    assert decode_value(body, "otlp_proto", logs=False) is not None
    with budget.charged(body) as refused:
        assert refused == ""
        receivers = budget.held
    assert budget.take(body) == ("", receivers)
    budget.give_back(receivers)
    assert budget.held == 0
