"""Code actions as steps: Python blocks read with ``ast`` (smolagents' CodeAgent), shell blocks
with ``shlex`` (mini-swe-agent), rebuilt as tool steps when no span ran them; hostile code is
counted, never raised; and on real runs (TRAIL GAIA, SWE-bench) the steps and the loops they
reveal."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from trajectory_factory import span, trace

from otel_eval.base.model import Span, Trace
from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.detectors import Detectors, DetectorsConfig, budget
from otel_eval.evaluate.trajectory import build_trajectory, code_actions
from otel_eval.evaluate.trajectory.code_actions import CODE_TOOL, last_message_text
from otel_eval.evaluate.trajectory.code_parse import (
    MAX_CALLS,
    MAX_CODE_CHARS,
    code_blocks,
    python_calls,
)
from otel_eval.evaluate.trajectory.interpreters import is_interpreter
from otel_eval.evaluate.trajectory.shell import MAX_COMMAND_CHARS, shell_commands
from otel_eval.receive.loaders import load_file, load_path

CFG = TrajectoryConfig()
KNOWN = {"get_weather", "final_answer", "search_agent"}


# --- finding blocks -------------------------------------------------------------------------


BLOCKS = [
    ("older smolagents fence (TRAIL)",
     "Thought: go\nCode:\n```py\nget_weather(city='Paris')\n```<end_code>",
     [("python", "get_weather(city='Paris')\n")]),
    ("smolagents <code> tags", "Thought: go\n<code>\nprint(1)\n</code>",
     [("python", "\nprint(1)\n")]),
    ("mini-swe-agent bash", "THOUGHT: look\n\n```bash\nls -la\n```", [("shell", "ls -la\n")]),
    ("an inline ``` in prose is no fence", "use ```this``` inline\n```bash\nls\n```",
     [("shell", "ls\n")]),
    ("unterminated fence: no block", "```python\nprint(1)\n", []),
    ("other languages are not actions", "```json\n{}\n```\n```diff\n-a\n```", []),
]


@pytest.mark.parametrize(("text", "expected"), [b[1:] for b in BLOCKS], ids=[b[0] for b in BLOCKS])
def test_code_blocks(text: str, expected: list[tuple[str, str]]) -> None:
    assert code_blocks(text) == expected


# --- Python ---------------------------------------------------------------------------------


def test_python_calls_of_known_tools_with_literal_arguments_in_source_order() -> None:
    code = ("task = 'Find the video'\n"
            "for city in ['Paris', 'Rome']:\n"
            "    print(get_weather(city=city))\n"
            "r = search_agent(task=task, n=3, opts={'a': [1, 2]})\n"
            "open('x')  # not a tool\n"
            "final_answer(f'{r} done')\n"
            "final_answer('positional')\n")
    calls, problem = python_calls(code, KNOWN, {"final_answer": ["answer"]})
    assert problem is None
    assert [(c.name, c.arguments) for c in calls] == [
        ("get_weather", {"city": "city"}),  # a loop variable: its source text
        ("search_agent", {"task": "Find the video", "n": 3, "opts": {"a": [1, 2]}}),
        ("final_answer", {"answer": "f'{r} done'"}),
        ("final_answer", {"answer": "positional"}),
    ]
    assert calls[0].source == "get_weather(city=city)"


def test_python_rebinding_to_a_non_literal_hides_the_literal() -> None:
    calls, _ = python_calls("q = 'a'\nq = q.upper()\nget_weather(city=q)", KNOWN)
    assert calls[0].arguments == {"city": "q"}


def test_python_unicode_source_segments() -> None:
    calls, _ = python_calls("x = 'é'; get_weather(city=x + 'ü')", KNOWN)
    assert calls[0].arguments == {"city": "x + 'ü'"}
    assert calls[0].source == "get_weather(city=x + 'ü')"


HOSTILE = [
    ("huge code", "get_weather(city='a')\n" * (MAX_CODE_CHARS // 20), "too_large"),
    ("deep nesting", "get_weather(" + "-" * 40_000 + "1)", "too_deep"),
    ("nested parentheses", "get_weather" + "(" * 10_000 + ")" * 10_000, "syntax_error"),
    ("unterminated string", "get_weather(city='Paris)", "syntax_error"),
    ("NUL byte", "get_weather(city='a')\x00", "syntax_error"),
]


@pytest.mark.parametrize(("code", "problem"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_python_hostile_code_is_a_problem_not_an_exception(code: str, problem: str) -> None:
    calls, found = python_calls(code, KNOWN)
    assert found == problem and calls == []


def test_python_int_literal_too_long_to_write_out_is_kept_as_source() -> None:
    code = "get_weather(0x" + "f" * 20_000 + ")"
    [call], found = python_calls(code, KNOWN)
    assert found is None and call.arguments == {"args": [code[12:-1][:2_000]]}
    t = build_trajectory(_with_tools(_code_llm("llm1", "step1", 2, code)), CFG)
    findings, _ = Detectors(DetectorsConfig()).evaluate(t)
    assert not [f for f in findings if f.kind == "evaluation_error"]


def test_python_too_many_calls_are_cut() -> None:
    calls, problem = python_calls("get_weather(city='a')\n" * (MAX_CALLS * 3), KNOWN)
    assert problem == "too_many_calls" and len(calls) == MAX_CALLS


# --- shell ----------------------------------------------------------------------------------


SHELL = [
    ("list and pipeline", 'cd /repo && grep -n "a|b" x.py | head -5; ls',
     [["cd", "/repo"], ["grep", "-n", "a|b", "x.py"], ["head", "-5"], ["ls"]], False, None),
    ("newlines separate, continuations join", "ls \\\n -la\npwd",
     [["ls", "-la"], ["pwd"]], False, None),
    ("2>&1 and /dev/null are no writes", "pytest -x 2>&1 > /dev/null",
     [["pytest", "-x"]], False, None),
    ("a redirection to a file writes", "echo hi >> notes.txt", [["echo", "hi"]], True, None),
    ("here-document bodies are data", "cat <<'EOF' > f.py\nprint('don't')\nEOF\npython f.py",
     [["cat"], ["python", "f.py"]], True, None),
    ("unterminated quote", 'echo "oops', [["echo"]], False, "unterminated_quote"),
    ("too large", "ls " * MAX_COMMAND_CHARS, [], False, "too_large"),
]


@pytest.mark.parametrize(("command", "commands", "writes", "problem"), [s[1:] for s in SHELL],
                         ids=[s[0] for s in SHELL])
def test_shell_commands(command: str, commands: list[list[str]], writes: bool,
                        problem: str | None) -> None:
    assert shell_commands(command) == (commands, writes, problem)


def test_shell_too_many_words_are_cut() -> None:
    commands, _, problem = shell_commands("a; " * 10_000)
    assert problem == "too_long" and 0 < len(commands) <= 65


# --- rebuilt steps --------------------------------------------------------------------------


def _oi(kind: str, **attrs: object) -> dict[str, object]:
    return {"openinference.span.kind": kind, **attrs}


def _code_llm(name: str, parent: str, start: int, code: str) -> Span:
    reply = f"Thought: act.\n<code>\n{code}\n</code>"
    return span(name, parent, start, _oi("LLM", **{
        "llm.model_name": "gpt-4o", "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": reply}))


def _smolagents(*step_children: Span, chain_output: str = "Execution logs:\nsunny",
                status: str = "unset", message: str = "") -> Trace:
    return trace(
        span("run", None, 0, _oi("AGENT", **{"input.value": "task"}), end=100),
        span("step1", "run", 1, _oi("CHAIN", **{"output.value": chain_output}), end=90,
             status=status, message=message),
        *step_children)


def test_only_tools_the_trace_knows_are_calls() -> None:
    t = build_trajectory(_smolagents(
        _code_llm("llm1", "step1", 2, "a = get_weather(city='Paris')\nfinal_answer(a)")), CFG)
    (code,) = [s for s in t.steps if s.rebuilt]  # the block is a step; no call in it
    assert code.tool_name == CODE_TOOL and code.arguments == {
        "code": "a = get_weather(city='Paris')\nfinal_answer(a)"}
    assert code.result == "Execution logs:\nsunny" and not code.in_code
    assert t.code_actions == {"blocks": 1, "code_steps": 1}


def _calls(t: Trajectory) -> list[Step]:
    """The rebuilt steps of calls made from code (not the code steps)."""
    return [s for s in t.steps if s.rebuilt and s.tool_name != CODE_TOOL]


def _with_tools(*children: Span, **kw: object) -> Trace:
    """The trace offers its tools through smolagents.tools_names on the agent span."""
    tr = _smolagents(*children, **kw)  # type: ignore[arg-type]
    tr.spans[0].attributes["smolagents.tools_names"] = json.dumps(["get_weather",
                                                                   "final_answer"])
    return tr


def test_llm_only_code_agent_gets_rebuilt_steps_with_the_execution_logs() -> None:
    t = build_trajectory(_with_tools(
        _code_llm("llm1", "step1", 2, "a = get_weather(city='Paris')\nfinal_answer(a)")), CFG)
    llm = next(s for s in t.steps if s.kind == "llm")
    rebuilt = _calls(t)
    assert [(s.tool_name, s.arguments) for s in rebuilt] == [
        ("get_weather", {"city": "Paris"}), ("final_answer", {"args": ["a"]})]  # no schema
    assert all(s.span_id == llm.span_id and s.parent_span_id == llm.parent_span_id
               and s.index == llm.index + 2 + i and s.in_code for i, s in enumerate(rebuilt))
    assert rebuilt[0].result == "Execution logs:\nsunny"
    assert [s.tool_name for s in t.action_steps] == [CODE_TOOL]  # one step, its calls in it
    assert t.code_actions == {"blocks": 1, "code_steps": 1, "calls": 2, "steps": 2,
                              "rebuilt": 2}


def test_a_call_with_its_own_tool_span_is_not_counted_twice() -> None:
    t = build_trajectory(_with_tools(
        _code_llm("llm1", "step1", 2, "print(get_weather(city='Paris'))"),
        span("tool1", "step1", 3, _oi("TOOL", **{"tool.name": "get_weather",
                                                 "input.value": '{"city": "Paris"}'}))), CFG)
    assert [(s.tool_name, s.rebuilt, s.in_code) for s in t.tool_steps] == [
        (CODE_TOOL, True, False), ("get_weather", False, True)]
    assert t.code_actions == {"blocks": 1, "code_steps": 1, "calls": 1, "steps": 1}


def test_a_tool_span_s_unfit_kwargs_are_the_arguments_the_code_called_it_with() -> None:
    """smolagents' code agent runs get_weather(town="Paris"): its TOOL span records the call
    as {"args": [], "kwargs": {"town": "Paris"}}, which does not fit the tool's schema and is
    made unknown (it may be a framework's own keyword); the code asked for exactly that, so
    those are its arguments, a wrong-arguments call. A value the code did not ask for stays
    unknown."""
    def run(kwargs: dict[str, object]) -> Step:
        described = json.dumps({"city": {"type": "string"}})  # smolagents' tool.parameters
        t = build_trajectory(_smolagents(  # the schema: the tool span's own description
            _code_llm("llm1", "step1", 2, "print(get_weather(town='Paris'))"),
            span("tool1", "step1", 3, _oi("TOOL", **{
                "tool.name": "get_weather", "tool.parameters": described,
                "input.value": json.dumps({"args": [], "kwargs": kwargs})}))), CFG)
        return next(s for s in t.tool_steps if s.tool_name == "get_weather")

    step = run({"town": "Paris"})
    assert step.arguments == {"town": "Paris"} and "arguments" not in step.unknown
    step = run({"town": "Paris", "ctx": "<Context>"})
    assert step.arguments is None and "unparsed" in step.unknown["arguments"]


def test_where_tools_have_spans_a_call_without_one_did_not_run() -> None:
    t = build_trajectory(_with_tools(
        _code_llm("llm1", "step1", 2, "get_weather(city='Paris')\nget_weather(city='Rome')"),
        span("tool1", "step1", 3, _oi("TOOL", **{"tool.name": "get_weather",
                                                 "input.value": '{"city": "Paris"}'}))), CFG)
    assert [s.arguments for s in t.tool_steps if s.tool_name != CODE_TOOL] == [
        {"city": "Paris"}]


def test_a_failing_line_marks_its_rebuilt_call_failed() -> None:
    error = "Code execution failed at line 'get_weather(city='Atlantis')' due to: KeyError"
    t = build_trajectory(_with_tools(
        _code_llm("llm1", "step1", 2, "get_weather(city='Atlantis')"),
        status="error", message=error), CFG)
    code, step = t.tool_steps
    assert step.status == "error" and "Atlantis" in (step.error or "")
    assert code.tool_name == CODE_TOOL and code.status == "ok"  # one failure, the call's


def test_a_managed_agent_called_from_code_becomes_a_tool_step_with_its_result() -> None:
    t = build_trajectory(_with_tools(
        _code_llm("llm1", "step1", 2, "search_agent(task='find the video')"),
        span("sub", "step1", 3, _oi("AGENT", **{"agent.name": "search_agent",
                                                "output.value": "not found"}), end=50)), CFG)
    (step,) = _calls(t)
    assert (step.tool_name, step.arguments, step.result) == (
        "search_agent", {"task": "find the video"}, "not found")
    assert "search_agent" in t.tools  # offered to the model as a callable


def _chat(name: str, start: int, reply: str, history: list[dict[str, object]]) -> Span:
    return span(name, "agent", start, {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
        "gen_ai.input.messages": json.dumps(history),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
            {"type": "text", "content": reply}]}])})


def test_llm_only_shell_agent_gets_bash_steps_with_the_observation() -> None:
    say = {"role": "assistant", "parts": [{"type": "text", "content": "x"}]}
    seen = {"role": "user", "parts": [{"type": "text", "content": "<returncode>0</returncode>"}]}
    t = build_trajectory(trace(
        span("agent", None, 0, {"gen_ai.operation.name": "invoke_agent"}, end=100),
        _chat("c1", 1, "THOUGHT: look\n```bash\ngrep -n 'a|b' x.py\n```", [seen]),
        _chat("c2", 5, "done", [seen, say, seen])), CFG)
    (step,) = t.tool_steps
    assert (step.tool_name, step.arguments, step.rebuilt) == (
        "bash", {"command": "grep -n 'a|b' x.py"}, True)
    assert step.result == "<returncode>0</returncode>"


def test_last_message_text_reads_only_the_tail() -> None:
    history = [{"role": "user", "parts": [{"type": "text", "content": "a {\"role\" b"}]},
               {"role": "assistant", "parts": [{"type": "text", "content": "x"}]},
               {"role": "user", "parts": [{"type": "text", "content": "obs"}]}]
    assert last_message_text(json.dumps(history)) == "obs"
    assert last_message_text(json.dumps(history[:2])) is None  # the model spoke last
    assert last_message_text("not json") is None and last_message_text("[") is None


_ASKED = {"role": "assistant", "content": None,
          "tool_calls": [{"id": "c1", "type": "function",
                          "function": {"name": "get_weather", "arguments": "{}"}}]}


@pytest.mark.parametrize("last", [
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},  # OpenAI chat
    # GenAI parts (the conventions' ``response``; pydantic-ai's ``result``); a user message
    # of results (OpenLLMetry's Anthropic); AutoGen's function role under OpenInference
    {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "sunny"}]},
    {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "result": "sunny"}]},
    {"role": "user", "parts": [{"type": "tool_call_response", "id": "c1", "response": "sunny"}]},
    {"role": "function", "parts": [{"type": "tool_call_response", "id": "c1",
                                    "response": "sunny"}]},
    # the role after other keys, with nested objects after it (agno)
    {"id": "m3", "content": "sunny", "role": "tool", "tool_args": {"city": {"name": "P"}},
     "metrics": {"time": 1}},
    # the AI SDK (v5 and v4), Bedrock Converse (Strands), the Responses API (OpenAI Agents)
    {"role": "tool", "content": [{"type": "tool-result", "toolCallId": "c1",
                                  "output": {"type": "text", "value": "sunny"}}]},
    {"role": "tool", "content": [{"type": "tool-result", "toolCallId": "c1",
                                  "result": "sunny"}]},
    {"role": "tool", "content": [{"toolResult": {"toolUseId": "c1", "status": "success",
                                                 "content": [{"text": "sunny"}]}}]},
    {"call_id": "c1", "output": "sunny", "type": "function_call_output"},
])
def test_the_last_message_reads_a_tool_result_in_every_shape(last: dict[str, Any]) -> None:
    history = [{"role": "user", "content": "What is the weather?"}, _ASKED, last]
    assert last_message_text(json.dumps(history)) == "sunny"


def test_the_last_message_is_no_observation_when_the_model_or_nobody_said_it() -> None:
    assert last_message_text(json.dumps([{"role": "user", "content": "hi"}, _ASKED])) is None
    assert last_message_text(json.dumps([{"role": ["tool"], "content": "x"}])) is None
    assert last_message_text(json.dumps([{"type": "function_call", "output": "x"}])) is None
    # the role after more nested objects than the tries: not found, never a wrong message
    deep = {"content": "sunny", **{f"k{i}": {"v": i} for i in range(20)}, "role": "tool"}
    assert last_message_text(json.dumps([{"role": "user", "content": "q"}, deep])) is None


def test_hostile_code_in_a_reply_is_counted_and_the_trace_still_builds() -> None:
    t = build_trajectory(_with_tools(
        _code_llm("llm1", "step1", 2, "get_weather(" + "-" * 40_000 + "1)"),
        _code_llm("llm2", "step1", 3, "get_weather(city='Paris"),
        _code_llm("llm3", "step1", 4, "x = 1\n" * 10_000)), CFG)
    assert t.code_actions == {"blocks": 3, "code_steps": 3, "unparsed_too_deep": 1,
                              "unparsed_syntax_error": 1, "unparsed_too_large": 1}
    assert not _calls(t)
    assert all(len(s.arguments["code"]) <= MAX_CODE_CHARS for s in t.tool_steps)


def test_runs_without_code_actions_are_unchanged(datasets: Path) -> None:
    path = datasets / "tau-bench" / "airline" / "gpt-4o-airline.runs.json"
    for t in (build_trajectory(tr, CFG) for tr in load_path(path)):
        assert t.code_actions == {} and not any(s.rebuilt for s in t.steps)
        assert "code_actions" not in json.dumps([s.to_json() for s in t.steps])


# --- real runs ------------------------------------------------------------------------------


def test_trail_code_agent_managed_agent_call_and_reworded_searches(datasets: Path) -> None:
    """TRAIL GAIA 2cb6924c (annotated "Resource Abuse"): the CodeAgent asks its search_agent
    from code (a rebuilt step with the agent's answer), and the search agent rewords the same
    web search three times with nothing new."""
    (tr,) = load_file(datasets / "trail" / "GAIA" / "traces" /
                      "2cb6924caac94b32d2bf4b40bdf4ab51.json.gz")
    t = build_trajectory(tr, CFG)
    (call,) = _calls(t)
    assert call.tool_name == "search_agent" and call.node is None  # CodeAgent: no name
    assert str(call.arguments["task"]).startswith("Please search for and confirm the test")
    assert (call.result or "").startswith("### 1. Task outcome")
    findings, _ = Detectors(DetectorsConfig()).evaluate(t)
    (reworded,) = [f for f in findings if f.kind == "reworded_repeat"]
    assert reworded.attributes["tool"] == "web_search" and reworded.attributes["count"] == 3
    steps = {s.span_id: s for s in t.steps if s.kind == "tool"}
    assert all("Cheater" in str(steps[i].arguments) for i in reworded.span_ids)


def test_swe_bench_run_seen_only_through_llm_spans(datasets: Path) -> None:
    """A mini-swe-agent run as an instrumentation that records only LLM calls would send it
    (the loader's bash tool spans removed): every command comes back as a rebuilt step, with
    the observation the agent was told, and the loop it reveals is the same."""
    path = datasets / "swe-bench-mini-swe-agent" / "trajs" / "django__django-16899"
    (full,) = load_path(path)
    bare = Trace(full.trace_id, [s for s in full.spans if s.attributes.get(
        "gen_ai.operation.name") != "execute_tool"], full.status, source=full.source)
    with_spans, llm_only = build_trajectory(full, CFG), build_trajectory(bare, CFG)
    assert not any(s.rebuilt for s in with_spans.steps)
    assert all(s.rebuilt for s in llm_only.tool_steps)
    assert [s.arguments for s in llm_only.tool_steps] == [
        s.arguments for s in with_spans.tool_steps]
    assert [s.result for s in llm_only.tool_steps][:-1] == [
        s.result for s in with_spans.tool_steps][:-1]
    assert llm_only.code_actions["rebuilt"] == len(with_spans.tool_steps)

    def loops(t: object) -> list[tuple[str, str]]:
        found, _ = Detectors(DetectorsConfig()).evaluate(t)  # type: ignore[arg-type]
        return [(f.kind, f.message) for f in found if f.detector == "loop"]

    assert loops(llm_only) == loops(with_spans) == [(
        "repeated_action", "bash: nl -ba django/contrib/admin/checks.py | sed -n '770,785p' "
        "called 2 times in a row with identical action")]


def test_shell_fast_path_splits_as_shlex_does() -> None:
    """Commands without escapes or comments are split by a regular expression; on random
    text over the characters that matter it gives shlex's tokens (or shlex's error)."""
    import random
    import shlex

    from otel_eval.evaluate.trajectory import shell

    def lexed(text: str) -> object:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|<>\n")
        lexer.whitespace, lexer.whitespace_split = " \t\r", True
        try:
            return list(lexer)
        except ValueError:
            return "error"

    def fast(text: str) -> object:
        try:
            return list(shell._tokens(text))
        except ValueError:
            return "error"

    rng = random.Random(13)
    for _ in range(5_000):
        text = "".join(rng.choice("ab -;&|<>\n\t'\"") for _ in range(rng.randint(0, 24)))
        assert fast(text) == lexed(text), text


def test_python_block_naming_no_known_tool_is_not_parsed() -> None:
    assert python_calls("print(1 +)", KNOWN) == ([], None)  # not even a syntax error


def test_a_reply_with_tool_calls_acts_through_them_not_through_its_code() -> None:
    """An LLM-only function-calling agent whose reply also shows a code example: the call is
    rebuilt once, from the tool call, not again from the example."""
    reply = [{"role": "assistant", "parts": [
        {"type": "text", "content": "Like this:\n```python\nget_weather(city='Rome')\n```"},
        {"type": "tool_call", "id": "c1", "name": "get_weather",
         "arguments": {"city": "Paris"}}]}]
    t = build_trajectory(trace(
        span("agent", None, 0, {"gen_ai.operation.name": "invoke_agent"}, end=100),
        span("c1", "agent", 1, {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
            "gen_ai.output.messages": json.dumps(reply),
            "gen_ai.tool.definitions": json.dumps([{"type": "function", "name": "get_weather",
                                                    "parameters": {}}])})), CFG)
    assert [(s.tool_name, s.arguments) for s in t.tool_steps] == [
        ("get_weather", {"city": "Paris"})]
    assert t.code_actions == {}


def test_every_code_block_is_a_step_for_budgets_and_the_loop_rules() -> None:
    """A CodeAgent run of 4 blocks (one calls a known tool) is 4 steps, each block's step
    carrying its normalised code and its Step span's execution logs; the same tree printed
    by three rewritten blocks is a circling loop on the first and last of them."""
    tree = "Execution logs:\nsrc/\n  core.py\n  utils.py\ntests/\n  test_core.py\nsetup.py\n"
    codes = ["import os\n# look\nfor root, dirs, files in os.walk('.'):\n    print(root, files)",
             "import os\nfor r, d, f in os.walk('.'):\n    print(r, f)",
             "import os\n\nfor root, dirs, files in os.walk('./'):\n    print(root, files)",
             "print(get_weather(city='Paris'))"]
    spans: list[Span] = []
    for i, code in enumerate(codes):
        spans += [span(f"block{i}", "run", 10 * i + 1, _oi("CHAIN", **{
                      "output.value": tree if i < 3 else "Execution logs:\nsunny"}),
                       end=10 * i + 9),
                  _code_llm(f"llm{i}", f"block{i}", 10 * i + 2, code)]
    tr = _with_tools(*spans)
    t = build_trajectory(tr, CFG)
    steps = t.action_steps
    assert [s.tool_name for s in steps] == [CODE_TOOL] * 4
    assert steps[0].arguments == {  # the comment line dropped
        "code": "import os\nfor root, dirs, files in os.walk('.'):\n    print(root, files)"}
    assert steps[2].arguments["code"].count("\n") == 2  # the blank line dropped
    assert steps[1].result == tree and steps[3].result == "Execution logs:\nsunny"
    assert [s.tool_name for s in _calls(t)] == ["get_weather"]
    assert budget.measure(t, {"steps"})["steps"] == 4  # not 5: the call is in its block
    # the blocks are steps, not tool calls: the one call of a known tool is
    assert t.counts()["tool_calls"] == budget.measure(t, {"tool_calls"})["tool_calls"] == 1
    findings, _ = Detectors(DetectorsConfig()).evaluate(t)
    (circle,) = [f for f in findings if f.kind == "circling"]
    assert circle.span_ids == [steps[0].span_id, steps[2].span_id]


# --- code given to an interpreter-like tool --------------------------------------------------


INTERPRETERS = [
    ("python_interpreter", None, True), ("execute_code", None, True),
    ("run_python", None, True), ("execute_python_code", None, True),
    ("PythonREPL", None, True), ("CodeInterpreterTool", None, True), ("python", None, True),
    ("search_code", None, False), ("format_code", {"properties": {"code": {}}}, False),
    ("bash", None, False), ("execute_command", None, False), ("get_weather", None, False),
    # the offered schema: an executing word and one parameter named as code is
    ("run_it", {"properties": {"code": {"type": "string"}}}, True),
    ("run_it", {"properties": {"code": {}, "timeout": {}}}, False),
]


@pytest.mark.parametrize(("name", "schema", "expected"), INTERPRETERS,
                         ids=[f"{n}-{bool(s)}" for n, s, _ in INTERPRETERS])
def test_interpreter_like_tools_by_declared_signals(name: str, schema: object,
                                                    expected: bool) -> None:
    assert is_interpreter(name, schema) is expected


def test_a_long_tool_name_is_not_kept_whole_by_the_word_cache() -> None:
    """The tool name is span content: the memo of its words (1,024 entries, for the life of
    the worker) holds its first ``MAX_TOOL_NAME`` characters, never the whole name; 1,024
    names of a MiB each were 1 GiB held after their traces were gone."""
    names = [f"python_interpreter_{i}_" + "x" * 100_000 for i in range(4)]
    before = [sys.getrefcount(n) for n in names]
    assert all(is_interpreter(n) for n in names)
    assert [sys.getrefcount(n) for n in names] == before  # no reference kept to any


def _fc_trace(*codes: str, tool: str = "execute_code", children: list[Span] | None = None,
              error: str = "") -> Trace:
    """A function-calling agent (GenAI spans) calling an interpreter tool with each code."""
    definitions = [{"type": "function", "name": tool, "parameters": {
                       "type": "object", "properties": {"code": {"type": "string"}}}},
                   {"type": "function", "name": "get_weather", "parameters": {
                       "type": "object", "properties": {"city": {"type": "string"}}}}]
    spans = [span("agent", None, 0, {"gen_ai.operation.name": "invoke_agent",
                                     "gen_ai.agent.name": "coder"}, end=1000)]
    for i, code in enumerate(codes):
        spans.append(span(f"chat{i}", "agent", 10 * i + 1, {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
            "gen_ai.tool.definitions": json.dumps(definitions)}))
        spans.append(span(f"run{i}", "agent", 10 * i + 5, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
            "gen_ai.tool.call.arguments": json.dumps({"code": code}),
            "gen_ai.tool.call.result": "sunny"}, status="error" if error else "unset",
            message=error))
    return trace(*spans, *(children or []))


def test_code_given_to_an_interpreter_tool_is_read_into_the_calls_it_makes() -> None:
    t = build_trajectory(_fc_trace("for c in ['Paris', 'Rome']:\n    pass\n"
                                   "print(get_weather(city='Paris'))\n"
                                   "print('get_weather(city=\"Oslo\")')\n"
                                   "get_weather('Rome')"), CFG)
    run, *calls = t.tool_steps
    assert run.tool_name == "execute_code" and not run.rebuilt and not run.in_code
    assert [(s.tool_name, s.arguments) for s in calls] == [  # a call in a string is none
        ("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]
    assert all(s.rebuilt and s.in_code and s.span_id == run.span_id
               and s.parent_span_id == run.span_id and s.result == "sunny" for s in calls)
    assert [s.index for s in t.steps] == list(range(len(t.steps)))
    assert t.action_steps == [run]  # one step; the interpreter and the 2 calls are tool calls
    assert t.counts()["tool_calls"] == 3
    assert t.code_actions == {"interpreter_blocks": 1, "calls": 2, "steps": 2, "rebuilt": 2}


def test_a_tool_span_under_the_interpreter_is_the_call_and_compared_by_the_loop_rules() -> None:
    child = span("weather", "run0", 6, {"gen_ai.operation.name": "execute_tool",
                                         "gen_ai.tool.name": "get_weather",
                                         "gen_ai.tool.call.arguments": '{"city": "Paris"}'})
    t = build_trajectory(_fc_trace("x = get_weather(city='Paris')\nprint(x)",
                                   children=[child]), CFG)
    assert [(s.tool_name, s.rebuilt, s.in_code) for s in t.tool_steps] == [
        ("execute_code", False, False), ("get_weather", False, True)]
    assert t.code_actions == {"interpreter_blocks": 1, "calls": 1, "steps": 1}


def test_the_same_call_from_two_interpreter_blocks_is_a_repeated_call() -> None:
    t = build_trajectory(_fc_trace("print(get_weather(city='Paris'))",
                                   "w = get_weather(city='Paris')\nprint(w.upper())"), CFG)
    findings, _ = Detectors(DetectorsConfig()).evaluate(t)
    (repeat,) = [f for f in findings if f.detector == "loop"]
    assert repeat.kind == "repeated_call" and "get_weather" in repeat.message
    # different calls from the same code are none
    t = build_trajectory(_fc_trace(*(f"print(get_weather(city='{c}'))"
                                     for c in ("Paris", "Rome", "Oslo"))), CFG)
    assert not [f for f in Detectors(DetectorsConfig()).evaluate(t)[0] if f.detector == "loop"]


def test_hostile_code_given_to_an_interpreter_is_counted_not_raised() -> None:
    t = build_trajectory(_fc_trace("get_weather(city='a')\n" * (MAX_CODE_CHARS // 20),
                                   "get_weather(" + "(" * 10_000, "get_weather(" + "-" * 40_000
                                   + "1)"), CFG)
    assert [s.tool_name for s in t.tool_steps] == ["execute_code"] * 3
    assert t.code_actions == {"interpreter_blocks": 3, "unparsed_too_large": 1,
                              "unparsed_syntax_error": 1, "unparsed_too_deep": 1}


def test_which_known_tool_a_block_names_is_one_scan_of_its_identifiers() -> None:
    known = {f"tool_{i}" for i in range(5_000)} | {"get_weather", "web-search"}
    calls, problem = python_calls("print(get_weather(city='Paris'))", known)
    assert problem is None and [c.name for c in calls] == ["get_weather"]
    # a tool named by no identifier cannot be called, nor a name inside another name
    assert python_calls("web-search('x') +", known) == ([], None)
    assert python_calls("my_get_weather_x(1) +", known) == ([], None)


def test_the_tail_message_is_checked_on_its_own_text_not_the_whole_input(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # An agent resends its history on every call: checking each tail against the whole input
    # scanned it again per step (quadratic in the run). Only the message decoded is checked.
    seen: list[int] = []
    real = code_actions.checked
    monkeypatch.setattr(code_actions, "checked", lambda v, t: seen.append(len(t)) or real(v, t))
    old = [{"role": "user", "content": "[" * 80 + "x" * 10_000}] * 20
    raw = json.dumps([*old, {"role": "tool", "content": "obs \ud800"}])
    assert last_message_text(raw) == "obs \ufffd"  # a lone surrogate in it is still fixed
    assert seen and max(seen) < 100
