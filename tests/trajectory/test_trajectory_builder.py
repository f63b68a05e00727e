"""Tree order, nodes, rebuilt tool calls and bad input for ``build_trajectory``."""

from __future__ import annotations

import json

import pytest
from trajectory_factory import TRACE_ID, sid, span, trace

from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.trajectory import build_trajectory

CFG = TrajectoryConfig()
AGENT = {"gen_ai.operation.name": "invoke_agent"}
CHAT = {"gen_ai.operation.name": "chat"}


def tool(name: str, args: str = "{}") -> dict[str, str]:
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
            "gen_ai.tool.call.arguments": args}


def chat_calling(*calls: tuple[str, object]) -> dict[str, str]:
    parts = [{"type": "tool_call", "id": f"c{i}", "name": n, "arguments": a}
             for i, (n, a) in enumerate(calls)]
    return {**CHAT, "gen_ai.output.messages": json.dumps(
        [{"role": "assistant", "parts": parts, "finish_reason": "tool_call"}])}


def names(t: Trajectory) -> list[str]:
    return [s.name for s in t.steps]


def test_tree_order_is_depth_first_by_start_time_whatever_the_arrival_order() -> None:
    t = build_trajectory(trace(
        span("b2", "b", 25), span("a", "root", 10), span("root", None, 0, end=100),
        span("b", "root", 20), span("a1", "a", 11), span("b1", "b", 21),
    ), CFG)
    assert names(t) == ["root", "a", "a1", "b", "b1", "b2"]
    assert [s.depth for s in t.steps] == [0, 1, 2, 1, 2, 2]
    assert [s.index for s in t.steps] == list(range(6))
    assert t.steps[1].parent_span_id == sid("root")


def test_siblings_starting_together_are_ordered_by_content_never_by_arrival() -> None:
    """JavaScript SDKs write whole milliseconds: a tool span that starts and ends in the
    millisecond its model call starts ran before that call (it ends first); two siblings
    with the same start and end go by span id; a sibling not ended goes after those that
    did. Every arrival order gives that one order."""
    spans = [span("root", None, 0, end=100), span("llm", "root", 10, end=40),
             span("tool", "root", 10, end=10), span("x", "root", 50, end=60,
                                                    span_id="b" * 16),
             span("y", "root", 50, end=60, span_id="a" * 16), span("open", "root", 50, end=0),
             span("under-x", "x", 50, end=55)]
    for order in (spans, spans[::-1], spans[2:] + spans[:2], spans[4:] + spans[:4]):
        t = build_trajectory(trace(*order), CFG)
        assert names(t) == ["root", "tool", "llm", "y", "x", "under-x", "open"]


def test_roots_starting_together_are_chosen_by_content_never_by_arrival() -> None:
    """Two spans with no parent and the same start: the longer is the root, then the lower
    span id, whichever came first."""
    spans = [span("r1", None, 0, end=50, span_id="c" * 16),
             span("r2", None, 0, end=50, span_id="d" * 16), span("r3", None, 0, end=20)]
    for order in (spans, spans[::-1]):
        t = build_trajectory(trace(*order), CFG)
        assert t.root_span_id == "c" * 16
        assert names(t) == ["r1", "r2", "r3"]


def test_a_repeated_span_id_keeps_the_most_complete_copy_whatever_came_first() -> None:
    """Two copies of one span id: the ended one, else the one with more attributes, else one
    chosen by content alone, in either arrival order."""
    root = span("root", None, 0, end=100)
    ended = span("call", "root", 10, tool("ended"), end=20)
    open_ = span("call", "root", 10, {**tool("open"), "x": 1}, end=0)
    fuller = span("call", "root", 10, {**tool("fuller"), "x": 1}, end=20)
    one, other = (span("call", "root", 10, tool(n), end=20) for n in ("one", "other"))
    for first, second, kept in ((ended, open_, "ended"), (ended, fuller, "fuller")):
        for order in ((root, first, second), (root, second, first)):
            t = build_trajectory(trace(*order), CFG)
            assert [s.tool_name for s in t.tool_steps] == [kept]
            assert t.span_count == 2
    chosen = {build_trajectory(trace(root, a, b), CFG).tool_steps[0].tool_name
              for a, b in ((one, other), (other, one))}
    assert len(chosen) == 1


