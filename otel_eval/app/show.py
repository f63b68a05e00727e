"""``otel-eval show``: one evaluated run, as a tree of steps with each finding and judge
critique on its step (text for a terminal, JSON for machines).

    per-trace object (v1, from the store or an offline run) -> tree(body) -> render_text | JSON

Input is the stored per-trace JSON, so what is shown is what the results API returns. A
finding sits on the last step it names (a loop's repeat, a budget's overrun), with the other
steps listed; findings and critiques naming no step are shown on the trace.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from otel_eval.base.model import is_trace_id as is_lower_trace_id
from otel_eval.base.printable import escaped_cut, printable
from otel_eval.outputs.ui.run import contents, outcome_note
from otel_eval.outputs.ui.text import (
    Redact,
    as_text,
    clip,
    duration,
    fold,
    redacted,
    run_cost,
    tokens,
    usd,
)

if TYPE_CHECKING:
    from otel_eval.base.results import Evaluation

_TEXT_CHARS = 160  # one terminal line per finding / critique
_FOLD_LINES = 3  # lines of a folded value (tool result, LLM content)
_FULL_CHARS = 64 * 1024  # of one value even with --full (stored values are cut at 4096)
_MAX_INDENT = 3 * 32  # deeper steps are drawn at depth 32 (a line stays a line)


class ShowError(Exception):
    """The run cannot be found or read; the message says why."""


def is_trace_id(text: str) -> bool:
    """A trace id as a command line may give it (either case)."""
    return is_lower_trace_id(text.lower())


def from_store(path: str, trace_id: str) -> dict[str, Any]:
    """The stored per-trace object (the store file is only read, never created)."""
    from otel_eval.store import is_postgresql_url, open_store, redact_url

    if not is_postgresql_url(path) and not Path(path).is_file():
        raise ShowError(f"no store at {path} (--store PATH|URL, or store.path / store.url in "
                        "--config)")
    try:
        store = open_store(path, read_only=True)
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


def _short(value: Any, limit: int = _TEXT_CHARS) -> str:
    flat = " ".join(printable(as_text(value, limit)).split())
    return flat if len(flat) <= limit else escaped_cut(flat, limit - 1) + "…"


def _said(value: Any, redact: Redact, limit: int = _TEXT_CHARS) -> str:
    """``_short`` of span content, redacted first (an error's text, a finding's message, a
    critique, a call's arguments), as the web view shows it."""
    return _short(redacted(value, limit, redact), limit)


def _step_line(s: dict[str, Any], redact: Redact) -> str:
    parts = [f"[{s['index']}] {printable(str(s['kind']))}", _short(s.get("name") or "", 80)]
    if s.get("rebuilt"):
        parts.append("(rebuilt: no span of its own)")
    if s.get("model"):
        parts.append(_short(s["model"], 60))
    if s.get("input_tokens") is not None or s.get("output_tokens") is not None:
        parts.append(f"{s.get('input_tokens') or 0}+{s.get('output_tokens') or 0} tok")
    if s.get("cost_usd") is not None:
        parts.append(usd(s["cost_usd"]))
    parts.append(duration(s.get("start_time_unix_nano"), s.get("end_time_unix_nano")))
    if s.get("status") == "error":
        parts.append("ERROR " + _said(s.get("error") or "", redact, 80))
    return "  ".join(p for p in parts if p)


def _content(s: dict[str, Any], width: int, full: bool, redact: Redact) -> list[str]:
    """A step's arguments, result, prompt and answer, each folded to ``width`` columns and 3
    lines (all lines with ``full``), and the calls it asked for."""
    out = []
    cut = s.get("truncated") or {}
    for label, value in contents(s):
        if label != "error" or s.get("status") != "error":  # else on the step's line
            out += _value(label, value, cut.get(label), width, full, redact)
    for call in s.get("tool_calls") or []:
        if call.get("outcome") == "ran":
            continue  # the tool step is drawn below
        note = outcome_note(call)
        out.append(f"asks: {_short(call.get('name') or '', 60)} "
                   f"{_said(call.get('arguments'), redact, 60)}" + (f"  {note}" if note else ""))
    return out


def _value(label: str, value: Any, recorded: int | None, width: int, full: bool,
           redact: Redact) -> list[str]:
    """``label: value`` redacted and folded, continuation lines indented under the value."""
    text, more = clip(redacted(value, _FULL_CHARS, redact), _FULL_CHARS)
    lines, folded = fold(text, width, None if full else _FOLD_LINES)
    lines = [printable(line) for line in lines] or [""]
    out = [f"{label}: {lines[0]}"] + [" " * (len(label) + 2) + line for line in lines[1:]]
    if recorded:
        out[-1] += f"  … ({recorded} characters recorded, {len(text)} kept)"
    elif folded or more:
        out[-1] += "  … (--full)"
    return out


def _notes(node: dict[str, Any], redact: Redact) -> list[str]:
    out = []
    for f in node["findings"]:
        others = [i for i in f.get("step_indexes") or [] if i != node.get("index")]
        also = f" (steps {', '.join(map(str, f['step_indexes']))})" if others else ""
        out.append(f"! {printable(str(f['severity']))} {_short(f['detector'], 40)}:"
                   f"{_short(f['kind'], 40)}: {_said(f['message'], redact)}{also}")
    for c in node["critiques"]:
        score = c.get("score")
        score_text = f" {score:.2f}" if isinstance(score, int | float) else ""
        out.append(f"~ judge {_short(c['judge'], 40)} {_short(c.get('dimension') or '', 40)}"
                   f"{score_text}: {_said(c.get('text') or '', redact)}")
    return out


def _walk(t: dict[str, Any], lines: list[str], width: int, full: bool,
          redact: Redact) -> None:
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
        lines.append(prefix + ("└─ " if last else "├─ ") + _step_line(s, redact))
        inner = prefix + ("   " if last else "│  ") if len(prefix) < _MAX_INDENT else prefix
        bar = inner + ("│  " if s["children"] else "   ")
        lines += [bar + "  " + n for n in _content(s, width, full, redact)]
        lines += [bar + n for n in _notes(s, redact)]
        kids = s["children"]
        stack += [(i, inner, n == len(kids) - 1) for n, i in enumerate(kids)][::-1]


def _steps(counts: dict[str, Any]) -> str:
    """"N steps, " (``Trajectory.action_steps``: what ``--budget steps`` counts); "" for a
    run stored before the count was."""
    steps = counts.get("steps")
    return f"{steps} steps, " if isinstance(steps, int) else ""


def _status(t: dict[str, Any]) -> str:
    """The run's status, with why it was cut (``release_reason``) when it was."""
    reason = t.get("release_reason")
    if t.get("status") == "truncated" and isinstance(reason, str) and reason:
        return f"truncated ({_short(reason, 40)})"
    return str(t.get("status"))


def render_text(t: dict[str, Any], width: int = 100, full: bool = False,
                redact: Redact = None) -> str:
    """The tree as terminal text: tool results and LLM content, errors, findings' messages,
    critiques and the arguments of calls asked for (passed through ``redact``, as the judge
    would see them, as the web view shows them) folded to ``width`` columns (``full``:
    unfolded), calls never run marked, costs as decimals; every value from the spans has its control
    characters escaped (no terminal escape sequence gets through)."""
    verdict = t.get("verdict")
    mark = "-" if verdict is None else ("PASS" if verdict["passed"] else "FAIL")
    who = " / ".join(str(x) for x in (t.get("service"), t.get("agent")) if x) or "-"
    lines = [f"trace {printable(str(t['trace_id']))}  {_short(who, 120)}  "
             f"task {_short(t.get('task_id') or '-', 80)}  {_status(t)}  {mark}",
             f"  {_steps(t['counts'])}{t['counts']['spans']} spans, "
             f"{t['counts']['llm_calls']} LLM calls, "
             f"{t['counts']['tool_calls']} tool calls, {t['counts']['errors']} errors; "
             f"{tokens(t['usage'])}; "
             f"{run_cost(t)}; "
             f"{t.get('duration_s') or 0:.1f} s; revision {t.get('revision', 0)}"]
    for label in ("input", "output"):
        if t.get(label) is not None:
            lines += ["  " + line for line in _value(label, t[label], None, width, full,
                                                     redact)]
    if verdict is not None and verdict.get("reasons"):
        lines.append("  reasons: " + _said("; ".join(verdict["reasons"]), redact))
    judge = t.get("judge")
    if judge:
        lines.append(f"  judge: {judge.get('status')}"
                     + "".join(f", {k} {judge[k]}" for k in ("process_score", "outcome_score",
                                                            "passed", "lucky_pass", "reason")
                               if judge.get(k) is not None))
    lines += ["  " + n for n in _notes(t, redact)]
    _walk(t, lines, width, full, redact)
    return "\n".join(lines) + "\n"
