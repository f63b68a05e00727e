import json
from pathlib import Path
from typing import Any

import pytest
from cost import work
from detector_factory import kinds, llm, tool, traj

from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.detectors import load_references, reference
from otel_eval.evaluate.detectors.calls import Context, RefCall, Reference, top_level_tool_steps
from otel_eval.evaluate.detectors.config import DetectorsConfig
from otel_eval.evaluate.detectors.references import (
    TAU_BENCH_WRITE_TOOLS,
    ReferencesError,
    ReferenceSet,
)
from otel_eval.evaluate.trajectory import build_trajectory

A: tuple[str, Any] = ("a", {"x": 1})
B: tuple[str, Any] = ("b", {"y": 2, "z": 3})
C: tuple[str, Any] = ("c", {})


def ref(*calls: tuple[str, Any], match: str, args: str = "exact",
        by_tool: dict[str, str] | None = None) -> Reference:
    return Reference("t1", tuple(RefCall(n, a) for n, a in calls), match, args, by_tool or {})


def steps(*calls: tuple[str, Any]) -> list[Step]:
    return [tool(n, a) for n, a in calls]


# (name, reference, actual calls, matched, score)
CASES: list[tuple[str, Reference, list[Step], bool, float]] = [
    ("exact: same", ref(A, B, match="exact"), steps(A, B), True, 1.0),
    ("exact: order matters", ref(A, B, match="exact"), steps(B, A), False, 0.5),
    ("exact: extras forbidden", ref(A, B, match="exact"), steps(A, C, B), False, 0.8),
    ("in_order: extras allowed", ref(A, B, match="in_order"), steps(C, A, C, B), True, 1.0),
    ("in_order: order matters", ref(A, B, match="in_order"), steps(B, A), False, 0.5),
    ("any_order: any order", ref(A, B, match="any_order"), steps(B, A), True, 1.0),
    ("any_order: extras forbidden", ref(A, B, match="any_order"), steps(B, A, C), False, 0.8),
    ("superset: extras and any order", ref(A, B, match="superset"), steps(C, B, C, A), True,
     1.0),
    ("superset: missing one", ref(A, B, match="superset"), steps(A, C), False, 0.5),
    ("superset: multiplicity counts", ref(A, A, match="superset"), steps(A), False, 0.5),
    ("exact args: a wrong value", ref(A, match="superset"), steps(("a", {"x": 2})), False, 0.0),
    ("ignore args", ref(A, match="superset", args="ignore"), steps(("a", {"q": 9})), True, 1.0),
    ("subset args: fewer given is fine", ref(B, match="superset", args="subset"),
     steps(("b", {"y": 2})), True, 1.0),
    ("subset args: an extra is not", ref(B, match="superset", args="subset"),
     steps(("b", {"y": 2, "z": 3, "w": 0})), False, 0.0),
    ("superset args: extra given is fine", ref(B, match="superset", args="superset"),
     steps(("b", {"y": 2, "z": 3, "w": 0})), True, 1.0),
    ("superset args: a missing one is not", ref(B, match="superset", args="superset"),
     steps(("b", {"y": 2})), False, 0.0),
    ("per-tool override", ref(A, B, match="in_order", by_tool={"b": "ignore"}),
     steps(A, ("b", {})), True, 1.0),
    ("canonical args: whitespace and 250 vs 250.0",
     ref(("p", {"amount": 250, "note": "a  b"}), match="exact"),
     steps(("p", {"note": "a b", "amount": 250.0})), True, 1.0),
    ("empty reference, superset", ref(match="superset"), steps(A), True, 1.0),
]


@pytest.mark.parametrize(("reference_", "actual", "matched", "score"),
                         [(r, a, m, s) for _, r, a, m, s in CASES], ids=[c[0] for c in CASES])
def test_reference_cases(reference_: Reference, actual: list[Step], matched: bool,
                         score: float) -> None:
    (f,) = reference.detect(traj(llm("x"), *actual, task_id="t1"), DetectorsConfig(),
                            Context(reference=reference_))
    assert (f.attributes["matched"], f.attributes["score"]) == (matched, pytest.approx(score))
    assert f.kind == ("match" if matched else "mismatch")
    assert f.severity == ("info" if matched else "error")