def test_orphans_follow_the_root_tree_in_start_order_with_their_children() -> None:
    t = build_trajectory(trace(
        span("late-orphan", "missing-1", 50), span("root", None, 0),
        span("early-orphan", "missing-2", 5), span("child", "early-orphan", 6),
        span("kid", "root", 1),
    ), CFG)
    assert names(t) == ["root", "kid", "early-orphan", "child", "late-orphan"]
    assert [s.depth for s in t.steps] == [0, 1, 0, 1, 0]
    assert t.steps[2].parent_span_id == sid("missing-2")  # kept as received


def test_an_orphan_goes_where_it_ran_under_the_span_enclosing_it() -> None:
    """A span a collector dropped (a framework's loop-cycle span, a filtered HTTP span):
    its children ran inside the root, before the spans that started after them; they stay
    in that order, not after the whole run (its later steps taken for earlier ones)."""
    t = build_trajectory(trace(
        span("root", None, 0, end=100),
        span("first-call", "dropped-cycle", 10, end=20),  # the dropped cycle's children
        span("first-tool", "dropped-cycle", 21, end=30),
        span("cycle-2", "root", 40, end=60), span("second-call", "cycle-2", 41, end=50),
        span("outside", "dropped-other", 95, end=120),  # enclosed by no span: top level
    ), CFG)
    assert names(t) == ["root", "first-call", "first-tool", "cycle-2", "second-call",
                        "outside"]
    assert [s.depth for s in t.steps] == [0, 1, 1, 1, 2, 0]
    assert t.steps[1].parent_span_id == sid("dropped-cycle")  # kept as received


def test_parent_cycles_and_self_parents_are_kept_once() -> None:
    t = build_trajectory(trace(
        span("root", None, 0), span("x", "y", 5), span("y", "x", 6),
        span("self", "self", 3),
    ), CFG)
    assert sorted(names(t)) == ["root", "self", "x", "y"]
    assert names(t)[:2] == ["root", "self"]  # self-parent reads as an orphan


def test_duplicate_span_ids_keep_one_span_whatever_the_arrival_order() -> None:
    first = span("tool", "root", 1, tool("first"))
    dup = span("tool", "root", 2, tool("second"))  # as complete, ended later
    for order in ((first, dup), (dup, first)):
        t = build_trajectory(trace(span("root"), *order), CFG)
        assert [s.tool_name for s in t.tool_steps] == ["second"]
        assert t.span_count == 2


def test_nodes_are_the_enclosing_agent_names() -> None:
    t = build_trajectory(trace(
        span("root", None, 0, {**AGENT, "gen_ai.agent.name": "boss"}),
        span("llm", "root", 1, CHAT),
        span("sub", "root", 2, {"gen_ai.operation.name": "invoke_agent"}, span_id=None),
        span("sub-llm", "sub", 3, CHAT),
        span("after", "root", 9, tool("t")),
        span("orphan", "gone", 20, CHAT),
    ), CFG)
    nodes = {s.name: s.node for s in t.steps}
    assert nodes == {"root": "boss", "llm": "boss", "sub": "sub", "sub-llm": "sub",
                     "after": "boss", "orphan": None}
    assert t.agent == "boss"


def _agents(*named: tuple[str, int]) -> list[object]:
    """The OpenAI Agents SDK's shape: an ``Agent workflow`` wrapper (its default name, no
    work of its own) holding each agent that ran as a sibling, each with an LLM call."""
    out = [span("Agent workflow", None, 0, AGENT, end=100)]
    for name, start in named:
        out += [span(name, "Agent workflow", start, {**AGENT, "gen_ai.agent.name": name}),
                span(f"{name}-llm", name, start + 1, CHAT)]
    return out


def test_a_hand_off_runs_under_the_agent_the_run_began_with() -> None:
    """Under a wrapper named by a framework default, the first agent to start is the run's:
    the one the user ran, not the one it handed off to, whatever the arrival order."""
    t = build_trajectory(trace(*reversed(_agents(("triage_agent", 10), ("weather_agent", 30)))),
                         CFG)
    assert (t.agent, t.agent_source) == ("triage_agent", "span")


def test_a_named_wrapper_around_several_agents_is_the_run_s_agent() -> None:
    spans = _agents(("triage_agent", 10), ("weather_agent", 30))
    spans[0] = span("Agent workflow", None, 0, {**AGENT, "gen_ai.agent.name": "travel_desk"},
                    end=100)
    assert build_trajectory(trace(*spans), CFG).agent == "travel_desk"


