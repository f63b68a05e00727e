"""A reference's expected final answer (``expected_output``) against the run's answer."""

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from detector_factory import llm, tool, traj

from otel_eval.base.results import NOTE_KINDS
from otel_eval.evaluate.detectors import Detectors, load_references, reference
from otel_eval.evaluate.detectors.calls import Context, RefCall, Reference
from otel_eval.evaluate.detectors.config import DetectorsConfig, ReferenceConfig
from otel_eval.evaluate.detectors.references import ReferencesError


def answer_ref(expected: Any, mode: str | None = None, tolerance: float | None = None,
               calls: tuple[RefCall, ...] | None = None) -> Reference:
    return Reference("t1", calls or (), expected_output=expected, output_match=mode,
                     output_tolerance=tolerance, compare_calls=calls is not None)


def kinds_of(answer: str | None, r: Reference, config: DetectorsConfig | None = None
             ) -> list[str]:
    t = traj(llm("x"), output=answer, task_id="t1")
    t.answer = answer
    return [f.kind for f in reference.detect(t, config or DetectorsConfig(),
                                             Context(reference=r))]


CASES: list[tuple[str, Any, str | None, float | None, str | None, str]] = [
    ("exact: case and whitespace folded", "Paris", None, None, "  paris\n", "answer_match"),
    ("exact: Unicode NFC", "Café", "exact", None, "cafe\u0301", "answer_match"),
    ("exact: more is a mismatch", "Paris", "exact", None, "Paris, France", "answer_mismatch"),
    ("exact: inner whitespace", "New  York", "exact", None, "new york", "answer_match"),
    ("contains", "Paris", "contains", None, "The capital is PARIS.", "answer_match"),
    ("contains: absent", "Paris", "contains", None, "Lyon", "answer_mismatch"),
    ("numeric: last number", 42, "numeric", None, "6 x 7 gives 42.0", "answer_match"),
    ("numeric: thousands", "1234", "numeric", None, "It is 1,234.", "answer_match"),
    ("numeric: within tolerance", 3.14, "numeric", 0.01, "about 3.1416", "answer_match"),
    ("numeric: outside tolerance", 3.14, "numeric", 0.001, "about 3.1416", "answer_mismatch"),
    ("numeric: no number", 42, "numeric", None, "I do not know", "answer_mismatch"),
    # digits of other scripts, and their own separators: the number they write, not a part
    ("numeric: Arabic-Indic digits", 42, "numeric", None,
     "\u0627\u0644\u062c\u0648\u0627\u0628 \u0664\u0662", "answer_match"),
    ("numeric: full-width digits", 42, "numeric", None, "\u7b54\u6848\u662f\uff14\uff12",
     "answer_match"),
    ("numeric: Arabic decimal separator", 3.14, "numeric", None,
     "\u0627\u0644\u062c\u0648\u0627\u0628 \u0663\u066b\u0661\u0664", "answer_match"),
    ("numeric: Persian digits, decimal separator", 2.5, "numeric", None,
     "\u06f2\u066b\u06f5", "answer_match"),
    ("numeric: Arabic thousands separator", 1234, "numeric", None,
     "\u0661\u066c\u0662\u0663\u0664", "answer_match"),
    ("numeric: full-width separators", -1234.5, "numeric", None,
     "\uff0d\uff11\uff0c\uff12\uff13\uff14\uff0e\uff15", "answer_match"),
    ("numeric: the minus sign", -5, "numeric", None, "\u22125 \u00b0C", "answer_match"),
    ("numeric: an expected text in Arabic digits", "\u0663\u066b\u0661\u0664", "numeric",
     None, "3.14", "answer_match"),
    # a number written in numerals no number is read from (CJK, Roman): unknown, not absent
    ("numeric: Chinese numerals", 42, "numeric", None, "\u7b54\u6848\u662f\u56db\u5341\u4e8c",
     "answer_unknown"),
    ("numeric: Chinese two", 2, "numeric", None, "\u6709\u4e24\u4e2a", "answer_unknown"),
    ("numeric: Roman numeral", 12, "numeric", None, "Chapter \u216b", "answer_unknown"),
    ("numeric: Chinese, no number", 42, "numeric", None, "\u6211\u4e0d\u77e5\u9053",
     "answer_mismatch"),
    ("missing answer", "Paris", None, None, None, "answer_unknown"),
    ("an answer cut as JSON", "Paris", None, None, '{"city": "Par', "answer_unknown"),
]


