"""Output (part): one run (``/ui/runs/{trace_id}``) and one of its steps
(``/ui/runs/{trace_id}/steps/{index}``).

At the top the verdict and its reasons, the budgets blown, the reference match, the judge's
scores and the findings naming no step; then the steps in tree order, indented by depth (a
flat list: a hostile trace can be thousands of spans deep), each with its arguments, result
and LLM content (redacted as the judge sees them, folded), timing, tokens and cost, the calls
it asked for that never ran, and every finding that points at it; the judge's critiques of
a step are folded under it (one ``<details>`` a step, its summary the count and the lowest
score). Between the two (``outcome``): ``p_success``, what judging the run cost, the outcome
recorded for it, where the judge or the predictor disagree with that outcome, and the form
that records one (``POST /v1/feedback``, sent by ``static/outcome.js``).

Bounded by one budget of characters (``values.Budget``) that counts everything the page
emits: the header, each step whole (its head, values, calls, findings and critiques). The
steps are listed until it is spent (one at least), then the page says how many are left out
and links to the next ones (``?from=N``: from the step N + 1 in tree order), as the runs list
and a conversation page do; a link to a step on another page goes to the server, which
finds the page that holds it (``?step=N``, ``steplinks``). What one step or the run lists
is capped too (``LISTED`` findings, critiques and calls, ``ALSO_LINKS`` other steps a
finding names), the rest counted, with where to find it: the step's own page, which lists
more (``LISTED_ON_STEP``), or the API's record of the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from otel_eval.base.results import budget_exceeded
from otel_eval.outputs.ui.html import Html, h, href, segment
from otel_eval.outputs.ui.run import contents, outcome_note
from otel_eval.outputs.ui.runs import verdict_badge
from otel_eval.outputs.ui.sessions import session_url
from otel_eval.outputs.ui.steplinks import StepLinks, step_url
from otel_eval.outputs.ui.text import Redact, duration, redacted, run_cost, tokens, usd
from otel_eval.outputs.ui.values import NAME_CHARS, Budget, short, value, when
from otel_eval.outputs.ui.verdicts import agent_name, number

MAX_DEPTH = 24  # deeper steps are drawn at this indentation
LISTED = 20  # findings, critiques, calls that never ran: listed per step and on the run
LISTED_ON_STEP = 500  # the same on a step's own page
ALSO_LINKS = 20  # other steps a finding names, linked
REASONS = 100  # of the verdict's reasons


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _more(count: int, what: str, where: Html | None) -> Html | None:
    """``(N more what: where)`` when ``count`` > 0."""
    if count <= 0:
        return None
    return h("p", f"({count:,} more {what}", [": ", where] if where else None, ")",
             class_="cut")


def _api(trace_id: str) -> Html:
    """Where the whole record of a run is (read with a Bearer token)."""
    return h("code", f"GET /v1/evaluations/{trace_id}")


def _finding(f: dict[str, Any], here: Any, redact: Redact, links: StepLinks) -> Html:
    steps = [i for i in f.get("step_indexes") or [] if isinstance(i, int) and i != here]
    # a step the run does not list (cut from the stored record) has no anchor anywhere
    also = [h("a", str(i), href=links.href(i)) if links.lists(i) else str(i)
            for i in steps[:ALSO_LINKS]]
    return h("div", h("span", short(f.get("severity"), 20), class_="sev"), " ",
             h("b", f"{short(f.get('detector'), 40)}:{short(f.get('kind'), 40)}"), " ",
             short(redact(short(f.get("message"), 2000)) if redact else f.get("message"),
                   2000),
             h("span", " (steps ", [[a, " "] for a in also],
               f"and {len(steps) - ALSO_LINKS:,} more" if len(steps) > ALSO_LINKS else None,
               ")", class_="also")
             if also else None,
             class_="finding sev-" + short(f.get("severity"), 20))


def _critique(c: dict[str, Any], redact: Redact) -> Html:
    score = c.get("score")
    return h("div", h("span", "judge " + short(c.get("judge"), 40), class_="sev"), " ",
             h("b", short(c.get("dimension") or "", 40)),
             f" {score:.2f} " if isinstance(score, int | float) else " ",
             short(redact(short(c.get("text"), 2000)) if redact else c.get("text"), 2000),
             class_="critique")


def _findings(node: dict[str, Any], redact: Redact, listed: int, rest: Html | None,
              links: StepLinks) -> list[Html | None]:
    """The first ``listed`` findings on ``node`` (a step or the run), the others counted."""
    found = node.get("findings") or []
    return [*(_finding(f, node.get("index"), redact, links) for f in found[:listed]),
            _more(len(found) - listed, "findings", rest)]


def _notes(t: dict[str, Any], redact: Redact, links: StepLinks) -> list[Html | None]:
    """The findings and critiques naming no step."""
    critiques = t.get("critiques") or []
    return [*_findings(t, redact, LISTED, _api(t["trace_id"]), links),
            *(_critique(c, redact) for c in critiques[:LISTED]),
            _more(len(critiques) - LISTED, "critiques", _api(t["trace_id"]))]


def _folded_notes(node: dict[str, Any], redact: Redact, listed: int, rest: Html,
                  links: StepLinks) -> list[Html | None]:
    """A step's findings, then its critiques folded in one ``<details>``: the summary says
    how many and the lowest score (of them all; ``listed`` of each are shown)."""
    out = _findings(node, redact, listed, rest, links)
    critiques = [c for c in node.get("critiques") or [] if isinstance(c, dict)]
    if critiques:
        scores = [x for x in (number(c.get("score")) for c in critiques) if x is not None]
        about = (f"judge: {len(critiques)} critique{'s' if len(critiques) > 1 else ''}"
                 + (f", lowest {min(scores):.2f}" if scores else ""))
        out.append(h("details", h("summary", about),
                      [_critique(c, redact) for c in critiques[:listed]],
                      _more(len(critiques) - listed, "critiques", rest), class_="critiques"))
    return out


def _step_head(s: dict[str, Any], links: StepLinks) -> Html:
    tokens = (s.get("input_tokens"), s.get("output_tokens"))
    facts = [f"agent {short(s['agent_shown'], 80)}" if s.get("agent_shown") else None,
             short(s.get("model"), 80) if s.get("model") else None,
             "+".join("?" if n is None else str(n) for n in tokens) + " tok"  # ? unknown
             if tokens != (None, None) else None,
             usd(s["cost_usd"]) if s.get("cost_usd") is not None else None,
             duration(s.get("start_time_unix_nano"), s.get("end_time_unix_nano")) or None]
    marks = [h("span", "rebuilt: no span of its own", class_="mark rebuilt")
             if s.get("rebuilt") else None,
             h("span", "error", class_="mark err") if s.get("status") == "error" else None]
    return h("div", h("a", f"[{s['index']}]", href=links.href(s["index"])), " ",
             h("span", short(s.get("kind"), 20), class_="kind"), " ",
             h("span", short(s.get("name")), class_="name"), " ", marks,
             [h("span", f, class_="fact") for f in facts if f], class_="head")


def _call(call: dict[str, Any], redact: Redact) -> Html:
    return h("div", "asks for ", h("b", short(call.get("name"), 80)), " ",
             h("code", short(redacted(call.get("arguments"), 300, redact), 300)), " ",
             h("span", outcome_note(call), class_="mark never"
               if call.get("outcome") == "never_ran" else "mark"),
             class_="call")


def step_block(trace_id: str, s: dict[str, Any], budget: Budget, redact: Redact,
               links: StepLinks, whole: bool = False) -> Html:
    """One step, charged whole to ``budget``, its links to steps by ``links``; ``whole``: on
    the step's own page (lists ``LISTED_ON_STEP`` findings, critiques and calls, not
    ``LISTED``)."""
    before = budget.left
    more = f"/ui/runs/{segment(trace_id)}/steps/{s.get('index')}"
    listed, rest = (LISTED_ON_STEP, _api(trace_id)) if whole \
        else (LISTED, h("a", "whole step", href=more))
    cut = _dict(s.get("truncated"))
    parts: list[Any] = [_step_head(s, links)]
    parts += [value(label, raw, budget, redact, recorded=cut.get(label), more=more)
              for label, raw in contents(s)]
    calls = [c for c in s.get("tool_calls") or []
             if isinstance(c, dict) and c.get("outcome") != "ran"]
    parts += [_call(c, redact) for c in calls[:listed]]
    parts.append(_more(len(calls) - listed, "calls it asked for", rest))
    parts += _folded_notes(s, redact, listed, rest, links)
    depth = min(int(s.get("depth_shown") or 0), MAX_DEPTH)
    kind = short(s.get("kind"), 20)
    classes = f"step d{depth} k-{kind}" + (" has-findings" if s.get("findings") else "")
    return budget.charge(h("section", parts, id=f"step-{s.get('index')}", class_=classes),
                         before)


def _ordered(t: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Steps depth first (explicit stack), each once, with ``depth_shown`` and
    ``agent_shown`` (``_other_agent``)."""
    steps = {s["index"]: s for s in t["steps"]}
    seen: set[int] = set()
    stack = [(i, 0) for i in reversed(t["roots"])]
    while stack:
        index, depth = stack.pop()
        if index in seen:
            continue
        seen.add(index)
        yield {**steps[index], "depth_shown": depth,
               "agent_shown": _other_agent(t, steps[index])}
        stack += [(i, depth + 1) for i in reversed(steps[index]["children"])]


