"""Every recording of the conformance corpus gets the same evaluation whatever order its
spans arrive in: recorded, reversed and shuffled (a collector whose queue exports batches
concurrently delivers them in any order; JavaScript SDKs write whole milliseconds, so a tool
call and the model call reading its result often start in the same one)."""

from __future__ import annotations

import json
import random
from typing import Any, TypeVar

import pytest
from conformance import corpus, hung

from otel_eval.app.config import Config
from otel_eval.base.model import LogEvent, Span, Trace
from otel_eval.decode.otlp_logs import (
    decode_logs,
    hold_logs,
    logs_request_from_json,
    parse_logs_request,
)
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.trajectory import build_trajectory

_SHUFFLES = 3  # seeded shuffles besides the recorded and the reversed order
T = TypeVar("T")


def _orders(items: list[T]) -> list[list[T]]:
    out = [items, items[::-1]]
    for seed in range(_SHUFFLES):
        shuffled = list(items)
        random.Random(seed).shuffle(shuffled)
        out.append(shuffled)
    return out


def _evaluation(spans: list[Span], logs: list[object], evaluator: Evaluator) -> str:
    ev = evaluator.evaluate(Trace("ef" * 16, spans, "complete", logs=logs))  # type: ignore[arg-type]
    assert ev is not None
    return json.dumps(ev.to_json(), sort_keys=True)


@pytest.mark.parametrize(("stack", "scenario"), corpus.recorded(),
                         ids=[f"{s}/{c}" for s, c in corpus.recorded()])
def test_the_evaluation_does_not_depend_on_the_arrival_order(stack: str, scenario: str) -> None:
    evaluator = Evaluator(Config())
    spans, logs = hung.load(stack, scenario)
    first, *others = [_evaluation(order, list(logs), evaluator) for order in _orders(spans)]
    for number, other in enumerate(others, 1):
        assert other == first, f"order {number} evaluates otherwise"


# The older one-event-per-message shape (a record per input message, then gen_ai.choice), as
# recorded from openai-v2's events, with every record of a span stamped at one time (an
# instrumentation that stamps a request's records with its own time, or a coarse clock). A
# batching exporter sends the records in consecutive chunks (requests); a concurrent one
# delivers the chunks in any order. "fine": each record keeps the observed time its SDK
# took it at, and a span's records are split across requests; "coarse": the observed times
# tie too, and only the place in a request (a span's records in one) tells them apart.
_PER_MESSAGE = ("openai-v2-events", "clean")
_CHUNK = 2  # records per request ("fine"), so a span's records are split across requests


def _stamped_alike(clock: str) -> list[list[dict[str, Any]]]:
    """The recording's log records, each span's stamped with its first record's time
    (observed time too, "coarse"), cut into the requests a batching exporter sends."""
    stack, scenario = _PER_MESSAGE
    records = [dict(r) for item in corpus.recording(stack, scenario)["requests"]
               if item["signal"] == "logs" for rl in item["body"]["resourceLogs"]
               for sl in rl["scopeLogs"] for r in sl["logRecords"]]
    first: dict[str, str] = {}
    for r in records:
        r["timeUnixNano"] = first.setdefault(r["spanId"], r["observedTimeUnixNano"])
        if clock == "coarse":
            r["observedTimeUnixNano"] = r["timeUnixNano"]
    if clock == "coarse":
        spans = list(dict.fromkeys(r["spanId"] for r in records))
        return [[r for r in records if r["spanId"] == s] for s in spans]
    return [records[i:i + _CHUNK] for i in range(0, len(records), _CHUNK)]


def _decoded(records: list[dict[str, Any]], path: str) -> list[LogEvent]:
    """A request's records as ``eval`` decodes them (OTLP/JSON) or ``serve`` holds them
    (protobuf, decoded when their trace is released)."""
    body = {"resourceLogs": [{"scopeLogs": [{"logRecords": records}]}]}
    req = logs_request_from_json(json.dumps(body).encode())
    if path == "json":
        return decode_logs(req).records
    return [r.decode() for r in hold_logs(parse_logs_request(req.SerializeToString())[0]).records]


@pytest.mark.parametrize("path", ["json", "protobuf"])
@pytest.mark.parametrize("clock", ["fine", "coarse"])
def test_records_of_one_span_at_one_time_are_read_in_the_order_sent(clock: str,
                                                                    path: str) -> None:
    spans, _ = hung.load(*_PER_MESSAGE)
    evaluator = Evaluator(Config())
    evaluations = []
    for number, order in enumerate(_orders(_stamped_alike(clock))):
        logs = [r for request in order for r in _decoded(request, path)]
        evaluations.append(_evaluation(list(spans), logs, evaluator))
        trace = Trace("ef" * 16, list(spans), "complete", logs=logs)
        last = build_trajectory(trace, TrajectoryConfig()).steps[-1]  # the call after the tool
        roles = [m["role"] for m in json.loads(last.input_text or "[]")]
        assert roles == ["system", "user", "assistant", "tool"], f"order {number}"
    assert evaluations == [evaluations[0]] * len(evaluations)
