"""Output (part): one value of a run as bounded, redacted, escaped HTML.

A page holds many values, each from span content: a name, a tool's arguments, its result, an
LLM's prompt and answer, a critique. Each is redacted (as the judge sees it), cut to what the
page can hold and escaped; a long one shows its head with the rest folded in ``<details>``
(no script needed); control characters show as visible escapes (``\x1b``), as in
``show``. A page has a budget of characters (``Budget``) that counts everything it emits,
markup included: a value is cut to what is left of it (its head and a link to the step's own
page once it is spent), and the run page lists steps until it is spent (``runview``), so a
run of 10,000 steps, each with its values, findings and critiques, is still a page of a few
megabytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from otel_eval.base.printable import escaped_cut, printable
from otel_eval.base.steps import CONTENT_CHARS
from otel_eval.outputs.ui.html import Html, h
from otel_eval.outputs.ui.text import Redact, as_text, redacted

HEAD_CHARS = 600  # shown unfolded
HEAD_LINES = 8
NAME_CHARS = 200  # a span name, model, agent: one line
PAGE_CHARS = 3_000_000  # characters of HTML one page emits for a run, markup included
VALUE_CHARS = 65_536  # of one value, folded part included (stored texts are cut at 4096)
SMALL_CHARS = 200  # of a value once the page's budget is spent


@dataclass
class Budget:
    """Characters of HTML a page may still emit. A value reserves its text (``take``) before
    it is cut to what is left; each part of the page is charged whole once built
    (``charge``), its values' reservations included, so what is spent is what was emitted."""

    left: int = PAGE_CHARS

    def take(self, wanted: int) -> int:
        given = max(0, min(wanted, self.left))
        self.left -= given
        return given

    def charge(self, part: Html, left_before: int) -> Html:
        """``part``, charged whole: ``left_before`` is ``left`` before it was built (what its
        values took since then is part of it, not charged twice)."""
        self.left = min(self.left, left_before - len(part))
        return part

    @property
    def spent(self) -> bool:
        return self.left <= 0


def short(value: Any, limit: int = NAME_CHARS) -> str:
    """One line of at most ``limit`` characters (whitespace runs collapsed), cut on whole
    escapes (``escaped_cut``: never ``\\x1`` before the "…")."""
    flat = " ".join(printable(as_text(value, limit)).split())
    return flat if len(flat) <= limit else escaped_cut(flat, limit - 1) + "…"


def _head(text: str) -> int:
    """Where the unfolded head of ``text`` ends: ``HEAD_CHARS`` or ``HEAD_LINES`` lines, never
    inside an escape (``escaped_cut``: the head never ends in ``\\x1``, the fold in ``b``)."""
    end = len(escaped_cut(text, HEAD_CHARS))
    at = -1
    for _ in range(HEAD_LINES):
        at = text.find("\n", at + 1, end)
        if at < 0:
            return end
    return at


def value(label: str, raw: Any, budget: Budget, redact: Redact, *,
          recorded: int | None = None, more: str | None = None) -> Html:
    """``label`` and ``raw`` redacted, bounded and folded. ``recorded``: the length the
    instrumentation sent, when the store kept less; ``more``: a link to the whole step."""
    wanted = printable(redacted(raw, VALUE_CHARS, redact), keep="\n\t")
    room = budget.take(len(wanted))
    shown = escaped_cut(wanted, max(room, min(SMALL_CHARS, len(wanted))))  # whole escapes
    cut = _head(shown)
    parts: list[Any] = [h("span", label, class_="label"), h("pre", shown[:cut])]
    if cut < len(shown):
        parts.append(h("details", h("summary", f"show all ({len(wanted):,} characters)"),
                       h("pre", shown[cut:])))
    notes = []
    if len(shown) < len(wanted):
        notes.append(f"{len(wanted) - len(shown):,} more characters")
    if recorded:
        notes.append(f"{recorded:,} characters recorded, {min(recorded, CONTENT_CHARS):,} kept")
    if notes:
        parts.append(h("p", "; ".join(notes), " ",
                       h("a", "whole step", href=more) if more and len(shown) < len(wanted)
                       else None, class_="cut"))
    return h("div", parts, class_="value")


def when(ns: Any) -> str:
    """Unix nanoseconds as UTC time to the second; "" when unknown."""
    if not isinstance(ns, int) or ns <= 0:
        return ""
    try:
        return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return ""
