"""Acknowledged means durable for the judged record of the results topic too: once its
judgement is stored, the judge publishes the trace again (``ResultsPublisher.publish_stored``),
and that record, the last of its key, is in no store until Kafka has it. The judge's journal
entry stays until it is delivered, and a start after a kill -9 publishes the stored object
again. Before, the entry was removed as soon as the judgement was stored (with no events
endpoint): a kill before the delivery left the topic's last record of the run unjudged, and
the next start sent nothing. A producer double stands in for aiokafka's."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from judge_fake_llm import FakeLLM, good
from judge_fixtures import combined_reply, config, evaluation
from prometheus_client import CollectorRegistry
from support.poll import poll
from support.producers import RecordingProducer

from otel_eval.base.aio import LoopThread
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import KafkaStats
from otel_eval.base.model import Trace
from otel_eval.evaluate.judge.journal import PendingJournal
from otel_eval.evaluate.judge.stage import JudgeStage
from otel_eval.outputs.kafka import ResultsPublisher
from otel_eval.store import SqliteStore
from otel_eval.telemetry.metrics import Metrics


class _Process:
    """A serve's judge stage and results topic on the store in ``path``."""

    def __init__(self, path: str, api_base: str, producer: RecordingProducer) -> None:
        self.producer = producer
        self.stats = KafkaStats()
        self.publisher = ResultsPublisher(KafkaConfig(results_topic="results"), self.stats)
        self.loop = LoopThread()
        self.loop.start()
        self.loop.run(self._start())
        self.store = SqliteStore(path).open()
        self.stage = JudgeStage(config(api_base, combined=True), self.loop, self.store,
                                Metrics(CollectorRegistry()), cache_path=path,
                                results=self.publisher)

    async def _start(self) -> None:
        self.publisher._loop = asyncio.get_running_loop()
        self.publisher._producer = self.producer  # type: ignore[assignment]
        self.publisher._task = asyncio.create_task(self.publisher._run())

    def records(self) -> list[tuple[str, dict[str, Any]]]:
        return [(k.decode(), json.loads(v)) for k, v in list(self.producer.records)]

    def kill(self) -> None:
        """kill -9: nothing flushed, nothing counted; the files as they are (the writer
        thread let go and the connections closed, as the process's end would)."""
        self.loop.stop(5.0)
        if self.stage._writer is not None:
            self.stage._writer.stop()
        self.stage._close_cache()
        self.store.close()


def test_a_judged_record_lost_to_a_kill_is_published_again_at_the_next_start(
        llm: FakeLLM, tmp_path: Path) -> None:
    llm.route = lambda body: good(combined_reply([0, 1, 2, 3, 4, 5]))
    path = str(tmp_path / "s.db")
    ev = evaluation(trace_id="d7" * 16)
    first = _Process(path, llm.api_base, RecordingProducer(deliver=False))
    first.store.put_many([ev])
    first.stage.start()
    first.stage.export(Trace(ev.trace_id, [], "complete"), ev)
    poll(lambda: bool(first.producer.records), "the judged trace handed to Kafka",
         interval_s=0.02)
    stored = first.store.get(ev.trace_id)
    assert stored is not None and "judge" in stored
    # not delivered: its entry stays for the next start
    assert [e[0] for e in PendingJournal(path).open().pending()] == [ev.trace_id]
    first.kill()

    second = _Process(path, llm.api_base, RecordingProducer(deliver=True))
    try:
        second.stage.start()  # before any new work: what the dead process left
        second.loop.run(second.publisher.shutdown(5.0))  # sends what was handed over
        assert second.records() == [(ev.trace_id, json.loads(json.dumps(stored)))]
        assert second.stats.published_records == {"results": 1}
        assert PendingJournal(path).open().pending() == []  # delivered: the entry leaves
    finally:
        second.stage.shutdown(5.0)
        second.kill()
