import dataclasses
import json

import pytest
from detector_factory import bash, kinds, llm, tool, traj

from otel_eval.app.config import Config
from otel_eval.base.model import Span, Trace
from otel_eval.base.steps import Step
from otel_eval.evaluate.conventions.values import MAX_OUTPUT_CALLS
from otel_eval.evaluate.detectors import loop
from otel_eval.evaluate.detectors.calls import Context, calls
from otel_eval.evaluate.detectors.config import DetectorsConfig, LoopConfig
from otel_eval.evaluate.evaluator import Evaluator

SAME = ("The answer is not in these results, so I will search again with the same query. "
        "If that does not work either, I will look at the documentation index and try the "
        "search tool one more time with the same words as before.")
# the same, in Chinese and in Japanese (no spaces between words)
ZH_SAME = ("这些结果里没有答案，所以我会用同样的查询再搜索一次。"  # noqa: RUF001
           "如果还是不行，我会查看文档索引，再用和之前相同的词试一次搜索工具。")  # noqa: RUF001
JA_SAME = ("これらの結果には答えがないので、同じクエリでもう一度検索します。"
           "それでもだめなら、ドキュメントの索引を見て、前と同じ言葉で検索ツールをもう一度試します。")



def _dspy(thought: str, city: str) -> Step:
    """A DSPy ReAct turn in its ChatAdapter template (field markers, tool name, JSON args),
    its reply text read (``Step.answer``) as from the LLM span's output message."""
    text = (f"[[ ## next_thought ## ]]\n{thought}\n\n[[ ## next_tool_name ## ]]\nget_weather"
            f'\n\n[[ ## next_tool_args ## ]]\n{{"city": "{city}"}}\n\n[[ ## completed ## ]]')
    return dataclasses.replace(llm(text), answer=text)


THOUGHT = "I will look up the weather in the next city the user asked about, then continue."


def _code(source: str) -> Step:
    """A code block made a step (smolagents' python_interpreter, rebuilt from the reply)."""
    return dataclasses.replace(tool("python_interpreter", {"code": source}, "sunny"),
                               rebuilt=True, code_block=True)


def _in_code(name: str, city: str) -> Step:
    """A call of a known tool made from the block before it."""
    return dataclasses.replace(tool(name, {"city": city}, f"sunny in {city}"), in_code=True)


def _unknown() -> Step:
    """A step whose span's marker held a value no convention defines."""
    return dataclasses.replace(llm("x"), kind="other", unknown={"kind": "marker not defined"})


def _unrecorded(name: str) -> Step:
    """A call whose arguments were not recorded."""
    return dataclasses.replace(tool(name, {}, "r"), arguments=None)


