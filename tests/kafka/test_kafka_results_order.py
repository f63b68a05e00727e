"""The results topic's last record of a trace is its newest stored evaluation
(docs/guide.md: "the last record of a key is what ``GET /v1/evaluations/{trace_id}``
returns"). Records reach the publisher from three threads (the engine's sinks, the judge's
writer, feedback's request threads); before, a judgement of a revision that late spans
superseded meanwhile, handed over after the new revision's record, ended the topic on the
old revision while the results API returned the new one."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from otel_eval.app.config import Config
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import KafkaStats
from otel_eval.base.model import Span, Trace
from otel_eval.base.results import Evaluation
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.outputs.kafka import ResultsPublisher

TID = "a7" * 16


def _queued(publisher: ResultsPublisher, loop: asyncio.AbstractEventLoop) -> list[dict[str, Any]]:
    loop.call_soon(loop.stop)  # after the hand-overs scheduled before it
    loop.run_forever()
    return [json.loads(payload) for _, payload, *_ in publisher._queue]


def _evaluation(revision: int, at_ns: int, spans: int) -> tuple[Trace, Evaluation]:
    root = Span(TID, "1" * 16, None, "invoke_agent", 1, 1_000,
                attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"})
    tools = [Span(TID, f"{i + 2:016x}", "1" * 16, "execute_tool lookup", 10 + i, 20 + i,
                  attributes={"gen_ai.operation.name": "execute_tool",
                              "gen_ai.tool.name": "lookup"}) for i in range(spans)]
    trace = Trace(TID, [root, *tools], "complete", revision=revision)
    evaluation = Evaluator(Config()).evaluate(trace)
    evaluation.evaluated_at_ns = at_ns
    assert evaluation.trajectory.revision == revision
    return trace, evaluation


def test_a_judgement_of_a_superseded_revision_does_not_end_the_topic() -> None:
    publisher = ResultsPublisher(KafkaConfig(), KafkaStats())
    loop = asyncio.new_event_loop()
    publisher._loop = loop
    try:
        first_trace, first = _evaluation(0, 1_000, 1)
        publisher.export(first_trace, first)  # revision 0 stored; the judge takes it
        late_trace, late = _evaluation(1, 2_000, 2)
        publisher.export(late_trace, late)  # late spans re-opened it: revision 1 stored
        first.judge = {"score": 0.9}
        publisher.publish(first)  # the judge's write of revision 0 read back, handed late
        records = _queued(publisher, loop)
        assert records[-1]["revision"] == 1  # the results API's object: the newest
        assert [r["revision"] for r in records] == [0, 1]
    finally:
        loop.close()
