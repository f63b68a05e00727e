import dataclasses

import pytest
from detector_factory import kinds, llm, tool, traj

from otel_eval.base.results import NOT_ENDED_KINDS, NOTE_KINDS
from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.detectors import non_termination
from otel_eval.evaluate.detectors.calls import Context
from otel_eval.evaluate.detectors.config import DetectorsConfig


def _failed(error: str) -> Step:
    return dataclasses.replace(llm(None, input_tokens=0, output_tokens=0), status="error",
                               error=error)


CASES: list[tuple[str, Trajectory, list[str]]] = [
    ("a finished run", traj(llm("x"), tool("t"), llm("the answer")), []),
    ("root never ended", traj(llm("x"), status="incomplete"), ["non_termination/incomplete"]),
    ("cut at max duration", traj(llm("x"), status="truncated"), ["non_termination/truncated"]),
    ("last call stopped for length",
     traj(llm("x"), llm("partial", finish="length")), ["non_termination/length_stop"]),
    ("anthropic max_tokens",
     traj(llm("partial", finish="max_tokens")), ["non_termination/length_stop"]),
    ("pending tool calls, no final answer",
     traj(llm("", calls=[("search", {"q": 1})], finish="tool_calls"), output=None),
     ["non_termination/pending_tool_calls"]),
    ("tool calls that ran are not pending",
     traj(llm("", calls=[("search", {})]), tool("search"), llm("done")), []),
    ("an empty final output", traj(tool("t"), output=""), ["non_termination/no_output"]),
    ("output not recorded is unknown, not missing", traj(tool("t"), output=None), []),
    # what the run answered when no span recorded its result, from its last reply, is the
    # builder's (tests/trajectory/test_trajectory_readable.py: a reply that said nothing)
    ("an empty last answer, as the builder reads it", traj(tool("t"), llm(""), output=""),
     ["non_termination/no_output"]),
    # the run's recorded output is its answer, whatever its last call said (a code agent's
    # last reply is the code that called final_answer(""))
    ("an empty recorded output beside a last reply of code",
     traj(tool("t"), llm('<code>\nfinal_answer("")\n</code>'), output=""),
     ["non_termination/no_output"]),
    ("smolagents max steps",
     traj(llm("x"), output="Reached max steps."), ["non_termination/halted"]),
    ("LangGraph recursion limit on the root error",
     traj(llm("x"), output=None,
          root_error="GraphRecursionError: Recursion limit of 25 reached without hitting a "
                     "stop condition"),
     ["non_termination/halted"]),
    ("LangChain AgentExecutor",
     traj(llm("x"), output="Agent stopped due to iteration limit or time limit."),
     ["non_termination/halted"]),
    ("OpenAI Agents SDK",
     traj(tool("t"), output=None, root_error="MaxTurnsExceeded: Max turns (10) exceeded"),
     ["non_termination/halted"]),
    # the conformance corpus' max_turns recordings: each framework's own words at its cap
    ("BeeAI at max_iterations",
     traj(tool("t"), output=None, root_error="beeai_framework.agents.errors.AgentError: Agent "
                                            "was not able to resolve the task in 4 iterations."),
     ["non_termination/halted"]),
    ("Google ADK at max_llm_calls",
     traj(tool("t"), output=None, root_error="LlmCallsLimitExceededError: Max number of llm "
                                            "calls limit of `3` exceeded"),
     ["non_termination/halted"]),
    ("Microsoft Agent Framework at max_iterations",
     traj(tool("t"), output="Function invocation limit reached before a final answer could be "
                            "produced."), ["non_termination/halted"]),
    ("LangGraph's create_react_agent a step before its recursion limit",
     traj(tool("t"), output='{"messages": [{"type": "ai", "data": {"content": "Sorry, need '
                            'more steps to process this request."}}]}'),
     ["non_termination/halted"]),
    ("a LlamaIndex workflow at max_iterations",
     traj(tool("t"), output=None, root_error="WorkflowRuntimeError: Max iterations of 6 "
                                            "reached! Either something went wrong, or ..."),
     ["non_termination/halted"]),
    ("Haystack's Agent at max_agent_steps says so in its output",
     traj(tool("t"), output='{"messages": [], "step_count": 3, "tool_call_counts": {"get_weat'
                            'her": 3}, "exit_reason": "max_agent_steps", "last_message": "x"}'),
     ["non_termination/halted"]),
    ("smolagents asks for a last answer at max_steps",
     traj(tool("t"), dataclasses.replace(llm("sunny"), input_text=(
         "An agent tried to answer a user query but it got stuck and failed to do so. You are "
         "tasked with providing an answer instead. Here is the agent's memory:" + "x" * 5000))),
     ["non_termination/halted"]),
    ("CrewAI asks for a last answer at max_iter",
     traj(tool("t"), dataclasses.replace(llm("sunny"), input_text="x" * 5000 + (
         "Now it's time you MUST give your absolute best final answer. You'll ignore all "
         "previous instructions, stop using any tools, and just return your absolute BEST "
         "Final answer."))), ["non_termination/halted"]),
    ("the forced answer's words in an earlier call's input are no halt",
     traj(dataclasses.replace(llm("x"), input_text="Now it's time you MUST give your absolute "
                                                   "best final answer"), tool("t"), llm("done")),
     []),
    ("error on the root", traj(llm("x"), root_error="ValueError: boom"),
     ["non_termination/root_error"]),
    # the API answered the last call with an error (a context window exceeded): whatever the
    # framework then did (OpenAI Agents' wrapper span ends OK, Strands and DSPy raise their
    # own error), the model never answered after it
    ("the last LLM call failed",
     traj(llm("", calls=[("w", {})]), tool("w"), _failed("Error code: 400 - context_length"),
          output=None), ["non_termination/llm_error"]),
    ("the last LLM call failed, the framework answered anyway",
     traj(tool("w"), _failed("429 rate limited"), output="Sorry, try again later."),
     ["non_termination/llm_error"]),
    ("a failed call the run retried is no end",
     traj(tool("w"), _failed("429 rate limited"), llm("sunny")), []),
    # the AI SDK under OpenInference's span processor: the root ERROR with the first failed
    # call's message, though the run retried, succeeded and answered
    ("the root repeats the error of a call the run recovered from",
     traj(tool("w", {"c": "X"}, None, error="unknown city: X"), tool("w", {"c": "P"}),
          llm("sunny"), root_error="unknown city: X"), []),
    ("the same error, nothing succeeded after it",
     traj(tool("w", {"c": "P"}), tool("w", {"c": "X"}, None, error="unknown city: X"),
          llm("sorry"), root_error="unknown city: X"), ["non_termination/root_error"]),
    ("recovered from another error",
     traj(tool("w", {"c": "X"}, None, error="unknown city: X"), tool("w", {"c": "P"}),
          llm("sunny"), root_error="ValueError: boom"), ["non_termination/root_error"]),
    ("the failed step's kind unknown (it may have been the call recovered from)",
     traj(dataclasses.replace(tool("w", {"c": "X"}, None, error="unknown city: X"),
                              kind="other", unknown={"kind": "marker ? not defined"}),
          tool("w", {"c": "P"}), llm("sunny"), root_error="unknown city: X"), []),
    ("recovered, and no answer recorded",
     traj(tool("w", {"c": "X"}, None, error="unknown city: X"), tool("w", {"c": "P"}),
          output=None, root_error="unknown city: X"), ["non_termination/root_error"]),
    # the AI SDK with recordOutputs: false: no answer's text recorded, but the model's last
    # call after the recovered one stopped on its own (its answer is unknown, not missing)
    ("recovered, the answer's text unrecorded, the last call stopped",
     traj(tool("w", {"c": "X"}, None, error="unknown city: X"), tool("w", {"c": "P"}),
          llm(None), output=None, root_error="unknown city: X"), []),
    ("recovered, the answer unrecorded, the last call asked for a tool",
     traj(tool("w", {"c": "X"}, None, error="unknown city: X"), tool("w", {"c": "P"}),
          llm(None, calls=[("w", {})], finish="tool_calls"), output=None,
          root_error="unknown city: X"),
     ["non_termination/pending_tool_calls", "non_termination/root_error"]),
    ("recovered, the answer unrecorded, the last call before the recovery",
     traj(tool("w", {"c": "X"}, None, error="unknown city: X"), llm(None),
          tool("w", {"c": "P"}), output=None, root_error="unknown city: X"),
     ["non_termination/root_error"]),
    ("recovered, and an empty answer recorded",
     traj(tool("w", {"c": "X"}, None, error="unknown city: X"), tool("w", {"c": "P"}),
          llm(""), output="", root_error="unknown city: X"),
     ["non_termination/root_error", "non_termination/no_output"]),
    # an answer that speaks of a maximum number of turns is no halt; a framework saying it
    # reached one is (Claude Code's CLI: "Reached maximum number of turns (1)")
    ("an answer about a maximum number of rounds",
     traj(llm("x"), output="The maximum number of rounds in a title fight is 12."), []),
    ("a CLI at its turn cap",
     traj(tool("t"), output=None, root_error="Error: Reached maximum number of turns (1)"),
     ["non_termination/halted"]),
    ("a maximum number of iterations exceeded",
     traj(tool("t"), output=None, root_error="Maximum number of iterations (8) exceeded"),
     ["non_termination/halted"]),
    ("halt text inside a tool result is not a halt",
     traj(tool("read_file", {}, "docs: raises when max iterations reached"), llm("done")), []),
]


