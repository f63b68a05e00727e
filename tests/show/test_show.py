"""``otel-eval show``: a run from the store or from a file, as a tree of steps with each
finding and judge critique on its step; ``--format json`` for machines."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from otel_eval.app.cli import main
from otel_eval.app.config import Config, replace
from otel_eval.app.offline import EvalRun
from otel_eval.app.show import render_text
from otel_eval.outputs.ui.run import tree
from otel_eval.store import Store
from otel_eval.store.migrations import LATEST

DATA = Path(__file__).resolve().parents[1] / "data" / "detectors"
TRACE = DATA / "guide_lucky_recovery.otlp.json"
REFS = DATA / "guide_lucky_recovery.references.jsonl"
TRACE_ID = "6e0c63257de34c926f9efcd03899a81d"
CRITIQUE = "re-read docs/config.md although its content was already in context"


def _stored(tmp_path: Path) -> str:
    """The guide trace evaluated offline, stored, then judged (a critique on step 8)."""
    path = str(tmp_path / "otel-eval.db")
    store = Store(path)
    [evaluation] = list(EvalRun(Config(), [str(TRACE)], references_path=str(REFS))
                        .evaluations())
    store.put_many([evaluation])
    step8 = evaluation.trajectory.steps[8]
    judge = {"judges": {"combined": {"status": "ok", "critiques": [
        {"dimension": "efficiency", "score": 0.25, "text": CRITIQUE, "span_id": step8.span_id,
         "node": "docs-fixer", "step_index": None},
        {"dimension": "trace", "score": 0.5, "text": "slow but correct", "span_id": None,
         "node": None, "step_index": None}]}},
        "overall": {"status": "ok", "process_score": 0.4, "outcome_score": 1.0}}
    assert store.put_judge(TRACE_ID, 0, judge)
    store.close()
    return path


def _show(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["show", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _block(text: str, step: int) -> list[str]:
    """The line of step ``step`` and the note lines under it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if f"[{step}] " in line)
    block = [lines[start]]
    for line in lines[start + 1:]:
        if "] " in line and ("├─ [" in line or "└─ [" in line):
            break
        block.append(line)
    return block


