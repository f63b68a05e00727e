"""Bounded results (issue 21): a code block that binds a 48 kB literal of control characters
once and passes it to a tool 64 times was 64 rebuilt steps each carrying it, an 18.8 MB stored
body from a 50 kB span (382x). Per trace: rebuilt calls capped, each step's values capped, the
whole object capped, a ``result_truncated`` finding saying what was cut; JSON written as UTF-8
(``ensure_ascii`` off)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from support.bench_module import load_bench

from otel_eval.app.config import Config
from otel_eval.base.jsontext import json_text
from otel_eval.base.model import Span, Trace
from otel_eval.base.results import Evaluation, Finding
from otel_eval.base.steps import Step, ToolCall, Trajectory
from otel_eval.evaluate.bounds import bound
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.conventions.values import MAX_OUTPUT_CALLS
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.trajectory.code_actions import CODE_TOOL

BENCH = load_bench("bounded_results.py", "bench_bounded_results")


def _evaluate(spans: int, **trajectory: Any) -> tuple[Evaluation, int]:
    config = Config()
    if trajectory:
        config = dataclasses.replace(
            config, trajectory=dataclasses.replace(config.trajectory, **trajectory))
    trace, sent = BENCH.hostile_trace(spans)
    return Evaluator(config).evaluate(trace), sent


def _truncated(ev: Evaluation) -> Finding:
    found = [f for f in ev.findings if f.kind == "result_truncated"]
    assert len(found) == 1
    assert found[0].detector == "evaluation" and found[0].severity == "info"
    return found[0]


def test_a_literal_passed_64_times_is_stored_within_the_value_bound() -> None:
    ev, _ = _evaluate(1)
    cfg = TrajectoryConfig()
    body = ev.to_json_text().encode()
    assert len(body) < 2 * 1024 * 1024  # was 18.8 MB
    # the 64 calls, and the block that made them, a step of its own (trajectory.code_actions)
    rebuilt = [s for s in json.loads(body)["steps"] if s.get("rebuilt")
               and s["tool_name"] != CODE_TOOL]
    # (the block is a step, not a tool call: Trajectory.counts counts the 64)
    assert len(rebuilt) == 64 and ev.trajectory.counts()["tool_calls"] == 64
    for step in rebuilt:
        assert len(json.dumps(step["arguments"]).encode()) <= cfg.max_value_bytes
        assert step["truncated"]["arguments"] > 6 * 48_000  # its full size, bytes of JSON
    finding = _truncated(ev)
    assert finding.attributes["values"] == 65  # the calls and the block's code
    assert finding.attributes["result_bytes"] < finding.attributes["max_result_bytes"]
    # the detectors read the whole values: the repeated call is still found, the verdict
    # is what it was without the bounds
    assert any(f.kind == "repeated_call" for f in ev.findings)
    assert ev.verdict is not None and ev.verdict.passed is not None


def test_rebuilt_calls_are_capped_per_trace_and_counted() -> None:
    ev, _ = _evaluate(2, max_rebuilt_steps=10)
    assert sum(1 for s in ev.trajectory.steps if s.rebuilt and s.tool_name != CODE_TOOL) == 10
    assert ev.trajectory.code_actions["over_limit"] == 118
    assert _truncated(ev).attributes["rebuilt_calls"] == 118


def test_an_object_over_max_result_bytes_is_cut_from_the_last_step_back() -> None:
    limit = 64 * 1024
    ev, _ = _evaluate(1, max_result_bytes=limit, max_value_bytes=4096)
    text = ev.to_json_text()
    assert len(text.encode()) <= limit
    body = json.loads(text)
    attrs = _truncated(ev).attributes
    assert attrs["result_bytes"] > limit and attrs["max_result_bytes"] == limit
    kept = body["steps"]
    emptied = [s for s in kept if s.get("arguments") is None and s.get("rebuilt")]
    assert attrs["steps_emptied"] == len(emptied) > 0
    assert attrs.get("steps_dropped", 0) + len(kept) == len(ev.trajectory.steps)
    assert kept[0]["index"] == 0 and all(s["truncated"]["arguments"] for s in emptied)
    # counts still say what the run did; the finding is in the stored object
    assert body["counts"]["tool_calls"] == 64  # 64 calls (their code block is no call)
    assert any(f["kind"] == "result_truncated" for f in body["findings"])
    assert ev.to_json() == body  # eval output and the store agree


def test_a_clean_trace_is_not_cut() -> None:
    trace, _ = BENCH.hostile_trace(1, clean=True)
    ev = Evaluator(Config()).evaluate(trace)
    assert not any(f.kind == "result_truncated" for f in ev.findings)
    assert ev.bounded is None


def test_json_is_utf8_and_a_lone_surrogate_falls_back_to_escapes() -> None:
    traj = Trajectory("a" * 32, "otlp", "complete", [], task="caf\u00e9 \u6771\u4eac")
    ev = Evaluation(traj)
    assert "caf\u00e9 \u6771\u4eac" in ev.to_json_text()  # 2 and 3 bytes, not 6 each
    traj.task = "bad \ud800 half"
    text = ev.to_json_text()
    text.encode()  # storable as UTF-8
    assert json.loads(text)["input"] == "bad \ud800 half"


def test_bound_leaves_small_values_alone() -> None:
    step = Step(0, "b" * 16, None, "tool", "t", tool_name="t", arguments={"q": "x" * 10})
    ev = Evaluation(Trajectory("a" * 32, "otlp", "complete", [step]))
    bound(ev, TrajectoryConfig())
    assert step.arguments == {"q": "x" * 10} and not step.cut and not ev.findings


def _one_value(size: int) -> tuple[Evaluation, Step]:
    """An evaluation whose one tool step's arguments encode to ``size`` bytes of JSON."""
    args = {"q": ""}
    args["q"] = "x" * (size - len(json.dumps(args)))
    step = Step(0, "b" * 16, None, "tool", "t", tool_name="t", arguments=args)
    return Evaluation(Trajectory("a" * 32, "otlp", "complete", [step])), step