@pytest.mark.parametrize(("trajectory", "expected"), [(t, e) for _, t, e in CASES],
                         ids=[c[0] for c in CASES])
def test_non_termination_cases(trajectory: Trajectory, expected: list[str]) -> None:
    found = non_termination.detect(trajectory, DetectorsConfig(), Context())
    assert kinds(found) == expected


def test_severities() -> None:
    found = non_termination.detect(traj(llm("x"), status="incomplete", output=None),
                                   DetectorsConfig(), Context())
    assert [(f.kind, f.severity) for f in found] == [("incomplete", "error")]
    found = non_termination.detect(traj(tool("t"), output=""), DetectorsConfig(), Context())
    assert [(f.kind, f.severity) for f in found] == [("no_output", "warning")]


def test_a_run_cut_while_it_went_on_is_not_judged_by_its_last_llm_call() -> None:
    """A trace released ``truncated`` was cut while its run went on: its last LLM call here
    is not the run's last, so a failure of it (``llm_error``), a stop for length or calls
    not run yet are no conclusion about how the run ended (each an error before, beside
    the ``truncated`` warning: a long run cut while the model retried was judged failed)."""
    failed = dataclasses.replace(llm(None), status="error", error="rate limited")
    for last in (failed, llm("", finish="length"), llm(None, calls=[("search", {"q": 1})])):
        t = traj(tool("a"), last, status="truncated", output=None)
        found = non_termination.detect(t, DetectorsConfig(), Context())
        assert kinds(found) == ["non_termination/truncated"], last