def _other_agent(t: dict[str, Any], s: dict[str, Any]) -> str | None:
    """The agent an LLM or tool step belongs to (its ``node``) when it is not the run's: in
    a multi-agent run, the sub-agent that made the call."""
    node = s.get("node")
    if s.get("kind") not in ("llm", "tool") or not isinstance(node, str) or not node:
        return None
    return node if node != t.get("agent") else None


def _status(t: dict[str, Any]) -> str:
    """The run's status, with why it was cut (``release_reason``) when it was."""
    reason = t.get("release_reason")
    if t.get("status") == "truncated" and isinstance(reason, str) and reason:
        return f"truncated ({short(reason, 40)})"
    return short(t.get("status"), 20)


def _summary(t: dict[str, Any], budget: Budget, redact: Redact, trace_url: str,
             links: StepLinks) -> Html:
    verdict = _dict(t.get("verdict"))
    counts, usage = t.get("counts") or {}, t.get("usage") or {}
    facts = [f"{counts.get('spans', 0)} spans", f"{counts.get('llm_calls', 0)} LLM calls",
             f"{counts.get('tool_calls', 0)} tool calls", f"{counts.get('errors', 0)} errors",
             tokens(usage),
             run_cost(t), f"{t.get('duration_s') or 0:.1f} s",
             f"status {_status(t)}", f"revision {t.get('revision', 0)}"]
    judge = _dict(t.get("judge"))
    scores = [f"{k.replace('_', ' ')} {judge[k]}" for k in  # a score not given: left out
              ("status", "process_score", "outcome_score", "lucky_pass")
              if judge.get(k) is not None]
    budgets = [f"{short(a.get('budget'), 40)} {a.get('value')} of {a.get('limit')}"
               for f in [*t["findings"], *(f for s in t["steps"] for f in s["findings"])]
               if budget_exceeded(f.get("detector"), f.get("kind"))
               for a in [f.get("attributes") or {}]][:LISTED]
    reasons = verdict.get("reasons") or []
    ref = _dict(verdict.get("reference"))
    match = _reference_line(ref)
    link = h("a", "open in the trace backend", href=trace_url.replace("{trace_id}",
                                                                    t["trace_id"]),
             rel="noreferrer") if trace_url else None
    return h("header", h("h1", verdict_badge(t.get("verdict")), " ",
                         agent_name(t, NAME_CHARS) if t.get("agent")
                         else short(t.get("service") or "run")),
             h("p", f"trace {t['trace_id']} · service {short(t.get('service') or '-')} · "
                    f"task {short(t.get('task_id') or '-')} · "
                    f"{when(t.get('start_time_unix_nano'))}",
               " ", link, class_="ids"),
             h("p", " · ".join(facts), class_="facts"),
             h("ul", [h("li", short(redacted(r, 500, redact), 500))  # findings' messages
                      for r in reasons[:REASONS]],
               class_="reasons"),
             _more(len(reasons) - REASONS, "reasons", _api(t["trace_id"])),
             h("p", "budgets exceeded: " + "; ".join(budgets), class_="budgets")
             if budgets else None,
             h("p", match, class_="match") if match else None,
             h("p", "judge: " + ", ".join(scores), class_="judge") if scores else None,
             [value(k, t[k], budget, redact) for k in ("input", "output")
              if t.get(k) is not None],
             _notes(t, redact, links), class_="run")