def test_precision_recall_apart_from_argument_accuracy() -> None:
    r = ref(A, B, ("d", {}), match="in_order")
    t = traj(*steps(("a", {"x": 9}), B, C, C), task_id="t1")
    (f,) = reference.detect(t, DetectorsConfig(), Context(reference=r))
    summary = reference.reference_summary([f])
    assert summary == {"match": "in_order", "arguments_match": "exact", "matched": False,
                       "tool_precision": 0.5, "tool_recall": pytest.approx(0.666667),
                       "argument_accuracy": 0.5, "score": pytest.approx(0.333333)}
    assert f.attributes["missing"] == ["d"]
    assert f.attributes["unexpected"] == ["c", "c"]
    assert f.attributes["wrong_arguments"] == ["a"]
    assert f.message == ("calls do not match the reference for task t1 (in_order, arguments "
                         "exact): missing d; wrong arguments a")
    assert f.step_indexes == [1, 3, 4]  # the wrong-argument call, then the unexpected ones


def test_defaults_come_from_config_and_no_reference_no_finding() -> None:
    r = Reference("t1", (RefCall("a", {"x": 1}),))
    (f,) = reference.detect(traj(*steps(A)), DetectorsConfig(), Context(reference=r))
    assert (f.attributes["match"], f.attributes["arguments_match"]) == ("in_order", "exact")
    assert reference.detect(traj(*steps(A)), DetectorsConfig(), Context()) == []


def test_reference_scope_compares_only_listed_tools() -> None:
    r = Reference("0", (RefCall("book", {"id": 1}),), "any_order", "exact",
                  tools=frozenset({"book", "cancel"}))
    t = traj(*steps(("get_user", {}), ("book", {"id": 1}), ("get_user", {})))
    (f,) = reference.detect(t, DetectorsConfig(), Context(reference=r))
    assert f.attributes["matched"] and f.attributes["tool_precision"] == 1.0


def test_load_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "refs.jsonl"
    path.write_text(
        json.dumps({"task_id": "fix-1", "calls": [{"name": "list_dir", "arguments": {}}],
                    "match": "superset", "arguments_match": "ignore"}) + "\n\n"
        + json.dumps({"task_id": 7, "calls": [{"name": "a"}],
                      "arguments_match_by_tool": {"a": "subset"}, "tools": ["a"]}) + "\n")
    refs = load_references(path)
    assert sorted(refs) == ["7", "fix-1"]
    assert refs["fix-1"] == Reference("fix-1", (RefCall("list_dir", {}),), "superset", "ignore")
    assert refs["7"].arguments_match_by_tool == {"a": "subset"}
    assert refs["7"].tools == frozenset({"a"}) and refs["7"].match is None


@pytest.mark.parametrize(("line", "message"), [
    ("{not json", r"refs.jsonl:1: not valid JSON"),
    ('{"calls": []}', "expected an object with task_id"),
    ('{"task_id": 1, "calls": {}}', "calls must be a list"),
    ('{"task_id": 1, "calls": [{"arguments": {}}]}', r"calls\[0\] needs a string name"),
    ('{"task_id": 1, "calls": [], "match": "fuzzy"}', "match 'fuzzy' is not one of"),
    ('{"task_id": 1, "calls": [], "arguments_match_by_tool": {"a": "x"}}',
     r"arguments_match_by_tool.a 'x' is not one of"),
])
def test_load_errors_name_the_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "refs.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=message):
        load_references(path)


