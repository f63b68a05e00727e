"""Chat-message logs (tau-bench, mini-swe-agent) -> GenAI spans -> trajectories."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from otel_eval.base.model import Trace
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.trajectory import build_trajectory
from otel_eval.receive.loaders import chat, load_file

DATA = Path(__file__).resolve().parents[1] / "data" / "loaders"
CFG = TrajectoryConfig()


def _check_synthetic_spans(trace: Trace) -> None:
    root, *children = trace.spans
    assert root.parent_span_id is None and root.attributes["gen_ai.operation.name"] == (
        "invoke_agent")
    assert all(s.parent_span_id == root.span_id for s in children)
    assert len({s.span_id for s in trace.spans}) == len(trace.spans)
    assert all(len(s.span_id) == 16 and int(s.span_id, 16) for s in trace.spans)
    assert len(trace.trace_id) == 32
    starts = [s.start_ns for s in children]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    assert all(s.start_ns < s.end_ns <= root.end_ns for s in children)
    for s in children:
        assert s.attributes["gen_ai.operation.name"] in ("chat", "execute_tool")


def test_tau_bench_runs_become_genai_traces() -> None:
    first, second = load_file(DATA / "tau_runs.json")
    for trace in (first, second):
        _check_synthetic_spans(trace)
    t = build_trajectory(first, CFG)
    assert [s.kind for s in t.steps] == ["agent", "llm", "tool", "tool", "llm"]
    lookup, cancel = t.tool_steps
    assert (lookup.tool_name, lookup.arguments, lookup.result, lookup.status) == (
        "get_reservation_details", {"reservation_id": "ABC"}, '{"status": "booked"}', "ok")
    # invalid JSON arguments stay the raw string; "Error: ..." results are tool errors
    assert (cancel.arguments, cancel.status, cancel.error) == (
        '{"reservation_id": "ABC"', "error", "Error: invalid arguments")
    assert [c.name for c in t.llm_steps[0].tool_calls] == ["get_reservation_details",
                                                           "cancel_reservation"]
    assert t.llm_steps[0].finish_reasons == ["tool_call"]
    assert (t.task_id, t.agent, t.convention) == ("3", "tau-bench-agent", "genai")
    assert t.root_attributes["otel_eval.outcome"] == "success"
    assert json.loads(t.input or "")[0]["parts"][0]["content"] == "cancel my booking ABC"
    assert "Your booking is cancelled." in (t.output or "")
    history = json.loads(t.llm_steps[1].input_text or "")
    assert [m["role"] for m in history] == ["system", "user", "assistant", "tool", "tool"]
    assert history[3]["parts"][0] == {"type": "tool_call_response", "id": "call_1",
                                      "response": '{"status": "booked"}'}
    t2 = build_trajectory(second, CFG)
    assert (t2.task_id, t2.root_attributes["otel_eval.outcome"]) == ("4", "failure")
    assert t2.tool_steps == []


def test_outcome_and_task_attributes_follow_config() -> None:
    cfg = TrajectoryConfig(task_id_attribute="task", outcome_attribute="won")
    (trace, _) = load_file(DATA / "tau_runs.json", config=cfg)
    assert (trace.spans[0].attributes["task"], trace.spans[0].attributes["won"]) == (
        "3", "success")
    assert build_trajectory(trace, cfg).task_id == "3"


def test_ids_and_times_depend_on_file_name_index_and_content(tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere"
    copy.mkdir()
    shutil.copy(DATA / "tau_runs.json", copy / "tau_runs.json")
    here = load_file(DATA / "tau_runs.json")
    there = load_file(copy / "tau_runs.json")
    key = [[(s.trace_id, s.span_id, s.start_ns, s.end_ns) for s in t.spans] for t in here]
    assert key == [[(s.trace_id, s.span_id, s.start_ns, s.end_ns) for s in t.spans]
                   for t in there]
    assert here[0].trace_id != here[1].trace_id
    renamed = tmp_path / "other_name.json"
    shutil.copy(DATA / "tau_runs.json", renamed)
    assert load_file(renamed)[0].trace_id != here[0].trace_id


def test_runs_files_of_one_name_in_two_directories_are_other_traces(tmp_path: Path) -> None:
    """``before/runs.json`` and ``after/runs.json`` (two runs of one benchmark, or two
    trajectories of one instance) are other runs: other trace ids. They shared them, keyed
    by (file name, index) alone: ``eval`` printed two results under one id, and replayed
    into one serve the second file's spans were refused as duplicates or re-opened the
    first file's run, stored as one trace of both runs."""
    runs = json.loads((DATA / "tau_runs.json").read_text(encoding="utf-8"))
    traj = json.loads((DATA / "mini.traj.json").read_text(encoding="utf-8"))
    other_traj = {**traj, "messages": traj["messages"][:4]}
    for name, before, after in (("runs.json", runs, runs[::-1]),
                                ("demo.traj.json", traj, other_traj)):
        ids = []
        for folder, doc in (("before", before), ("after", after)):
            (tmp_path / folder).mkdir(exist_ok=True)
            (tmp_path / folder / name).write_text(json.dumps(doc), encoding="utf-8")
            ids += [t.trace_id for t in load_file(tmp_path / folder / name)]
        assert len(set(ids)) == len(ids), name


