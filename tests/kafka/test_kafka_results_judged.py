"""The results topic's last record of a trace is its judged one, whatever order the engine
thread and the judge hand them over in. The engine exports an evaluation to every sink in
turn, the judge first; a judge skip (``sampled_out``, ``queue_full``) is stored in a few
milliseconds, and its record published again at once, while the engine thread may still be
encoding the trace's spans for pass-through, so the un-judged record could come second and be
what a compacted topic keeps (no ``judge``, while the results API has it)."""

from __future__ import annotations

import asyncio
import json

from otel_eval.app.config import Config
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import KafkaStats
from otel_eval.base.model import Span, Trace
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.outputs.kafka import ResultsPublisher


def _queued(publisher: ResultsPublisher, loop: asyncio.AbstractEventLoop) -> list[dict]:
    loop.call_soon(loop.stop)  # after the hand-overs scheduled before it
    loop.run_forever()
    return [json.loads(payload) for _, payload, *_ in publisher._queue]


def test_the_judged_record_stays_last_when_the_engine_hands_over_after_it() -> None:
    tid = "d4" * 16
    trace = Trace(tid, [Span(tid, "1" * 16, None, "invoke_agent", 1, 2)], "complete")
    evaluation = Evaluator(Config()).evaluate(trace)
    evaluation.evaluated_at_ns = 1_000
    publisher = ResultsPublisher(KafkaConfig(), KafkaStats())
    loop = asyncio.new_event_loop()
    publisher._loop = loop
    try:
        judged = Evaluator(Config()).evaluate(trace)
        judged.evaluated_at_ns = 1_000
        judged.judge = {"overall": {"status": "skipped", "reason": "sampled_out"}}
        publisher.publish(judged)  # the judge's skip, stored and published first
        publisher.export(trace, evaluation)  # the engine thread's, handed over after it
        records = _queued(publisher, loop)
        assert records and records[-1].get("judge") == judged.judge
        # a later evaluation of the trace (re-opened: a new revision) is published again
        evaluation.trajectory.revision = 1
        publisher.export(trace, evaluation)
        assert "judge" not in _queued(publisher, loop)[-1]
    finally:
        loop.close()
