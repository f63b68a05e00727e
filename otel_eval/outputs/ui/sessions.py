"""Output (part): conversations. ``/ui/sessions`` lists them as ``GET /v1/sessions`` does;
``/ui/sessions/{id}`` shows one as a transcript: per turn the user's request and the agent's
answer (redacted as the judge sees them, folded), the turn's verdict and a link to its run,
and each session finding on the turn it points at.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from otel_eval.outputs.ui.html import Html, h, href, segment
from otel_eval.outputs.ui.runs import finding_kinds, verdict_badge
from otel_eval.outputs.ui.text import Redact
from otel_eval.outputs.ui.values import short, when

_TEXT_CHARS = 2000  # of a request or answer shown in the transcript


def _link(session_id: str) -> str:
    return "/ui/sessions/" + segment(session_id)


def _row(s: Mapping[str, Any]) -> Html:
    sid = str(s.get("session_id"))
    cells = [h("a", short(sid, 60), href=_link(sid)), when(s.get("start_time_unix_nano")),
             short(s.get("service") or "", 60), short(s.get("agent") or "", 60),
             short(s.get("status"), 20), str(s.get("turns")), verdict_badge(s.get("verdict")),
             finding_kinds(s)]
    return h("tr", [h("td", c) for c in cells])


def sessions_page(page: Mapping[str, Any] | None, params: Mapping[str, str],
                  error: str = "") -> Html:
    """One page of sessions (newest last turn first), or why the parameters were refused."""
    parts: list[Any] = [h("h1", "Conversations")]
    if error:
        parts.append(h("p", error, class_="error"))
    if page is None:
        return Html("".join(parts))
    head = h("tr", [h("th", c) for c in ("session", "started", "service", "agent", "status",
                                         "turns", "verdict", "findings")])
    rows = [_row(s) for s in page.get("sessions") or () if isinstance(s, dict)]
    parts.append(h("table", h("thead", head), h("tbody", rows), class_="runs"))
    if not rows:
        parts.append(h("p", "No conversation matches.", class_="empty"))
    if page.get("next_cursor"):
        parts.append(h("p", h("a", "next page", rel="next", href=href(
            "/ui/sessions", {**params, "cursor": str(page["next_cursor"])})), class_="pages"))
    return Html("".join(parts))


def _said(who: str, value: Any, redact: Redact) -> Html | None:
    if not isinstance(value, str) or not value:
        return None
    shown = redact(value) if redact else value
    return h("details", h("summary", h("b", who + " "), short(shown, 160)),
             h("pre", shown[:_TEXT_CHARS]), class_="said")


def _finding(f: Mapping[str, Any]) -> Html:
    return h("div", h("span", short(f.get("severity"), 20), class_="sev"), " ",
             h("b", f"{short(f.get('detector'), 40)}:{short(f.get('kind'), 40)}"), " ",
             short(f.get("message"), 2000),
             class_="finding sev-" + short(f.get("severity"), 20))


def session_page(record: Mapping[str, Any], turn: Callable[[str], dict[str, Any] | None],
                 redact: Redact) -> Html:
    """The conversation's verdict, then its turns in order, each with its findings."""
    verdict = record.get("verdict") or {}
    on_turn: dict[str, list[Mapping[str, Any]]] = {}
    for f in record.get("findings") or ():
        if isinstance(f, dict):
            on_turn.setdefault(str(f.get("trace_id")), []).append(f)
    parts: list[Any] = [
        h("h1", "Conversation ", short(record.get("session_id"), 120)),
        h("p", verdict_badge(verdict), " ", short(record.get("status"), 20), " · ",
          f"{record.get('turns')} turns · ", short(record.get("service") or "", 60), " · ",
          short(record.get("agent") or "", 60)),
        h("ul", [h("li", short(r, 2000)) for r in verdict.get("reasons") or ()],
          class_="reasons")]
    for number, trace_id in enumerate(record.get("traces") or (), 1):
        tid = str(trace_id)
        body = turn(tid) or {}
        parts.append(h("section", h("h2", f"turn {number} ", verdict_badge(body.get("verdict")),
                                    " ", h("a", "run " + tid[:8], href="/ui/runs/"
                                           + segment(tid))),
                       _said("user", body.get("input"), redact),
                       _said("agent", body.get("output"), redact),
                       [_finding(f) for f in on_turn.get(tid, ())], class_="turn",
                       id=f"turn-{number}"))
    return Html("".join(parts))
