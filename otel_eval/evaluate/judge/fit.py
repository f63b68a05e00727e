"""The judge object cut to fit the stored result (issue 33: a 10 MB critique made a 20.9 MB
stored body with ``trajectory.max_result_bytes`` 4 MiB, and a serve peak of 657 MB).

``fit(judge, room, max_text_bytes)`` returns the object as stored, a copy when anything was cut
(``fit_stored``: with the room the stored result leaves):

- every string (critiques, reasoning, criteria, errors) at most ``max_text_bytes`` bytes of
  UTF-8 (``trajectory.max_value_bytes``, the bound of one value of a step): its start, then
  ``…``;
- the whole object at most ``room`` bytes of JSON (what the stored result leaves of
  ``max_result_bytes``): the text limit is halved until it fits, down to 64 bytes; then the
  per-step details (critiques, turns, criteria, by_node) go; then every judge's entry
  (``judges`` is left empty), keeping ``mode``, ``model``, ``overall``, ``totals`` and
  ``judged_at_unix_nano`` (a few hundred bytes, always kept: the verdict, what it cost and
  when it was made are never cut);
- what was cut is said in ``truncated``: the object's full size, how many texts were cut and
  to what, and whether details were dropped.
"""

from __future__ import annotations

import json
from typing import Any

from otel_eval.base.jsontext import json_text
from otel_eval.base.judgement import JUDGED_AT
from otel_eval.base.results import Evaluation
from otel_eval.evaluate.config import TrajectoryConfig

_MIN_TEXT_BYTES = 64
_DETAILS = ("critiques", "turns", "criteria", "by_node", "steps")
_KEPT = ("mode", "model", "overall", "totals", JUDGED_AT)
_ELLIPSIS = "…"


def text_bytes(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def size(value: Any) -> int:
    """Bytes of ``value``'s JSON as stored (UTF-8 text, not ``\\u`` escapes)."""
    return text_bytes(json.dumps(value, ensure_ascii=False, default=str))


def _cut_text(text: str, limit: int) -> str | None:
    """The start of ``text`` within ``limit`` bytes, or None when it fits as it is."""
    if len(text) <= limit // 4:  # fits whatever its characters
        return None
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return None
    return data[:max(limit - 3, 0)].decode("utf-8", "ignore") + _ELLIPSIS


def _cut(value: Any, limit: int, counts: list[int]) -> Any:
    """``value`` with each string over ``limit`` bytes cut (a copy of the containers; the judge
    object is a few levels deep)."""
    if isinstance(value, str):
        cut = _cut_text(value, limit)
        if cut is None:
            return value
        counts[0] += 1
        return cut
    if isinstance(value, dict):
        return {k: _cut(v, limit, counts) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v, limit, counts) for v in value]
    return value


def _without_details(judge: dict[str, Any]) -> dict[str, Any]:
    judges = judge.get("judges")
    if not isinstance(judges, dict):
        return judge
    return {**judge, "judges": {
        name: {k: v for k, v in e.items() if k not in _DETAILS} if isinstance(e, dict) else e
        for name, e in judges.items()}}


def fit(judge: dict[str, Any], room: int, max_text_bytes: int) -> dict[str, Any]:
    """``judge`` within ``room`` bytes and each text within ``max_text_bytes`` (see above)."""
    full = size(judge)
    limit, counts = max_text_bytes, [0]
    out = _cut(judge, limit, counts)
    while (now := size(out)) > room and limit > _MIN_TEXT_BYTES:
        limit, counts = max(limit // 2, _MIN_TEXT_BYTES), [0]
        out = _cut(judge, limit, counts)
    dropped = ""
    if now > room:
        out, dropped = _without_details(out), "details"
        if size(out) > room:
            out, dropped = {**{k: out[k] for k in _KEPT if k in out}, "judges": {}}, "judges"
    if not counts[0] and not dropped:
        return judge
    out["truncated"] = {"judge_bytes": full, "texts_cut": counts[0], "max_text_bytes": limit,
                        "dropped": dropped or None}
    return out


def fit_stored(evaluation: Evaluation, judge: dict[str, Any],
               bounds: TrajectoryConfig) -> dict[str, Any]:
    """``judge`` cut to what ``evaluation``'s stored result leaves of ``max_result_bytes``
    (``serve``'s writer and ``eval`` alike; ``evaluate.bounds`` keeps room for it)."""
    body = evaluation.to_json(finite_floats=False)
    body.pop("judge", None)
    room = bounds.max_result_bytes - text_bytes(json_text(body)) - len(',"judge":')
    return fit(judge, room, bounds.max_value_bytes)