CASES: list[tuple[str, list[Step], list[str]]] = [
    ("llm-tool-llm alternation is not a loop",
     [llm("plan"), tool("search", {"q": "a"}, "r1"), llm("next"), tool("read", {"p": 1}, "x"),
      llm("done")], []),
    ("(a) back-to-back identical calls, llm steps between",
     [llm("a"), tool("search_docs", {"q": "x"}, "r"), llm("b"),
      tool("search_docs", {"q": "x"}, "r")], ["loop/repeated_call"]),
    ("(a) canonical: key order and whitespace do not matter",
     [tool("f", {"a": 1, "b": "x  y"}), tool("f", {"b": "x y", "a": 1})],
     ["loop/repeated_call"]),
    ("(a) arguments given as JSON text are canonicalized too",
     [tool("f", '{"b": 2, "a": 1}'), tool("f", {"a": 1, "b": 2})], ["loop/repeated_call"]),
    ("different arguments are different calls",
     [tool("f", {"a": 1}), tool("f", {"a": 2}), tool("f", {"a": 3})], []),
    ("(b) same call, same result, only reads between",
     [tool("get_user", {"id": 1}, "u"), tool("get_order", {"id": 2}, "o"),
      tool("get_user", {"id": 1}, "u")], ["loop/no_progress"]),
    ("(b) not flagged when the result changed",
     [tool("get_status", {"id": 1}, "pending"), tool("get_order", {"id": 2}, "o"),
      tool("get_status", {"id": 1}, "done")], []),
    ("(b) not flagged after a state change (re-run tests after an edit)",
     [bash("pytest -x", "1 failed"), tool("edit_file", {"path": "a.py", "new": "x"}),
      bash("pytest -x", "1 failed")], []),
    ("(b) outside the window is not flagged",
     [tool("get_user", {"id": 1}, "u"),
      *[tool("get_item", {"id": i}, str(i)) for i in range(10)],
      tool("get_user", {"id": 1}, "u")], []),
    ("(c) cycle A B A B A B",
     [tool("open", {"p": 1}, "x"), tool("scroll", {}, "y")] * 3, ["loop/cycle"]),
    ("(c) two occurrences are not a cycle (retrying a procedure)",
     [tool("open", {"p": 1}, "x"), tool("write", {}, "y")] * 2, []),
    ("(c) period-3 cycle",
     [tool("a", {}, "1"), tool("b", {}, "2"), tool("c", {}, "3")] * 3, ["loop/cycle"]),
    ("(d) stagnation: three near-identical LLM outputs",
     [llm(SAME), llm(SAME + "!"), llm(SAME)], ["loop/stagnation"]),
    ("(d) stagnation that only repeats flagged calls is reported once, as the call loop",
     [llm(SAME), tool("s", {"q": 1}, "r"), llm(SAME), tool("s", {"q": 1}, "r"), llm(SAME),
      tool("s", {"q": 1}, "r")], ["loop/repeated_call"]),
    ("(d) stagnation with unflagged calls in between is reported",
     [llm(SAME), tool("s", {"q": 1}, "r1"), llm(SAME), tool("s", {"q": 2}, "r2"), llm(SAME),
      tool("s", {"q": 3}, "r3")], ["loop/stagnation"]),
    ("(d) outputs sharing a framework's template but calling the tool for six cities: not alike",
     [_dspy(f"I will look up the weather in {c}.", c)
      for c in ("Paris", "London", "Tokyo", "Berlin", "Rome", "Madrid")], []),
    ("(d) ... even when the thought is the same and only the arguments change",
     [_dspy(THOUGHT, c) for c in ("Paris", "London", "Tokyo", "Berlin")], []),
    ("(d) the same templated turn three times is stagnation",
     [_dspy(THOUGHT, "Paris") for _ in range(3)], ["loop/stagnation"]),
    ("(d) templated turns whose free text differs by one word in forty are near-identical",
     [_dspy(SAME + suffix, "Paris") for suffix in ("", " Now.", "")], ["loop/stagnation"]),
    ("(d) a paragraph and the same with a line added are not alike (something new was said)",
     [llm(SAME), llm(SAME + "\nThe index lists a page on search syntax."), llm(SAME)], []),
    ("(d) a step of unknown kind between outputs may have been another output: no run",
     [llm(SAME), _unknown(), llm(SAME), llm(SAME)], []),
    ("(d) outputs followed by flagged calls, or by calls with unrecorded arguments (which may "
     "have been the same call): reported once, as the call loop",
     [llm(SAME), tool("s", {"q": 1}, "r"), llm(SAME), tool("s", {"q": 1}, "r"), llm(SAME),
      tool("s", {"q": 1}, "r"), llm(SAME), _unrecorded("s")], ["loop/repeated_call"]),
    ("(d) ... or by a call whose arguments were cut at a length limit (which may have been "
     "the same call): reported once, as the call loop",
     [llm(SAME), tool("s", {"q": 1}, "r"), llm(SAME), tool("s", {"q": 1}, "r"), llm(SAME),
      tool("s", {"q": 1}, "r"), llm(SAME), tool("s", '{"q": "what is the weather forecast for',
                                                "r")], ["loop/repeated_call"]),
    ("(d) two identical outputs are not stagnation",
     [llm(SAME), llm(SAME)], []),
    # Chinese and Japanese are written without spaces: each character is a word to compare
    ("(d) stagnation in Chinese: replies that differ in one character",
     [llm(f"{ZH_SAME}这是第{n}次尝试。") for n in (1, 2, 3)], ["loop/stagnation"]),
    ("(d) stagnation in Japanese: replies that differ in one character",
     [llm(f"{JA_SAME}試行{n}回目です。") for n in (1, 2, 3)], ["loop/stagnation"]),
    ("(d) different Chinese replies are not alike",
     [llm(ZH_SAME), llm("东京今天晴，最高气温二十五度，最低气温十八度，适合外出。"),  # noqa: RUF001
      llm("我已经为您预订了明天上午十点飞往大阪的航班，座位靠窗。")], []),  # noqa: RUF001
    ("(d) short outputs ignored",
     [llm("ok"), llm("ok"), llm("ok")], []),
    ("(d) a Chinese sentence of thirteen characters is no short output",
     [llm("我会再搜索一次东京的天气。")] * 3, ["loop/stagnation"]),
    ("(d) short Chinese outputs ignored", [llm("好的。")] * 3, []),
    ("(e) shell: same command back to back",
     [bash("ls -la  src"), bash("ls -la src")], ["loop/repeated_action"]),
    ("(e) shell: same read-only command with the same output, reads between",
     [bash("cat a.py", "A"), bash("grep -n foo b.py", "B"), bash("cat a.py", "A")],
     ["loop/no_progress"]),
    ("(e) shell: a write between is a state change",
     [bash("python t.py", "E"), bash("sed -i 's/a/b/' a.py", ""), bash("python t.py", "E")],
     []),
    ("(e) python code action text",
     [tool("python_interpreter", {"code": "print(x)\n"}, "1"),
      tool("python_interpreter", {"code": "print(x)"}, "1")], ["loop/repeated_action"]),
    ("(a) a code step stands for its calls: the same call from two blocks is a repeat",
     [_code("x = get_weather(city='Paris')\nprint(x)"), _in_code("get_weather", "Paris"),
      _code("print(get_weather(city='Paris'))"), _in_code("get_weather", "Paris")],
     ["loop/repeated_call"]),
    ("(a) the same block making the same call 4 times is a repeated call, not a cycle",
     [_code("print(get_weather(city='Paris'))"), _in_code("get_weather", "Paris")] * 4,
     ["loop/repeated_call"]),
    ("the same block making different calls is no loop",
     [s for c in ("Paris", "Rome", "Oslo") for s in (
         _code("print(get_weather(city=c))"), _in_code("get_weather", c))], []),
    ("a tool called from inside code is not a step of its own",
     [tool("python_interpreter", {"code": "web_search('a')"}, "r"),
      tool("web_search", {"q": "a"}, "r", parent=1),
      tool("python_interpreter", {"code": "web_search('b')"}, "r"),
      tool("web_search", {"q": "a"}, "r", parent=3)], []),
]


