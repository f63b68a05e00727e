"""Values from span content made readable and bounded, for the terminal and the web view.

Span content is hostile and unbounded: a tool output of 20 MB, a span name full of escape
sequences. ``clip`` cuts a value to a number of characters (saying how much was cut),
``fold`` wraps it to a width and a number of lines, ``usd`` writes a cost as a decimal
(``$0.0000555``, never ``5.5499999999999994e-05``). Terminal safety is ``printable``'s.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from otel_eval.base.usage import cost_partly_known
from otel_eval.base.words import wrapped

# A redaction (``judge.redact.Redactor.redact``), or None to show values as stored.
Redact = Callable[[str], str] | None
# Characters read past a cut before redacting, so a secret straddling the cut is still seen
# whole by its pattern (the longest built-in needs fewer; a PEM key's head matches alone).
_REDACT_MARGIN = 512


def as_text(value: Any, limit: int) -> str:
    """``value`` as text of at most about ``limit`` characters: a string as it is, anything
    else as compact JSON (a structure bigger than the limit is cut, never fully dumped when
    it is a huge string inside)."""
    if isinstance(value, str):
        return value[:limit + 1]
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):
        text = repr(value)[:limit + 1]
    return text[:limit + 1]


def redacted(value: Any, limit: int, redact: Redact) -> str:
    """``as_text(value)`` redacted, at most about ``limit`` characters: cut past the limit
    first (linear work in what is shown, not in a 20 MB value), then redacted."""
    text = as_text(value, limit + _REDACT_MARGIN)
    if redact is None:
        return text[:limit + 1]
    return redact(text)[:limit + 1]


def clip(text: str, limit: int) -> tuple[str, int]:
    """(the first ``limit`` characters of ``text``, how many more there were)."""
    return (text, 0) if len(text) <= limit else (text[:limit], len(text) - limit)


def fold(text: str, width: int, max_lines: int | None) -> tuple[list[str], bool]:
    """``text`` wrapped to ``width`` columns (its own line breaks kept), at most ``max_lines``
    lines (None: all); True when lines were left out."""
    budget = None if max_lines is None else width * max_lines * 2  # wrap no more than shown
    lines: list[str] = []
    for raw in (text if budget is None else text[:budget]).split("\n"):
        lines += wrapped(raw, width) or [""]  # in columns: a wide character is two
        if max_lines is not None and len(lines) > max_lines:
            return lines[:max_lines], True
    cut = budget is not None and len(text) > budget
    return lines, cut


def tokens(usage: Any) -> str:
    """A run's ``usage`` tokens as ``input+output tokens``, ``?`` for a count not known
    (``tokens unknown`` when neither is)."""
    usage = usage if isinstance(usage, dict) else {}
    tin, tout = usage.get("input_tokens"), usage.get("output_tokens")
    if tin is None and tout is None:
        return "tokens unknown"
    return f"{'?' if tin is None else tin}+{'?' if tout is None else tout} tokens"


def usd(value: float | None) -> str:
    """A cost in USD as a decimal with 3 significant digits: ``$0.0000555``, ``$1.23``."""
    if value is None:
        return "-"
    if value == 0:
        return "$0"
    digits = 2
    while digits < 12 and abs(value) < 10 ** -(digits - 2):
        digits += 1
    return "$" + f"{value:.{digits + 1}f}".rstrip("0").rstrip(".")


def run_cost(run: Mapping[str, Any]) -> str:
    """A stored run's ``usage.cost_usd`` as ``usd`` writes it, "≥ $0.0025" when it is the
    known part of the cost only (``base.usage.cost_partly_known``: a call of unknown cost)."""
    usage = run.get("usage")
    cost = usd(usage.get("cost_usd") if isinstance(usage, dict) else None)
    return "≥ " + cost if cost_partly_known(run) else cost


def duration(start_ns: int | None, end_ns: int | None) -> str:
    if not start_ns or not end_ns or end_ns < start_ns:
        return ""
    ms = (end_ns - start_ns) / 1e6
    return f"{ms:.0f} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"