def test_load_tau_bench_task_file(datasets: Path) -> None:
    path = datasets / "tau-bench" / "tasks" / "airline_tasks_test.json"
    tasks = json.loads(path.read_text())
    refs = load_references(path)
    assert len(refs) == len(tasks) == 50
    first = refs["0"]
    assert [c.name for c in first.calls] == ["book_reservation"]
    assert first.calls[0].arguments == tasks[0]["actions"][0]["kwargs"]
    assert (first.match, first.arguments_match) == ("any_order", "exact")
    assert first.tools == TAU_BENCH_WRITE_TOOLS
    for i, task in enumerate(tasks):  # write actions only, in file order
        names = [a["name"] for a in task["actions"] if a["name"] in TAU_BENCH_WRITE_TOOLS]
        assert [c.name for c in refs[str(i)].calls] == names
    retail = load_references(datasets / "tau-bench" / "tasks" / "retail_tasks_test.json")
    assert len(retail) == 115
    assert all(c.name in TAU_BENCH_WRITE_TOOLS for r in retail.values() for c in r.calls)


def test_kinds_helper_for_reference() -> None:
    r = ref(A, match="exact")
    found = reference.detect(traj(*steps(B)), DetectorsConfig(), Context(reference=r))
    assert kinds(found) == ["reference/mismatch"]
    assert found[0].attributes["missing"] == ["a"] and found[0].attributes["unexpected"] == ["b"]


def _unknown_arguments(name: str) -> Step:
    """A call whose arguments were present but not understood (``trajectory.arguments``)."""
    step = tool(name)
    step.arguments = None
    step.unknown["arguments"] = "unparsed: text that is no JSON object nor Python dict"
    return step


def test_a_call_whose_arguments_are_unknown_is_not_a_wrong_argument() -> None:
    # compared as if it had none, {"x": 1} against {} was "wrong arguments a"
    r = ref(A, B, match="in_order")
    t = traj(_unknown_arguments("a"), tool(*B), task_id="t1")
    (f,) = reference.detect(t, DetectorsConfig(), Context(reference=r))
    assert f.kind == "match" and f.attributes["wrong_arguments"] == []
    assert f.attributes["unknown_arguments"] == ["a"]
    assert f.attributes["argument_accuracy"] == 1.0  # of the one call whose arguments are known
    assert f.message.endswith("(arguments unknown for a)")


def test_unknown_arguments_do_not_hide_a_missing_call_or_a_wrong_one() -> None:
    r = ref(A, B, ("d", {}), match="in_order")
    t = traj(_unknown_arguments("a"), tool("b", {"y": 0, "z": 3}), task_id="t1")
    (f,) = reference.detect(t, DetectorsConfig(), Context(reference=r))
    assert f.kind == "mismatch"
    assert (f.attributes["missing"], f.attributes["wrong_arguments"],
            f.attributes["unknown_arguments"]) == (["d"], ["b"], ["a"])
    assert f.attributes["argument_accuracy"] == 0.0


@pytest.mark.parametrize(("text", "message"), [
    ('{"task_id": 1, "calls": [{"name": "a", "arguments": ' + "[" * 5000 + "]" * 5000 + "}]}",
     r"refs.jsonl:1: not valid JSON: maximum recursion depth"),
    ("[" + "[" * 5000 + "]" * 5000 + "]", r"refs.jsonl: not valid JSON: maximum recursion"),
    ('[{"actions": 5}]', r"refs.jsonl\[0\]: actions must be a list"),
    ('[{"actions": null}]', r"refs.jsonl\[0\]: actions must be a list"),
    ('[{"actions": [{"name": ["book_reservation"]}]}, {"calls": []}]',
     r"refs.jsonl\[1\]: expected an object with task_id"),  # the list name is no write
    ('{"task_id": 1, "calls": [], "match": ["exact"]}', r"match \['exact'\] is not one of"),
    ('{"task_id": 1, "calls": [], "arguments_match_by_tool": {"a": {}}}',
     r"arguments_match_by_tool.a {} is not one of"),
], ids=["deep_line", "deep_array", "actions_int", "actions_null", "name_list", "match_list",
        "mode_object"])
def test_hostile_references_are_refused_naming_the_file(tmp_path: Path, text: str,
                                                        message: str) -> None:
    """Nesting past the recursion limit, a tau-bench task whose actions are no list, a mode
    that is a list or an object: each raised RecursionError or TypeError (a traceback from
    ``eval --references``, and serve's start) instead of the ReferencesError naming it."""
    path = tmp_path / "refs.jsonl"
    path.write_text(text + "\n")
    with pytest.raises(ReferencesError, match=message):
        load_references(path)