@pytest.mark.parametrize(("steps", "expected"), [(s, e) for _, s, e in CASES],
                         ids=[c[0] for c in CASES])
def test_loop_cases(steps: list[Step], expected: list[str]) -> None:
    found = loop.detect(traj(*steps), DetectorsConfig(), Context())
    assert kinds(found) == expected


def test_repeated_call_finding_fields() -> None:
    t = traj(llm("a"), tool("search_docs", {"q": "x"}, "r"), tool("search_docs", {"q": "x"}, "r"),
             tool("search_docs", {"q": "x"}, "r"))
    (f,) = loop.detect(t, DetectorsConfig(), Context())
    assert f.severity == "error"
    assert f.message == "search_docs called 3 times in a row with identical arguments"
    assert f.step_indexes == [2, 3, 4]
    assert f.span_ids == [t.steps[i].span_id for i in (2, 3, 4)]
    assert f.attributes["count"] == 3 and f.attributes["same_result"] is True



def test_a_repeat_whose_results_were_not_recorded_does_not_say_they_were_the_same() -> None:
    """Content capture off: no result recorded. ``same_result`` said True, an unknown read as
    "the same result"; it is left out, and given when every result is known."""
    t = traj(llm("a"), tool("search_docs", {"q": "x"}, None), tool("search_docs", {"q": "x"}, None))
    (f,) = loop.detect(t, DetectorsConfig(), Context())
    assert f.kind == "repeated_call" and "same_result" not in f.attributes
    t = traj(llm("a"), tool("search_docs", {"q": "x"}, "r1"), tool("search_docs", {"q": "x"}, "r2"),
             tool("search_docs", {"q": "x"}, "r2"))
    (f,) = loop.detect(t, DetectorsConfig(), Context())
    assert f.attributes["same_result"] is False

def test_cycle_threshold_configurable() -> None:
    cfg = DetectorsConfig(loop=LoopConfig(cycle_min_repeats=2))
    steps = [tool("open", {"p": 1}, "x"), tool("write", {}, "y")] * 2
    (f,) = loop.detect(traj(*steps), cfg, Context())
    assert f.kind == "cycle" and f.attributes == {
        "period": 2, "repeats": 2, "pattern": ["open", "write"]}


def _by(node: str, step: Step) -> Step:
    step.node = node
    return step


def test_the_same_call_by_two_agents_is_no_repeat() -> None:
    """smolagents' managed agent answers with final_answer, then the coordinator with the same
    text: two agents, one call each (the multi_agent conformance recording)."""
    steps = [_by("weather_agent", tool("get_weather", {"city": "Paris"}, "sunny")),
             _by("weather_agent", tool("final_answer", {"answer": "It is sunny."})),
             _by("triage_agent", tool("final_answer", {"answer": "It is sunny."}))]
    assert loop.detect(traj(*steps), DetectorsConfig(), Context()) == []


