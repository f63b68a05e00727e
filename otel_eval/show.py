"""``otel-eval show``: one evaluated run, as a tree of steps with each finding and judge
critique on its step (text for a terminal, JSON for machines).

    per-trace object (v1, from the store or an offline run) -> tree(body) -> render_text | JSON

Input is the stored per-trace JSON, so what is shown is what the results API returns. A
finding sits on the last step it names (a loop's repeat, a budget's overrun), with the other
steps listed; findings and critiques naming no step are shown on the trace.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from otel_eval.model import Evaluation

_TEXT_CHARS = 160  # one terminal line per finding / critique
_MAX_INDENT = 3 * 32  # deeper steps are drawn at depth 32 (a line stays a line)
_TRACE_ID = re.compile(r"^[0-9a-fA-F]{32}$")


class ShowError(Exception):
    """The run cannot be found or read; the message says why."""


def is_trace_id(text: str) -> bool:
    return bool(_TRACE_ID.match(text))


def from_store(path: str, trace_id: str) -> dict[str, Any]:
    """The stored per-trace object (the store file is only read, never created)."""
    from otel_eval.store import is_postgresql_url, open_store, redact_url

    if not is_postgresql_url(path) and not Path(path).is_file():
        raise ShowError(f"no store at {path} (--store PATH|URL, or store.path / store.url in "
                        "--config)")
    try:
        store = open_store(path)
    except Exception as e:  # a server down, a wrong password: say so, no traceback
        raise ShowError(f"cannot open the store at {redact_url(path)}: {e}") from None
    try:
        body = store.get(trace_id.lower())
    finally:
        store.close()
    if body is None:
        raise ShowError(f"no evaluation for trace {trace_id} in {redact_url(path)}")
    return body


def from_run(evaluations: Iterable[Evaluation], where: str,
             trace_id: str | None) -> dict[str, Any]:
    """The evaluation of ``trace_id`` among an offline run's (the only one when None)."""
    wanted = trace_id.lower() if trace_id else None
    seen = []
    for ev in evaluations:
        if wanted is None or ev.trace_id == wanted:
            seen.append(ev)
            if wanted is not None or len(seen) > 1:
                break
    if wanted is not None and not seen:
        raise ShowError(f"{where} holds no trace {trace_id}")
    if not seen:
        raise ShowError(f"{where} holds no trace")
    if len(seen) > 1:
        raise ShowError(f"{where} holds several traces: pick one with --trace TRACE_ID "
                        "(otel-eval eval lists them)")
    return seen[0].to_json()