def test_a_run_that_ended_with_spans_cut_is_no_run_that_did_not_end() -> None:
    """A run released ``truncated`` because spans of it were cut (past
    ``assembly.max_spans_per_trace``, or refused for a share) while its root ended: the run
    ended. Its ``non_termination/truncated`` counted it among the runs that did not end
    (``NOT_ENDED_KINDS``: the non-termination metric and alert) for every run over the span
    limit, gave it p_success 0 and failed ``--fail-on non_termination``. Its finding is
    the note ``evaluation/spans_cut`` (info)."""
    t = traj(llm("x"), status="truncated")
    t.steps[0].end_ns = 5_000_000  # the root (no parent) ended
    [f] = non_termination.detect(t, DetectorsConfig(), Context())
    assert (f.detector, f.kind, f.severity) == ("evaluation", "spans_cut", "info")
    assert (f.detector, f.kind) in NOTE_KINDS
    t.steps[0].end_ns = 0  # cut while it went on (its root has not ended)
    [f] = non_termination.detect(t, DetectorsConfig(), Context())
    assert f.kind == "truncated" and f.kind in NOT_ENDED_KINDS


def test_a_called_run_that_ended_past_the_span_limit_is_no_run_that_did_not_end() -> None:
    """Assembly releases a run ``truncated`` with reason ``trace_too_large`` only when it
    ended (it would be ``complete``, spans past ``assembly.max_spans_per_trace`` unread). An
    agent called from an upstream service (its entry span's parent remote: an API behind a
    traced gateway) so released got ``non_termination/truncated``, counted among the runs
    that did not end (the non-termination metric and alert) for every such run over the
    limit: only a root with no parent was read as ended. The reason says the run ended."""
    t = traj(llm("x"), status="truncated")
    t.steps[0].parent_span_id, t.steps[0].end_ns = "f" * 16, 5_000_000  # called, and ended
    t.release_reason = "trace_too_large"
    [f] = non_termination.detect(t, DetectorsConfig(), Context())
    assert (f.detector, f.kind, f.severity) == ("evaluation", "spans_cut", "info")
    t.release_reason = "max_duration"  # cut while its caller's run went on: not the end
    assert kinds(non_termination.detect(t, DetectorsConfig(), Context())) == [
        "non_termination/truncated"]


@pytest.mark.parametrize("reason", ["overflow", "pressure", "service_share"])
def test_a_run_otel_eval_cut_while_it_went_on_is_a_note(reason: str) -> None:
    """A run otel-eval pushed out for room or missing spans refused for a share, its root not
    ended, was ``non_termination/truncated`` (counted as not ended: the non-termination
    alert paged for otel-eval's own lack of room). Now the note ``evaluation/run_cut`` with
    its reason; a run cut at its maximum duration is still ``truncated``."""
    t = traj(tool("a"), llm(None), status="truncated", output=None)
    t.release_reason = reason
    [f] = non_termination.detect(t, DetectorsConfig(), Context())
    assert (f.detector, f.kind, f.severity) == ("evaluation", "run_cut", "info")
    assert (f.detector, f.kind) in NOTE_KINDS and f.attributes == {"release_reason": reason}
    t.release_reason = "max_duration"
    assert kinds(non_termination.detect(t, DetectorsConfig(), Context())) == [
        "non_termination/truncated"]
