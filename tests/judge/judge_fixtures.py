"""A small hand-built agent run (airline-like) shared by the judge tests, and ``serve`` with
its judge pointed at the scripted LLM (``judged_service``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from otel_eval.app.config import Config, replace
from otel_eval.app.service import Service
from otel_eval.base.results import Evaluation, Finding, Verdict
from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.judge.config import JudgeConfig

SYSTEM = "You are an airline agent. Follow the policy. " + "Policy line. " * 200
TASK = "Cancel my reservation ABC123. I am jane.doe@example.com, phone +1 415 555 0132."


def _call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


def trajectory(task_id: str | None = "airline-7") -> Trajectory:
    sys_msg = {"role": "system", "content": SYSTEM}
    user = {"role": "user", "content": TASK}
    a1 = {"role": "assistant", "content": None,
          "tool_calls": [_call("get_reservation", {"id": "ABC123"}, "c1")]}
    t1 = {"role": "tool", "tool_call_id": "c1", "content": json.dumps(
        {"id": "ABC123", "status": "active", "notes": "x" * 3000})}
    a2 = {"role": "assistant", "content": None,
          "tool_calls": [_call("cancel_reservation", {"id": "ABC123"}, "c2")]}
    t2 = {"role": "tool", "tool_call_id": "c2", "content": '{"status": "cancelled"}'}
    a3 = {"role": "assistant", "content": "Your reservation ABC123 is cancelled."}
    steps = [
        Step(0, "a" * 16, None, "agent", "airline_agent", node="airline_agent"),
        Step(1, "b" * 16, "a" * 16, "llm", "chat gpt-4o", node="airline_agent", depth=1,
             model="gpt-4o", input_tokens=3000, output_tokens=20,
             input_text=json.dumps([sys_msg, user]), output_text=json.dumps([a1])),
        Step(2, "c" * 16, "a" * 16, "tool", "get_reservation", node="airline_agent", depth=1,
             tool_name="get_reservation", arguments={"id": "ABC123"}, result=t1["content"]),
        Step(3, "d" * 16, "a" * 16, "llm", "chat gpt-4o", node="airline_agent", depth=1,
             model="gpt-4o", input_tokens=3800, output_tokens=20,
             input_text=json.dumps([sys_msg, user, a1, t1]), output_text=json.dumps([a2])),
        Step(4, "e" * 16, "a" * 16, "tool", "cancel_reservation", node="airline_agent",
             depth=1, tool_name="cancel_reservation", arguments={"id": "ABC123"},
             result=t2["content"]),
        Step(5, "f" * 16, "a" * 16, "llm", "chat gpt-4o", node="airline_agent", depth=1,
             model="gpt-4o", input_tokens=3900, output_tokens=15,
             input_text=json.dumps([sys_msg, user, a1, t1, a2, t2]),
             output_text=json.dumps([a3])),
    ]
    return Trajectory(trace_id="0" * 31 + "1", source="test", status="complete", steps=steps,
                      agent="airline_agent", task_id=task_id, input=TASK,
                      output=a3["content"], span_count=6)


def evaluation(outcome: str | None = None, task_id: str | None = "airline-7",
               trace_id: str | None = None) -> Evaluation:
    t = trajectory(task_id)
    if trace_id:
        t.trace_id = trace_id
    findings = [Finding("tool_call", "unconfirmed_write", "warning",
                        "cancel_reservation called without asking the user to confirm",
                        span_ids=["e" * 16], step_indexes=[4])]
    verdict = Verdict(passed=True, reasons=[], outcome=outcome)
    return Evaluation(t, findings, verdict)


def config(api_base: str = "", **changes: Any) -> JudgeConfig:
    base: dict[str, Any] = {"model": "openai/gpt-4o-mini", "api_base": api_base,
                            "timeout_s": 5.0, "max_retries": 2, "backoff_initial_s": 0.0}
    return JudgeConfig(**(base | changes))


def step_reply(indexes: list[int], score: float = 0.8) -> dict[str, Any]:
    return {"steps": [{"step": i, "critique": f"step {i} ok-ish", "score": score}
                      for i in indexes]}


def turns_reply(indexes: list[int], score: float = 0.6) -> dict[str, Any]:
    dim = {"reasoning": "fine", "score": score}
    return {"turns": [{"turn": i, "stage": "tool_invocation", "goal_alignment": dim,
                       "efficiency": dim, "information_utilization": dim,
                       "result_verification": {"reasoning": "did not confirm", "score": 0.2}}
                      for i in indexes]}


def combined_reply(indexes: list[int], outcome: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {**step_reply(indexes), **turns_reply(indexes),
                           "trace": {"critique": "Cancelled without confirmation.",
                                     "score": 0.7}}
    if outcome:
        out["outcome"] = {"reasoning": "The reservation was cancelled.", "score": 1.0}
    return out


@contextmanager
def judged_service(tmp_path: Path, api_base: str, clock: Callable[[], float] = time.monotonic,
                   **changes: Any) -> Iterator[Service]:
    """A started ``Service`` (no worker threads: tests drive the engine and jobs by hand) on
    free loopback ports, its store in ``tmp_path``, its judge at ``api_base`` (one try, 5 s);
    ``changes``: config fields by dotted name. Shut down (judge queue drained) on exit."""
    cfg = replace(Config(), **{
        "receiver.grpc_endpoint": "127.0.0.1:0", "receiver.http_endpoint": "",
        "admin.endpoint": "127.0.0.1:0", "store.path": str(tmp_path / "r.db"),
        "judge.model": "openai/gpt-4o-mini", "judge.api_base": api_base,
        "judge.timeout_s": 5.0, "judge.max_retries": 0, "evaluation.workers": 1, **changes})
    svc = Service(cfg, registry=CollectorRegistry(), clock=clock)
    svc.start(worker=False)
    try:
        yield svc
    finally:
        svc.shutdown(deadline_s=20)
