"""Output (part): one stored run regrouped for reading, shared by the web view and ``show``.

    per-trace object (v1) -> tree(body) -> each step with its findings, critiques, children

A finding sits on the last step it names (a loop's repeat, a budget's overrun), with the other
steps listed; findings and critiques naming no step stay on the trace. ``contents`` lists
what a step said and got back (arguments, result, prompt, answer, calls it asked for), in the
order a reader wants them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from otel_eval.base.judgement import graded


def critiques(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The critiques of every judge whose grades stand (``base.judgement.graded``): a failed
    judge's entry may keep those of a chunk graded before another failed, which stand for no
    score (its failure is the run's ``judge`` status)."""
    judge = body.get("judge") or {}
    for name, entry in sorted((judge.get("judges") or {}).items()):
        if not isinstance(entry, dict) or not graded(entry):
            continue
        for c in entry.get("critiques") or []:
            if isinstance(c, dict):
                yield {"judge": name, **c}


def tree(body: dict[str, Any]) -> dict[str, Any]:
    """The per-trace object regrouped for reading: each step (tree order) carries its
    ``findings`` and ``critiques`` and the indexes of its ``children``; ``roots`` are the
    steps without a parent among them, and one step of each cycle of parents (``_cycles``);
    what names no step stays on the trace. Flat, not nested: a hostile trace can be
    thousands of spans deep."""
    steps = {s["index"]: {**s, "findings": [], "critiques": [], "children": []}
             for s in body.get("steps") or []}
    by_span: dict[str, dict[str, Any]] = {}
    for s in steps.values():  # a rebuilt step shares its LLM step's span id: keep the LLM's
        if s.get("span_id") and not s.get("rebuilt"):
            by_span.setdefault(s["span_id"], s)
    trace_findings: list[dict[str, Any]] = []
    trace_critiques: list[dict[str, Any]] = []
    for f in body.get("findings") or []:
        where = [i for i in f.get("step_indexes") or [] if i in steps]
        (steps[where[-1]]["findings"] if where else trace_findings).append(f)
    for c in critiques(body):
        step = steps.get(c.get("step_index")) or by_span.get(c.get("span_id") or "")
        (step["critiques"] if step else trace_critiques).append(c)
    roots = []
    for s in steps.values():
        parent = by_span.get(s.get("parent_span_id") or "")  # a rebuilt step: its LLM's
        if parent is not None and parent is not s:
            parent["children"].append(s["index"])
        else:
            roots.append(s["index"])
    roots += _cycles(steps, roots)
    head = {k: v for k, v in body.items() if k not in ("steps", "findings", "judge")}
    judge = body.get("judge") or {}
    return {**head, "judge": judge.get("overall"), "judge_record": judge or None,
            "findings": trace_findings,
            "critiques": trace_critiques, "roots": roots, "steps": list(steps.values())}


def _cycles(steps: dict[int, dict[str, Any]], roots: list[int]) -> list[int]:
    """Steps no root reaches (spans naming each other as parents: a cycle with no root
    above it), one of each cycle (the first in the record), so that a walk from the roots shows
    every step once."""
    seen: set[int] = set()
    more: list[int] = []

    def reach(start: int) -> None:
        stack = [start]
        while stack:
            index = stack.pop()
            if index not in seen:
                seen.add(index)
                stack += steps[index]["children"]

    for root in roots:
        reach(root)
    for index in steps:
        if index not in seen:
            more.append(index)
            reach(index)
    return more


def contents(step: dict[str, Any]) -> list[tuple[str, Any]]:
    """(label, value) of what the step carries, in reading order; values as stored."""
    out: list[tuple[str, Any]] = []
    if step.get("kind") == "tool" or step.get("tool_name"):
        if step.get("arguments") is not None:
            out.append(("arguments", step["arguments"]))
        if step.get("result") is not None:
            out.append(("result", step["result"]))
    for name in ("prompt", "answer"):
        if step.get(name) is not None:
            out.append((name, step[name]))
    if step.get("error"):
        out.append(("error", step["error"]))
    return out


def outcome_note(call: dict[str, Any]) -> str:
    """How a call an LLM asked for went, in words."""
    return {"ran": "ran", "rebuilt": "no span of its own (rebuilt)",
            "never_ran": "NEVER RAN"}.get(str(call.get("outcome") or ""), "")
