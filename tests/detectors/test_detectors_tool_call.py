import dataclasses
import unicodedata
from typing import Any

import pytest
from detector_factory import bash, kinds, llm, tool, traj

from otel_eval.base.steps import Step
from otel_eval.evaluate.detectors import loop, non_termination, tool_call
from otel_eval.evaluate.detectors.calls import Context
from otel_eval.evaluate.detectors.config import DetectorsConfig
from otel_eval.evaluate.trajectory.interpreters import MAX_TOOL_NAME

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"},
                                           "limit": {"type": "integer", "minimum": 1}},
          "required": ["path"]}
TOOLS: dict[str, Any] = {
    "read_file": SCHEMA,
    "search": {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"],
        "additionalProperties": False}}},
    "free": {"type": "object", "properties": {"a": {}}, "additionalProperties": True},
}

ZH_TOOLS: dict[str, Any] = {"查询天气": {"type": "object", "properties": {"城市": {}}}, **TOOLS}

CASES: list[tuple[str, Step, dict[str, Any], list[tuple[str, str | None]]]] = [
    ("valid call", tool("read_file", {"path": "a"}), TOOLS, []),
    ("tool not offered", tool("delete_all", {}), TOOLS, [("selection", None)]),
    ("missing required", tool("read_file", {}), TOOLS, [("arguments", "required")]),
    ("wrong type", tool("read_file", {"path": 3}), TOOLS, [("arguments", "type")]),
    ("constraint", tool("read_file", {"path": "a", "limit": 0}), TOOLS,
     [("arguments", "minimum")]),
    ("unknown parameter (schema silent)", tool("read_file", {"path": "a", "mode": "r"}), TOOLS,
     [("arguments", "additionalProperties")]),
    ("unknown parameter (schema forbids), OpenAI function shape",
     tool("search", {"q": "x", "k": 1}), TOOLS, [("arguments", "additionalProperties")]),
    ("extra allowed when the schema says so", tool("free", {"a": 1, "b": 2}), TOOLS, []),
    ("arguments that are not JSON", tool("read_file", "{path: a"), TOOLS,
     [("arguments", "json")]),
    ("no tool definitions: selection and arguments skipped", tool("anything", {"x": 1}), {}, []),
    ("shell actions are not a selection error", bash("ls"), TOOLS, []),
    ("span error is a runtime error", tool("read_file", {"path": "a"}, None, error="ENOENT"),
     TOOLS, [("runtime", None)]),
    ("error payload is a runtime error",
     tool("read_file", {"path": "a"}, "Error: file not found"), TOOLS, [("runtime", None)]),
    ("JSON error payload", tool("read_file", {"path": "a"}, '{"error": "denied"}'), TOOLS,
     [("runtime", None)]),
    ("null error field is fine", tool("read_file", {"path": "a"}, '{"error": null, "x": 1}'),
     TOOLS, []),
    ("a traceback printed by a shell command is an observation",
     bash("python t.py", "Traceback (most recent call last):\n  ..."), TOOLS, []),
    ("wrong tool and failed", tool("nope", {}, "Error: unknown tool"), TOOLS,
     [("selection", None), ("runtime", None)]),
    # CrewAI runs "Delegate work to coworker", offered as delegate_work_to_coworker
    ("a tool run by the display name it was offered by", tool("Read File", {"path": "a"}),
     TOOLS, []),
    ("other words are another tool", tool("Read Files", {"path": "a"}), TOOLS,
     [("selection", None)]),
    # names in a script with no ASCII letter (Chinese, emoji) are no one spelling
    ("a Chinese-named tool not offered", tool("删除全部", {}), ZH_TOOLS, [("selection", None)]),
    ("an emoji-named tool not offered", tool("🗑️", {}), ZH_TOOLS, [("selection", None)]),
    ("a Chinese-named tool offered", tool("查询天气", {"城市": "北京"}), ZH_TOOLS, []),
]


@pytest.mark.parametrize(("step", "tools", "expected"), [(s, t, e) for _, s, t, e in CASES],
                         ids=[c[0] for c in CASES])
def test_tool_call_cases(step: Step, tools: dict[str, Any],
                         expected: list[tuple[str, str | None]]) -> None:
    found = tool_call.detect(traj(llm("x"), step, tools=tools), DetectorsConfig(), Context())
    assert [(f.kind, f.attributes.get("constraint")) for f in found] == expected