def test_values_are_measured_one_by_one_only_when_the_whole_is_over_the_value_bound(
        monkeypatch: Any) -> None:
    """A value's JSON is part of the object's: an object within ``max_value_bytes`` has no
    value over it, and nothing is encoded but the object. Past it, the values are measured
    together, then each when together they are over; one at the bound is kept (and the
    object's text stands), one byte more is cut."""
    from otel_eval.evaluate import bounds
    encoded: list[Any] = []
    measure = bounds._encoded
    monkeypatch.setattr(bounds, "_encoded", lambda v: encoded.append(v) or measure(v))
    cfg = TrajectoryConfig(max_value_bytes=4096)
    small, step = _one_value(300)
    bound(small, cfg)
    assert encoded == [] and not step.cut and small.encoded is not None
    at_bound, step = _one_value(4096)
    bound(at_bound, cfg)
    assert encoded == [[step.arguments], step.arguments]
    assert not step.cut and not at_bound.findings
    assert at_bound.to_json_text() == json_text(at_bound.to_json())
    over, step = _one_value(4097)
    bound(over, cfg)
    assert step.cut == {"arguments": 4097} and len(json.dumps(step.arguments)) <= 4096
    assert [f.kind for f in over.findings] == ["result_truncated"]


def test_values_that_fit_together_are_measured_in_one_encoding(monkeypatch: Any) -> None:
    """An object over ``max_value_bytes`` whose values are small (its size is in the tool
    results, which are not measured: a tau-bench run's): the values are encoded together
    once, as a list, whose text holds each value's; one by one only when that list is over
    (then each is measured, and only the one over is cut)."""
    from otel_eval.evaluate import bounds
    encoded: list[Any] = []
    measure = bounds._encoded
    monkeypatch.setattr(bounds, "_encoded", lambda v: encoded.append(v) or measure(v))
    cfg = TrajectoryConfig(max_value_bytes=4096)
    steps = [Step(i, f"{i + 1:016x}", None, "tool", "t", tool_name="t", arguments={"q": i},
                  result="r" * 1000) for i in range(10)]
    small = Evaluation(Trajectory("a" * 32, "otlp", "complete", steps))
    bound(small, cfg)
    assert len(encoded) == 1 and not small.findings and small.encoded is not None
    assert small.to_json_text() == json_text(small.to_json())
    encoded.clear()
    big, step = _one_value(4097)
    big.trajectory.steps += steps
    bound(big, cfg)
    assert len(encoded[0]) == 1 + len(steps)  # together, then each
    assert all(any(v is s.arguments for v in encoded[1:]) for s in steps)
    assert step.cut == {"arguments": 4097} and not any(s.cut for s in steps)


def test_the_calls_of_a_step_that_is_no_llm_step_are_measured_though_not_stored() -> None:
    """Only an LLM step's tool calls are in the object: another step's (an LLM span nested
    in an LLM span keeps its own, ``trajectory.links``) are measured one by one even when
    the object fits ``max_value_bytes``, as before."""
    big = ToolCall("t", {"q": "x" * 5000})
    size = len(json.dumps(big.arguments))
    step = Step(0, "b" * 16, None, "other", "inner", tool_calls=[big])
    ev = Evaluation(Trajectory("a" * 32, "otlp", "complete", [step]))
    bound(ev, TrajectoryConfig(max_value_bytes=4096))
    assert step.cut == {"tool_calls": size}
    assert isinstance(big.arguments, str) and len(big.arguments) <= 4096
    assert [f.attributes["values"] for f in ev.findings] == [1]


def _calls_trace(spans: int, calls: int) -> Trace:
    """``spans`` LLM spans, each asking for ``calls`` tool calls in its output messages, and no
    tool span: every call is rebuilt as a step (an instrumentation that records LLM calls
    only)."""
    out = []
    for n in range(spans):
        parts = [{"type": "tool_call", "id": f"c{n}-{i}", "name": "lookup",
                  "arguments": {"i": i}} for i in range(calls)]
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                 "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": parts}])}
        out.append(Span("ab" * 16, f"{n + 1:016x}", None, "chat", n * 10, n * 10 + 5,
                        attributes=attrs))
    return Trace("ab" * 16, out, "complete")