def _top(t: dict[str, Any], budget: Budget, redact: Redact, trace_url: str,
         outcome: Html | None, links: StepLinks) -> Html:
    """What heads every page of the run: its conversation, its summary, ``outcome``."""
    before = budget.left
    session = t.get("session_id")
    link = h("p", "a turn of conversation ", h("a", short(session, 120), href=session_url(
        session, t.get("service"))), class_="session") if isinstance(session, str) else Html("")
    return budget.charge(Html(link + _summary(t, budget, redact, trace_url, links)
                              + (outcome or "")), before)


def _listed(t: dict[str, Any], order: list[dict[str, Any]], first: int, left: int,
            redact: Redact, links: StepLinks) -> list[Html]:
    """The steps in tree order from position ``first`` until a budget of ``left`` is spent
    (one at least, so the next page moves on): where the page starting there ends."""
    budget, blocks = Budget(left), []
    for at in range(first, len(order)):
        blocks.append(step_block(t["trace_id"], order[at], budget, redact, links))
        if budget.spent:
            break
    return blocks


def _pager(trace_id: str, blocks: list[Html], first: int, total: int) -> Html:
    """The steps listed; when they are not the whole run, which they are and links to the
    first and the next ones."""
    listed = h("div", blocks, class_="steps")
    skipped = min(first, total)
    left = total - skipped - len(blocks)
    if not left and not first:
        return listed
    url = f"/ui/runs/{segment(trace_id)}"
    said = (f"steps {skipped + 1:,}-{skipped + len(blocks):,} of {total:,} (in tree order)"
            if blocks else f"no step from {first + 1:,}: the run has {total:,}")
    if left:
        said += f"; {left:,} more not on this page"
    links = [h("a", "first steps", href=url) if first else None,
             h("a", "next steps", rel="next", href=href(url, {"from": str(total - left)}))
             if left else None]
    return Html(listed + h("p", said, " ", links, class_="pages"))