def test_messages_name_the_constraint() -> None:
    t = traj(tool("read_file", {"path": 3}), tool("delete_all"), tools=TOOLS)
    found = tool_call.detect(t, DetectorsConfig(), Context())
    assert kinds(found) == ["tool_call/arguments", "tool_call/selection"]
    assert found[0].message == "read_file: invalid arguments (type at path: 3 is not of type " \
        "'string')"
    assert found[0].severity == "error" and found[0].step_indexes == [1]
    assert found[1].message == "called delete_all, which was not offered"


def test_invalid_schema_is_skipped_not_raised() -> None:
    t = traj(tool("bad", {"a": 1}), tools={"bad": {"type": "object", "properties": 3}})
    found = tool_call.detect(t, DetectorsConfig(), Context())
    assert [(f.kind, f.severity, f.attributes["reason"]) for f in found] == [
        ("schema", "warning", "invalid_schema")]


def test_a_long_tool_name_is_cut_in_messages() -> None:
    # A tool name is span content: 40,000 characters of it went whole into each message,
    # and on into the issues job's clustering.
    long = "a-" * 20_000
    (selection,) = tool_call.detect(traj(tool(long, {}), tools=TOOLS), DetectorsConfig(),
                                    Context())
    assert selection.message == f"called {long}"[:300]
    assert selection.attributes["tool"] == long  # the attributes keep the name as it came
    t = traj(tool(long, {"path": 3}), tools={long: SCHEMA})
    (arguments,) = tool_call.detect(t, DetectorsConfig(), Context())
    assert arguments.message == long[:300]
    (repeated,) = loop.detect(traj(tool(long, {}, "r"), tool(long, {}, "r"), tool(long, {}, "r")),
                              DetectorsConfig(), Context())
    assert repeated.message == f"{long[:MAX_TOOL_NAME]} called 3 times in a row with " \
        "identical arguments"
    pending = traj(llm("", calls=[(long, {})], finish="tool_calls"), output=None)
    (never_ran,) = non_termination.detect(pending, DetectorsConfig(), Context())
    assert never_ran.message == f"the run ended with tool calls that never ran ({long}"[:300]


def test_a_sub_agent_whose_offer_no_span_recorded_selects_no_wrong_tool() -> None:
    """google-genai's multi_agent recording: the coordinator's LLM span offered
    ask_weather_agent; the weather agent's calls were never recorded, so what it was offered is
    unknown and its get_weather is no selection error. The coordinator's own calls still are."""
    weather = dataclasses.replace(tool("get_weather", {"city": "Paris"}), node="weather_agent")
    stray = dataclasses.replace(tool("delete_all", {}), node="agent")
    t = traj(weather, stray, tools=TOOLS)
    t.offered_to = {("agent", None): TOOLS}  # the coordinator's (the root's node) alone
    found = tool_call.detect(t, DetectorsConfig(), Context())
    assert [(f.kind, f.attributes["tool"]) for f in found] == [("selection", "delete_all")]


def test_the_arguments_of_a_call_that_never_ran_are_checked_on_the_llm_step() -> None:
    """smolagents, LangChain.js and a hand-made Anthropic loop refuse arguments that fail the
    tool's schema before running it: no tool step exists to check (the conformance corpus'
    wrong_args), so the LLM step's own call is. A call that ran or was rebuilt is checked on
    its step and not twice; a tool with no schema recorded is not checked at all."""
    def asked(outcome: str, arguments: Any) -> Step:
        step = llm("", calls=[("read_file", arguments)], finish="tool_calls")
        step.tool_calls[0].outcome = outcome
        return step

    wrong = {"file": "a.txt"}
    found = tool_call.detect(traj(asked("never_ran", wrong), llm("done"), tools=TOOLS),
                             DetectorsConfig(), Context())
    assert [(f.kind, f.attributes["tool"], f.attributes["constraint"], f.step_indexes)
            for f in found] == [("arguments", "read_file", "required", [1])]
    assert found[0].severity == "error"
    assert tool_call.detect(traj(asked("never_ran", {"path": "a.txt"}), tools=TOOLS),
                            DetectorsConfig(), Context()) == []
    for outcome in ("ran", "rebuilt"):
        ran = traj(asked(outcome, wrong), tool("read_file", wrong), tools=TOOLS)
        assert [(f.kind, f.step_indexes) for f in tool_call.detect(
            ran, DetectorsConfig(), Context())] == [("arguments", [2])]
    no_schema = {"read_file": {"type": "function", "function": {"name": "read_file"}}}
    assert tool_call.detect(traj(asked("never_ran", wrong), tools=no_schema),
                            DetectorsConfig(), Context()) == []
    # an agent whose offer no span recorded: the schema known by that name may be another's
    unoffered = traj(asked("never_ran", wrong), llm("done"), tools=TOOLS)
    unoffered.offered_to = {("another_agent", None): TOOLS}
    assert tool_call.detect(unoffered, DetectorsConfig(), Context()) == []


