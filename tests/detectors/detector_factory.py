"""Hand-built trajectories for detector tests: a root agent step plus llm/tool steps.

    traj(llm("thinking"), tool("read_file", {"path": "a"}, "text"), llm("done"))

Steps are numbered in order after the root (index 0); span ids are derived from the index.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from otel_eval.base.model import TraceStatus
from otel_eval.base.steps import Step, ToolCall, Trajectory

ROOT_SPAN = "00000000000000aa"


def tool(name: str, arguments: Any = None, result: str | None = "ok", *,
         error: str | None = None, parent: int | None = None) -> Step:
    """A tool step; ``error`` marks the span failed; ``parent`` nests it under that index."""
    return Step(index=-1, span_id="", parent_span_id=str(parent) if parent is not None else None,
                kind="tool", name=f"execute_tool {name}", tool_name=name,
                arguments={} if arguments is None else arguments, result=result,
                status="error" if error else "ok", error=error)


def bash(command: str, result: str = "<returncode>0</returncode>") -> Step:
    return tool("bash", {"command": command}, result)


def llm(output: str | None = "", *, calls: list[tuple[str, Any]] | None = None,
        finish: str = "stop", model: str | None = "gpt-4o", input_tokens: int = 100,
        output_tokens: int = 20, cost: float | None = None) -> Step:
    return Step(index=-1, span_id="", parent_span_id=None, kind="llm", name="chat",
                model=model, output_text=output, finish_reasons=[finish],
                tool_calls=[ToolCall(n, a) for n, a in (calls or [])],
                input_tokens=input_tokens, output_tokens=output_tokens, cost_usd=cost)


def span_id(index: int) -> str:
    return f"{index:016x}"


def traj(*steps: Step, tools: dict[str, Any] | None = None, status: TraceStatus = "complete",
         output: str | None = "final answer", agent: str | None = "agent",
         task_id: str | None = None, root_error: str | None = None,
         duration_s: float = 10.0) -> Trajectory:
    root = Step(index=0, span_id=ROOT_SPAN, parent_span_id=None, kind="agent",
                name="invoke_agent", node=agent, result=output,
                status="error" if root_error else "ok", error=root_error)
    built = [root]
    for i, s in enumerate(steps, 1):
        parent = span_id(int(s.parent_span_id)) if s.parent_span_id else ROOT_SPAN
        built.append(dataclasses.replace(s, index=i, span_id=span_id(i), parent_span_id=parent,
                                         start_ns=i * 1_000_000, end_ns=i * 1_000_000 + 500))
    return Trajectory(trace_id="ab" * 16, source="test", status=status,
                      steps=built, agent=agent, task_id=task_id, output=output,
                      tools=tools or {}, start_ns=0, end_ns=int(duration_s * 1e9),
                      # ``tools`` were offered to every agent of the run
                      offered_to={s.agent_scope: tools for s in built} if tools else {},
                      span_count=len(built), root_span_id=ROOT_SPAN, run_span_id=ROOT_SPAN)


def kinds(findings: list[Any]) -> list[str]:
    """``detector/kind`` of each finding, for compact expectations."""
    return [f"{f.detector}/{f.kind}" for f in findings]