def run_page(t: dict[str, Any], redact: Redact, trace_url: str = "",
             budget: Budget | None = None, outcome: Html | None = None,
             first: int = 0, step: int | None = None) -> Html:
    """A ``run.tree`` as the run view; ``outcome``: what is said between the header and the
    steps (``outcome.outcome_section``); ``first``: the steps listed start at this position
    in tree order (``?from=N``); ``step``: instead, the page that holds the step of that
    index (``?step=N``), the pages laid out from the first (``first`` if the run lists no
    such step).

    Where a page ends is where its budget is spent with every link to a step taken as on the
    page (``#step-N``, the shortest): that depends on the run and where the page starts
    only, so the server finds the same pages on every request. When a step linked to is on
    another page, the page's steps are built again with its links (``steplinks``)."""
    size = (budget or Budget()).left
    order = list(_ordered(t))
    position = {s["index"]: at for at, s in enumerate(order)}
    head, room = StepLinks(t["trace_id"], position), Budget(size)
    top = _top(t, room, redact, trace_url, outcome, head)
    at = position.get(step) if step is not None else None
    first = 0 if at is not None else first
    while True:  # pages from the first until the one holding ``step``; else only ``first``'s
        guess = StepLinks(t["trace_id"], position, first, linked=set(head.linked))
        blocks = _listed(t, order, first, room.left, redact, guess)
        end = first + len(blocks)
        if at is None or at < end:
            break
        first = end
    if not guess.guessed_right(end):
        links, room = StepLinks(t["trace_id"], position, first, end), Budget(size)
        top = _top(t, room, redact, trace_url, outcome, links)
        blocks = [step_block(t["trace_id"], s, room, redact, links) for s in order[first:end]]
    return Html(top + _pager(t["trace_id"], blocks, first, len(order)))


def step_page(t: dict[str, Any], index: int, redact: Redact) -> Html | None:
    """One step of a ``run.tree`` whole (its values bounded by the value limit, its lists
    by ``LISTED_ON_STEP``), or None. Its links to other steps go to the run's pages."""
    found = next((s for s in t["steps"] if s.get("index") == index), None)
    if found is None:
        return None
    position = {s["index"]: at for at, s in enumerate(_ordered(t))}
    at = position.get(index, -1)
    links = StepLinks(t["trace_id"], position, at, at + 1)
    back = h("p", h("a", "← the whole run", href=step_url(t["trace_id"], index)))
    shown = {**found, "depth_shown": 0, "agent_shown": _other_agent(t, found)}
    return Html(back + step_block(t["trace_id"], shown, Budget(), redact, links, whole=True))


def _reference_line(ref: dict[str, Any]) -> str | None:
    """``verdict.reference`` in a line: the calls' match (when compared), the answer's."""
    parts = []
    if "matched" in ref:
        said = ("matched" if ref.get("matched") is True else "not matched"
                if ref.get("matched") is not None else "unknown (the trace was cut)")
        parts.append(f"{said} ({short(ref.get('match'), 40)}, score {ref.get('score')})")
    if ref.get("answer") is not None:
        parts.append(f"answer {short(ref.get('answer'), 40)}")
    return "reference: " + "; ".join(parts) if parts else None

