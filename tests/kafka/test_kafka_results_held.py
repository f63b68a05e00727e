"""Acknowledged means durable for the results topic too: its publisher's queue holds in memory
what no topic has yet, so a stored trace stays replayable (spool rows, Kafka offsets) until
its record is delivered or dropped for a counted reason, and a replay after a kill -9 sends
the record again, as the store holds it (the results API's object). Before, the trace left
the spool as soon as it was stored: a kill -9 lost the queued record, uncounted, and the
replay, ``already_evaluated``, published nothing. A producer double stands in for aiokafka's."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from prometheus_client import CollectorRegistry
from support.producers import RecordingProducer

from otel_eval.app.config import Config, replace
from otel_eval.assemble.engine import Engine
from otel_eval.assemble.spool import Spool
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.aio import LoopThread
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import KafkaStats
from otel_eval.base.model import Span
from otel_eval.decode.encode import encode_spans
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import InProcess
from otel_eval.outputs.kafka import ResultsPublisher
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics

T = "7c" * 16
GRACE = 5.0


def _run() -> list[Span]:
    root = Span(T, "1" * 16, None, "invoke_agent", 1, 100,
                attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"})
    tool = Span(T, "2" * 16, "1" * 16, "execute_tool lookup", 10, 20,
                attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "x"})
    return [tool, root]


class _Process:
    """One serve's engine with a results topic, on the store and spool in ``tmp``."""

    def __init__(self, tmp: Path, producer: RecordingProducer) -> None:
        self.now = 1000.0
        metrics = Metrics(CollectorRegistry())
        cfg = replace(Config(), **{"assembly.grace_s": GRACE})
        self.stats = KafkaStats()
        self.publisher = ResultsPublisher(KafkaConfig(results_topic="results"), self.stats)
        self.loop = LoopThread()
        self.loop.start()
        self.loop.run(self._start(producer))
        self.store = Store(str(tmp / "store.db"))
        self.spool = Spool(str(tmp / "store.db-spool"), 1 << 30, metrics.spool).open()
        self.engine = Engine(InProcess(Evaluator(cfg), self.store),
                             StoreHealth(self.store.location, clock=lambda: self.now),
                             metrics, assembly=cfg.assembly, clock=lambda: self.now,
                             spool=self.spool, sinks=[self.publisher],
                             stored=self.store.get_stamped)
        self.engine.replay()

    async def _start(self, producer: RecordingProducer) -> None:
        self.publisher._loop = asyncio.get_running_loop()
        self.publisher._producer = producer  # type: ignore[assignment]
        self.publisher._task = asyncio.create_task(self.publisher._run())

    def advance(self) -> int:
        self.now += GRACE
        self.engine.tick()
        return self.engine.process()

    def kill(self) -> None:
        """kill -9: nothing flushed, nothing counted; the files as they are."""
        self.store.close()
        self.spool.close()
        self.loop.stop(5.0)


def test_a_results_record_lost_to_a_kill_is_published_again_by_the_replay(
        tmp_path: Path) -> None:
    lost = RecordingProducer(deliver=False)
    first = _Process(tmp_path, lost)
    spans = _run()
    first.engine.submit(spans, request=encode_spans(spans).SerializeToString())
    assert first.advance() == 1
    assert lost.sent.wait(30)
    stored = first.store.get(T)
    assert first.spool.held()[0] == 1  # its request: kept until the record is delivered
    first.kill()

    delivered = RecordingProducer(deliver=True)
    second = _Process(tmp_path, delivered)
    assert second.advance() == 1  # already evaluated: sent again, not evaluated again
    second.loop.run(second.publisher.shutdown(5.0))
    assert [(k.decode(), json.loads(v)) for k, v in delivered.records] == [(T, stored)]
    assert second.stats.published_records == {"results": 1}
    assert second.spool.held() == (0, 0)  # delivered: the request leaves the spool
    assert second.store.get(T) == stored
    second.kill()
