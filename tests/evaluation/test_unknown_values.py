"""A value the instrumentation did not record is unknown, never a reason for a finding.

Each run of the conformance corpus that gets no finding as recorded is evaluated again with one
span's tool name taken away (removed, or recorded empty), or the run's output (its root span's)
not recorded, the way another version of the same instrumentation might send it, or one tool
span's call id replaced by one no LLM call carries (a framework's own ids), or one tool span's
kind a value no convention defines (a later version's new kind). No new finding may appear.
(An output recorded empty is no unknown: ``no_output`` is right then.)

Found by mutating every attribute of the corpus (2026-12-05): before, a tool step whose tool no
attribute named was judged by its span's name (``weather_agent.get_weather``, ``ai.toolCall``)
and called a tool ``which was not offered`` (``tool_call/selection``, an error), and a run whose
last LLM call asked for tools with no text, and whose own output was not recorded, was said to
have ``produced no final output`` (``non_termination/no_output``), and a tool span whose call
id matched no requested call left that call to be rebuilt beside it: the same tool called
twice with the same arguments (``loop/repeated_call``); so did a tool span of unknown kind,
when the tool spans around it carried their input as text (LangGraph's ``"Paris"``): joined by
name before those inputs were read as arguments, every later step took the call before its own.

Every run of the corpus is evaluated again with one span's kind (its convention's marker) a
value no convention defines. Before, a rule that concludes from the absence of a step drew its
conclusion over that span: when it was the call that succeeded after a tool error (or the LLM
call that asked for it), nothing succeeded after, and the run ``gave_up`` (6 of 2,322); when it
was the LLM call that answered, the one before it ended with calls that never ran
(``pending_tool_calls``, 1); when it was one of a loop's calls, the model's repeated outputs
before it were no longer that loop seen from the model's side (``stagnation``, 10). And the
runs that recovered from a tool error by a call known only from an LLM's reply (no span of its
own: Haystack, CrewAI under OpenLLMetry) are evaluated again with that reply, or a requested
call's name in it, not recorded: before, nothing succeeded after the failure (``gave_up``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from functools import cache

import pytest
from conformance import corpus
from cost import work

from otel_eval.app.config import Config
from otel_eval.base.model import Trace
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.trajectory import build_trajectory

# The attributes the conventions read a tool step's tool from, and a run's output from.
TOOL_NAME_KEYS = ("gen_ai.tool.name", "tool.name", "traceloop.entity.name", "ai.toolCall.name")
# The flattened keys of a requested call's name: Traceloop's and OpenInference's LLM spans.
REQUESTED_NAME_SUFFIXES = (".tool_calls.0.name", ".tool_call.function.name")
CALL_ID_KEYS = ("gen_ai.tool.call.id", "tool_call.id", "ai.toolCall.id")
# A tool span's kind, by convention: the values that make it one.
TOOL_KINDS = {"openinference.span.kind": "TOOL", "traceloop.span.kind": "tool",
              "gen_ai.operation.name": "execute_tool"}
# Every convention's marker: the attribute whose value says a span's kind.
MARKER_KEYS = ("openinference.span.kind", "traceloop.span.kind", "gen_ai.operation.name",
               "ai.operationId", "mlflow.spanType", "langfuse.observation.type")
OUTPUT_KEYS = ("output.value", "gen_ai.output.messages", "traceloop.entity.output",
               "ai.response.text", "mlflow.spanOutputs")


@cache
def _evaluator() -> Evaluator:
    return Evaluator(Config())


def _kinds(trace: Trace) -> set[tuple[str, str]]:
    ev = _evaluator().evaluate(trace)
    assert ev is not None
    return {(f.detector, f.kind) for f in ev.findings}


@cache
def _clean_runs() -> list[Trace]:
    """The corpus's traces that are runs and get no finding as recorded (but the cells
    ``known_wrong`` lists: a finding missed there is no baseline)."""
    logging.disable(logging.WARNING)
    try:
        traces = work.decode_recordings(work.conformance_requests(corpus.known_wrong()))
        return [t for t in traces
                if _evaluator().evaluate(t) is not None and not _kinds(t)]
    finally:
        logging.disable(logging.NOTSET)


def _tool_names_unrecorded() -> Iterator[tuple[str, Trace]]:
    """Each clean run with one span's tool name, or the name of a call an LLM span asked
    for, removed or recorded empty."""
    for trace in _clean_runs():
        for i, sp in enumerate(trace.spans):
            for key in list(sp.attributes):
                if key in TOOL_NAME_KEYS or key.endswith(REQUESTED_NAME_SUFFIXES):
                    for label, value in (("removed", None), ("empty", "")):
                        yield f"{trace.trace_id[:8]} {sp.name!r} {key} {label}", \
                            work.with_attribute(trace, i, key, value)


def _tool_names_not_text() -> Iterator[tuple[str, Trace]]:
    """Each clean run with one span's tool name, the name of a call an LLM span asked for
    or of a tool it was offered (OpenLLMetry's ``llm.request.functions.N.name``), or a
    smolagents managed agent's name, a number or a map (an OTLP kvlist): no name any
    convention records, not understood. Before, its JSON text (``7``, ``{"v":
    "get_weather"}``) was the tool's name, a tool ``which was not offered``
    (``tool_call/selection``, an error), or the agent's whose offers a step was judged by."""
    for trace in _clean_runs():
        for i, sp in enumerate(trace.spans):
            for key, value in list(sp.attributes.items()):
                if key in TOOL_NAME_KEYS or key.endswith(
                        (*REQUESTED_NAME_SUFFIXES, ".function_call.name",
                         "managed_agents.0.name", "request.functions.0.name")):
                    for label, other in (("a number", 7), ("a map", {"v": value})):
                        yield f"{trace.trace_id[:8]} {sp.name!r} {key} {label}", \
                            work.with_attribute(trace, i, key, other)


def _outputs_unrecorded() -> Iterator[tuple[str, Trace]]:
    """Each clean run with its root span's output removed."""
    for trace in _clean_runs():
        for i, sp in enumerate(trace.spans):
            if sp.parent_span_id is None:
                for key in OUTPUT_KEYS:
                    if key in sp.attributes:
                        yield f"{trace.trace_id[:8]} {sp.name!r} {key}", \
                            work.with_attribute(trace, i, key, None)


def _call_ids_of_their_own() -> Iterator[tuple[str, Trace]]:
    """Each clean run with one tool span's call id one no LLM call carries."""
    for trace in _clean_runs():
        for i, sp in enumerate(trace.spans):
            for key in CALL_ID_KEYS:
                if key in sp.attributes:
                    yield f"{trace.trace_id[:8]} {sp.name!r} {key}", \
                        work.with_attribute(trace, i, key, f"framework-run-{i}")


def _tool_kinds_unrecognised() -> Iterator[tuple[str, Trace]]:
    """Each clean run with one tool span's kind a value no convention defines."""
    for trace in _clean_runs():
        for i, sp in enumerate(trace.spans):
            for key, tool in TOOL_KINDS.items():
                if sp.attributes.get(key) == tool:
                    yield f"{trace.trace_id[:8]} {sp.name!r} {key}", \
                        work.with_attribute(trace, i, key, "zz_unrecognised")


def test_the_corpus_has_clean_runs_to_take_values_from() -> None:
    assert len(_clean_runs()) >= 50
    assert len(list(_tool_names_unrecorded())) >= 100
    assert len(list(_outputs_unrecorded())) >= 20
    assert len(list(_call_ids_of_their_own())) >= 20
    assert len(list(_tool_kinds_unrecognised())) >= 50


@pytest.mark.parametrize("mutated", [_tool_names_unrecorded, _tool_names_not_text,
                                     _outputs_unrecorded, _call_ids_of_their_own,
                                     _tool_kinds_unrecognised],
                         ids=["tool names", "tool names not text", "outputs", "call ids",
                              "tool kinds"])
def test_an_unrecorded_value_adds_no_finding(
        mutated: Callable[[], Iterator[tuple[str, Trace]]]) -> None:
    found = [f"{what}: {sorted(kinds)}" for what, trace in mutated()
             if (kinds := _kinds(trace))]
    assert not found, f"{len(found)} new finding(s):\n" + "\n".join(found[:20])


def test_every_kind_the_corpus_records_is_one_its_convention_defines() -> None:
    """A recorded marker value read as undefined would hide what the steps after a failure
    did (Strands' ``execute_event_loop_cycle`` is its wrapper of a cycle): none is."""
    undefined = [s.unknown["kind"] for t in work.decode_recordings(work.conformance_requests())
                 for s in build_trajectory(t, Config().trajectory).steps
                 if "kind" in s.unknown]
    assert not undefined


def test_a_step_of_unknown_kind_is_never_the_absence_a_finding_concludes_from() -> None:
    """Every marker of every run (clean or not) changed to a value no convention defines: no
    finding appears but one: a loop's repeated call whose arguments the changed LLM span held
    is a call of unknown arguments, so the repeats around it are told as ``no_progress`` (the
    same call, the same result, a read-only call between), still a repeat already found."""
    logging.disable(logging.WARNING)
    try:
        traces = work.decode_recordings(work.conformance_requests())
        found, changed = [], 0
        for trace in traces:
            before = _evaluator().evaluate(trace)
            if before is None:
                continue
            kinds = {(f.detector, f.kind) for f in before.findings}
            looped = {i for f in before.findings if f.detector == "loop" for i in f.step_indexes}
            for i, sp in enumerate(trace.spans):
                for key in MARKER_KEYS:
                    if key not in sp.attributes:
                        continue
                    changed += 1
                    after = _evaluator().evaluate(
                        work.with_attribute(trace, i, key, "zz_unrecognised"))
                    assert after is not None
                    found += [f"{trace.trace_id[:8]} {sp.name!r} {key}: {f.detector}/{f.kind}"
                              for f in after.findings if (f.detector, f.kind) not in kinds
                              and not (f.kind == "no_progress"
                                       and looped.issuperset(f.step_indexes))]
    finally:
        logging.disable(logging.NOTSET)
    assert changed >= 2000
    assert not found, f"{len(found)} new finding(s):\n" + "\n".join(found[:20])


# Where an LLM span records its reply (the calls it asked for), by convention.
REPLY_KEYS = ("gen_ai.output.messages", "output.value", "gen_ai.completion.0.content")


def test_a_reply_not_recorded_after_a_tool_error_is_no_gave_up() -> None:
    """Every run that recovered, with one LLM span's reply, or the name of a call it asked
    for, removed (or recorded empty): the run never gives up over what it cannot see."""
    logging.disable(logging.WARNING)
    try:
        found, changed = [], 0
        for trace in work.decode_recordings(work.conformance_requests()):
            before = _evaluator().evaluate(trace)
            if before is None or not any(f.kind == "recovered" for f in before.findings):
                continue
            kinds = {f.kind for f in before.findings if f.detector == "recovery"}
            for i, sp in enumerate(trace.spans):
                for key in sp.attributes:
                    if not (key in REPLY_KEYS or key.endswith(REQUESTED_NAME_SUFFIXES)):
                        continue
                    for value in (None, ""):
                        changed += 1
                        after = _evaluator().evaluate(work.with_attribute(trace, i, key, value))
                        assert after is not None
                        found += [f"{trace.trace_id[:8]} {sp.name!r} {key} {value!r}: {f.kind}"
                                  for f in after.findings if f.detector == "recovery"
                                  and f.kind not in kinds]
    finally:
        logging.disable(logging.NOTSET)
    assert changed >= 50
    assert not found, f"{len(found)} new finding(s):\n" + "\n".join(found[:20])