def test_an_agent_repeating_itself_between_another_agents_calls_is_a_loop() -> None:
    """Each agent's calls are compared with its own: the coordinator's two identical
    delegations are back to back for it, whatever the sub-agent did in between."""
    ask = {"question": "weather in Paris?"}
    steps = [_by("triage_agent", tool("ask_weather_agent", ask, "sunny")),
             _by("weather_agent", tool("get_weather", {"city": "Paris"}, "sunny")),
             _by("triage_agent", tool("ask_weather_agent", ask, "sunny"))]
    t = traj(*steps)
    (f,) = loop.detect(t, DetectorsConfig(), Context())
    asked = [s.index for s in t.steps if s.tool_name == "ask_weather_agent"]
    assert (f.kind, f.step_indexes) == ("repeated_call", asked)


def test_configured_tool_names_are_case_insensitive() -> None:
    """``read_only_prefixes`` are documented case-insensitive (and tool names are lowercased
    before ``action_tools`` is asked): a prefix or an action tool configured with a capital
    never matched, so the reads between two identical lookups counted as state changes and
    a shell tool's repeated command was compared as arguments."""
    cfg = DetectorsConfig(loop=LoopConfig(read_only_prefixes=("Get",)))
    steps = [tool("get_user", {"id": 1}, "u"), tool("Get_Order", {"id": 2}, "o"),
             tool("get_user", {"id": 1}, "u")]
    assert kinds(loop.detect(traj(*steps), cfg, Context())) == ["loop/no_progress"]
    cfg = DetectorsConfig(loop=LoopConfig(action_tools=("Run_Shell",)))
    shell = [tool("run_shell", {"command": "ls  -la"}, "x"),
             tool("run_shell", {"command": "ls -la"}, "x")]
    (f,) = loop.detect(traj(*shell), cfg, Context())
    assert f.kind == "repeated_action"


@pytest.mark.parametrize("between", ["checkout_cart", "Checkout", "checkpoint_save",
                                     "listen_for_events", "showcase_item"])
def test_a_tool_whose_name_only_starts_with_a_read_only_word_changes_state(
        between: str) -> None:
    """``read_only_prefixes`` name the first word of a tool's name: ``checkout_cart`` starts
    with the letters of "check" but is no check, so the same lookup around it is no loop
    (it read as read-only and made a ``no_progress`` error)."""
    steps = [tool("get_cart", {"id": 1}, "empty"), tool(between, {"id": 1}, "ok"),
             tool("get_cart", {"id": 1}, "empty")]
    assert kinds(loop.detect(traj(*steps), DetectorsConfig(), Context())) == []


@pytest.mark.parametrize("between", ["check_status", "getUser", "CheckOrder", "page_down",
                                     "TextInspectorTool", "VisitTool", "inspect_file_as_text",
                                     "search2", "list-files", "think"])
def test_a_tool_named_with_a_read_only_word_first_is_read_only(between: str) -> None:
    """The configured words match the name's first word, however its words are joined
    (``_``, ``-``, camelCase, a digit); a prefix that ends in a separator (``page_``) or
    names several words run together (``textinspector``) matches as it is written."""
    steps = [tool("get_cart", {"id": 1}, "empty"), tool(between, {"id": 1}, "ok"),
             tool("get_cart", {"id": 1}, "empty")]
    assert kinds(loop.detect(traj(*steps), DetectorsConfig(), Context())) \
        == ["loop/no_progress"]


# OpenLLMetry records each call the model asked for in its own attribute
# (gen_ai.completion.0.tool_calls.0.arguments): at an attribute length limit the arguments of
# three searches for three cities read the same start, the text of an object never closed
CUT = [json.dumps({"query": f"what is the weather forecast for tomorrow in {city}"})[:48]
       for city in ("Paris", "London", "Tokyo")]


def cut_calls_trace(session: str | None = None) -> Trace:
    tid = "ab" * 16
    spans = [Span(tid, "f" * 16, None, "agent", 0, 1000,
                  attributes={"traceloop.span.kind": "agent", "traceloop.entity.name": "a",
                              **({"traceloop.association.properties.session_id": session}
                                 if session else {})})]
    for n, args in enumerate(CUT):
        attrs = {"llm.request.type": "chat", "gen_ai.system": "openai",
                 "gen_ai.request.model": "gpt-4o", "gen_ai.completion.0.role": "assistant",
                 "gen_ai.completion.0.finish_reason": "tool_calls",
                 "gen_ai.completion.0.tool_calls.0.name": "search",
                 "gen_ai.completion.0.tool_calls.0.id": f"c{n}",
                 "gen_ai.completion.0.tool_calls.0.arguments": args}
        spans.append(Span(tid, f"{n + 1:016x}", "f" * 16, "openai.chat", 10 + n * 10,
                          15 + n * 10, attributes=attrs))
    return Trace(tid, spans, "complete")