def test_rebuilt_tool_calls_are_capped_per_trace_and_counted() -> None:
    """One LLM output's tool calls were rebuilt into steps without limit (``max_rebuilt_steps``
    bounds code actions only): a 64 MiB span made ~1.2M steps, ~70 s and ~3 GB. Past
    ``max_rebuilt_calls`` per trace a call is no step, counted and said, as the code-action
    cut."""
    config = dataclasses.replace(Config(), trajectory=TrajectoryConfig(max_rebuilt_calls=10))
    ev = Evaluator(config).evaluate(_calls_trace(3, 8))
    rebuilt = [s for s in ev.trajectory.steps if s.rebuilt]
    assert len(rebuilt) == 10  # not 24
    assert ev.trajectory.calls_over_limit == 14
    llm = ev.trajectory.llm_steps
    assert [c.outcome for c in llm[1].tool_calls] == ["rebuilt"] * 2 + [""] * 6  # not known
    attrs = _truncated(ev).attributes
    assert attrs["rebuilt_tool_calls"] == 14 and attrs["max_rebuilt_calls"] == 10
    assert ev.verdict is not None and ev.verdict.passed is not None


def test_the_default_cap_bounds_a_trace_of_calls() -> None:
    """Counted work, not time: spans asking for more calls than the default cap make the
    cap's number of steps (one output's calls are read up to ``MAX_OUTPUT_CALLS``:
    tests/trajectory/test_output_calls_bound.py)."""
    cap = TrajectoryConfig().max_rebuilt_calls
    spans = cap // MAX_OUTPUT_CALLS + 1
    trajectory = Evaluator(Config()).evaluate(_calls_trace(spans, MAX_OUTPUT_CALLS)).trajectory
    assert sum(1 for s in trajectory.steps if s.rebuilt) == cap
    assert trajectory.calls_over_limit == spans * MAX_OUTPUT_CALLS - cap


def test_a_task_id_longer_than_an_id_is_none_and_the_result_stays_bounded(tmp_path: Any) -> None:
    """The task id was read whole from span content: a 200,000-character value of
    ``otel_eval.task.id`` (a prompt put where the id goes) made a stored result of 200 kB
    under a 64 KiB ``max_result_bytes``, and was stored again in its own column. A value
    longer than ``MAX_TASK_ID_CHARS`` is no task id (as a conversation id), and a references
    file naming such an id is refused, naming it: no run could ever find it."""
    import pytest

    from otel_eval.evaluate.config import MAX_TASK_ID_CHARS
    from otel_eval.evaluate.detectors import load_references
    from otel_eval.evaluate.detectors.references import ReferencesError

    tid = "ab" * 16
    config = dataclasses.replace(Config(), trajectory=dataclasses.replace(
        Config().trajectory, max_result_bytes=64 * 1024))
    for task, expected in (("t" * MAX_TASK_ID_CHARS, "t" * MAX_TASK_ID_CHARS),
                           ("q" * 200_000, None)):
        root = Span(tid, "1" * 16, None, "invoke_agent", 1, 100, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a",
            "otel_eval.task.id": task})
        ev = Evaluator(config).evaluate(Trace(tid, [root], "complete"))
        assert ev is not None and ev.trajectory.task_id == expected
        body = ev.bounded if ev.bounded is not None else ev.to_json()
        assert len(json_text(body).encode()) <= 64 * 1024
    path = tmp_path / "refs.jsonl"
    path.write_text(json.dumps({"task_id": "q" * (MAX_TASK_ID_CHARS + 1), "calls": []}) + "\n")
    with pytest.raises(ReferencesError, match=r"refs.jsonl:1: task_id longer than 256"):
        load_references(path)


def test_a_long_service_name_is_cut_and_the_result_stays_bounded() -> None:
    """``service.name`` was read whole from the resource (content of whoever reaches the
    port), so a 200,000-character one made a stored result of 200 kB under a 64 KiB
    ``max_result_bytes`` (and was stored again in its own column). It is cut to
    ``MAX_SERVICE_CHARS``, as the session key and the sessions' queries cut it."""
    from otel_eval.store.sessions import MAX_SERVICE_CHARS

    tid = "ab" * 16
    config = dataclasses.replace(Config(), trajectory=dataclasses.replace(
        Config().trajectory, max_result_bytes=64 * 1024))
    for service, expected in (("s" * MAX_SERVICE_CHARS, "s" * MAX_SERVICE_CHARS),
                              ("q" * 200_000, "q" * MAX_SERVICE_CHARS)):
        root = Span(tid, "1" * 16, None, "invoke_agent", 1, 100, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"},
            resource={"service.name": service})
        ev = Evaluator(config).evaluate(Trace(tid, [root], "complete"))
        assert ev is not None and ev.trajectory.service == expected
        body = ev.bounded if ev.bounded is not None else ev.to_json()
        assert len(json_text(body).encode()) <= 64 * 1024
