"""Kafka front ends: consume OTLP records as a scaled-out worker (``consumer``, ``records``,
``assignment``, ``offsets``), publish as a stateless receiver (``publisher``, ``frontend``).

``build(config, deps, engine)``: the front end ``kafka.enabled`` asks for, run on the
service's loop; aiokafka is imported only then (a default ``serve`` never loads it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from otel_eval.base.component import OnLoop
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.outputs.deps import Deps

if TYPE_CHECKING:
    from otel_eval.receive.decoding import DecodeBudget
    from otel_eval.receive.ingest import Submitter
    from otel_eval.receive.kafka.consumer import EngineLike


@dataclass(frozen=True)
class KafkaFrontEnd:
    name: str                # in the lifecycle: "kafka publisher" or "kafka consumer"
    component: OnLoop        # started after the spool replay, stopped after the engine
    submitter: Submitter | None  # publish: what the receivers feed instead of the engine
    failure: Callable[[], BaseException | None]  # a consumer loop that died (serve stops)


def _no_failure() -> None:
    return None


def build(config: KafkaConfig, deps: Deps, engine: EngineLike,
          decoding: DecodeBudget | None = None) -> KafkaFrontEnd | None:
    """With ``kafka.publish`` the receivers' records go to the topic (``PublishingEngine``);
    otherwise this serve is a worker consuming the topic into ``engine``, decoding its
    records within ``decoding`` (the receivers' budget: one for every door)."""
    if not config.enabled or deps.loop is None:
        return None
    if config.publish:
        from otel_eval.receive.kafka.frontend import PublishingEngine
        from otel_eval.receive.kafka.publisher import KafkaPublisher

        publisher = KafkaPublisher(config, deps.metrics.kafka)
        return KafkaFrontEnd("kafka publisher", OnLoop(publisher, deps.loop),
                             PublishingEngine(publisher, deps.loop), _no_failure)
    from otel_eval.receive.kafka.consumer import KafkaConsumerStage

    consumer = KafkaConsumerStage(config, engine, deps.metrics.kafka, decoding=decoding)
    return KafkaFrontEnd("kafka consumer", OnLoop(consumer, deps.loop), None,
                         lambda: consumer.failure)
