"""Runs that never ended, from the conformance corpus: which agent otel-eval names for them.

Each stack's ``non_terminating`` recording is a real killed run (its open spans never sent).
Every other recording also gives a simulated one: the same spans without the root span and
without any agent span (what a run killed before its agent span ended exports).

``agents_of_hung_runs(history)`` evaluates them per stack, after the stack's completed
recordings when ``history`` is set (what a service that ran before has in its store), and
answers, per stack, how many hung runs got the stack's agent out of how many.

    PYTHONPATH=.:tests python3 tests/conformance/hung.py  # the table, without and with history
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from conformance import corpus

from otel_eval.app.config import Config
from otel_eval.base.model import LogEvent, Span, Trace, local_root
from otel_eval.decode.otlp import decode_request
from otel_eval.decode.otlp_json import request_from_dict
from otel_eval.decode.otlp_logs import decode_logs, logs_request_from_json
from otel_eval.evaluate.agent_inference import learned
from otel_eval.evaluate.conventions import classify
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.store import SqliteStore

KILLED = "non_terminating"


@cache
def _requests(stack: str, scenario: str) -> tuple[tuple[str, Any], ...]:
    """The recording's requests parsed once (protobuf's JSON parsing is the slow part)."""
    out = []
    for item in corpus.recording(stack, scenario)["requests"]:
        if item["signal"] == "traces":
            out.append(("traces", request_from_dict(item["body"])))
        else:
            out.append(("logs", logs_request_from_json(json.dumps(item["body"]).encode())))
    return tuple(out)


def load(stack: str, scenario: str) -> tuple[list[Span], list[LogEvent]]:
    """The recording's spans and GenAI log records, new objects on every call."""
    spans: list[Span] = []
    logs: list[LogEvent] = []
    for signal, request in _requests(stack, scenario):
        if signal == "traces":
            spans += decode_request(request).spans
        else:
            logs += decode_logs(request).records
    return spans, logs


# The scenarios whose run is the stack's agent's alone (multi_agent's is its coordinator's).
ONE_AGENT = tuple(s for s in corpus.SCENARIOS if s != corpus.MULTI_AGENT)


def without_root_and_agents(spans: list[Span]) -> list[Span]:
    root = local_root(spans)
    return [s for s in spans if (root is None or s.span_id != root.span_id)
            and classify(s, s.attributes)[0] != "agent"]


def hung_runs(stack: str) -> list[Trace]:
    """The stack's killed run and one simulated hung run per completed recording."""
    out = []
    for scenario in ONE_AGENT:
        if not corpus.recording_path(stack, scenario).is_file():
            continue
        spans, logs = load(stack, scenario)
        if scenario != KILLED:
            spans = without_root_and_agents(spans)
        out.append(Trace(f"{len(out) + 1:032x}", spans, "incomplete", logs=logs))
    return out


def completed_runs(stack: str, scenarios: tuple[str, ...] = corpus.SCENARIOS) -> list[Trace]:
    """The stack's recordings of ``scenarios`` that ran to their end."""
    out = []
    for scenario in scenarios:
        if scenario != KILLED and corpus.recording_path(stack, scenario).is_file():
            spans, logs = load(stack, scenario)
            out.append(Trace(f"{len(out) + 100:032x}", spans, "complete", logs=logs))
    return out


def agents_of_hung_runs(history: bool) -> dict[str, tuple[int, int, list[str]]]:
    """stack -> (hung runs given the stack's agent, hung runs, agent sources seen)."""
    evaluator = Evaluator(Config())
    out = {}
    for stack, spec in corpus.stacks().items():
        store = SqliteStore(":memory:").open()
        try:
            if history:
                for trace in completed_runs(stack, ONE_AGENT):
                    store.remember_agents(learned([evaluator.evaluate(trace,
                                                                      history=store)]))
            evs = [evaluator.evaluate(t, history=store if history else None)
                   for t in hung_runs(stack)]
        finally:
            store.close()
        right = sum(1 for ev in evs if ev.trajectory.agent == spec["agent"])
        sources = sorted({ev.trajectory.agent_source for ev in evs})
        out[stack] = (right, len(evs), sources)
    return out


def main() -> None:
    before, after = agents_of_hung_runs(False), agents_of_hung_runs(True)
    print("| stack | hung runs | right agent, no history | right agent, with history | "
          "agent_source |")
    print("|---|---|---|---|---|")
    for stack in before:
        b, n, _ = before[stack]
        a, _, sources = after[stack]
        print(f"| {stack} | {n} | {b} | {a} | {', '.join(sources)} |")
    stacks_b = sum(1 for b, n, _ in before.values() if b == n)
    stacks_a = sum(1 for a, n, _ in after.values() if a == n)
    print(f"stacks whose every hung run gets the agent: {stacks_b} -> {stacks_a} "
          f"of {len(before)}")


if __name__ == "__main__":
    main()