def test_smolagents_managed_agent_named_from_the_manager() -> None:
    manager = {"openinference.span.kind": "AGENT",
               "smolagents.managed_agents.0.name": "search_agent",
               "smolagents.managed_agents.1.name": "code_agent"}
    managed = {"openinference.span.kind": "AGENT",
               "input.value": "You're a helpful agent named 'search_agent'."}
    t = build_trajectory(trace(
        span("CodeAgent.run", None, 0, manager), span("Step 1", "CodeAgent.run", 1,
                                                      {"openinference.span.kind": "CHAIN"}),
        span("ToolCallingAgent.run", "Step 1", 2, managed),
        span("LLM", "ToolCallingAgent.run", 3, {"openinference.span.kind": "LLM"}),
    ), CFG)
    # the manager, given no name=, is no node (as it is no agent), its managed agent is
    assert [s.node for s in t.steps] == [None, None, "search_agent", "search_agent"]


@pytest.mark.parametrize("default", ["CodeAgent.run", "invoke_agent", "Agent workflow"])
def test_the_steps_of_an_agent_named_by_a_framework_default_have_no_node(default: str) -> None:
    """A framework's default is no agent's name: the run's agent was None while its steps'
    node was the default, so the issues job grouped their critiques under a node called
    ``CodeAgent`` shared by every unnamed agent of every service; now their node is unknown
    too (a critique falls back to the run's agent, inferred or not)."""
    t = build_trajectory(trace(
        span(default, None, 0, {"openinference.span.kind": "AGENT"}),
        span("LLM", default, 1, {"openinference.span.kind": "LLM"}),
        span("search", default, 2, {"openinference.span.kind": "TOOL", "tool.name": "search"}),
    ), CFG)
    assert t.agent is None
    assert [s.node for s in t.steps] == [None, None, None]
    assert all(s["node"] is None for s in (step.to_json() for step in t.steps))


def test_tool_calls_only_in_llm_output_are_rebuilt_after_their_llm_step() -> None:
    t = build_trajectory(trace(
        span("root", None, 0, AGENT),
        span("llm1", "root", 1, chat_calling(("search", {"q": "a"}), ("open", "not json"))),
        span("llm2", "root", 5, CHAT),
    ), CFG)
    assert [(s.kind, s.name, s.rebuilt) for s in t.steps] == [
        ("agent", "root", False), ("llm", "llm1", False), ("tool", "search", True),
        ("tool", "open", True), ("llm", "llm2", False)]
    rebuilt = t.steps[2]
    assert rebuilt.span_id == sid("llm1") and rebuilt.arguments == {"q": "a"}
    assert rebuilt.tool_name == "search" and rebuilt.node == "root"
    assert t.steps[3].arguments == "not json"
    assert [s.index for s in t.steps] == list(range(5))
    assert rebuilt.to_json()["rebuilt"] is True


def test_rebuilt_tool_results_come_from_later_llm_inputs() -> None:
    genai_input = json.dumps([{"role": "tool", "parts": [
        {"type": "tool_call_response", "id": "c0", "response": "3 results"}]}])
    openai_input = json.dumps({"messages": [{"role": "tool", "tool_call_id": "c1",
                                             "content": "page text"}]})
    t = build_trajectory(trace(
        span("root", None, 0, AGENT),
        span("llm1", "root", 1, chat_calling(("search", {}), ("open", {}), ("none", {}))),
        span("llm2", "root", 5, {**CHAT, "gen_ai.input.messages": genai_input}),
        span("llm3", "root", 6, {**CHAT, "gen_ai.input.messages": openai_input}),
    ), CFG)
    assert [s.result for s in t.steps if s.rebuilt] == ["3 results", "page text", None]


def test_no_rebuild_when_the_agent_has_tool_spans() -> None:
    t = build_trajectory(trace(
        span("root", None, 0, AGENT),
        span("llm1", "root", 1, chat_calling(("search", {}))),
        span("tool1", "root", 2, tool("search")),
    ), CFG)
    assert [s.rebuilt for s in t.steps] == [False, False, False]