def test_mini_swe_agent_traj() -> None:
    (trace,) = load_file(DATA / "mini.traj.json")
    _check_synthetic_spans(trace)
    t = build_trajectory(trace, CFG)
    assert [s.kind for s in t.steps] == ["agent", "llm", "tool", "llm", "llm", "tool", "llm",
                                         "tool", "llm", "tool"]
    commands = [s.arguments["command"] for s in t.tool_steps]
    assert commands == ["ls -la", "grep -r nothing .", "sleep 1000",
                        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff"]
    assert [s.error for s in t.tool_steps] == [None, "returncode 1", "timeout", None]
    assert t.tool_steps[0].result == "<returncode>0</returncode>\n<output>\nx\n</output>"
    assert t.tool_steps[-1].result == "diff --git a/x b/x"
    llm = t.llm_steps[0]
    assert (llm.model, llm.input_tokens, llm.output_tokens, llm.cost_usd, llm.finish_reasons) == (
        "gemini", 10, 5, 0.001, ["stop"])
    assert t.llm_steps[1].model is None and t.llm_steps[1].finish_reasons == ["stop"]
    assert (t.task_id, t.agent, t.service) == ("demo__demo-1", "mini-swe-agent", "mini-swe-agent")
    assert t.root_attributes["mini_swe_agent.exit_status"] == "Submitted"
    assert "diff --git" in (t.output or "")


def test_tau_bench_reused_call_ids_get_their_own_results(tmp_path: Path) -> None:
    """Real runs reuse ids (25 of the 100 airline runs): each call takes the first answer
    after it, not the last message carrying the id."""
    def call(name: str) -> dict[str, object]:
        return {"id": "call_x", "type": "function",
                "function": {"name": name, "arguments": "{}"}}

    traj = [{"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [call("first")]},
            {"role": "tool", "tool_call_id": "call_x", "content": "one"},
            {"role": "assistant", "content": None, "tool_calls": [call("second")]},
            {"role": "tool", "tool_call_id": "call_x", "content": "two"},
            {"role": "assistant", "content": "done"}]
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([{"task_id": 1, "reward": 1.0, "traj": traj}]))
    (trace,) = load_file(path)
    t = build_trajectory(trace, CFG)
    assert [(s.tool_name, s.result) for s in t.tool_steps] == [("first", "one"),
                                                                ("second", "two")]


def test_a_reward_that_is_no_number_of_tau_bench_is_no_outcome(tmp_path: Path) -> None:
    """``reward >= 1`` made a NaN reward a failure (and Infinity a success): a value not
    recognised became an outcome (the verdict's, and a training label). NaN and +-Infinity
    are no outcome, as normalize_outcome reads them; 0 and 1 still are."""
    traj = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
    path = tmp_path / "runs.json"
    path.write_text("[" + ", ".join(
        f'{{"task_id": {i}, "reward": {reward}, "traj": {json.dumps(traj)}}}'
        for i, reward in enumerate(["NaN", "Infinity", "-Infinity", "1", "0.0"])) + "]")
    outcomes = [build_trajectory(t, CFG).root_attributes.get("otel_eval.outcome")
                for t in load_file(path)]
    assert outcomes == [None, None, None, "success", "failure"]


def _inputs(traces: list[Trace]) -> list[str]:
    return [s.attributes["gen_ai.input.messages"] for t in traces for s in t.spans
            if s.attributes.get("gen_ai.operation.name") == "chat"]


@pytest.mark.parametrize("turns", [False, True], ids=["run", "turns"])
def test_a_long_chat_log_costs_memory_linear_in_its_size(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, turns: bool) -> None:
    """Each chat span's input was the whole history before it: a 3 MB runs file of one run
    of 12,000 messages made 18 GB of inputs (and eval ran out of memory). Past the run's
    budget of input text a call's input is what it added to the history; below it, the
    whole history, as before."""
    monkeypatch.setattr(chat, "MAX_INPUT_CHARS", 20_000, raising=False)
    traj = [{"role": "system", "content": "policy"}]
    for i in range(300):
        traj += [{"role": "user", "content": f"question {i} " + "u" * 100},
                 {"role": "assistant", "content": f"answer {i} " + "a" * 100}]
    path = tmp_path / "long.json"
    path.write_text(json.dumps([{"task_id": 1, "reward": 1.0, "traj": traj, "info": {}}]))
    inputs = _inputs(load_file(path, turns=turns))
    assert len(inputs) == 300
    assert sum(map(len, inputs)) <= 20_000 + 2 * path.stat().st_size
    assert "question 0 " in inputs[0] and "question 1 " in inputs[1]  # whole, below it
    assert "question 299 " in inputs[-1] and "answer 298 " in inputs[-1]  # what it added
    assert all(json.loads(text) for text in inputs)  # each a JSON list of messages


def test_a_short_chat_log_sends_the_whole_history_at_each_call() -> None:
    inputs = _inputs(load_file(DATA / "tau_runs.json")[:1])
    assert len(inputs) == 2 and json.loads(inputs[0]) == json.loads(inputs[1])[:2]
