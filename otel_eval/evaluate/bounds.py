"""Stage: evaluate (last part). The stored result of one trace is bounded.

Span content decides how big a trajectory is: one 50 KB code block binding a literal and
passing it to a tool 64 times is 64 rebuilt steps each carrying it (issue 21: a 19 MB result
from a 50 KB span). After the detectors have read everything, ``bound`` cuts what is stored
(the v1 object of the store, the results API, ``eval`` output and the exports) to
``TrajectoryConfig``'s bounds:

- the run's ``input`` and ``output``, each step's ``arguments``, each tool call's
  ``arguments`` and ``error``: at most
  ``max_value_bytes`` of JSON; a longer value becomes a string that fits, its start (of its
  JSON text, when it is not a string), its full size in the step's ``truncated``
  (``{"arguments": 3145728}``);
- the whole object: at most ``max_result_bytes``, less ``_LATER_RESERVE`` kept for the
  judge and the prediction set after (the judge cut to what is left: ``judge.fit``). Past
  it, ``input_messages`` and ``output_messages`` go first, then the contents of steps from
  the last step back (each emptied step keeps its identity, kind, names, status, times and
  tokens, and lists what was taken in ``truncated``), then the last steps themselves, then
  the last verdict reasons (said by a "(N more reasons)" reason) and the last findings
  (counted, their distinct [detector, kind, severity] kept: ``findings_dropped_kinds``, read
  by the lucky-pass check an outcome recorded later re-runs);
- anything cut (and the code-action calls ``max_rebuilt_steps`` left out) is said by one
  ``result_truncated`` finding (detector ``evaluation``, severity ``info``: the verdict does
  not change) whose attributes count what was cut.

The trajectory's steps keep their number (metrics and budgets counted them); only the stored
object loses steps, and its ``counts`` still say how many there were.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from otel_eval.base.jsontext import finite, json_text
from otel_eval.base.loglimit import LogLimiter, failed_line
from otel_eval.base.results import Evaluation, Finding
from otel_eval.base.steps import Step
from otel_eval.evaluate.config import TrajectoryConfig

__all__ = ["bound"]

log = logging.getLogger(__name__)

# Content fields of a step's v1 object, emptied (in this order) when the object is too big.
_CONTENT = ("arguments", "result", "prompt", "answer", "error", "tool_calls")
_FINDING_RESERVE = 1024  # bytes kept for the finding itself
# Bytes kept for what is set after the object is bounded: the judge (``judge.fit`` cuts it to
# what is left, never below its verdict and totals) and the prediction made again with the
# judge's scores.
_LATER_RESERVE = 4096


def _size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


# json.dumps with non-default options builds an encoder per call: these are the same ones.
# Strict first: the walk for non-finite floats (``finite``) only when the encoder meets one.
_STRICT = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=str).encode
_LENIENT = json.JSONEncoder(ensure_ascii=False, default=str).encode


def _encoded(value: Any) -> str:
    """``json.dumps(finite(value), ensure_ascii=False, default=str)``."""
    try:
        return _STRICT(value)
    except ValueError:
        return _LENIENT(finite(value))


def _prefix(text: str, limit: int) -> str:
    """The longest start of ``text`` (about) whose JSON string is at most ``limit`` bytes."""
    prefix = text[:limit]
    while len(prefix) > 1 and (size := _size(_encoded(prefix))) > limit:
        prefix = prefix[:max(1, len(prefix) * limit // size - 1)]
    return prefix


def _cut_value(value: Any, limit: int) -> tuple[Any, int]:
    """(value, 0) when its JSON fits ``limit`` bytes, else (a string whose JSON does: the
    start of the value, or of the value's JSON text when it is not a string; the value's full
    size)."""
    if value is None or isinstance(value, bool | int | float):
        return value, 0
    if isinstance(value, str) and len(value) * 6 + 2 <= limit:  # 6: a \u0001 per char
        return value, 0
    text = _encoded(value)
    size = _size(text)
    if size <= limit:
        return value, 0
    return _prefix(value if isinstance(value, str) else text, limit), size


def _cut_step(step: Step, limit: int) -> int:
    """Cuts ``step``'s values in place; how many were cut."""
    cut = 0
    step.arguments, size = _cut_value(step.arguments, limit)
    if size:
        step.cut["arguments"], cut = size, cut + 1
    step.error, size = _cut_value(step.error, limit)
    if size:
        step.cut["error"], cut = size, cut + 1
    calls = 0
    for call in step.tool_calls:
        call.arguments, size = _cut_value(call.arguments, limit)
        if size:
            calls, cut = calls + size, cut + 1
    if calls:
        step.cut["tool_calls"] = calls
    return cut