OI_AGENT = {"openinference.span.kind": "AGENT"}
OI_LLM_CALLING = {"openinference.span.kind": "LLM",
                  "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "grep"}


def test_rebuild_is_decided_per_agent() -> None:
    """A sub-agent's tool spans count for its manager, not the other way round."""
    t = build_trajectory(trace(
        span("boss", None, 0, OI_AGENT),
        span("boss-llm", "boss", 1, chat_calling(("delegate", {}))),
        span("worker", "boss", 2, OI_AGENT),
        span("worker-llm", "worker", 3, OI_LLM_CALLING),
        span("other", "boss", 4, OI_AGENT),
        span("other-llm", "other", 5, chat_calling(("ls", {}))),
        span("other-tool", "other", 6, tool("ls")),
    ), CFG)
    assert [s.name for s in t.steps if s.rebuilt] == ["grep"]


def test_no_rebuild_when_the_convention_emits_tool_spans_elsewhere() -> None:
    """smolagents' managed ToolCallingAgent answers via final_answer without a TOOL span."""
    t = build_trajectory(trace(
        span("boss", None, 0, OI_AGENT),
        span("boss-tool", "boss", 1, {"openinference.span.kind": "TOOL", "tool.name": "x"}),
        span("worker", "boss", 2, OI_AGENT),
        span("worker-llm", "worker", 3, OI_LLM_CALLING),
    ), CFG)
    assert not any(s.rebuilt for s in t.steps)


def test_trajectory_fields() -> None:
    res = {"service.name": "svc", "otel_eval.task.id": "from-resource"}
    t = build_trajectory(trace(
        span("root", None, 100, {**AGENT, "gen_ai.agent.name": "a",
                                 "gen_ai.input.messages": "question",
                                 "gen_ai.output.messages": "answer",
                                 "otel_eval.outcome": "success"}, end=900, resource=res),
        span("llm", "root", 200, {**CHAT, "gen_ai.usage.input_tokens": 3,
                                  "gen_ai.usage.output_tokens": 4,
                                  "gen_ai.usage.cost": 0.5}, resource=res),
        span("t", "root", 300, tool("x"), status="error", message="denied", resource=res),
    ), CFG)
    assert (t.trace_id, t.service, t.agent, t.task_id) == (TRACE_ID, "svc", "a", "from-resource")
    assert (t.input, t.output, t.convention) == ("question", "answer", "genai")
    assert (t.start_ns, t.end_ns, t.duration_s) == (100, 900, 800 / 1e9)
    assert t.root_attributes["otel_eval.outcome"] == "success"
    assert t.counts() == {"spans": 3, "steps": 1, "llm_calls": 1, "tool_calls": 1,
                          "errors": 1}
    assert t.usage() == {"input_tokens": 3, "output_tokens": 4, "cost_usd": 0.5}
    assert t.steps[2].error == "denied"


def test_service_from_any_span_when_the_root_has_none() -> None:
    t = build_trajectory(trace(span("root"), span("c", "root", 1,
                                                  resource={"service.name": "worker"})), CFG)
    assert t.service == "worker"


def test_task_id_from_a_span_attribute_named_in_config() -> None:
    cfg = TrajectoryConfig(task_id_attribute="my.task")
    t = build_trajectory(trace(span("root"), span("c", "root", 1, {"my.task": 17})), cfg)
    assert t.task_id == "17"


def test_input_and_output_fall_back_to_root_without_agent() -> None:
    t = build_trajectory(trace(span("root", None, 0, {
        **CHAT, "gen_ai.input.messages": "q", "gen_ai.output.messages": "a"})), CFG)
    assert (t.agent, t.input, t.output) == (None, "q", "a")


def test_empty_trace() -> None:
    t = build_trajectory(trace(), CFG)
    assert (t.steps, t.span_count, t.input, t.convention) == ([], 0, None, "unknown")


def test_huge_strings_stay_raw_and_unparsed() -> None:
    big = '{"x": "' + "a" * 10_000_000 + '"}'
    t = build_trajectory(trace(span("root", None, 0, {
        **CHAT, "gen_ai.input.messages": big, "gen_ai.output.messages": big})), CFG)
    assert t.steps[0].input_text is big and t.steps[0].output_text is big


def test_garbage_attribute_types() -> None:
    t = build_trajectory(trace(span("root", None, 0, {
        "gen_ai.operation.name": ["chat"], "gen_ai.usage.input_tokens": "many",
        "gen_ai.usage.output_tokens": float("nan"), "gen_ai.tool.definitions": "{bad",
        "gen_ai.response.finish_reasons": 7, "gen_ai.output.messages": {"tool_call": 1},
        "gen_ai.usage.cost": "free", "otel_eval.task.id": {"a": 1},
    })), CFG)
    step = t.steps[0]
    assert (step.kind, step.input_tokens, step.output_tokens, step.cost_usd) == (
        "other", None, None, None)
    assert t.task_id == '{"a": 1}'


def test_steps_under_a_span_of_unknown_kind_are_not_known_to_be_the_enclosing_agent_s() -> None:
    """A marker no convention defines may have been a sub-agent's: the steps under it (up to
    the next known agent) are marked within it, and that agent's own steps are not."""
    unknown = {"gen_ai.operation.name": "zz_unrecognised"}
    t = build_trajectory(trace(
        span("root", None, 0, {**AGENT, "gen_ai.agent.name": "boss"}),
        span("own", "root", 1, tool("t")),
        span("odd", "root", 2, unknown),
        span("inside", "odd", 3, tool("t")),
        span("sub", "odd", 4, {**AGENT, "gen_ai.agent.name": "helper"}),
        span("sub-tool", "sub", 5, tool("t")),
    ), CFG)
    keys = {s.name: s.agent_scope for s in t.steps}
    assert keys == {"root": ("boss", None), "own": ("boss", None), "odd": ("boss", sid("odd")),
                    "inside": ("boss", sid("odd")), "sub": ("helper", None),
                    "sub-tool": ("helper", None)}


def _openinference(kind: str, **attrs: str) -> dict[str, str]:
    return {"openinference.span.kind": kind, **attrs}


@pytest.mark.parametrize(("arguments", "node"), [
    ('{"task": "weather?", "context": "", "coworker": "weather_agent"}', "weather_agent"),
    ('{"task": "weather?", "coworker": "Crew"}', "triage_agent"),  # a default: no name
    ('{"task": "weather?"}', "triage_agent"),                      # none named
])
def test_crewai_s_coworker_tool_runs_the_agent_it_names(arguments: str, node: str) -> None:
    """CrewAI under OpenInference: the coworker a delegation runs has no agent span; the LLM
    calls and tools under the Delegate work to coworker span are the named coworker's."""
    t = build_trajectory(trace(
        span("triage_agent._execute_core", None, 0,
             _openinference("AGENT", **{"graph.node.id": "triage_agent"}), end=100),
        span("Delegate work to coworker.run", "triage_agent._execute_core", 1, _openinference(
            "TOOL", **{"tool.name": "Delegate work to coworker", "input.value": arguments})),
        span("get_weather.run", "Delegate work to coworker.run", 2, _openinference(
            "TOOL", **{"tool.name": "get_weather", "input.value": '{"city": "Paris"}'})),
    ), CFG)
    nodes = {s.tool_name: s.node for s in t.tool_steps}
    assert nodes == {"Delegate work to coworker": "triage_agent", "get_weather": node}
    assert t.agent == "triage_agent"


def _says(text: str) -> dict[str, str]:
    return {**CHAT, "gen_ai.output.messages": json.dumps(
        [{"role": "assistant", "parts": [{"type": "text", "content": text}],
          "finish_reason": "stop"}])}


@pytest.mark.parametrize("skew", [-10_000, 10_000])
def test_a_span_whose_remote_parent_is_in_the_trace_is_placed_under_it(skew: int) -> None:
    """A tool call reaches a downstream service: its server span has a remote parent (the
    OTLP span flags), which is in the trace. It was taken as a top-level span, placed by the
    downstream clock (before or after the whole run) at depth 0, so the downstream service's
    LLM call could be "the last LLM call" and its text the run's answer. A span whose parent
    is in the trace belongs under it, whatever the remote flag says."""
    remote = span("svc", "lookup", 30 + skew, {"gen_ai.operation.name": "execute_tool",
                                               "gen_ai.tool.name": "svc"})
    remote.parent_remote = True
    t = build_trajectory(trace(
        span("root", None, 0, AGENT, end=100),
        span("plan", "root", 10, chat_calling(("lookup", {}))),
        span("lookup", "root", 20, tool("lookup"), end=60),
        remote,
        span("summarize", "svc", 31 + skew, _says("the downstream summary")),
        span("final", "root", 70, _says("the final answer")),
    ), CFG)
    assert names(t) == ["root", "plan", "lookup", "svc", "summarize", "final"]
    assert [s.depth for s in t.steps] == [0, 1, 1, 2, 3, 1]
    assert t.output == "the final answer"