@pytest.mark.parametrize(("expected", "mode", "tolerance", "answer", "kind"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_answer_cases(expected: Any, mode: str | None, tolerance: float | None,
                      answer: str | None, kind: str) -> None:
    assert kinds_of(answer, answer_ref(expected, mode, tolerance)) == [kind]


@pytest.mark.parametrize(("expected", "answer", "kind"), [
    (4, "GPT-4", "answer_match"),
    (19, "COVID-19", "answer_match"),
    (-4, "GPT-4", "answer_mismatch"),
    (2, "It costs 3-2", "answer_match"),
    (-5, "it is -5 now", "answer_match"),
    (-5, "x=-5", "answer_match"),
    (-5, "(-5)", "answer_match"),
    (-5, "between 1 and \u22125", "answer_match"),
    (-2.5e3, "about -2.5e-0", "answer_mismatch"),
    (2.5e-3, "about 2.5e-3", "answer_match"),
])
def test_a_hyphen_after_a_letter_or_digit_is_no_minus_sign(expected: Any, answer: str,
                                                          kind: str) -> None:
    """'GPT-4' and 'COVID-19' name a model and a disease: the hyphen joins a word to its
    number, it signs nothing. Read as -4 and -19, an answer whose number is right was a
    reference/answer_mismatch failing the run. A sign counts only where no letter or digit
    comes right before it."""
    assert kinds_of(answer, answer_ref(expected, "numeric")) == [kind]


@pytest.mark.parametrize(("expected", "answer", "kind"), [
    (42, "\u7b54\u6848\u662f\u56db\u5341\u4e8c\uff0c\u51713\u6b65", "answer_unknown"),
    (3, "\u7b54\u6848\u662f\u56db\u5341\u4e8c\uff0c\u51713\u6b65", "answer_match"),
    (42, "Chapter \u216b, page 7", "answer_unknown"),
    (42, "the answer is 41", "answer_mismatch"),
])
def test_numerals_not_read_beside_a_number_read_leave_the_answer_unknown(
        expected: Any, answer: str, kind: str) -> None:
    """答案是四十二 共3步 ("the answer is forty-two, in 3 steps"): the last number read is
    the 3 of the steps, the answer's own written in Chinese numerals no number is read
    from. Compared as 3 it was a reference/answer_mismatch, a finding drawn from a value not
    recognised: an answer that does not match by the numbers read, but holds numerals not
    read, is unknown (a match by the numbers read is still a match)."""
    assert kinds_of(answer, answer_ref(expected, "numeric")) == [kind]


def test_an_answer_at_the_length_limit_is_unknown_not_a_mismatch() -> None:
    """An SDK cuts attribute values at ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``: an answer of
    that length is known only in part (the expected one may be past the cut)."""
    config = dataclasses.replace(DetectorsConfig(),
                                 reference=ReferenceConfig(answer_length_limit=10))
    r = answer_ref("the answer: Paris", "contains")
    assert kinds_of("x" * 10, r, config) == ["answer_unknown"]
    assert kinds_of("x" * 9, r, config) == ["answer_mismatch"]
    assert kinds_of("x" * 10, r) == ["answer_mismatch"]  # no limit set: the whole answer


def test_the_verdict_fails_on_a_wrong_answer_and_notes_the_others() -> None:
    config = DetectorsConfig(enabled=("reference",))
    detectors = Detectors(config)
    for answer, passed, summary in (("Lyon", False, "mismatch"), ("Paris", True, "match"),
                                    (None, True, "unknown")):
        t = traj(llm("x"), output=answer, task_id="t1")
        t.answer = answer
        detectors.references = {"t1": answer_ref("Paris")}  # type: ignore[assignment]
        findings, verdict = detectors.evaluate(t)
        assert verdict.passed is passed
        assert verdict.extra["reference"] == {"answer": summary}
        (f,) = findings
        assert f.detector == "reference" and f.attributes["expected_output"] == "Paris"
        assert (f.severity == "info") is passed
        assert passed is ((f.detector, f.kind) in NOTE_KINDS)


def test_calls_and_answer_both_compared() -> None:
    r = answer_ref("done", calls=(RefCall("a", {"x": 1}),))
    t = traj(tool("a", {"x": 1}), output=" DONE ", task_id="t1")
    t.answer = " DONE "
    findings = reference.detect(t, DetectorsConfig(), Context(reference=r))
    assert [f.kind for f in findings] == ["match", "answer_match"]
    summary = reference.reference_summary(findings)
    assert summary is not None and summary["matched"] and summary["answer"] == "match"


def test_load_expected_output(tmp_path: Path) -> None:
    path = tmp_path / "refs.jsonl"
    path.write_text(
        json.dumps({"task_id": "q1", "expected_output": "Paris"}) + "\n"
        + json.dumps({"task_id": "q2", "expected_output": 42, "output_match": "numeric",
                      "output_tolerance": 0.5, "calls": [{"name": "calc"}]}) + "\n")
    refs = load_references(path)
    assert refs["q1"] == Reference("q1", (), expected_output="Paris", compare_calls=False)
    assert refs["q2"].expected_output == 42 and refs["q2"].output_match == "numeric"
    assert refs["q2"].output_tolerance == 0.5 and refs["q2"].compare_calls
    assert refs["q2"].calls == (RefCall("calc"),)


@pytest.mark.parametrize(("obj", "message"), [
    ({"task_id": 1}, "calls must be a list"),
    ({"task_id": 1, "expected_output": "a", "output_match": "fuzzy"},
     "output_match 'fuzzy' is not one of contains, exact, numeric"),
    ({"task_id": 1, "expected_output": "a", "output_tolerance": -1},
     "output_tolerance must be a number at least 0"),
    ({"task_id": 1, "expected_output": {"a": 1}},
     "expected_output must be a text or a number, got an object"),
    ({"task_id": 1, "expected_output": "x", "output_match": "numeric"},
     "expected_output 'x' is no number"),
])
def test_load_expected_output_errors(tmp_path: Path, obj: dict[str, Any], message: str) -> None:
    path = tmp_path / "refs.jsonl"
    path.write_text(json.dumps(obj) + "\n")
    with pytest.raises(ReferencesError, match=message):
        load_references(path)


def test_a_run_s_answer_is_compared_end_to_end(tmp_path: Path) -> None:
    """From a references file to the stored verdict: the run's answer (the agent span's
    output) against ``expected_output``, calls not compared when the reference gives none."""
    from otel_eval.app.config import Config
    from otel_eval.base.model import Span, Trace
    from otel_eval.evaluate.evaluator import Evaluator

    path = tmp_path / "refs.jsonl"
    path.write_text(json.dumps({"task_id": "q1", "expected_output": "Paris"}) + "\n")
    evaluator = Evaluator(Config(), references_path=str(path))
    tid = "ab" * 16
    for output, passed in (("paris", True), ("Lyon", False)):
        span = Span(tid, "1" * 16, None, "agent", 1, 100, attributes={
            "openinference.span.kind": "AGENT", "otel_eval.task.id": "q1",
            "input.value": "capital of France?", "output.value": output})
        ev = evaluator.evaluate(Trace(tid, [span], "complete"))
        assert ev is not None
        assert [f.kind for f in ev.findings if f.detector == "reference"] == [
            "answer_match" if passed else "answer_mismatch"]
        verdict = ev.to_json()["verdict"]
        assert verdict["passed"] is passed
        assert verdict["reference"] == {"answer": "match" if passed else "mismatch"}


def test_the_last_reply_of_a_run_that_did_not_end_is_no_final_answer() -> None:
    """A run that did not end (a ``non_termination`` finding of ``NOT_ENDED_KINDS``: cut off,
    halted at its step limit) gave no final answer: its last reply compared as one made an
    ``answer_mismatch`` (an error) of a stop. The answer is unknown."""
    from otel_eval.base.results import Finding

    t = traj(llm("x"), output="Let me check Lyon first", task_id="t1")
    t.answer = "Let me check Lyon first"
    for kind, expected in (("incomplete", "answer_unknown"), ("halted", "answer_unknown"),
                           ("root_error", "answer_mismatch")):
        ended = Finding("non_termination", kind, "error", "m")
        findings = reference.detect(t, DetectorsConfig(),
                                    Context(reference=answer_ref("Paris"), findings=(ended,)))
        assert [f.kind for f in findings] == [expected], kind


def test_the_last_reply_of_a_run_otel_eval_cut_is_no_final_answer() -> None:
    """A run otel-eval cut while it went on (the note ``evaluation/run_cut``: pushed out
    for room) gave no final answer either: its last reply is unknown, not a mismatch."""
    from otel_eval.base.results import Finding

    t = traj(llm("x"), output="Let me check Lyon first", task_id="t1", status="truncated")
    t.answer = "Let me check Lyon first"
    cut = Finding("evaluation", "run_cut", "info", "m", attributes={"release_reason": "overflow"})
    findings = reference.detect(t, DetectorsConfig(),
                                Context(reference=answer_ref("Paris"), findings=(cut,)))
    assert [f.kind for f in findings] == ["answer_unknown"]



@pytest.mark.parametrize(("expected", "kind"), [
    ({"answer": "Paris"}, "an object"), (["Paris"], "an array"), (True, "true")])
def test_an_expected_output_no_text_says_what_to_do(tmp_path: Path, expected: Any,
                                                    kind: str) -> None:
    """A Langfuse dataset export may hold an object as ``expected_output``; a references file
    holding one beside its calls was taken by the release before answers were compared (the
    key was not read) and now stops serve at start. The message names the line, what it
    found, what the value must be and that the key can be removed (its calls still compared)."""
    path = tmp_path / "refs.jsonl"
    path.write_text(json.dumps({"task_id": 1, "calls": [{"name": "calc"}],
                                "expected_output": expected}) + "\n")
    with pytest.raises(ReferencesError) as e:
        load_references(path)
    message = str(e.value)
    assert f"{path}:1: expected_output must be a text or a number, got {kind}" in message
    assert "remove the key" in message


def test_a_references_line_holding_unicode_line_separators_loads(tmp_path: Path) -> None:
    """JSON lines are split at "\\n" only: JSON writes U+2028, U+2029 and NEL (U+0085) inside
    a string as they are (Python's json.dumps with ensure_ascii=False, JavaScript's
    JSON.stringify), and an expected answer copied from a web page or a Word document holds
    them. str.splitlines cut the line there: 'not valid JSON', and serve refused to start."""
    expected = ("\u0627\u0644\u0633\u0637\u0631 \u0627\u0644\u0623\u0648\u0644"
                "\u2028second\u2029third\x85end")
    path = tmp_path / "refs.jsonl"
    path.write_text(json.dumps({"task_id": "q1", "expected_output": expected},
                               ensure_ascii=False) + "\r\n"
                    + json.dumps({"task_id": "q2", "expected_output": "x"}) + "\n",
                    encoding="utf-8")
    refs = load_references(path)
    assert refs["q1"].expected_output == expected and refs["q2"].expected_output == "x"