def _fit_together(steps: list[Step], limit: int) -> bool:
    """Whether the values ``_cut_step`` measures of ``steps`` fit ``limit`` bytes together
    (then each does: a list's JSON text holds each item's), in one encoding: an object over
    ``max_value_bytes`` is so for its results and messages (not measured) far more often
    than for a value, and a value encoded on its own costs a call of the encoder each."""
    values = [v for s in steps
              for v in (s.arguments, s.error, *(c.arguments for c in s.tool_calls))
              if v is not None]
    return _size(_encoded(values)) <= limit


def _emptied(step: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in step.items() if k not in _CONTENT}
    truncated = dict(step.get("truncated") or {})
    for name in _CONTENT:
        value = step.get(name)
        if value is not None and value != []:
            truncated.setdefault(name, _size(_encoded(value)))
            out[name] = None
    if truncated:
        out["truncated"] = truncated
    return out


def _first(items: list[Any], room: int) -> int:
    """How many of ``items``, from the first, fit ``room`` bytes of JSON."""
    n = 0
    for item in items:
        room -= _size(_encoded(item)) + 2
        if room < 0:
            break
        n += 1
    return n


def _kinds(findings: list[Any]) -> list[list[str]]:
    """The distinct [detector, kind, severity] of ``findings``, in order of first appearance
    (a set bounded by the code: kinds and severities are never span content)."""
    out: dict[tuple[str, str, str], None] = {}
    for f in findings:
        if isinstance(f, dict):
            out[str(f.get("detector")), str(f.get("kind")), str(f.get("severity"))] = None
    return [list(k) for k in out]