def test_arguments_cut_at_a_length_limit_are_unknown_not_wrong() -> None:
    """An SDK with ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`` cuts the tool span's input and the
    model's call alike (OpenInference records each in its own attribute): the step keeps the
    cut text (the model's own call, ``trajectory.arguments``), which the loop rules compare to
    no other call. The reference detector compared it as the arguments: the text against the
    reference's object, "wrong arguments", an error finding from a value known only in part."""
    from otel_eval.app.config import Config
    from otel_eval.base.model import Span, Trace
    from otel_eval.evaluate.detectors import ReferenceSet
    from otel_eval.evaluate.evaluator import Evaluator

    tid, cut = "ab" * 16, '{"city": "Paris", "note": "' + "x" * 50
    call = "llm.output_messages.0.message.tool_calls.0.tool_call."
    spans = [
        Span(tid, "1" * 16, None, "agent", 1, 100, attributes={
            "openinference.span.kind": "AGENT", "otel_eval.task.id": "t1"}),
        Span(tid, "2" * 16, "1" * 16, "ChatCompletion", 2, 10, attributes={
            "openinference.span.kind": "LLM", "llm.output_messages.0.message.role": "assistant",
            call + "id": "c1", call + "function.name": "weather",
            call + "function.arguments": cut}),
        Span(tid, "3" * 16, "1" * 16, "weather", 11, 20, attributes={
            "openinference.span.kind": "TOOL", "tool.name": "weather", "input.value": cut,
            "output.value": "sunny"}),
    ]
    expected = Reference("t1", (RefCall("weather", {"city": "Paris", "note": "x" * 60}),),
                         "exact", "exact")
    evaluator = Evaluator(Config(), references=ReferenceSet({"t1": expected}))
    evaluation = evaluator.evaluate(Trace(tid, spans, "complete"))
    assert evaluation is not None
    (f,) = [f for f in evaluation.findings if f.detector == "reference"]
    assert f.kind == "match" and f.attributes["wrong_arguments"] == []
    assert f.attributes["unknown_arguments"] == ["weather"]


def test_a_null_per_tool_mode_is_the_default_not_a_mode_of_its_own(tmp_path: Path) -> None:
    """``"arguments_match_by_tool": {"a": null}`` passed the check (null is "not set", as
    ``match: null`` is) and was kept as the mode "None", which the comparison read as
    ``superset``: a call with an extra argument matched a reference whose arguments are
    compared ``exact``. A null mode is the reference's (or the configured) default."""
    path = tmp_path / "refs.jsonl"
    path.write_text(json.dumps({"task_id": "t1", "calls": [{"name": "a", "arguments": {"x": 1}}],
                                "arguments_match_by_tool": {"a": None}}) + "\n")
    (r,) = load_references(path).values()
    assert dict(r.arguments_match_by_tool) == {}
    (f,) = reference.detect(traj(tool("a", {"x": 1, "y": 2}), task_id="t1"), DetectorsConfig(),
                            Context(reference=r))
    assert f.kind == "mismatch" and f.attributes["wrong_arguments"] == ["a"]


def test_a_long_reference_of_one_tool_is_matched_without_recursion() -> None:
    """Matching ran Kuhn's augmenting paths recursively from every reference call: with
    many calls of one tool each new call's path ran through all the earlier ones, so a
    golden run of 1,500 calls of one tool hit Python's recursion limit after seconds of
    work, and the run got an ``evaluation_error`` (an error: failed) instead of its match.
    Each call now takes a free partner first, and paths are searched on a list."""
    from otel_eval.evaluate.detectors import Detectors

    n = 1500
    r = Reference("t1", tuple(RefCall("search", {"c": i}) for i in range(n)), "any_order",
                  "exact")
    t = traj(*[tool("search", {"c": n - 1 - i}) for i in range(n)], task_id="t1")
    for s in t.steps[1:]:  # ids past the factory's 0xaa root id
        s.span_id = f"{s.index + 4096:016x}"
    findings, verdict = Detectors(DetectorsConfig(enabled=("reference",)),
                                  ReferenceSet({"t1": r})).evaluate(t)
    assert kinds(findings) == ["reference/match"]
    assert verdict.passed and verdict.extra["reference"]["matched"] is True



