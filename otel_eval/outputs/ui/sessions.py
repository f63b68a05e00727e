"""Output (part): conversations. ``/ui/sessions`` lists them as ``GET /v1/sessions`` does;
``/ui/sessions/{id}`` shows one as a transcript. Its header: the conversation's verdict and
reasons, status and counts, and once complete what the other graders say of it, as the run
page says of a run: the predictor's ``p_success`` and the session judge's score, critique and
cost. Then per turn, in turn order: the turn's verdict and a link to its
run, the user's message, the tool calls in brief (each linked to its step in the run view),
the agent's reply, and each session finding on the turn (and step) it points at.

Bounded: a page shows ``TURNS_PER_PAGE`` turns (``?turn=N`` starts at turn N + 1; the
findings on the other turns are listed on their page, and counted in the header), at most
``CALLS_SHOWN`` tool calls per turn, and every value is redacted as the judge sees it, cut
and escaped (``html``, ``values.short``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from otel_eval.outputs.ui.html import Html, h, href, is_dot_segment, join, segment
from otel_eval.outputs.ui.run import critiques
from otel_eval.outputs.ui.runs import finding_kinds, verdict_badge
from otel_eval.outputs.ui.steplinks import step_url
from otel_eval.outputs.ui.text import Redact, redacted
from otel_eval.outputs.ui.values import short, when
from otel_eval.outputs.ui.verdicts import judge_cost, p_badge, p_success
from otel_eval.outputs.ui.verdicts import number as _number
from otel_eval.store.query import UNKNOWN_LABEL
from otel_eval.store.sessions import MAX_SERVICE_CHARS, MAX_SERVICES_NAMED

__all__ = ["CALLS_SHOWN", "TURNS_PER_PAGE", "session_page", "sessions_page"]

_TEXT_CHARS = 2000  # of a request or answer shown in the transcript
_ARGS_CHARS = 160  # of a tool call's arguments, in brief
TURNS_PER_PAGE = 50  # turns shown on one page (each turn's stored run is read)
CALLS_SHOWN = 20  # tool calls listed per turn (the rest counted)
_SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}
_COUNTS = (("turns", "turns"), ("failed_turns", "failed turns"), ("steps", "steps"),
           ("tool_calls", "tool calls"), ("findings", "session findings"),
           ("turn_findings", "findings in the turns"), ("turns_cut", "turns not read"))


def session_url(session_id: str, service: Any, turn: int | None = None) -> str:
    """The page of conversation ``session_id`` within ``service`` (None or "": the turns
    without one; as much of it as the session's key holds), from turn ``turn`` + 1."""
    query = {"service": service[:MAX_SERVICE_CHARS] if isinstance(service, str) else ""}
    if turn:
        query["turn"] = str(turn)
    if is_dot_segment(session_id):  # no path carries it: the id goes in the query
        return "/ui/sessions?" + urlencode({"id": session_id, **query})
    return "/ui/sessions/" + segment(session_id) + "?" + urlencode(query)


def _link(record: Mapping[str, Any], turn: int | None = None) -> str:
    return session_url(str(record.get("session_id")), record.get("service"), turn)


def services_page(session_id: str, services: Sequence[str]) -> Html:
    """A conversation id that several services' turns carry: a link to each one's."""
    more = len(services) > MAX_SERVICES_NAMED
    return Html(join([
        h("h1", "Conversation ", short(session_id, 120), " is in several services"),
        h("ul", [h("li", h("a", short(s or "(no service.name)", 120),
                           href=session_url(session_id, s)))
                 for s in services[:MAX_SERVICES_NAMED]]),
        h("p", "and more; filter the conversations by service") if more else ""]))


def _run_link(trace_id: str, step: Any = None) -> str:
    """The run; with ``step``, the page of the run that holds that step, at its anchor."""
    if isinstance(step, int) and not isinstance(step, bool):
        return step_url(trace_id, step)
    return "/ui/runs/" + segment(trace_id)


def _session_kinds(s: Mapping[str, Any]) -> Html:
    """The session's findings by ``detector:kind`` (errors first); not links: the run list's
    detector filter is about traces."""
    kinds: Counter[tuple[int, str, str]] = Counter()
    for f in s.get("findings") or ():
        if isinstance(f, dict):
            severity = short(f.get("severity"), 20)
            kinds[(_SEVERITY_RANK.get(severity, 3),
                   f"{short(f.get('detector'), 40)}:{short(f.get('kind'), 40)}", severity)] += 1
    return h("span", [h("span", name + (f" x{n}" if n > 1 else ""), class_="kind sev-" + sev)
                      for (_, name, sev), n in sorted(kinds.items())[:12]], class_="kinds")


def _row(s: Mapping[str, Any]) -> Html:
    sid = str(s.get("session_id"))
    cells = [h("a", short(sid, 60), href=_link(s)), when(s.get("start_time_unix_nano")),
             short(s.get("service") or "", 60), short(s.get("agent") or "", 60),
             short(s.get("status"), 20), short(s.get("turns"), 12),
             verdict_badge(s.get("verdict")), _session_kinds(s)]
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
    parts.append(h("table", h("thead", head), h("tbody", rows), class_="runs sessions"))
    if not rows:
        parts.append(h("p", "No conversation matches.", class_="empty"))
    if page.get("next_cursor"):
        parts.append(h("p", h("a", "next page", rel="next", href=href(
            "/ui/sessions", {**params, "cursor": str(page["next_cursor"])})), class_="pages"))
    return Html("".join(parts))


def _said(who: str, value: Any, redact: Redact) -> Html | None:
    if not isinstance(value, str) or not value:
        return None
    shown = redacted(value, _TEXT_CHARS, redact)
    return h("details", h("summary", h("b", who + " "), short(shown, 160)),
             h("pre", shown[:_TEXT_CHARS]), class_=f"said {who}")


def _calls(trace_id: str, steps: Any, redact: Redact) -> Html | None:
    """The turn's tool calls in brief: ``tool(arguments)``, error marked, each linked to its
    step in the run view."""
    calls = [s for s in steps if isinstance(s, dict) and s.get("kind") == "tool"] \
        if isinstance(steps, list) else []
    if not calls:
        return None
    items = []
    for step in calls[:CALLS_SHOWN]:
        arguments = short(redacted(step.get("arguments"), _ARGS_CHARS, redact), _ARGS_CHARS)
        failed = step.get("status") == "error" or step.get("error")
        items.append(h("li", h("a", short(step.get("tool_name") or step.get("name"), 80),
                               href=_run_link(trace_id, step.get("index"))),
                       h("span", f"({arguments})", class_="args"),
                       h("span", "error", class_="mark err") if failed else None))
    more = len(calls) - CALLS_SHOWN
    if more > 0:
        items.append(h("li", f"and {more} more tool calls", class_="also"))
    return h("ul", items, class_="calls")


def _finding(trace_id: str, f: Mapping[str, Any], redact: Redact) -> Html:
    step = f.get("step")
    where = h("a", f"step {step}", href=_run_link(trace_id, step)) \
        if isinstance(step, int) and not isinstance(step, bool) else None
    return h("div", h("span", short(f.get("severity"), 20), class_="sev"), " ",
             h("b", f"{short(f.get('detector'), 40)}:{short(f.get('kind'), 40)}"), " ",
             short(redacted(f.get("message"), 2000, redact), 2000), " ", where,
             class_="finding session-finding sev-" + short(f.get("severity"), 20))


def _turn(number: int, trace_id: str, body: Mapping[str, Any],
          findings: list[Mapping[str, Any]], redact: Redact) -> Html:
    head = h("h2", f"turn {number} ", verdict_badge(body.get("verdict")), " ",
             h("a", "run " + trace_id[:8], href=_run_link(trace_id)), " ",
             h("span", when(body.get("start_time_unix_nano")), class_="fact"),
             " ", finding_kinds(body, {"service": body.get("service") or UNKNOWN_LABEL})
             if body.get("findings") else None)  # the runs of the conversation's service
    missing = None if body else h("p", "This turn's run is no longer stored.", class_="empty")
    return h("section", head, missing, _said("user", body.get("input"), redact),
             _calls(trace_id, body.get("steps"), redact),
             _said("agent", body.get("output"), redact),
             [_finding(trace_id, f, redact) for f in findings], class_="turn",
             id=f"turn-{number}")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _judged(judge: Mapping[str, Any]) -> str | None:
    """The session judge's word: its score against ``tau_task``, else why there is none."""
    overall = _mapping(judge.get("overall"))
    if not overall:
        return None
    score = _number(overall.get("session_score"))
    if score is not None:
        tau = _number(overall.get("tau_task"))
        tau = 0.5 if tau is None else tau
        return (f"judge: {'succeeded' if score >= tau else 'failed'} (session score "
                f"{score:.2f} {'>=' if score >= tau else '<'} {tau:g})")
    why = overall.get("reason") or overall.get("error")
    return f"judge: {short(overall.get('status'), 20)}" + (f" ({short(why, 60)})" if why else "")


def _graders(record: Mapping[str, Any], threshold: float, redact: Redact) -> list[Any]:
    """What the predictor and the judge say of a complete conversation (the API's
    ``prediction`` and ``judge``: an open one has neither yet), the judge's critiques
    redacted as every value."""
    facts: list[Any] = []
    p = p_success(record)
    if p is not None:
        model = _mapping(record.get("prediction")).get("model")
        facts.append(h("span", "p(success) ", p_badge(record, threshold),
                       f" predicted to {'fail' if p < threshold else 'pass'} (pass threshold "
                       f"{threshold:g}; model {short(model or '-', 60)})"))
    judge = _mapping(record.get("judge"))
    said = _judged(judge)
    if said is not None:
        facts.append(h("span", said))
    cost = judge_cost(record)
    if cost:
        facts.append(h("span", cost, class_="judge-cost"))
    if not facts:
        return []
    texts = [c.get("text") for c in critiques({"judge": dict(judge)})]
    shown = [part for n, fact in enumerate(facts) for part in ((" · ", fact) if n else (fact,))]
    return [h("p", shown, class_="facts graders"),
            h("ul", [h("li", short(redacted(t, 2000, redact), 2000)) for t in texts[:20]],
              class_="critiques") if texts else ""]


def _header(record: Mapping[str, Any], redact: Redact, threshold: float) -> list[Any]:
    verdict = _mapping(record.get("verdict"))
    counts = _mapping(record.get("counts"))
    facts = [f"{counts[k]} {label}" for k, label in _COUNTS
             if isinstance(counts.get(k), int) and (counts[k] or k in ("turns", "findings"))]
    return [h("h1", verdict_badge(verdict), " Conversation ",
              short(record.get("session_id"), 120)),
            h("p", short(record.get("status"), 20), " · service ",
              short(record.get("service") or "-", 60), " · agent ",
              short(record.get("agent") or "-", 60), " · user ",
              short(record.get("user_id") or "-", 60), " · started ",
              when(record.get("start_time_unix_nano")) or "-", class_="ids"),
            h("p", " · ".join(facts), class_="facts counts"),
            h("ul", [h("li", short(redacted(r, 2000, redact), 2000))  # findings' messages
                     for r in (verdict.get("reasons") or ())[:100]], class_="reasons"),
            *_graders(record, threshold, redact)]


def session_page(record: Mapping[str, Any], turn: Callable[[str], dict[str, Any] | None],
                 redact: Redact, first: int = 0, threshold: float = 0.5) -> Html:
    """The conversation's verdict, counts and graders (``threshold``:
    ``prediction.pass_threshold``), then its turns in order from turn ``first`` + 1
    (``TURNS_PER_PAGE`` of them), each with its tool calls and its findings."""
    on_turn: dict[str, list[Mapping[str, Any]]] = {}
    for f in record.get("findings") or ():
        if isinstance(f, dict):
            on_turn.setdefault(str(f.get("trace_id")), []).append(f)
    traces = [str(t) for t in record.get("traces") or ()]
    first = min(max(first, 0), max(len(traces) - 1, 0))
    parts = _header(record, redact, threshold)
    shown = traces[first:first + TURNS_PER_PAGE]
    for number, tid in enumerate(shown, first + 1):
        parts.append(_turn(number, tid, turn(tid) or {}, on_turn.get(tid, []), redact))
    pages = []
    if first > 0:
        pages.append(h("a", "earlier turns", rel="prev", href=_link(
            record, max(first - TURNS_PER_PAGE, 0) if first > TURNS_PER_PAGE else None)))
    if first + TURNS_PER_PAGE < len(traces):
        pages.append(h("a", "later turns", rel="next",
                       href=_link(record, first + TURNS_PER_PAGE)))
    if pages:
        parts.append(h("p", f"turns {first + 1}-{first + len(shown)} of {len(traces)} ",
                       pages, class_="pages"))
    return Html("".join(parts))
