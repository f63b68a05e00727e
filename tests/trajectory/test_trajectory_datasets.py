"""Acceptance on the shared public datasets: TRAIL span trees, tau-bench runs, mini-swe-agent.

Expectations are computed from the raw files independently of the loaders.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.trajectory import build_trajectory
from otel_eval.receive.loaders import load_file, load_path

CFG = TrajectoryConfig()


def _trail_files(datasets: Path) -> list[Path]:
    files = sorted((datasets / "trail" / "GAIA" / "traces").glob("*.json*"))
    assert len(files) == 56
    return files


def _raw_spans(node: dict[str, Any]) -> list[dict[str, Any]]:
    out = [node]
    for child in node["child_spans"]:
        out.extend(_raw_spans(child))
    return out


def test_trail_every_span_once_llm_and_tool_steps_match_span_kinds(datasets: Path) -> None:
    for file in _trail_files(datasets):
        doc = json.loads(gzip.decompress(file.read_bytes()))
        raw = [s for root in doc["spans"] for s in _raw_spans(root)]
        kind_of = {s["span_id"]: s["span_attributes"].get("openinference.span.kind") for s in raw}
        (trace,) = load_file(file)
        t = build_trajectory(trace, CFG)
        spanned = [s for s in t.steps if not s.rebuilt]
        assert Counter(s.span_id for s in spanned) == Counter(s["span_id"] for s in raw), file
        # rebuilt: exactly the CodeAgent's calls of its managed agent (an AGENT span, no TOOL
        # span), each on the LLM span that wrote the code (trajectory.code_actions)
        managed = [s for s in raw if s["span_name"] == "ToolCallingAgent.run"]
        rebuilt = [s for s in t.steps if s.rebuilt and s.tool_name != "python_interpreter"]
        assert [s.tool_name for s in rebuilt] == ["search_agent"] * len(managed), file
        # and every code block of a Step span is a python_interpreter step of its own, with
        # the block's execution logs as its result
        code = [s for s in t.steps if s.rebuilt and s.tool_name == "python_interpreter"]
        assert all(kind_of[s.span_id] == "LLM" and "code" in s.arguments for s in code)
        assert all(kind_of[s.span_id] == "LLM" for s in rebuilt)
        assert [s.span_id for s in t.llm_steps] == [
            s.span_id for s in spanned if kind_of[s.span_id] == "LLM"]
        assert {s.span_id for s in t.llm_steps} == {i for i, k in kind_of.items() if k == "LLM"}
        assert {s.span_id for s in t.tool_steps if not s.rebuilt} == {
            i for i, k in kind_of.items() if k == "TOOL"}
        assert t.trace_id == doc["trace_id"] and t.status == "complete"
        assert t.convention == "openinference"
        # the manager is smolagents' CodeAgent given no name= (span CodeAgent.run): a class
        # name every unnamed CodeAgent shares, so the agent is unknown, not "CodeAgent"
        assert (t.agent, t.agent_source) == (None, "unknown"), file
        parents = {s["span_id"]: s["parent_span_id"] for s in raw}
        assert all(s.parent_span_id == parents[s.span_id] for s in t.steps)


def test_trail_errors_tools_and_managed_agents(datasets: Path) -> None:
    steps = [s for f in _trail_files(datasets) for tr in load_file(f)
             for s in build_trajectory(tr, CFG).steps]
    # the spans with status Error (a code step takes its failed Step span's status)
    assert sum(s.status == "error" for s in steps if not s.rebuilt) == 140
    assert all(s.tool_name for s in steps if s.kind == "tool")
    # the manager, smolagents' CodeAgent given no name=, is no node: only its managed agents
    assert {s.node for s in steps if s.kind == "agent"} >= {None, "search_agent"}
    assert "CodeAgent" not in {s.node for s in steps}


def _tau_runs(datasets: Path) -> tuple[Path, list[dict[str, Any]]]:
    path = datasets / "tau-bench" / "airline" / "gpt-4o-airline.runs.json"
    return path, json.loads(path.read_text())


def test_tau_bench_one_tool_step_per_call_in_order_with_parsed_arguments(
        datasets: Path) -> None:
    path, runs = _tau_runs(datasets)
    trajectories = [build_trajectory(t, CFG) for t in load_path(path)]
    assert len(trajectories) == len(runs) == 100
    for run, t in zip(runs, trajectories, strict=True):
        assistant = [m for m in run["traj"] if m["role"] == "assistant"]
        calls = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                 for m in assistant for c in m.get("tool_calls") or ()]
        assert [(s.tool_name, s.arguments) for s in t.tool_steps] == calls
        assert len(t.llm_steps) == len(assistant)
        assert t.task_id == str(run["task_id"])
        outcome = "success" if run["reward"] == 1 else "failure"
        assert t.root_attributes["otel_eval.outcome"] == outcome
        assert (t.agent, t.convention, t.status) == ("tau-bench-agent", "genai", "complete")
        assert not any(s.rebuilt for s in t.steps)
        for step in t.tool_steps:  # each tool step follows the LLM step that asked for it
            previous_llm = next(s for s in reversed(t.steps[:step.index]) if s.kind == "llm")
            assert step.tool_name in [c.name for c in previous_llm.tool_calls]


_ACTION = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)


def test_mini_swe_agent_one_bash_step_per_action_one_llm_step_per_turn(datasets: Path) -> None:
    files = sorted((datasets / "swe-bench-mini-swe-agent" / "trajs").glob("*/*.traj.json*"))
    assert len(files) == 250
    for file in files[::5]:
        doc = json.loads(gzip.decompress(file.read_bytes()))
        turns = [m for m in doc["messages"] if m["role"] == "assistant"]
        actions = [a for m in turns if len(a := _ACTION.findall(m["content"])) == 1]
        (trace,) = load_file(file)
        t = build_trajectory(trace, CFG)
        assert len(t.llm_steps) == len(turns)
        assert [s.arguments for s in t.tool_steps] == [{"command": a[0].strip()}
                                                       for a in actions]
        assert {s.tool_name for s in t.tool_steps} <= {"bash"}
        assert t.task_id == doc["instance_id"]
        assert t.root_attributes["mini_swe_agent.exit_status"] == "Submitted"
        assert t.llm_steps[0].model and t.llm_steps[0].input_tokens


@pytest.mark.parametrize("name", ["tau-bench/airline/gpt-4o-airline.runs.json",
                                  "trail/GAIA/traces"])
def test_loading_twice_gives_identical_trajectories(datasets: Path, name: str) -> None:
    first = [build_trajectory(t, CFG).steps for t in load_path(datasets / name)]
    second = [build_trajectory(t, CFG).steps for t in load_path(datasets / name)]
    assert [[s.to_json() for s in steps] for steps in first] == [
        [s.to_json() for s in steps] for steps in second]