def test_the_extra_call_flagged_is_the_one_no_reference_call_matches() -> None:
    """Calls were paired with the reference by name first, the first call of a name taken:
    with ``a {x: 2}`` then ``a {x: 1}`` against a reference of ``a {x: 1}`` (exact), the
    right call was the one reported unexpected, and the finding pointed at it (the web view
    and ``show`` put it on that step) while the wrong one went unmentioned. The calls whose
    arguments match are paired first; the extra is the other."""
    r = ref(("a", {"x": 1}), match="exact")
    t = traj(tool("a", {"x": 2}), tool("a", {"x": 1}), task_id="t1")
    (f,) = reference.detect(t, DetectorsConfig(), Context(reference=r))
    assert f.kind == "mismatch" and f.attributes["unexpected"] == ["a"]
    assert f.step_indexes == [1] and f.span_ids == [t.steps[1].span_id]


def test_a_task_id_given_twice_is_refused_naming_both_lines(tmp_path: Path) -> None:
    """A task id repeated in a references file silently replaced the earlier reference (the
    last line won, the first was never compared): now refused, naming both lines."""
    path = tmp_path / "refs.jsonl"
    path.write_text(json.dumps({"task_id": "t1", "calls": [{"name": "a"}]}) + "\n"
                    + json.dumps({"task_id": "t2", "calls": []}) + "\n"
                    + json.dumps({"task_id": "t1", "calls": [{"name": "b"}]}) + "\n")
    with pytest.raises(ReferencesError, match=r"refs.jsonl:3: task_id 't1' given again "
                                              r"\(first at .*refs.jsonl:1\)"):
        load_references(path)
    path.write_text(json.dumps([{"task_id": 1, "calls": []}, {"task_id": "1", "calls": []}]))
    with pytest.raises(ReferencesError, match=r"refs.jsonl\[1\]: task_id '1' given again "
                                              r"\(first at .*refs.jsonl\[0\]\)"):
        load_references(path)


def test_a_references_file_with_a_utf8_bom_loads(tmp_path: Path) -> None:
    """Editors on Windows write a UTF-8 BOM; the trace file readers skip it (``files``,
    ``compressed``: utf-8-sig) but the references file was refused: not valid JSON."""
    path = tmp_path / "refs.jsonl"
    line = json.dumps({"task_id": "t1", "calls": [{"name": "a"}]}) + "\n"
    path.write_bytes(b"\xef\xbb\xbf" + line.encode())
    assert list(load_references(path)) == ["t1"]
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([json.loads(line)]).encode())
    assert list(load_references(path)) == ["t1"]


def test_arguments_equal_but_for_unicode_normal_form_are_right() -> None:
    """"café" composed (NFC, as typed) and decomposed (NFD, as macOS file names and some
    models write it) is the same text: it counted as wrong arguments, failing the verdict."""
    nfc, nfd = "caf\u00e9", "cafe\u0301"
    for mode in ("exact", "subset", "superset"):
        r = ref(("find", {"q": nfc, "tags": [nfc]}), match="exact", args=mode)
        (f,) = reference.detect(traj(tool("find", {"q": nfd, "tags": [nfd]}), task_id="t1"),
                                DetectorsConfig(), Context(reference=r))
        assert f.kind == "match", mode
        assert f.attributes["wrong_arguments"] == []