def test_calls_whose_arguments_were_cut_at_a_length_limit_are_no_repeat() -> None:
    assert len(set(CUT)) == 1
    ev = Evaluator(Config()).evaluate(cut_calls_trace())
    assert ev is not None
    assert [s.arguments for s in ev.trajectory.tool_steps] == CUT  # as the model's calls say
    assert not [f.message for f in ev.findings if f.detector == "loop"]


@pytest.mark.parametrize("steps", [
    [tool("search", CUT[0], "r") for _ in range(3)],
    [tool("search", CUT[0], "r"), tool("read", {"p": 1}, "x"), tool("search", CUT[0], "r")],
    [s for i in range(3) for s in (tool("search", CUT[0], f"r{i}"),
                                   tool("open", {"p": 1}, f"x{i}"))],
], ids=["repeated_call", "no_progress", "cycle"])
def test_cut_arguments_are_keyed_as_unknown(steps: list[Step]) -> None:
    assert kinds(loop.detect(traj(*steps), DetectorsConfig(), Context())) == []


def test_results_cut_at_a_length_limit_are_not_the_same_result() -> None:
    """A status polled while it changed, its JSON result cut at an attribute length limit
    before the field that changed: the same start is not the same result (no progress is
    concluded only from results known whole)."""
    head = '{"job": "build-42", "owner": "ci", "queue": "default", "status": "'
    polls = [tool("get_job", {"id": 42}, (head + state + '"}')[:48])
             for state in ("queued", "running", "done")]
    reads = [tool("get_log", {"id": 42, "page": n}, f"line {n}") for n in range(2)]
    steps = [polls[0], reads[0], polls[1], reads[1], polls[2]]
    assert kinds(loop.detect(traj(*steps), DetectorsConfig(), Context())) == []


def _outputs(*outputs: list[tuple[str, str]]) -> Trace:
    """A GenAI run of LLM outputs asking for calls (tool, city), each rebuilt as a step."""
    tid = "cd" * 16
    llm = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
    spans = [Span(tid, "f" * 16, None, "agent", 0, 1000,
                  attributes={"gen_ai.operation.name": "invoke_agent",
                              "gen_ai.agent.name": "a"})]
    for n, asked in enumerate(outputs):
        parts = [{"type": "tool_call", "id": f"o{n}c{i}", "name": name,
                  "arguments": {"city": city}} for i, (name, city) in enumerate(asked)]
        spans.append(Span(tid, f"{n + 1:016x}", "f" * 16, "chat", 10 + n * 10, 15 + n * 10,
                          attributes={**llm, "gen_ai.output.messages": json.dumps(
                              [{"role": "assistant", "parts": parts}])}))
    return Trace(tid, spans, "complete")


def _loop_kinds(trace: Trace) -> list[str]:
    ev = Evaluator(Config()).evaluate(trace)
    assert ev is not None
    return [f.kind for f in ev.findings if f.detector == "loop"]


def _cities(n: int) -> list[tuple[str, str]]:
    return [("get_weather", f"city {i}") for i in range(n)]


def test_a_call_after_an_output_whose_calls_were_cut_is_no_repeat_of_its_last_kept() -> None:
    """One output asked for more than MAX_OUTPUT_CALLS calls: the first ones are read, the
    rest are no steps. The next output's call equal to the last one read is not back to back
    with it: the calls cut (unknown) came between them."""
    last = ("get_weather", f"city {MAX_OUTPUT_CALLS - 1}")
    ev = Evaluator(Config()).evaluate(_outputs(_cities(MAX_OUTPUT_CALLS + 5), [last]))
    assert ev is not None
    first, second = ev.trajectory.llm_steps
    assert first.calls_unknown and not second.calls_unknown
    assert len(ev.trajectory.tool_steps) == MAX_OUTPUT_CALLS + 1
    assert not [f.message for f in ev.findings if f.detector == "loop"]
    # an output whose calls were all read: the same call next is back to back
    assert _loop_kinds(_outputs(_cities(MAX_OUTPUT_CALLS), [last])) == ["repeated_call"]


