"""Joining tool steps to the LLM calls that asked for them, the local root, and what stays
unknown: the shapes real instrumentations emit (arguments only on the LLM span, call ids,
bare-string inputs, remote parents, content in log records)."""

from __future__ import annotations

import json

import pytest
from trajectory_factory import TRACE_ID, sid, span, trace

from otel_eval.base.model import LogEvent, Span, local_root
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.detectors import Detectors
from otel_eval.evaluate.detectors.config import DetectorsConfig
from otel_eval.evaluate.trajectory import build_trajectory

CFG = TrajectoryConfig()
AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather"}


def _chat(name: str, calls: list[tuple[str, str, dict[str, str]]], start: int) -> Span:
    parts = [{"type": "tool_call", "id": cid, "name": tool, "arguments": args}
             for cid, tool, args in calls]
    return span(name, "agent", start, {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": parts}])})


def _tool(name: str, start: int, **attrs: str) -> Span:
    return span(name, "agent", start, {"gen_ai.operation.name": "execute_tool",
                                       "gen_ai.tool.name": "get_weather", **attrs})


def _tools(*spans: Span) -> list[tuple[object, object, bool]]:
    t = build_trajectory(trace(span("agent", None, 0, AGENT, end=100), *spans), CFG)
    return [(s.arguments, s.call_id, s.rebuilt) for s in t.tool_steps]


CASES = [
    ("by call id", [_chat("c1", [("call_1", "get_weather", {"city": "Paris"}),
                                 ("call_2", "get_weather", {"city": "Rome"})], 1),
                    _tool("t2", 3, **{"gen_ai.tool.call.id": "call_2"}),
                    _tool("t1", 4, **{"gen_ai.tool.call.id": "call_1"})],
     [({"city": "Rome"}, "call_2", False), ({"city": "Paris"}, "call_1", False)]),
    ("by name in order, no ids", [_chat("c1", [("", "get_weather", {"city": "Paris"})], 1),
                                  _tool("t1", 3)],
     [({"city": "Paris"}, None, False)]),
    ("a requested call no tool span ran stays rebuilt",
     [_chat("c1", [("call_1", "get_weather", {"city": "Paris"}),
                   ("call_2", "get_weather", {"city": "Oslo"})], 1),
      _tool("t1", 3, **{"gen_ai.tool.call.id": "call_1"})],
     [({"city": "Oslo"}, "call_2", True), ({"city": "Paris"}, "call_1", False)]),
    ("an id no LLM call carries: arguments stay unknown",
     [_tool("t1", 3, **{"gen_ai.tool.call.id": "call_9"})], [(None, "call_9", False)]),
    ("by the model's spelling of the tool's name (CrewAI's coworker tools)",
     [_chat("c1", [("", "delegate_work_to_coworker", {"task": "weather?"})], 1),
      _tool("t1", 3, **{"gen_ai.tool.name": "Delegate work to coworker"})],
     [({"task": "weather?"}, None, False)]),
    ("another tool's call is not taken for it",
     [_chat("c1", [("", "delegate_work", {"task": "weather?"})], 1),
      _tool("t1", 3, **{"gen_ai.tool.name": "Delegate work to coworker"})],
     [(None, None, False)]),
    # names in Chinese have no ASCII letter: each is its own spelling, not the empty one
    ("another Chinese-named tool's call is not taken for it",
     [_chat("c1", [("", "查询天气", {"城市": "北京"})], 1),
      _tool("t1", 3, **{"gen_ai.tool.name": "删除全部"})],
     [(None, None, False)]),
    ("a Chinese-named tool runs its own call",
     [_chat("c1", [("", "查询天气", {"城市": "北京"})], 1),
      _tool("t1", 3, **{"gen_ai.tool.name": "查询天气"})],
     [({"城市": "北京"}, None, False)]),
    ("recorded arguments are kept",
     [_chat("c1", [("call_1", "get_weather", {"city": "Paris"})], 1),
      _tool("t1", 3, **{"gen_ai.tool.call.id": "call_1",
                        "gen_ai.tool.call.arguments": '{"city": "Nice"}'})],
     [({"city": "Nice"}, "call_1", False)]),
]


@pytest.mark.parametrize(("spans", "expected"), [(c[1], c[2]) for c in CASES],
                         ids=[c[0] for c in CASES])
def test_tool_steps_join_their_calls(spans: list[Span], expected: list[object]) -> None:
    got = _tools(*spans)
    assert sorted(got, key=repr) == sorted(expected, key=repr)


def test_by_name_prefers_the_call_with_the_same_arguments() -> None:
    """A call whose tool span never arrived must not hand its place to the next call."""
    chat1 = _chat("c1", [("", "get_weather", {"city": "Atlantis"})], 1)
    chat2 = _chat("c2", [("", "get_weather", {"city": "Paris"})], 5)
    tool = _tool("t", 7, **{"gen_ai.tool.call.arguments": '{"city": "Paris"}'})
    t = build_trajectory(trace(span("agent", None, 0, AGENT, end=100), chat1, chat2, tool), CFG)
    ran = [s for s in t.tool_steps if not s.rebuilt]
    assert [s.arguments for s in ran] == [{"city": "Paris"}]


def test_parallel_calls_asked_without_ids_run_in_the_order_asked() -> None:
    """LiteLLM records a reply's parallel calls without their ids and its tool spans with
    them: no id joins, and each tool span takes the first call of the nearest reply that
    no span ran (the latest call first gave each span the other city)."""
    reply = _chat("c1", [("", "get_weather", {"city": "Paris"}),
                         ("", "get_weather", {"city": "London"})], 1)
    spans = [_tool("t1", 3, **{"gen_ai.tool.call.id": "call_a"}),
             _tool("t2", 4, **{"gen_ai.tool.call.id": "call_b"})]
    t = build_trajectory(trace(span("agent", None, 0, AGENT, end=100), reply, *spans), CFG)
    assert [(s.call_id, s.arguments) for s in t.tool_steps if not s.rebuilt] == [
        ("call_a", {"city": "Paris"}), ("call_b", {"city": "London"})]


def test_an_unjoined_tool_step_takes_the_nearest_reply_s_call() -> None:
    """One call a reply: the span after the second reply ran the second reply's call (the
    first's span never arrived; its call is rebuilt)."""
    chat1 = _chat("c1", [("", "get_weather", {"city": "Atlantis"})], 1)
    chat2 = _chat("c2", [("", "get_weather", {"city": "Paris"})], 5)
    tool = _tool("t", 7, **{"gen_ai.tool.call.id": "call_x"})
    t = build_trajectory(trace(span("agent", None, 0, AGENT, end=100), chat1, chat2, tool), CFG)
    assert [s.arguments for s in t.tool_steps if not s.rebuilt] == [{"city": "Paris"}]


HUGE_INT = "{'city': 0x" + "f" * 5_000 + "}"


@pytest.mark.parametrize(("raw", "expected"), [
    ("Paris", {"city": "Paris"}),  # LangChain: a bare string for a one-parameter tool
    ("{'city': 'Paris'}", {"city": "Paris"}),  # a Python dict literal
    # an int Python cannot write out (past its str-conversion limit) is no literal: text
    (HUGE_INT, {"city": HUGE_INT}),
])
def test_non_json_tool_input(raw: str, expected: object) -> None:
    defs = json.dumps([{"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}])
    root = span("agent", None, 0, {**AGENT, "gen_ai.tool.definitions": defs}, end=100)
    tool = _tool("t", 3, **{"gen_ai.tool.call.arguments": raw})
    [step] = build_trajectory(trace(root, tool), CFG).tool_steps
    assert step.arguments == expected


def test_log_events_lay_content_over_their_span() -> None:
    chat = span("chat", "agent", 1, {"gen_ai.operation.name": "chat"})
    logs = [LogEvent(TRACE_ID, sid("chat"), "gen_ai.user.message", 1, {}, {"content": "Hi?"}),
            LogEvent(TRACE_ID, sid("chat"), "gen_ai.choice", 2, {},
                     {"index": 0, "finish_reason": "stop",
                      "message": {"role": "assistant", "content": "Hello."}})]
    t = trace(span("agent", None, 0, AGENT, end=100), chat)
    t.logs = logs
    traj = build_trajectory(t, CFG)
    assert (traj.input, traj.output) == ("Hi?", "Hello.")
    assert traj.llm_steps[0].finish_reasons == ["stop"]
    assert traj.unrecorded == {}


@pytest.mark.parametrize(("times", "expected"), [
    ((5, 0, 7), ["system", "first", "second"]),  # no time: after the one received before it
    ((0, 5, 7), ["system", "first", "second"]),  # received first, none before it: first
    ((5, 0, 0), ["system", "first", "second"]),
    ((7, 0, 5), ["second", "system", "first"]),  # the known times still order the rest
])
def test_a_record_without_a_time_keeps_its_place_among_the_step_s_messages(
        times: tuple[int, int, int], expected: list[str]) -> None:
    """A GenAI record with neither time nor observed time (time 0, unknown) sorted before
    every other record of its span: the step's input messages put it first."""
    chat = span("chat", "agent", 1, {"gen_ai.operation.name": "chat"})
    roles = [("gen_ai.system.message", "system"), ("gen_ai.user.message", "first"),
             ("gen_ai.user.message", "second")]
    t = trace(span("agent", None, 0, AGENT, end=100), chat)
    t.logs = [LogEvent(TRACE_ID, sid("chat"), name, at, {}, {"content": text})
              for (name, text), at in zip(roles, times, strict=True)]
    [step] = build_trajectory(t, CFG).llm_steps
    assert [m["content"] for m in json.loads(step.input_text or "")] == expected


def _s(name: str, parent: str | None, start: int, end: int, remote: bool | None) -> Span:
    return Span(TRACE_ID, sid(name), sid(parent) if parent else None, name, start, end,
                parent_remote=remote)


@pytest.mark.parametrize(("spans", "root"), [
    ([_s("a", None, 0, 10, None), _s("b", "a", 1, 2, False)], "a"),
    ([_s("a", "up", 0, 10, True), _s("b", "a", 1, 2, False)], "a"),  # remote parent (flags)
    ([_s("a", "up", 0, 10, None), _s("b", "a", 1, 2, None)], "a"),  # no flags: it encloses
    ([_s("b", "a", 1, 2, None), _s("c", "a", 3, 4, None)], None),  # killed run: root lost
    ([_s("b", "a", 1, 9, False)], None),  # the exporter says the parent is local: missing
])
def test_local_root(spans: list[Span], root: str | None) -> None:
    found = local_root(spans)
    assert (found.name if found else None) == root


def test_the_spelling_lookup_is_linear_in_the_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hostile content: n calls of n names and n tool spans of n other names, none joined.
    Each name is spelled once (``as_offered``: a call per distinct name and one per miss), not
    once per pending name per miss (n * n). Work counted, not timed."""
    from otel_eval.evaluate.trajectory import links

    spelled = links.as_offered
    count = [0]

    def counted(name: str) -> str:
        count[0] += 1
        return spelled(name)

    monkeypatch.setattr(links, "as_offered", counted)
    n = 300
    spans = [_chat(f"c{i}", [("", f"tool{i}", {"q": i})], 1 + i) for i in range(n)]
    spans += [_tool(f"t{i}", 1 + n + i, **{"gen_ai.tool.name": f"other {i}"}) for i in range(n)]
    _tools(*spans)
    assert count[0] <= 2 * n


def test_a_tool_step_outside_every_agent_runs_the_oldest_pending_call_of_its_name() -> None:
    """Calls of get_weather by two agents; the tool spans outside every agent run them in the
    order they were asked for, whichever agent asked."""
    def agent(name: str, start: int, city: str) -> list[Span]:
        return [span(name, None, start, {"gen_ai.operation.name": "invoke_agent",
                                         "gen_ai.agent.name": name}, end=start + 5),
                span(f"{name}-chat", name, start + 1, {
                    "gen_ai.operation.name": "chat", "gen_ai.output.messages": json.dumps(
                        [{"role": "assistant", "parts": [{"type": "tool_call", "id": "",
                                                          "name": "get_weather",
                                                          "arguments": {"city": city}}]}])})]

    spans = [*agent("second", 10, "Rome"), *agent("first", 1, "Paris"),
             span("t1", None, 20, {"gen_ai.operation.name": "execute_tool",
                                   "gen_ai.tool.name": "get_weather"}),
             span("t2", None, 21, {"gen_ai.operation.name": "execute_tool",
                                   "gen_ai.tool.name": "get_weather"})]
    t = build_trajectory(trace(*spans), CFG)
    assert [s.arguments for s in t.tool_steps if not s.rebuilt] == [{"city": "Paris"},
                                                                     {"city": "Rome"}]


def _loop(call_args: dict[str, str], end: int) -> Span:
    """One LLM span of a whole automatic-function-calling loop (google-genai), holding only
    its last reply's call."""
    chat = _chat("generate_content", [("", "get_weather", call_args)], 1)
    return Span(chat.trace_id, chat.span_id, chat.parent_span_id, chat.name, chat.start_ns, end,
                attributes=chat.attributes)


def test_a_tool_step_takes_no_call_asked_for_other_arguments_after_it_began() -> None:
    """google-genai's loop span holds the call of its last reply (Tokyo), which it stopped
    at and never ran; the calls it ran (Paris, London) are tool spans inside it. Taken by
    name, Tokyo's call went to Paris' step and no call was left pending
    (google-genai/max_turns). A reply that ended before the step began is still taken by
    name whatever its arguments: a framework may record them otherwise."""
    def ran(end: int) -> Trajectory:
        tools = [_tool(f"t{i}", start, **{"gen_ai.tool.call.arguments": json.dumps(args)})
                 for i, (start, args) in enumerate(((60, {"city": "Paris"}),
                                                    (70, {"city": "London"})))]
        return build_trajectory(trace(span("agent", None, 0, AGENT, end=100),
                                      _loop({"city": "Tokyo"}, end), *tools), CFG)

    t = ran(end=90)
    assert [(s.arguments, s.rebuilt) for s in t.tool_steps] == [
        ({"city": "Paris"}, False), ({"city": "London"}, False)]
    assert t.llm_steps[0].tool_calls[0].outcome == "never_ran"
    findings = Detectors(DetectorsConfig()).evaluate(t, None)[0]
    assert "pending_tool_calls" in {f.kind for f in findings if f.detector == "non_termination"}
    t = ran(end=50)
    assert t.llm_steps[0].tool_calls[0].outcome == "ran"
    assert not [f for f in Detectors(DetectorsConfig()).evaluate(t, None)[0]
                if f.detector == "non_termination"]


def test_rebuilt_calls_of_a_reused_id_get_their_own_results() -> None:
    """A run that numbers its calls per reply (``call_0`` every turn) polls a job until it is
    done: each rebuilt call's result is the answer the next LLM call was told for it, not
    the first answer of that id, so the poll is no ``no_progress`` loop."""
    def status(cid: str) -> dict[str, object]:
        return {"role": "assistant", "parts": [{"type": "tool_call", "id": cid,
                                                "name": "get_job_status", "arguments": {}}]}

    def answer(cid: str, text: str) -> dict[str, object]:
        return {"role": "tool", "parts": [{"type": "tool_call_response", "id": cid,
                                           "response": text}]}
    logs = {"role": "assistant", "parts": [{"type": "tool_call", "id": "call_1",
                                            "name": "list_logs", "arguments": {}}]}
    turns = [status("call_0"), answer("call_0", "running"), logs, answer("call_1", "ok"),
             status("call_0"), answer("call_0", "done")]
    chats = [span(f"c{i}", "agent", 10 * i + 1, {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.input.messages": json.dumps(turns[:2 * i]),
        "gen_ai.output.messages": json.dumps([turns[2 * i]] if i < 3 else [])})
        for i in range(4)]
    t = build_trajectory(trace(span("agent", None, 0, AGENT, end=100), *chats), CFG)
    assert [(s.name, s.result) for s in t.tool_steps] == [
        ("get_job_status", "running"), ("list_logs", "ok"), ("get_job_status", "done")]
    findings = Detectors(DetectorsConfig()).evaluate(t, None)[0]
    assert "no_progress" not in {f.kind for f in findings}


def test_a_reused_call_id_joins_the_call_of_the_step_s_own_tool() -> None:
    """Ids reused per reply (``call_0`` every turn), and the first call's span lost: the
    fetch span took the older search call's arguments (an invalid-arguments finding about a
    call the model never made wrong) and fetch was rebuilt beside it as a second call."""
    def tools(name: str) -> dict[str, object]:
        return {"type": "function", "name": name, "parameters": {
            "type": "object", "properties": {name[0]: {"type": "string"}},
            "required": [name[0]]}}

    def chat(name: str, start: int, parts: list[dict[str, object]]) -> Span:
        return span(name, "agent", start, {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.tool.definitions": json.dumps([tools("search"), tools("fetch")]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": parts}])})

    def call(tool: str) -> list[dict[str, object]]:
        return [{"type": "tool_call", "id": "call_0", "name": tool,
                 "arguments": {tool[0]: "x"}}]
    fetch = span("t", "agent", 12, {"gen_ai.operation.name": "execute_tool",
                                    "gen_ai.tool.name": "fetch", "gen_ai.tool.call.id": "call_0",
                                    "gen_ai.tool.call.result": "page"})
    t = build_trajectory(trace(
        span("agent", None, 0, AGENT, end=100), chat("c1", 1, call("search")),
        chat("c2", 10, call("fetch")), fetch,
        chat("c3", 20, [{"type": "text", "content": "done"}])), CFG)
    assert [(s.tool_name, s.arguments, s.rebuilt) for s in t.tool_steps] == [
        ("search", {"s": "x"}, True), ("fetch", {"f": "x"}, False)]
    findings = Detectors(DetectorsConfig()).evaluate(t, None)[0]
    assert [f.kind for f in findings if f.detector == "tool_call"] == []


def test_one_tool_call_recorded_three_times_nested_is_one_step() -> None:
    """AutoGen's OpenInference TOOL span around autogen-core's execute_tool around an MCP
    client's tools/call: the innermost was left a call of its own (its parent's entry was
    gone once the middle one was folded)."""
    t = build_trajectory(trace(
        span("agent", None, 0, AGENT, end=100),
        span("get_weather", "agent", 1, {"openinference.span.kind": "TOOL",
                                         "tool.name": "get_weather"}, end=50),
        span("execute_tool get_weather", "get_weather", 2, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather"},
            end=40),
        span("tools/call get_weather", "execute_tool get_weather", 3, {
            "mcp.method.name": "tools/call", "gen_ai.tool.name": "get_weather",
            "gen_ai.tool.call.arguments": '{"city": "Paris"}',
            "gen_ai.tool.call.result": "sunny"}, end=30)), CFG)
    assert [(s.name, s.arguments, s.result) for s in t.tool_steps] == [
        ("get_weather", {"city": "Paris"}, "sunny")]