@pytest.mark.parametrize("task_id", [None, "", True, [1], {"a": 1}])
def test_a_task_id_that_is_no_id_is_refused(tmp_path: Path, task_id: Any) -> None:
    """A task id of null, true, a list or an object was kept as its Python text ("None",
    "True", "[1]"): the reference silently awaited a run of task id "None" (a golden set
    exported with a missing id), never the one meant. A task id is a string or a number."""
    path = tmp_path / "refs.jsonl"
    path.write_text(json.dumps({"task_id": task_id, "calls": []}) + "\n")
    with pytest.raises(ReferencesError, match=r"refs.jsonl:1: task_id must be a non-empty "
                                              r"string or a number"):
        load_references(path)


@pytest.mark.parametrize("mode", ["exact", "in_order", "any_order", "superset"])
def test_calls_after_the_cut_of_a_truncated_trace_are_unseen_not_missing(mode: str) -> None:
    """A trace released ``truncated`` (cut while its run went on: at its maximum duration, by
    an overflow, or spans refused past a bound) holds the calls made before the cut. The
    expected calls after it were reported missing: a reference/mismatch at error (verdict
    failed) for a run that may well have made them. They are unseen: the result is unknown
    (``matched`` null, an info ``reference/unknown``), never a mismatch."""
    r = ref(A, B, C, match=mode)
    t = traj(tool(*A), task_id="t1", status="truncated")
    (f,) = reference.detect(t, DetectorsConfig(), Context(reference=r))
    assert (f.kind, f.severity) == ("unknown", "info")
    assert f.attributes["matched"] is None
    assert (f.attributes["missing"], f.attributes["unseen"]) == ([], ["b", "c"])
    assert "not seen: b, c" in f.message
    # what the cut trace shows wrong is still wrong: a wrong argument before the cut
    t = traj(tool("a", {"x": 2}), task_id="t1", status="truncated")
    (f,) = reference.detect(t, DetectorsConfig(), Context(reference=r))
    assert (f.kind, f.severity, f.attributes["matched"]) == ("mismatch", "error", False)
    assert f.attributes["wrong_arguments"] == ["a"] and f.attributes["missing"] == []
    # a complete run that made only a is missing b and c
    (f,) = reference.detect(traj(tool(*A), task_id="t1"), DetectorsConfig(),
                            Context(reference=r))
    assert (f.kind, f.attributes["missing"], f.attributes["unseen"]) == (
        "mismatch", ["b", "c"], [])


def test_in_order_a_call_skipped_before_one_the_cut_trace_holds_is_missing() -> None:
    r = ref(A, B, C, match="in_order")
    t = traj(tool(*A), tool(*C), task_id="t1", status="truncated")
    (f,) = reference.detect(t, DetectorsConfig(), Context(reference=r))
    assert (f.kind, f.attributes["missing"], f.attributes["unseen"]) == ("mismatch", ["b"], [])


@pytest.mark.parametrize(("mode", "args"), [("exact", "exact"), ("superset", "subset")])
def test_a_reference_call_without_arguments_takes_any_arguments(
        tmp_path: Path, mode: str, args: str) -> None:
    """A reference call written without ``arguments`` was read as no arguments, so under
    the default argument mode (exact) a run that called it with any was a mismatch, its
    arguments wrong. Left out, they are not compared (DeepEval's expected ToolCall with a
    name only); an explicit ``{}`` still means none."""
    path = tmp_path / "refs.jsonl"
    path.write_text(json.dumps({"task_id": "t1", "match": mode, "arguments_match": args,
                                "calls": [{"name": "search"}, {"name": "done",
                                                               "arguments": {}}]}) + "\n")
    golden = load_references(path)["t1"]
    ran = traj(llm("x"), tool("search", {"q": "paris"}), tool("done", {}), task_id="t1")
    (f,) = reference.detect(ran, DetectorsConfig(), Context(reference=golden))
    assert f.kind == "match", f.message
    assert f.attributes["argument_accuracy"] == 1.0
    ran = traj(llm("x"), tool("search", {"q": "paris"}), tool("done", {"now": True}),
               task_id="t1")
    (f,) = reference.detect(ran, DetectorsConfig(), Context(reference=golden))
    assert f.kind == "mismatch"
    assert f.attributes["wrong_arguments"] == ["done"]