def _critiques(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    judge = body.get("judge") or {}
    for name, entry in sorted((judge.get("judges") or {}).items()):
        for c in entry.get("critiques") or []:
            yield {"judge": name, **c}


def tree(body: dict[str, Any]) -> dict[str, Any]:
    """The per-trace object regrouped for reading: each step (tree order) carries its
    ``findings`` and ``critiques`` and the indexes of its ``children``; ``roots`` are the
    steps without a parent among them; what names no step stays on the trace. Flat, not
    nested: a hostile trace can be thousands of spans deep."""
    steps = {s["index"]: {**s, "findings": [], "critiques": [], "children": []}
             for s in body.get("steps", [])}
    by_span = {s["span_id"]: s for s in steps.values() if s.get("span_id")}
    trace_findings: list[dict[str, Any]] = []
    trace_critiques: list[dict[str, Any]] = []
    for f in body.get("findings", []):
        where = [i for i in f.get("step_indexes") or [] if i in steps]
        (steps[where[-1]]["findings"] if where else trace_findings).append(f)
    for c in _critiques(body):
        step = steps.get(c.get("step_index")) or by_span.get(c.get("span_id") or "")
        (step["critiques"] if step else trace_critiques).append(c)
    roots = []
    for s in steps.values():
        parent = by_span.get(s.get("parent_span_id") or "")
        if parent is not None and parent is not s:
            parent["children"].append(s["index"])
        else:
            roots.append(s["index"])
    head = {k: v for k, v in body.items() if k not in ("steps", "findings", "judge")}
    judge = body.get("judge") or {}
    return {**head, "judge": judge.get("overall"), "findings": trace_findings,
            "critiques": trace_critiques, "roots": roots, "steps": list(steps.values())}


def _short(value: Any, limit: int = _TEXT_CHARS) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _step_line(s: dict[str, Any]) -> str:
    parts = [f"[{s['index']}] {s['kind']}", s.get("name") or ""]
    if s.get("tool_name") and s.get("arguments") is not None:
        parts.append(_short(s["arguments"], 60))
    if s.get("model"):
        parts.append(s["model"])
    if s.get("input_tokens") is not None or s.get("output_tokens") is not None:
        parts.append(f"{s.get('input_tokens') or 0}+{s.get('output_tokens') or 0} tok")
    start, end = s.get("start_time_unix_nano") or 0, s.get("end_time_unix_nano") or 0
    if end > start:
        parts.append(f"{(end - start) / 1e6:.0f} ms")
    if s.get("status") == "error":
        parts.append("ERROR " + _short(s.get("error") or "", 80))
    return "  ".join(p for p in parts if p)


def _notes(node: dict[str, Any]) -> list[str]:
    out = []
    for f in node["findings"]:
        others = [i for i in f.get("step_indexes") or [] if i != node.get("index")]
        also = f" (steps {', '.join(map(str, f['step_indexes']))})" if others else ""
        out.append(f"! {f['severity']} {f['detector']}:{f['kind']}: "
                   f"{_short(f['message'])}{also}")
    for c in node["critiques"]:
        score = c.get("score")
        out.append(f"~ judge {c['judge']} {c.get('dimension') or ''}"
                   f"{'' if score is None else f' {score:.2f}'}: {_short(c.get('text') or '')}")
    return out


def _walk(t: dict[str, Any], lines: list[str]) -> None:
    """Depth first with an explicit stack (no recursion limit on deep traces)."""
    steps = {s["index"]: s for s in t["steps"]}
    seen: set[int] = set()
    stack = [(i, "", n == len(t["roots"]) - 1) for n, i in enumerate(t["roots"])][::-1]
    while stack:
        index, prefix, last = stack.pop()
        if index in seen:  # a span id reused in one trace: show each step once
            continue
        seen.add(index)
        s = steps[index]
        lines.append(prefix + ("└─ " if last else "├─ ") + _step_line(s))
        inner = prefix + ("   " if last else "│  ") if len(prefix) < _MAX_INDENT else prefix
        lines += [inner + ("│  " if s["children"] else "   ") + n for n in _notes(s)]
        kids = s["children"]
        stack += [(i, inner, n == len(kids) - 1) for n, i in enumerate(kids)][::-1]


def render_text(t: dict[str, Any]) -> str:
    verdict = t.get("verdict")
    mark = "-" if verdict is None else ("PASS" if verdict["passed"] else "FAIL")
    who = " / ".join(str(x) for x in (t.get("service"), t.get("agent")) if x) or "-"
    lines = [f"trace {t['trace_id']}  {who}  task {t.get('task_id') or '-'}  "
             f"{t.get('status')}  {mark}",
             f"  {t['counts']['spans']} spans, {t['counts']['llm_calls']} LLM calls, "
             f"{t['counts']['tool_calls']} tool calls, {t['counts']['errors']} errors; "
             f"{t['usage']['input_tokens']}+{t['usage']['output_tokens']} tokens; "
             f"{t.get('duration_s') or 0:.1f} s; revision {t.get('revision', 0)}"]
    if verdict is not None and verdict.get("reasons"):
        lines.append("  reasons: " + _short("; ".join(verdict["reasons"])))
    judge = t.get("judge")
    if judge:
        lines.append(f"  judge: {judge.get('status')}"
                     + "".join(f", {k} {judge[k]}" for k in ("process_score", "outcome_score",
                                                            "passed", "lucky_pass", "reason")
                               if judge.get(k) is not None))
    lines += ["  " + n for n in _notes(t)]
    _walk(t, lines)
    return "\n".join(lines) + "\n"
