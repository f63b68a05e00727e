"""Trials: traces sharing a task id. Pass@k (any trial passes), Pass^k (all pass) and lucky
passes (outcome passes, process does not), from judge results alone (pure functions).

With ``k`` below the number of trials n the unbiased estimators are used (c passes of n):
pass@k = 1 - C(n-c, k) / C(n, k), pass^k = C(c, k) / C(n, k) (as in tau-bench).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from math import comb
from typing import Any


@dataclass(frozen=True, slots=True)
class Trial:
    task_id: str
    trace_id: str
    judge: Mapping[str, Any]  # the judge object of one trace (Evaluation.judge)


@dataclass(slots=True)
class TaskTrials:
    task_id: str
    n: int = 0  # trials with a dual-threshold verdict
    passes: int = 0
    lucky: list[str] = field(default_factory=list)  # trace ids of lucky passes
    undecided: int = 0  # trials without a verdict (a judge failed)
    k: int = 0
    pass_at_k: float | None = None
    pass_hat_k: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "trials": self.n, "passes": self.passes,
                "k": self.k, "pass_at_k": self.pass_at_k, "pass_hat_k": self.pass_hat_k,
                "lucky_passes": list(self.lucky), "undecided": self.undecided}


def pass_at_k(n: int, c: int, k: int) -> float:
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    return comb(c, k) / comb(n, k)


def summarize(trials: Iterable[Trial], k: int | None = None) -> dict[str, TaskTrials]:
    """Per task id; ``k`` None = all trials of the task (any / all pass)."""
    out: dict[str, TaskTrials] = {}
    for t in trials:
        task = out.setdefault(t.task_id, TaskTrials(t.task_id))
        overall = t.judge.get("overall") or {}
        passed = overall.get("passed")
        if passed is None:
            task.undecided += 1
            continue
        task.n += 1
        task.passes += bool(passed)
        if overall.get("lucky_pass"):
            task.lucky.append(t.trace_id)
    for task in out.values():
        task.k = min(k, task.n) if k else task.n
        if task.k:
            task.pass_at_k = pass_at_k(task.n, task.passes, task.k)
            task.pass_hat_k = pass_hat_k(task.n, task.passes, task.k)
    return out


def trials_of(evaluations: Iterable[Any]) -> list[Trial]:
    """Trials from ``results.Evaluation`` objects that have a task id and a judge object."""
    return [Trial(e.trajectory.task_id, e.trace_id, e.judge) for e in evaluations
            if e.trajectory.task_id and e.judge]