def test_tool_names_equal_but_for_unicode_normal_form_are_the_same_tool() -> None:
    """A tool named "café" composed (NFC) in the golden set and decomposed (NFD) by the
    agent's framework (macOS file names, some models) is one tool, as its arguments already
    were: it was a missing call and an unexpected one, a reference/mismatch failing the run.
    Per-tool argument modes and the ``tools`` filter find it under either spelling too."""
    nfc, nfd = "r\u00e9server_vol", "re\u0301server_vol"
    r = Reference("t1", (RefCall(nfc, {"ville": "Qu\u00e9bec"}),), "exact", "exact",
                  {nfc: "ignore"}, tools=frozenset({nfc}))
    t = traj(tool(nfd, {"ville": "Montr\u00e9al"}), task_id="t1")
    (f,) = reference.detect(t, DetectorsConfig(), Context(reference=r))
    assert f.kind == "match", f.message
    assert f.attributes["missing"] == [] and f.attributes["unexpected"] == []


def test_a_tool_run_by_the_display_name_it_was_offered_by_is_the_reference_s_call() -> None:
    """CrewAI runs the tool the model calls as delegate_work_to_coworker under its display
    name, "Delegate work to coworker" (the conformance corpus' crewai/multi_agent), and
    tool_call takes the two for one tool (``links.as_offered``). A golden set naming the
    call as the model made it (the function name, as DeepEval's and Langfuse's do) gave a
    missing and an unexpected call, a reference/mismatch failing the run. Other words are
    still another tool."""
    r = Reference("t1", (RefCall("delegate_work_to_coworker", {"task": "weather"}),
                         RefCall("get_weather", {"city": "Paris"})), "exact", "exact",
                  {"delegate_work_to_coworker": "ignore"})
    t = traj(tool("Delegate work to coworker", {"task": "the weather", "coworker": "w"}),
             tool("get_weather", {"city": "Paris"}), task_id="t1")
    (f,) = reference.detect(t, DetectorsConfig(), Context(reference=r))
    assert f.kind == "match", f.message
    other = traj(tool("Delegate work to coworkers", {}), tool("get_weather", {"city": "Paris"}),
                 task_id="t1")
    (f,) = reference.detect(other, DetectorsConfig(), Context(reference=r))
    assert f.kind == "mismatch" and f.attributes["missing"] == ["delegate_work_to_coworker"]


def test_a_task_id_in_another_unicode_normal_form_finds_its_reference(tmp_path: Path) -> None:
    """A task id made of a file name on macOS comes decomposed (NFD), the golden set's typed
    composed: the run found no reference, so nothing was compared and a CI gate passed with
    no reference finding at all. A task id is looked up in NFC; two spellings of one id in
    the file are the same id given twice."""
    path = tmp_path / "refs.jsonl"
    path.write_text(json.dumps({"task_id": "r\u00e9sum\u00e9-1", "calls": [{"name": "a"}]},
                               ensure_ascii=False) + "\n", encoding="utf-8")
    refs = load_references(path)
    assert refs.get("re\u0301sume\u0301-1") is refs["r\u00e9sum\u00e9-1"]
    path.write_text(path.read_text(encoding="utf-8") + json.dumps(
        {"task_id": "re\u0301sume\u0301-1", "calls": []}, ensure_ascii=False) + "\n",
        encoding="utf-8")
    with pytest.raises(ReferencesError, match=r"refs.jsonl:2: task_id .* given again"):
        load_references(path)


def _recorded(stack: str, scenario: str) -> Trajectory:
    (trace,) = work.decode_recordings([work.recording_requests(stack, scenario)])
    return build_trajectory(trace, TrajectoryConfig())