def test_a_call_of_a_tool_not_offered_that_never_ran_is_a_selection_error() -> None:
    """LangGraph's ToolNode, smolagents and pydantic-ai answer a call of a tool they do not
    have with an error and run nothing: no tool step exists to check, so the LLM step's own
    call is (the conformance corpus' wrong_tool); one that ran, or was rebuilt, is checked on
    its step and not twice; nothing is claimed where no offer was recorded."""
    def asked(outcome: str) -> Step:
        step = llm("", calls=[("get_forecast", {"city": "Paris"})], finish="tool_calls")
        step.tool_calls[0].outcome = outcome
        return step

    for outcome in ("never_ran", ""):
        found = tool_call.detect(traj(asked(outcome), llm("sunny"), tools=TOOLS),
                                 DetectorsConfig(), Context())
        assert [(f.kind, f.attributes["tool"], f.step_indexes) for f in found] == [
            ("selection", "get_forecast", [1])]
    ran = traj(asked("ran"), tool("get_forecast", {"city": "Paris"}), tools=TOOLS)
    assert kinds(tool_call.detect(ran, DetectorsConfig(), Context())) == ["tool_call/selection"]
    assert tool_call.detect(traj(asked("never_ran")), DetectorsConfig(), Context()) == []
    # a name recorded empty is unknown (bench/unknown_values: LiteLLM's function_call.name)
    blank = llm("", calls=[(" ", {"city": "Paris"})], finish="tool_calls")
    assert tool_call.detect(traj(blank, llm("sunny"), tools=TOOLS), DetectorsConfig(),
                            Context()) == []
    # a later step of unknown kind may have run it
    unknown = dataclasses.replace(llm("sunny"), kind="other", unknown={"kind": "? undefined"})
    assert tool_call.detect(traj(asked("never_ran"), unknown, tools=TOOLS), DetectorsConfig(),
                            Context()) == []
    # a managed agent called by name ran as that agent's steps (smolagents)
    managed = dataclasses.replace(llm("sunny"), kind="agent", node="get_forecast")
    assert tool_call.detect(traj(asked("never_ran"), managed, tools=TOOLS), DetectorsConfig(),
                            Context()) == []


def test_a_tool_offered_in_another_unicode_normal_form_is_no_selection_error() -> None:
    """A tool offered as "résumé" composed (NFC) and run under its decomposed spelling (NFD:
    the same name, as a macOS file name or some models write it) is the tool offered: it
    was "called résumé, which was not offered", a selection error failing the run, because
    the offered-name comparison dropped the combining accent of one spelling only."""
    offered = {"r\u00e9sum\u00e9": {"type": "object", "properties": {"q": {}}}}
    step = tool("re\u0301sume\u0301", {"q": "x"})
    assert tool_call.detect(traj(llm("x"), step, tools=offered), DetectorsConfig(),
                            Context()) == []


def test_arguments_in_another_unicode_normal_form_are_valid() -> None:
    """Vietnamese written decomposed (NFD: the base letter and its combining marks, as some
    Vietnamese input methods and macOS file names write it) is the same text as composed:
    an enum value or a parameter name so spelled was "'Hà Nội' is not one of ['Hà Nội',
    'Huế']" or an unknown parameter and a missing required one, a tool_call/arguments error
    failing the run, where the reference detector already compares arguments in NFC."""
    def nfd(text: str) -> str:
        return unicodedata.normalize("NFD", text)

    place, hanoi = "\u0111\u1ecba_\u0111i\u1ec3m", "H\u00e0 N\u1ed9i"
    offered = {"\u0111\u1eb7t_b\u00e0n": {
        "type": "object", "properties": {place: {"type": "string", "enum": [hanoi, "Hu\u1ebf"]}},
        "required": [place]}}
    for args in ({place: nfd(hanoi)}, {nfd(place): hanoi}):
        step = tool("\u0111\u1eb7t_b\u00e0n", args)
        found = tool_call.detect(traj(llm("x"), step, tools=offered), DetectorsConfig(),
                                 Context())
        assert found == [], args
    nfd_offer = {"\u0111\u1eb7t_b\u00e0n": {**offered["\u0111\u1eb7t_b\u00e0n"],
                                            "properties": {place: {"enum": [nfd(hanoi)]}}}}
    step = tool("\u0111\u1eb7t_b\u00e0n", {place: hanoi})
    assert tool_call.detect(traj(llm("x"), step, tools=nfd_offer), DetectorsConfig(),
                            Context()) == []