def _fit_listed(body: dict[str, Any], room: int, cut: dict[str, int],
                dropped: list[list[str]]) -> None:
    """The verdict's reasons (up to half of ``room``) and the findings (the rest), each kept
    from the first while they fit, in place; the reasons end with "(N more reasons)", the
    findings are counted by the ``result_truncated`` finding, and the kinds of those left
    out put in ``dropped`` (what feedback's lucky-pass check reads of them: room kept)."""
    findings: list[Any] = body.get("findings") or []
    verdict: dict[str, Any] = body["verdict"] if isinstance(body.get("verdict"), dict) else {}
    reasons: list[Any] = verdict.get("reasons") or []
    body["findings"] = []
    if reasons:
        verdict["reasons"] = []
        room -= _size(json_text(body))
        kept = _first(reasons, room // 2 - 40)  # 40: the marker
        if kept < len(reasons):
            cut["reasons_dropped"] = len(reasons) - kept
            reasons = [*reasons[:kept], f"({len(reasons) - kept} more reasons)"]
        verdict["reasons"] = reasons
        room -= _size(_encoded(reasons))
    else:
        room -= _size(json_text(body))
    kept = _first(findings, room - _size(_encoded(_kinds(findings))) - 40)  # 40: the key
    body["findings"] = findings[:kept]
    if kept < len(findings):
        cut["findings_dropped"] = len(findings) - kept
        dropped[:] = _kinds(findings[kept:])


def _fit(body: dict[str, Any], limit: int, cut: dict[str, int],
         dropped: list[list[str]]) -> None:
    """Cuts ``body`` (the v1 object) in place to about ``limit`` bytes of JSON."""
    for name in ("input_messages", "output_messages"):
        if name in body and _size(json_text(body)) > limit:
            cut[name] = _size(_encoded(body.pop(name)))
    steps: list[dict[str, Any]] = body["steps"]
    sizes = [_size(_encoded(s)) + 2 for s in steps]
    body["steps"] = []
    if _size(json_text(body)) > limit - _FINDING_RESERVE:  # no step fits: findings go too
        _fit_listed(body, limit - _FINDING_RESERVE, cut, dropped)
    room = limit - _size(json_text(body)) - _FINDING_RESERVE
    full = 0
    while full < len(steps) and sizes[full] <= room:  # whole steps from the first
        room -= sizes[full]
        full += 1
    kept = steps[:full]
    for step in steps[full:]:  # then emptied ones, while they fit
        empty = _emptied(step)
        size = _size(_encoded(empty)) + 2
        if size > room:
            break
        room -= size
        kept.append(empty)
    body["steps"] = kept
    if len(kept) > full:
        cut["steps_emptied"] = len(kept) - full
    if len(kept) < len(steps):
        cut["steps_dropped"] = len(steps) - len(kept)


def bound(evaluation: Evaluation, config: TrajectoryConfig,
          failure_log: LogLimiter | None = None) -> None:
    """Cuts what ``evaluation`` stores to ``config``'s bounds, in place (see the module
    docstring); adds the ``result_truncated`` finding when anything was cut. Its own
    boundary: when cutting raises, every step's content is cut and the findings stay.
    ``failure_log``: the limit of its per-trace line then (None: a line each)."""
    try:
        _bound(evaluation, config)
    except Exception as e:
        failed_line(failure_log or LogLimiter(0.0), log,
                    "bounding the result of trace %s failed: %s", evaluation.trace_id,
                    type(e).__name__)
        _cut_all(evaluation, config, type(e).__name__)


def _cut_all(evaluation: Evaluation, config: TrajectoryConfig, error: str) -> None:
    """The stored object with no content at all (messages, task, answer, each step's
    values), said by a ``result_truncated`` finding naming the ``error``."""
    body = evaluation.to_json(finite_floats=False)
    for name in ("input_messages", "output_messages"):
        body.pop(name, None)
    body.update(input=None, output=None)
    body["steps"] = [_emptied(s) for s in body.get("steps", [])]
    finding = Finding("evaluation", "result_truncated", "info",
                      f"the stored result was cut to its bounds (bounding failed: {error})",
                      [], [], {"max_result_bytes": config.max_result_bytes,
                               "max_value_bytes": config.max_value_bytes, "error": error})
    evaluation.findings.append(finding)
    body["findings"] = [*body.get("findings", []), finding.to_json()]
    evaluation.bounded = body


def _encode(evaluation: Evaluation) -> tuple[dict[str, Any], str | None]:
    """(the v1 object, its ``json_text``; None when it cannot be encoded as it is)."""
    body = evaluation.to_json(finite_floats=False)
    try:
        return body, json_text(body)
    except (TypeError, ValueError):
        return body, None


def _bound(evaluation: Evaluation, config: TrajectoryConfig) -> None:
    t = evaluation.trajectory
    cut: dict[str, int] = {}
    # The whole object is encoded first: a value's JSON is part of the object's (and the
    # ASCII-escaped text ``json_text`` falls back to is never shorter), so when the whole
    # fits ``max_value_bytes`` no value it holds is over it and none is encoded on its own
    # (the tool calls of a step that is no LLM step are not in it: those are measured);
    # when no value is cut, the values are the same objects and the text stands.
    body, text = _encode(evaluation)
    fits = text is not None and _size(text) <= config.max_value_bytes
    measured = [s for s in t.steps if not fits or (s.tool_calls and s.kind != "llm")]
    values = 0
    if measured and not _fit_together(measured, config.max_value_bytes):
        values = sum(_cut_step(s, config.max_value_bytes) for s in measured)
    if not fits:
        t.task, size = _cut_value(t.task, config.max_value_bytes)
        if size:
            cut["input"] = size
        t.answer, size = _cut_value(t.answer, config.max_value_bytes)
        if size:
            cut["output"] = size
    if values:
        cut["values"] = values
    if t.code_actions.get("over_limit"):
        cut["rebuilt_calls"] = t.code_actions["over_limit"]
    if t.calls_over_limit:
        cut["rebuilt_tool_calls"] = t.calls_over_limit
    if cut or text is None:
        body = evaluation.to_json(finite_floats=False)
        text = json_text(body)
    size = _size(text)
    limit = config.max_result_bytes - _LATER_RESERVE
    dropped: list[list[str]] = []  # [detector, kind, severity] of the findings left out
    if size > limit:
        _fit(body, limit, cut, dropped)
    if not cut:  # the object stays as encoded: stored as this text (``to_json_text``)
        evaluation.encoded = (text, evaluation.judge, evaluation.prediction,
                              len(evaluation.findings))
        return
    parts = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in cut.items())
    finding = Finding("evaluation", "result_truncated", "info",
                      f"the stored result was cut to its bounds ({parts})", [], [],
                      {"result_bytes": size, "max_result_bytes": config.max_result_bytes,
                       "max_value_bytes": config.max_value_bytes,
                       "max_rebuilt_steps": config.max_rebuilt_steps,
                       **({"max_rebuilt_calls": config.max_rebuilt_calls}
                          if t.calls_over_limit else {}), **cut,
                       **({"findings_dropped_kinds": dropped} if dropped else {})})
    evaluation.findings.append(finding)
    if size > limit:
        body["findings"] = [*body["findings"], finding.to_json()]
        evaluation.bounded = body