@pytest.mark.parametrize(("handoff", "kind"), [
    ("transfer_to_weather_agent", "match"),  # as the model called it
    ("handoff to weather_agent", "match"),  # as the SDK's span names it
    ("transfer_to_billing_agent", "mismatch"),
])
def test_an_openai_agents_hand_off_is_the_call_the_model_made(handoff: str, kind: str) -> None:
    """The OpenAI Agents SDK records a hand-off as a TOOL span "handoff to weather_agent"
    (the conformance corpus' openai-agents/multi_agent), for the model's call of the tool it
    offered, transfer_to_weather_agent. The span was joined to no call: a golden set naming
    the call as the model made it gave a missing and an unexpected call, a reference/mismatch
    failing the run, and the span's input (the agent handing off, "triage_agent") was taken
    for the call's arguments, a wrong argument against ``{}``. The span is the model's call
    now (either name matches; its arguments are the model's, unknown when not recorded)."""
    t = _recorded("openai-agents", "multi_agent")
    r = Reference("t1", (RefCall(handoff, {}), RefCall("get_weather", {"city": "Paris"})),
                  "exact", "exact")
    (f,) = reference.detect(t, DetectorsConfig(), Context(reference=r))
    assert f.kind == kind, f.message
    llm_calls = [c for s in t.llm_steps for c in s.tool_calls]
    assert [c.outcome for c in llm_calls] == ["ran", "ran"]


@pytest.mark.parametrize("stack", ["smolagents", "smolagents-code"])
def test_a_smolagents_managed_agent_call_is_a_call_in_either_mode(stack: str) -> None:
    """smolagents runs a managed agent the model calls (``weather_agent(task=...)``) as the
    agent's span beside the LLM span, no tool span. A code agent's call of it was a step
    (``code_actions``), a tool-calling agent's was none (the corpus' smolagents/multi_agent:
    its call "never ran"): a golden set naming the managed agent as the model called it gave
    a missing call, a reference/mismatch failing the run. The call is a step in both modes,
    with the managed agent's result."""
    t = _recorded(stack, "multi_agent")
    r = Reference("t1", (RefCall("weather_agent"), RefCall("get_weather", {"city": "Paris"})),
                  "in_order", "exact")
    (f,) = reference.detect(t, DetectorsConfig(), Context(reference=r))
    assert f.kind == "match", f.message
    (call,) = [s for s in top_level_tool_steps(t) if s.tool_name == "weather_agent"]
    assert call.result == "It is sunny in Paris." and call.status == "ok"


def _unnamed(name: str, arguments: Any) -> Step:
    """A tool step whose tool no attribute named: its name a guess from the span's name."""
    step = tool(name, arguments)
    step.sources["tool_name"] = "span name"
    return step


@pytest.mark.parametrize(("expected", "match", "tools", "kind"), [
    (("get_weather",), "exact", None, "unknown"),
    (("get_time",), "exact", None, "unknown"),
    (("get_weather", "get_time"), "exact", None, "mismatch"),  # one call, two expected
    (("get_weather",), "superset", None, "unknown"),
    ((), "exact", None, "mismatch"),  # a call where none is expected, whatever its tool
    (("get_time",), "exact", frozenset({"get_time"}), "unknown"),  # it may be left out
])
def test_a_call_whose_tool_was_not_recorded_is_unknown_not_a_mismatch(
        expected: tuple[str, ...], match: str, tools: frozenset[str] | None,
        kind: str) -> None:
    """A tool span that records no tool name (smolagents' "SimpleTool", AutoGen's
    "weather_agent.get_weather" without tool.name: the step's name a guess from the span's
    name, which the tool_call detector takes for unknown) was compared by that guess: a
    missing and an unexpected call, a reference/mismatch failing the run, from a value not
    recorded. Its call is now neither the reference's nor another: reference/unknown, unless
    the run is wrong whatever tool it was."""
    r = Reference("t1", tuple(RefCall(n) for n in expected), match, "ignore", tools=tools)
    t = traj(_unnamed("SimpleTool", {"city": "Paris"}), task_id="t1")
    (f,) = reference.detect(t, DetectorsConfig(), Context(reference=r))
    assert f.kind == kind, f.message
    assert f.attributes["unknown_names"] == ["SimpleTool"]
    named = traj(tool("SimpleTool", {"city": "Paris"}), task_id="t1")
    (f,) = reference.detect(named, DetectorsConfig(), Context(reference=r))
    assert f.kind != "unknown"  # a name recorded is compared as it is