@pytest.mark.parametrize(("steps", "cut_at", "kind"), [
    ([tool("get_user", {"id": 1}, "u"), tool("get_order", {"id": 2}, "o"),
      tool("get_user", {"id": 1}, "u")], 1, "no_progress"),
    ([tool("open", {"p": 1}, "x"), tool("scroll", {}, "y")] * 3, 1, "cycle"),
], ids=["no_progress", "cycle"])
def test_rules_b_and_c_see_no_run_across_an_outputs_cut_calls(steps: list[Step], cut_at: int,
                                                             kind: str) -> None:
    """Calls an output asked for past MAX_OUTPUT_CALLS are no steps: what came between the
    last call read from it (Call.cut_after) and the next is unknown, so no rule concludes
    from the calls on both sides being the only ones between (b) or in a row (c)."""
    cfg = DetectorsConfig()
    cs = calls(traj(*steps), cfg.loop, cfg.tool_call)
    rules = (loop.no_progress, loop.cycles)
    assert [f.kind for rule in rules for f in rule(cs, cfg.loop)] == [kind]
    cs[cut_at] = dataclasses.replace(cs[cut_at], cut_after=True)
    assert [f.kind for rule in rules for f in rule(cs, cfg.loop)] == []


VIDEO = ["youtube video 1htKBjuUWec transcript teal'c isn't that hot",
         "transcript of youtube video 1htKBjuUWec teal'c isn't that hot",
         "1htKBjuUWec youtube transcript teal'c response isn't that hot"]
EMPTY = "Address: google: {q}\nA Google search for '{q}' found 0 results.\nNo results found."
TREE = "src/\n  pkg/\n    __init__.py\n    core.py\n    utils.py\ntests/\n  test_core.py\n"


@pytest.mark.parametrize(("steps", "kind"), [
    ([tool("web_search", {"query": q}, EMPTY.format(q=q)) for q in VIDEO], "reworded_repeat"),
    ([bash(c, TREE) for c in ("ls -R src tests", "ls -R ./src ./tests", "ls -R src/ tests/")],
     "circling"),
], ids=["f", "g"])
@pytest.mark.parametrize("cut_at", [0, 1])
def test_rules_f_and_g_link_no_calls_across_an_outputs_cut_calls(steps: list[Step], kind: str,
                                                                cut_at: int) -> None:
    """As for (b): the calls an output asked for past MAX_OUTPUT_CALLS are unknown, maybe a
    state change, so no call before the cut (Call.cut_after) is linked with one after it: the
    reworded repeat (f) or the circle (g) of three calls is two calls on one side."""
    cfg = DetectorsConfig()
    cs = calls(traj(*steps), cfg.loop, cfg.tool_call)

    def found() -> list[str]:
        return [f.kind for f in (*loop.reworded_repeats(cs, cfg.loop),
                                 *loop.circling(cs, cfg.loop, set()))]

    assert found() == [kind]
    cs[cut_at] = dataclasses.replace(cs[cut_at], cut_after=True)
    assert found() == []


WAITING = "The build job has not finished yet, so I will check its status once more."


def _polls(*states: str) -> list[Step]:
    """An agent polling a job: each reply the same words and the same call, its status next."""
    return [s for state in states for s in (
        llm(WAITING, calls=[("get_job_status", {"job_id": "build-42"})], finish="tool_calls"),
        tool("get_job_status", {"job_id": "build-42"}, json.dumps({"status": state})))]


@pytest.mark.parametrize(("states", "expected"), [
    (("queued", "running", "running", "succeeded"), []),
    (("running", "succeeded"), []),
    (("running", "running", "running"), ["loop/repeated_call"]),
    (("running", "succeeded", "succeeded"), ["loop/repeated_call"]),
], ids=["poll", "two_polls", "never_changed", "after_it_changed"])
def test_a_poll_that_ends_when_its_result_changes_is_no_loop(states: tuple[str, ...],
                                                             expected: list[str]) -> None:
    """Loop rules flag an agent repeating itself *without making progress*: the same status
    call made until the status it watches changes, and no more, is a poll (the change is
    what it waited for), neither a repeated call (a) nor, for its replies that say the same
    while it waits, stagnation (d). The same call after the change, or repeated while the
    result never changed, is still a repeat."""
    steps = [*_polls(*states), llm("The build succeeded.")]
    assert kinds(loop.detect(traj(*steps), DetectorsConfig(), Context())) == expected