def test_from_the_store_each_finding_and_critique_sits_on_its_step(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _show(capsys, TRACE_ID, "--store", _stored(tmp_path))
    assert code == 0, err
    assert out.startswith(f"trace {TRACE_ID}  docs-fixer / docs-fixer") and "FAIL" in out
    step4 = "\n".join(_block(out, 4))
    assert "execute_tool search_docs" in step4 and "loop:repeated_call" in step4
    step8 = "\n".join(_block(out, 8))
    assert "loop:repeated_call" in step8 and CRITIQUE in step8 and "0.25" in step8
    step12 = "\n".join(_block(out, 12))
    assert "ERROR old text not found" in step12 and "tool_call:runtime" in step12
    assert "loop" not in "\n".join(_block(out, 3))
    header = out.split("└─ [0]")[0]
    assert "slow but correct" in header and "reference:match" in header  # on no step
    assert "judge: ok, process_score 0.4" in header


def test_json_keeps_the_tree_and_the_placement(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _show(capsys, TRACE_ID, "--store", _stored(tmp_path), "--format", "json")
    assert code == 0, err
    shown = json.loads(out)
    steps = {s["index"]: s for s in shown["steps"]}
    assert shown["roots"] == [0] and steps[0]["children"] == list(range(1, 18))
    assert [f["kind"] for f in steps[4]["findings"]] == ["repeated_call"]
    assert [c["text"] for c in steps[8]["critiques"]] == [CRITIQUE]
    assert [c["text"] for c in shown["critiques"]] == ["slow but correct"]
    assert shown["judge"]["process_score"] == 0.4


def test_from_a_file_picks_the_trace(tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    two = tmp_path / "two"
    two.mkdir()
    shutil.copy(TRACE, two / "a.json")
    doc = TRACE.read_text().replace(TRACE_ID, "f" * 32)
    (two / "b.json").write_text(doc)
    code, _, err = _show(capsys, str(two))
    assert code == 1 and "several traces: pick one with --trace" in err
    code, out, err = _show(capsys, str(two), "--trace", "F" * 32, "--format", "json")
    assert code == 0, err
    assert json.loads(out)["trace_id"] == "f" * 32
    code, _, err = _show(capsys, str(two), "--trace", "1" * 32)
    assert code == 1 and f"holds no trace {'1' * 32}" in err


def test_unknown_trace_or_store_is_a_clear_error(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    db = _stored(tmp_path)
    code, out, err = _show(capsys, "a" * 32, "--store", db)
    assert (code, out) == (1, "") and f"no evaluation for trace {'a' * 32}" in err
    missing = tmp_path / "nope.db"
    code, _, err = _show(capsys, TRACE_ID, "--store", str(missing))
    assert code == 1 and "no store at" in err and not missing.exists()


def test_a_deep_trace_renders_without_recursion() -> None:
    depth = 5000
    steps: list[dict[str, Any]] = [
        {"index": i, "span_id": f"{i + 1:016x}", "parent_span_id": f"{i:016x}" if i else None,
         "kind": "chain", "name": f"s{i}", "status": "ok"} for i in range(depth)]
    body = {"trace_id": "e" * 32, "status": "complete", "steps": steps, "verdict": None,
            "counts": {"spans": depth, "llm_calls": 0, "tool_calls": 0, "errors": 0},
            "usage": {"input_tokens": 0, "output_tokens": 0}, "findings": [
                {"detector": "loop", "kind": "x", "severity": "error", "message": "deep",
                 "step_indexes": [depth - 1]}]}
    shown = tree(body)
    text = render_text(shown)
    assert len(text.splitlines()) == depth + 3
    assert max(len(line) for line in text.splitlines()) < 300
    assert json.loads(json.dumps(shown))["steps"][depth - 1]["findings"][0]["message"] == "deep"



def test_show_says_why_a_run_was_cut() -> None:
    """A run released ``truncated`` showed only that: whether otel-eval cut it for room
    (``pressure``) or at its maximum duration was in no view. Its line names the reason."""
    body = {"trace_id": "e" * 32, "status": "truncated", "release_reason": "pressure",
            "steps": [], "verdict": None, "findings": [],
            "counts": {"spans": 1, "llm_calls": 0, "tool_calls": 0, "errors": 0},
            "usage": {"input_tokens": 0, "output_tokens": 0}}
    assert "  truncated (pressure)  " in render_text(tree(body)).splitlines()[0]


def test_show_only_reads_the_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The store file is only read: show opened it as serve does, so an empty file became a
    94 kB store (and "no evaluation for trace") and an older store was migrated."""
    empty = tmp_path / "empty.db"
    empty.touch()
    code, _, err = _show(capsys, TRACE_ID, "--store", str(empty))
    assert code == 1 and "not an otel-eval store" in err
    assert empty.stat().st_size == 0
    path = _stored(tmp_path)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(f"DELETE FROM schema_version WHERE version = {LATEST}")
    code, _, err = _show(capsys, TRACE_ID, "--store", path)
    assert code == 1 and f"version {LATEST - 1} is older than" in err
    assert db.execute("SELECT MAX(version) FROM schema_version").fetchone() == (LATEST - 1,)
    db.close()


def test_steps_whose_parents_form_a_cycle_are_shown() -> None:
    """Spans naming each other as parents have no root above them; they were left out."""
    ids = [f"{i + 1:016x}" for i in range(4)]
    parents = [None, ids[0], ids[3], ids[2]]  # 2 and 3 are each other's parent
    steps = [{"index": i, "span_id": ids[i], "parent_span_id": parents[i], "kind": "chain",
              "name": f"s{i}", "status": "ok"} for i in range(4)]
    body = {"trace_id": "e" * 32, "status": "complete", "steps": steps, "verdict": None,
            "counts": {"spans": 4, "llm_calls": 0, "tool_calls": 0, "errors": 0},
            "usage": {"input_tokens": 0, "output_tokens": 0}, "findings": []}
    shown = tree(body)
    assert shown["roots"] == [0, 2]
    text = render_text(shown)
    assert all(f" s{i}" in text for i in range(4))

def _hostile_body() -> dict[str, Any]:
    osc = "\x1b]52;c;cGF3bmVk\x07"  # OSC 52: write the clipboard
    steps: list[dict[str, Any]] = [
        {"index": 0, "span_id": "a" * 16, "parent_span_id": None, "kind": "agent",
         "name": "agent \x1b[2J\x1b[31mPASS\r", "status": "ok"},
        {"index": 1, "span_id": "b" * 16, "parent_span_id": "a" * 16, "kind": "llm",
         "name": "chat", "status": "ok", "model": "m\x9b31m", "cost_usd": 5.55e-05,
         "input_tokens": 3, "output_tokens": 4, "answer": osc + "line\n" * 40,
         "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"},
                         "call_id": "c1", "outcome": "never_ran"}]},
        {"index": 2, "span_id": "c" * 16, "parent_span_id": "a" * 16, "kind": "tool",
         "name": "execute_tool dump", "tool_name": "dump", "status": "ok",
         "arguments": {"key": "sk-proj-ABCDEFGHIJKLMNOPQRSTUV"},
         "result": "y" * 4096, "truncated": {"result": 20_000_000}}]
    return {"trace_id": "e" * 32, "status": "complete", "steps": steps,
            "verdict": {"passed": True, "reasons": []}, "input": "hi\x1b[0m", "output": None,
            "counts": {"spans": 3, "llm_calls": 1, "tool_calls": 1, "errors": 0},
            "usage": {"input_tokens": 3, "output_tokens": 4, "cost_usd": 5.55e-05},
            "findings": [{"detector": "loop", "kind": "x\x1b[8m", "severity": "error",
                          "message": "m\x07", "step_indexes": [2]}]}


def test_show_escapes_terminal_sequences_folds_values_and_marks_calls_never_run() -> None:
    from otel_eval.evaluate.judge.config import RedactionConfig
    from otel_eval.evaluate.judge.redact import Redactor

    text = render_text(tree(_hostile_body()), width=60,
                       redact=Redactor(RedactionConfig()).redact)
    assert not any(c in text for c in "\x1b\x07\r\x9b")  # no escape reaches the terminal
    assert "\\x1b[31mPASS\\r" in text and "\\x1b]52;c;" in text  # shown, harmless
    assert "$0.0000555" in text and "e-05" not in text
    assert "asks: get_weather" in text and "NEVER RAN" in text
    answer = next(line for line in text.splitlines() if "answer:" in line)
    assert "\\x07line" in answer  # the OSC shown as text, then the folded lines
    assert "… (--full)" in text and text.count("line") < 10
    assert "20000000 characters recorded, 4096 kept" in text
    assert "sk-proj-ABCDEF" not in text and "[API_KEY]" in text  # as the judge sees it
    assert max(len(line) for line in text.splitlines()) < 200


def test_show_full_unfolds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    full = render_text(tree(_hostile_body()), width=60, full=True)
    assert full.count("line") >= 40 and "… (--full)" not in full
    code, out, err = _show(capsys, TRACE_ID, "--store", _stored(tmp_path), "--full")
    assert code == 0, err
    assert "timeout_s: HTTP timeout in seconds (default 30)" in out
    assert "$0.03775" in out and "input: The HTTP timeout should be 30 s" in out


def test_steps_are_what_the_steps_budget_counts() -> None:
    """One meaning of steps: show's count is the budget's (top-level tool steps), not the
    spans or the tree's entries; a run stored before the count says none."""
    cfg = replace(Config(), **{"detectors.budget_overrides": {"steps": 5}})
    [evaluation] = list(EvalRun(cfg, [str(TRACE)]).evaluations())
    body = evaluation.to_json()
    summary = render_text(tree(body)).splitlines()[1]
    assert summary.startswith("  8 steps, 18 spans, 9 LLM calls, 8 tool calls")
    assert "8 steps against a budget of 5" in body["verdict"]["reasons"]
    assert len(body["steps"]) == 18  # the tree's entries: every span
    del body["counts"]["steps"]
    assert "steps" not in render_text(tree(body)).splitlines()[1]


def test_tokens_no_span_recorded_are_shown_unknown_not_zero() -> None:
    """``usage`` tokens are null when no LLM step recorded them (the tau-bench files, a
    stream asked without usage): ``show`` says so, and says ``?`` for the one count of two
    that is unknown; a known count is printed as it is."""
    from otel_eval.outputs.ui.text import tokens

    body = {"trace_id": "e" * 32, "status": "complete", "verdict": None,
            "steps": [{"index": 0, "span_id": "1" * 16, "parent_span_id": None,
                       "kind": "llm", "name": "chat", "status": "ok"}],
            "counts": {"spans": 1, "llm_calls": 1, "tool_calls": 0, "errors": 0},
            "usage": {"input_tokens": None, "output_tokens": None, "cost_usd": None},
            "findings": []}
    assert "tokens unknown;" in render_text(tree(body))
    assert tokens({"input_tokens": 120, "output_tokens": None}) == "120+? tokens"
    assert tokens({"input_tokens": 0, "output_tokens": 7}) == "0+7 tokens"


def test_a_file_read_with_a_problem_exits_1_after_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """show printed the run of a file whose other spans could not be read (reported on
    stderr) and exited 0, where eval, inspect and replay exit 1 for the same file: a script
    took the run for the whole file."""
    doc = json.loads(TRACE.read_text())
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans.append({**spans[-1], "spanId": "abc"})  # one span with a wrong-length id
    path = tmp_path / "partly_bad.json"
    path.write_text(json.dumps(doc))
    code, out, err = _show(capsys, str(path), "--format", "json")
    assert json.loads(out)["trace_id"] == TRACE_ID  # the run, shown
    assert f"{path}: " in err and code == 1


BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def test_show_escapes_bidirectional_overrides_a_name_cannot_read_reversed() -> None:
    """A right-to-left override (U+202E) in a tool name displayed the rest reversed: a tool
    named "\\u202etxt.exe" read "exe.txt" in the terminal (Trojan Source). The overrides and
    isolates are now escapes, as the terminal's controls are."""
    body = _hostile_body()
    body["steps"][2] |= {"tool_name": "\u202etxt.exe",
                         "name": "execute_tool \u202etxt.exe \u2067x\u2069"}
    body["steps"][0]["name"] = "agent " + BIDI
    text = render_text(tree(body), width=60)
    assert not any(c in text for c in BIDI)
    assert "\\u202etxt.exe" in text and "\\u2067x\\u2069" in text


def test_show_redacts_errors_findings_critiques_and_calls_as_the_web_view(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every text from the spans ``show`` prints is redacted as the judge sees it, as the web
    view shows it: a failed tool's error text (on the step's line) and the finding quoting it,
    a critique, the verdict's reasons and the arguments of a call that never ran, not only
    the step's arguments, result, prompt and answer."""
    from otel_eval.evaluate.judge.config import RedactionConfig
    from otel_eval.evaluate.judge.redact import Redactor

    doc = json.loads(TRACE.read_text())
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                if (span.get("status") or {}).get("message"):
                    span["status"]["message"] = "no account for alice@example.com"
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    code, out, err = _show(capsys, str(path))
    assert code == 0, err
    assert "ERROR no account for [EMAIL]" in out and "failed: no account for [EMAIL]" in out
    assert "alice@example.com" not in out

    secret = "sk-" + "c" * 40
    body = _hostile_body()
    body["steps"][1]["tool_calls"][0]["arguments"] = {"key": secret}
    body["steps"][2].update(status="error", error=f"rejected {secret}")
    body["verdict"]["reasons"] = [f"loop: bash: echo {secret} called 2 times"]
    body["judge"] = {"judges": {"combined": {"critiques": [
        {"score": 0.1, "text": f"leaked {secret}", "step_index": 2}]}}}
    text = render_text(tree(body), redact=Redactor(RedactionConfig()).redact)
    assert "NEVER RAN" in text and "rejected [API_KEY]" in text and "leaked [API_KEY]" in text
    assert secret[:10] not in text


def test_show_a_chat_log_holding_a_lone_surrogate(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A tau-bench chat log whose tool result holds ``"\\ud800"`` (JSON allows it; the
    chat-log loader keeps it): ``show`` prints the run, the value redacted around U+FFFD,
    where the redaction raised UnicodeEncodeError and ``show`` died with a traceback."""
    runs = json.loads((Path(__file__).resolve().parents[1] / "data" / "loaders" /
                       "tau_runs.json").read_text())
    tool = next(m for m in runs[0]["traj"] if m["role"] == "tool")
    tool["content"] = "booked \ud800 alice@example.com"
    path = tmp_path / "tau.json"
    path.write_text(json.dumps(runs))  # written as the escape "\ud800"
    assert "\\ud800" in path.read_text()
    main(["eval", str(path), "--format", "jsonl"])
    first = json.loads(capsys.readouterr().out.splitlines()[0])["trace_id"]
    code, out, err = _show(capsys, str(path), "--trace", first)
    assert code == 0, err
    assert "booked \ufffd [EMAIL]" in out and "alice@" not in out


def test_critiques_of_a_judge_that_failed_are_not_shown_as_grades() -> None:
    """A long run's step grades come in chunks: chunk 1 graded, chunk 2 timed out (the
    provider down), the step judge's status is ``timeout`` and it has no score, yet its
    entry keeps chunk 1's critiques. They stand for no grade (``base.judgement``), but
    ``show`` and the web view put them on their steps with their scores ("judge step 0.10"),
    a grade the judgement says it never gave."""
    body = _hostile_body()
    body["judge"] = {
        "judges": {"step": {"status": "timeout", "error": "no whole reply", "scores": {},
                            "critiques": [{"dimension": "step", "score": 0.1,
                                           "text": "chunk one grade", "step_index": 2}]},
                   "trace": {"status": "ok", "scores": {"trace": 0.5},
                             "critiques": [{"dimension": "trace", "score": 0.5,
                                            "text": "slow but correct", "step_index": None}]}},
        "overall": {"status": "partial"}}
    shown = tree(body)
    assert [c["text"] for s in shown["steps"] for c in s["critiques"]] == []
    assert [c["text"] for c in shown["critiques"]] == ["slow but correct"]
    assert "chunk one grade" not in render_text(shown)


@pytest.mark.parametrize(("flags", "named"), [
    (("--budget", "steps=1"), "--budget"),
    (("--budget", "session_turns=1", "--judge", "openai/gpt-4o-mini"), "--budget, --judge"),
    (("--references", str(REFS)), "--references"),
])
def test_a_stored_run_refuses_the_flags_that_evaluate_anew(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...],
        named: str) -> None:
    """``show TRACE_ID --budget steps=1`` printed the stored run as serve evaluated it, its
    budgets unchanged and no word that the flag was ignored: a run within the asked budget
    looked checked against it. The store keeps results, not spans, so a stored run is not
    evaluated again: the flags that would change its evaluation are refused, by name, with
    exit 1; a trace file is evaluated with them."""
    db = _stored(tmp_path)
    code, out, err = _show(capsys, TRACE_ID, "--store", db, *flags)
    assert (code, out) == (1, "")
    assert f"otel-eval show: {named} " in err and "trace file" in err
    code, out, err = _show(capsys, str(TRACE), "--budget", "steps=1")
    assert code == 0, err
    assert "budget:steps_exceeded" in out
