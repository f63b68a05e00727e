"""Budget detector (stage: evaluate): steps, LLM calls, tool calls, tokens, cost, wall time.

Budgets are resolved by ``Detectors`` (config, then the agent's overrides, then
``--budget NAME=VALUE``) and arrive in ``context.budgets``; a finding states value and
budget. Cost comes from the spans (``Step.cost_usd``), else from litellm's model price map;
a model litellm does not know makes the cost *unknown* (reported, never an exception): the
known part is then a lower bound, "partly unknown" within the budget, "at least" past it.
"""

from __future__ import annotations

import math
from typing import Any

from otel_eval.base.results import Finding
from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.conventions.span_readers import cost_unread
from otel_eval.evaluate.detectors.calls import Context
from otel_eval.evaluate.detectors.config import DetectorsConfig
from otel_eval.evaluate.trajectory.prices import model_prices, step_cost, unpriced

__all__ = ["cost", "detect", "measure", "model_prices", "step_cost"]

_UNITS = {"duration_s": " s", "cost_usd": " USD"}
_LABELS = {"steps": "steps", "llm_calls": "LLM calls", "tool_calls": "tool calls",
           "input_tokens": "input tokens", "output_tokens": "output tokens",
           "cost_usd": "cost", "duration_s": "wall time"}
# why a cost whose steps' costs are each a number is none (``Trajectory.usage`` reads it so)
_OVERFLOW = "the steps' costs sum past the largest float"


def cost(trajectory: Trajectory) -> tuple[float, list[str], list[str]]:
    """(known cost in USD, models whose cost is unknown, why: ``prices.unpriced``), over the
    ``usage_steps``: a remote agent's step counts the cost its span recorded, never a price of
    its summed tokens (a call's long-context tier is not known from a sum)."""
    total, unknown, why = 0.0, set(), set()
    for s in trajectory.usage_steps:
        c = step_cost(s) if s.kind == "llm" else s.cost_usd
        if c is None:
            unknown.add(s.model or "<no model>")
            no_cost = (unpriced(s) if s.kind == "llm" else
                       f"no cost recorded for the agent {(s.node or s.name)[:200]}")
            unread = cost_unread(s)  # recorded, not read: said first
            why.add(no_cost if unread is None else
                    f"{unread}, and {no_cost}" if s.kind == "llm" else unread)
        else:
            total += c
    return total, sorted(unknown), sorted(why)


def measure(trajectory: Trajectory, names: set[str]) -> dict[str, float]:
    """The measured values of the budgets in ``names`` (cost only when asked: it is lazy);
    tokens over the ``usage_steps``, as the run's ``usage``."""
    usage = {"input_tokens": 0, "output_tokens": 0}
    for s in trajectory.usage_steps:
        usage["input_tokens"] += s.input_tokens or 0
        usage["output_tokens"] += s.output_tokens or 0
    values: dict[str, float] = {
        "steps": len(_steps(trajectory)) if "steps" in names else 0,
        "llm_calls": len(trajectory.llm_steps),
        "tool_calls": len(trajectory.tool_call_steps),
        "duration_s": trajectory.duration_s,
        **usage,
    }
    if "cost_usd" in names:
        values["cost_usd"] = cost(trajectory)[0]
    return values


def _usd(value: float) -> str:
    """Dollars with enough decimals to show a small cost: 0.000042, 0.0123, 1.5."""
    if value == 0:
        return "0"
    digits = 4
    while digits < 12 and round(abs(value), digits) == 0:
        digits += 1
    return f"{value:.{digits + 1}f}".rstrip("0").rstrip(".")


def _fmt(name: str, value: float) -> str:
    if name == "cost_usd":
        return _usd(value) + _UNITS[name]
    if name == "duration_s":
        return f"{value:.1f}{_UNITS[name]}"
    return f"{value:g}{_UNITS.get(name, '')}"


def _steps(trajectory: Trajectory) -> list[Step]:
    """The run's steps (``Trajectory.action_steps``: top-level tool steps, a code action
    once)."""
    return trajectory.action_steps


def _beyond(trajectory: Trajectory, name: str, limit: float) -> list[Step]:
    """The steps past a count budget (where it was blown), empty for other budgets."""
    seq = {"steps": _steps, "tool_calls": lambda t: t.tool_call_steps,
           "llm_calls": lambda t: t.llm_steps}.get(name)
    return list(seq(trajectory))[int(limit):] if seq else []


def _message(name: str, value: float, limit: float, partly: bool = False) -> str:
    """What a budget finding says; ``partly``: the value is a lower bound (a cost partly
    unknown), "at least" it."""
    if name in ("cost_usd", "duration_s"):
        return (f"{_LABELS[name]} {'at least ' if partly else ''}{_fmt(name, value)} "
                f"against a budget of {_fmt(name, limit)}")
    return f"{_fmt(name, value)} {_LABELS[name]} against a budget of {_fmt(name, limit)}"


def detect(trajectory: Trajectory, config: DetectorsConfig, context: Context) -> list[Finding]:
    budgets = {k: v for k, v in context.budgets.items() if v is not None}
    if not budgets:
        return []
    values = measure(trajectory, set(budgets))
    out = []
    for name in sorted(budgets, key=list(_LABELS).index):
        limit, value = budgets[name], values[name]
        attrs: dict[str, Any] = {"budget": name, "value": value, "limit": limit}
        unknown, why = cost(trajectory)[1:] if name == "cost_usd" else ([], [])
        if unknown:
            attrs["cost_unknown_models"] = unknown
        if not math.isfinite(value):  # costs summing past the largest float: no number,
            # unknown (as the run's ``usage.cost_usd``), never over a budget
            attrs["value"] = None
            out.append(Finding("budget", "cost_unknown", "info",
                               f"cost unknown ({_OVERFLOW})", attributes=attrs))
        elif value > limit:
            over = _beyond(trajectory, name, limit)
            out.append(Finding("budget", f"{name}_exceeded", "error",
                               _message(name, value, limit, bool(unknown)),
                               [s.span_id for s in over],
                               [s.index for s in over], attrs))
        elif unknown:
            out.append(Finding("budget", "cost_unknown", "info",
                               f"cost partly unknown ({'; '.join(why)})",
                               attributes=attrs))
    return out