def _waits(states: tuple[str, ...], waits: tuple[int, ...]) -> list[Step]:
    """An agent polling a job with a wait tool between its status checks: the same reply,
    the status call, then (but after the last check) the wait call with its seconds."""
    steps = _polls(states[0])
    for state, seconds in zip(states[1:], waits, strict=True):
        wait = {"seconds": seconds}
        steps += [llm(WAITING, calls=[("wait", wait)], finish="tool_calls"),
                  tool("wait", wait, f"waited {seconds} s"), *_polls(state)]
    return steps


@pytest.mark.parametrize(("states", "waits", "expected"), [
    (("queued", "running", "running", "succeeded"), (5, 5, 5), []),
    (("queued", "running", "running", "succeeded"), (1, 2, 4), []),
    (("queued", "running", "succeeded"), (5, 5), []),
    (("running", "running", "running"), (5, 5), ["loop/no_progress"]),
    (("running", "running", "running", "running"), (5, 5, 5), ["loop/no_progress", "loop/cycle"]),
    (("running", "running", "succeeded", "succeeded"), (5, 5, 5),
     ["loop/no_progress", "loop/cycle"]),
], ids=["fixed_wait", "backoff", "two_fixed_waits", "never_changed", "two_never_changed",
        "after_it_changed"])
def test_a_poll_with_a_fixed_wait_between_its_checks_is_no_loop(
        states: tuple[str, ...], waits: tuple[int, ...], expected: list[str]) -> None:
    """A job's status checked with a wait tool between its checks, until the status changed:
    the same poll as back-to-back checks (rule (a)), whether it waits the same time each
    round or backs off. The cycle of the check and a fixed wait (c), and the wait repeated
    with the same result and only the reads of the status between (b), ended on a changed
    status: no loop (nor with two waits, short of a cycle: the waits are no (b) repeat). The
    same cycle while the status never changed, or after it changed, is still one."""
    steps = [*_waits(states, waits), llm("The build succeeded.")]
    assert kinds(loop.detect(traj(*steps), DetectorsConfig(), Context())) == expected


def test_a_cycle_of_one_round_is_no_poll() -> None:
    """With ``cycle_min_repeats`` 1 a pattern seen once is a cycle: it has no round before it
    whose result its last call could differ from, so it is no poll (and no error)."""
    cfg = DetectorsConfig(loop=LoopConfig(cycle_min_repeats=1))
    steps = [tool("get_job", {"id": 1}, "running"), tool("wait", {"s": 5}, "waited")]
    assert kinds(loop.detect(traj(*steps), cfg, Context())) == ["loop/cycle"]


@pytest.mark.parametrize("wait", [False, True], ids=["back_to_back", "with_a_fixed_wait"])
def test_a_poll_whose_results_were_cut_alike_is_no_repeat(wait: bool) -> None:
    """A job's status polled until it changed, its JSON result cut at an attribute length
    limit before the field that changed (values.cut_json): the checks read alike, but whether
    the status changed past the cut is unknown, and an unknown is no reason for a finding:
    no repeated call (a), nor, with a fixed wait between the checks, a cycle (c) or the waits
    as no progress (b). The same poll with its results whole is no loop either."""
    head = '{"job": "build-42", "owner": "ci", "queue": "default", "status": "'
    for cut in (48, None):
        checks = [tool("get_job", {"id": 42}, (head + state + '"}')[:cut])
                  for state in ("queued", "running", "running", "done")]
        steps = [checks[0]]
        for check in checks[1:]:
            steps += [tool("wait", {"seconds": 5}, "waited 5 s")] * wait + [check]
        assert kinds(loop.detect(traj(*steps), DetectorsConfig(), Context())) == []


@pytest.mark.parametrize(("states", "expected"), [
    (("queued", "running", "running", "done"), []),
    (("running", "running", "running"), ["loop/no_progress"]),
    (("running", "running", "done", "done"), ["loop/no_progress"]),
], ids=["changed_at_last", "never_changed", "after_it_changed"])
def test_a_status_checked_between_other_reads_until_it_changed_is_no_loop(
        states: tuple[str, ...], expected: list[str]) -> None:
    """A job's status checked between reads of its log pages until it changed: the same check
    with the same result and only reads between (b), but it ended on the changed status it
    waited for, the poll of rule (a), so no progress is not concluded. Checked while the
    status never changed, or again after it changed, it is still no progress."""
    steps = [tool("get_job", {"id": 42}, states[0])]
    for page, state in enumerate(states[1:]):
        steps += [tool("get_log", {"id": 42, "page": page}, f"line {page}"),
                  tool("get_job", {"id": 42}, state)]
    assert kinds(loop.detect(traj(*steps), DetectorsConfig(), Context())) == expected


