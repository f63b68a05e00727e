"""Output (part): the list of recent runs (``/ui/``), filtered as the results API.

One line per run: time, service, agent (marked when inferred), what the user asked (the
run's first user input, redacted as the judge sees it and cut to one line), verdict,
``p_success`` (marked below ``prediction.pass_threshold``), findings by kind, steps
(``counts.steps``: what ``--budget steps`` counts), tokens, cost, duration; the filter
form takes the results API's parameters (``otel_eval.store.query``), and the page ends
with a link to the next one (the API's keyset cursor).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from otel_eval.base.printable import bidi_escaped
from otel_eval.base.steps import tokens_total
from otel_eval.outputs.ui.html import Html, h, href, segment
from otel_eval.outputs.ui.text import Redact, redacted, run_cost
from otel_eval.outputs.ui.values import short, when
from otel_eval.outputs.ui.verdicts import agent_name, p_badge
from otel_eval.store.query import STATUSES, Page

FILTERS = ("service", "agent", "task_id", "status", "passed", "detector", "since", "until",
           "window", "counted_since", "counted_until", "counted_window", "limit")
# the window the metrics counted the runs in, as the alerts' and panels' links give it: kept
# through the form (hidden), not typed in
_COUNTED = ("counted_since", "counted_until", "counted_window")
DEFAULT_LIMIT = "50"
_SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}
PREVIEW_CHARS = 120  # of a run's input shown in the list (one line)


def verdict_badge(verdict: Any) -> Html:
    if not isinstance(verdict, dict):
        return h("span", "no verdict", class_="badge none")
    passed = bool(verdict.get("passed"))
    return h("span", "PASS" if passed else "FAIL", class_="badge " + ("pass" if passed
                                                                         else "fail"))


def finding_kinds(body: Mapping[str, Any], filters: Mapping[str, str] | None = None) -> Html:
    """Findings by ``detector:kind`` (errors first), each a link to the runs that have it
    within ``filters`` (the page's: its ``service``, ``agent``, ...; its own ``detector`` and
    ``cursor`` replaced)."""
    kept = {k: v for k, v in (filters or {}).items() if k not in ("detector", "cursor")}
    kinds: Counter[tuple[int, str, str]] = Counter()
    for f in body.get("findings") or []:
        if isinstance(f, dict):
            name = f"{short(f.get('detector'), 40)}:{short(f.get('kind'), 40)}"
            severity = str(f.get("severity"))
            kinds[(_SEVERITY_RANK.get(severity, 3), name, severity)] += 1
    items = [h("a", name + (f" x{n}" if n > 1 else ""), class_="kind sev-" + severity,
               href=href("/ui/", {**kept, "detector": name}))
             for (_, name, severity), n in sorted(kinds.items())[:12]]
    return h("span", items, class_="kinds")


def preview(value: Any, redact: Redact) -> Html:
    """The run's input as one escaped line of at most ``PREVIEW_CHARS`` characters, redacted
    (only its head is read: a 20 MB input costs what its first characters do)."""
    if value is None or value == "":
        return Html("")
    line = short(redacted(value, PREVIEW_CHARS * 4, redact), PREVIEW_CHARS)
    return h("span", line, class_="preview")


def steps_count(body: Mapping[str, Any]) -> str:
    """``counts.steps`` (the run's steps, as ``--budget steps`` counts them); "" for a run
    stored before it was recorded (unknown, not the number of spans)."""
    steps = (body.get("counts") or {}).get("steps")
    return str(steps) if isinstance(steps, int) and not isinstance(steps, bool) else ""


def _row(body: Mapping[str, Any], redact: Redact, threshold: float,
         params: Mapping[str, str]) -> Html:
    trace_id = str(body.get("trace_id"))
    usage = body.get("usage") or {}
    tokens = tokens_total(usage)
    duration = body.get("duration_s")
    at = when(body.get("start_time_unix_nano")).split(" ")  # date, time: each one piece
    cells = [
        h("a", [[h("span", part, class_="nobr"), " "] for part in at if part] or trace_id[:8],
          href="/ui/runs/" + segment(trace_id)),
        short(body.get("service") or "", 60), agent_name(body),
        preview(body.get("input"), redact),
        verdict_badge(body.get("verdict")), p_badge(body, threshold), finding_kinds(body, params),
        steps_count(body), "-" if tokens is None else f"{tokens:,}", run_cost(body),
        f"{duration:.1f} s" if isinstance(duration, int | float) else ""]
    return h("tr", [h("td", c) for c in cells])


_COLUMNS = (("time", None), ("service", None), ("agent", None),
            ("input", "the run's first user input (redacted as the judge sees it)"),
            ("verdict", None),
            ("p(success)", "the success predictor's p_success; red below "
                           "prediction.pass_threshold"),
            ("findings", None),
            ("steps", "the run's steps: its top-level tool calls, a code action once "
                      "(what --budget steps counts; LLM calls are not steps)"),
            ("tokens", None), ("cost", None), ("duration", None))


def _form(params: Mapping[str, str]) -> Html:
    def field(name: str, label: str, hint: str = "") -> Html:
        # the value goes back as it came (the filter the URL says); one holding a
        # bidirectional control (displayed reversed in the box) is written out escaped too
        value = params.get(name, "")
        escaped = bidi_escaped(value)
        return h("label", label, h("input", name=name, value=value, placeholder=hint or None),
                 h("small", "as text: ", escaped, class_="bidi") if escaped != value else None)
    def choose(name: str, label: str, options: tuple[tuple[str, str], ...]) -> Html:
        chosen = params.get(name, "")
        known = [v for v, _ in options]
        return h("label", label, h("select", [
            h("option", text, value=v, selected=chosen == v) for v, text in options]
            + ([h("option", chosen, value=chosen, selected=True)]  # a value of the URL's
               if chosen not in known else []), name=name))

    return h("form", field("service", "service"), field("agent", "agent"),
             field("task_id", "task"),
             choose("passed", "verdict", (("", "any"), ("false", "failed"), ("true", "passed"))),
             choose("status", "status", (("", "any"), *((s, s) for s in STATUSES))),
             field("detector", "finding", "loop or loop:stagnation"),
             field("since", "since", "2026-12-01T09:00:00Z"), field("until", "until"),
             field("window", "window before until", "1h"),
             [h("input", type="hidden", name=k, value=params[k]) for k in _COUNTED
              if k in params],
             h("input", type="hidden", name="limit", value=params.get("limit", DEFAULT_LIMIT)),
             h("button", "filter", type="submit"), method="get", action="/ui/",
             class_="filters")


def runs_page(page: Page | None, params: Mapping[str, str], error: str = "",
              redact: Redact = None, threshold: float = 0.5) -> Html:
    """The filter form and one page of runs (or the reason the filters were refused);
    ``threshold``: ``prediction.pass_threshold``."""
    parts: list[Any] = [h("h1", "Runs"), _form(params)]
    if error:
        parts.append(h("p", error, class_="error"))
    if page is None:
        return Html("".join(parts))
    head = h("tr", [h("th", c, title=about) for c, about in _COLUMNS])
    rows = [_row(b, redact, threshold, params) for b in page.evaluations if isinstance(b, dict)]
    parts.append(h("table", h("thead", head), h("tbody", rows), class_="runlist"))
    if not rows:
        parts.append(h("p", "No run matches these filters" + (
            " among the runs looked at; older ones are on the next page." if page.next_cursor
            else "."), class_="empty"))
    links = []
    if params.get("cursor"):
        links.append(h("a", "first page", href=href("/ui/", {**params, "cursor": None})))
    if page.next_cursor:
        links.append(h("a", "next page", href=href("/ui/", {**params,
                                                          "cursor": page.next_cursor}),
                       rel="next"))
    parts.append(h("p", links, class_="pages"))
    return Html("".join(parts))