def _rate_limited(ok: bool) -> Step:
    """A search raised on a rate limit (its span failed, no result recorded), or answered."""
    args = {"origin": "SFO", "destination": "JFK"}
    if ok:
        return tool("search_flights", args, '[{"flight": "UA1"}, {"flight": "DL2"}]')
    return tool("search_flights", args, None, error="RateLimitError: 429 Too Many Requests")


@pytest.mark.parametrize(("outcomes", "wait", "expected"), [
    ((False, True), False, []),
    ((False, False, True), False, []),
    ((False, False, False, True), True, []),
    ((False, False, False), False, ["loop/repeated_call"]),
    ((False, True, True), False, ["loop/repeated_call"]),
], ids=["retried_once", "retried_twice", "retried_after_fixed_waits", "never_succeeded",
        "after_it_succeeded"])
def test_a_call_retried_after_a_rate_limit_until_it_succeeded_is_no_loop(
        outcomes: tuple[bool, ...], wait: bool, expected: list[str]) -> None:
    """A call that failed on a rate limit (raised: its span failed with no result recorded,
    as instrumentations record an exception) retried until it succeeded ended on the change
    it waited for, the poll of rule (a): no repeated call, nor, with a fixed wait between
    the attempts, a cycle (c) or the waits as no progress (b). Failing every time, or called
    again after it succeeded, it is still a repeat."""
    steps: list[Step] = []
    for n, ok in enumerate(outcomes):
        steps += [tool("wait", {"seconds": 2}, "waited 2 s")] * (wait and n > 0)
        steps.append(_rate_limited(ok))
    steps.append(llm("UA1 and DL2 fly from SFO to JFK."))
    assert kinds(loop.detect(traj(*steps), DetectorsConfig(), Context())) == expected


@pytest.mark.parametrize(("between", "expected"), [
    ('find . -name "*.pyc" -delete', []),
    ("find django -name '*.py' -exec sed -i 's/old_name/new_name/g' {} +", []),
    ("sed -n -i '12p' django/db/models/query.py", []),
    ('find . -name "*.pyc"', ["loop/no_progress"]),
    ("find django -name '*.py' -exec grep -l old_name {} +", ["loop/no_progress"]),
    ("sed -n '12p' django/db/models/query.py", ["loop/no_progress"]),
], ids=["find_delete", "find_exec_sed_in_place", "sed_n_in_place", "find", "find_exec_grep",
        "sed_n"])
def test_a_command_run_again_after_find_or_sed_changed_files_is_no_loop(
        between: str, expected: list[str]) -> None:
    """A SWE agent runs its reproduction script, deletes the stale .pyc files (or edits with
    ``find -exec sed -i``, ``sed -n -i``) and runs it again (SWE-bench django-16100): the
    command between changed state, so the same output again is no repeat without progress
    (b). ``find`` and ``sed -n`` only read without those options: then it is one."""
    run = bash("python -u reproduce_issue.py", "<returncode>0</returncode>\n<output>1 row\n")
    steps = [run, bash(between, "<returncode>0</returncode>\n<output>\n</output>"), run]
    assert kinds(loop.detect(traj(*steps), DetectorsConfig(), Context())) == expected


PAGED_QUERY = ("support tickets that mention a failed payment, a declined card, a refund the "
               "customer never received, or a duplicate charge, for enterprise customers in Europe")
NEXT_PAGE = "There are more results, so I will fetch the next page of the ticket search."


@pytest.mark.parametrize(("pages", "expected"), [
    ((1, 2, 3, 4, 5), []),
    ((1, 1, 1, 1, 1), ["loop/repeated_call"]),
], ids=["next_pages", "the_same_page"])
def test_paging_through_one_long_query_is_no_stagnation(pages: tuple[int, ...],
                                                         expected: list[str]) -> None:
    """An agent pages through the results of one long query, each reply the same sentence and
    the same call but for the page: the calls differ, so each reply is a new action, no
    stagnation (d), however few of the reply's words changed (one page number in a long
    call). The same page asked for each time is still a repeat (its replies' stagnation
    the same loop seen from the model's side)."""
    steps = []
    for page in pages:
        args = {"query": PAGED_QUERY, "page": page}
        steps += [llm(NEXT_PAGE, calls=[("search_tickets", args)], finish="tool_calls"),
                  tool("search_tickets", args,
                       json.dumps([f"T-{100 * page + i}" for i in range(3)]))]
    steps.append(llm("I found the tickets."))
    assert kinds(loop.detect(traj(*steps), DetectorsConfig(), Context())) == expected
