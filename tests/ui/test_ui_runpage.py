"""The run page's bounds: one budget counts everything the page emits (step heads, values,
calls, findings, critiques), the steps are listed until it is spent and the rest are on the
next pages (``?from=N``); what one step or the run lists is capped, the rest counted. Each
page is well-formed HTML however it is cut."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

from otel_eval.outputs.ui.html import page
from otel_eval.outputs.ui.routes import PAGES, Sources
from otel_eval.outputs.ui.run import tree
from otel_eval.outputs.ui.runview import (
    ALSO_LINKS,
    LISTED,
    LISTED_ON_STEP,
    REASONS,
    run_page,
    step_page,
)
from otel_eval.outputs.ui.values import PAGE_CHARS, Budget

TRACE_ID = "ab" * 16
_VOID = {"br", "input", "meta", "link", "hr", "img"}


class _Balance(HTMLParser):
    """Every tag opened is closed, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open[-1] == tag, (tag, self.open[-5:])
        self.open.pop()


def _well_formed(html: str) -> None:
    parser = _Balance()
    parser.feed(html)
    parser.close()
    assert parser.open == []


def _step(i: int, values: bool) -> dict[str, Any]:
    """A step as stored: an erring tool call (or an LLM call asking for one that never ran)
    with a long name, its values only when ``values``."""
    kind = "tool" if i % 2 else "llm"
    s: dict[str, Any] = {"index": i, "span_id": f"{i + 1:016x}", "parent_span_id": None,
                         "kind": kind, "name": "execute_tool " + "n" * 190, "status": "error",
                         "tool_name": "t" if kind == "tool" else None,
                         "start_time_unix_nano": 1, "end_time_unix_nano": 2}
    if kind == "llm":
        s["tool_calls"] = [{"name": "x" * 80, "arguments": {"a": "z" * 300},
                            "outcome": "never_ran"}]
    if values:
        s.update({"error": "E" * 4096, "arguments": {"q": "A" * 4096}, "result": "R" * 4096}
                 if kind == "tool" else {"prompt": "P" * 4096, "answer": "Q" * 4096})
    return s


def _run(steps: int, values: bool = False, **more: Any) -> dict[str, Any]:
    return {"trace_id": TRACE_ID, "steps": [_step(i, values) for i in range(steps)],
            "findings": [{"detector": "tool_call", "kind": "runtime", "severity": "warning",
                          "message": "M" * 2000, "step_indexes": [i]} for i in range(steps)],
            "verdict": {"passed": False, "reasons": ["r"]}, **more}


def _shown(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<section id="step-(\d+)"', html)]


def test_steps_without_values_still_spend_the_budget() -> None:
    """Heads, calls that never ran and findings count: 6,000 steps of them, no value at all,
    were a page of 16 MB."""
    t = tree(_run(6000))
    html = run_page(t, None)
    shown = _shown(html)
    assert 0 < len(shown) < 6000 and shown == list(range(len(shown)))
    assert PAGE_CHARS < len(html) < PAGE_CHARS + 10_000  # the last step crosses it
    assert (f"steps 1-{len(shown):,} of 6,000 (in tree order); {6000 - len(shown):,} more not "
            f'on this page <a rel="next" href="/ui/runs/{TRACE_ID}?from={len(shown)}">next '
            "steps</a>") in html
    _well_formed(html)


def test_every_step_is_on_exactly_one_page() -> None:
    t = tree(_run(300, values=True))
    seen: list[int] = []
    first, pages = 0, 0
    while True:
        html = run_page(t, None, budget=Budget(100_000), first=first)
        _well_formed(html)
        shown = _shown(html)
        assert shown and len(html) < 100_000 + 30_000  # one step over at most
        seen += shown
        pages += 1
        found = re.search(rf'href="/ui/runs/{TRACE_ID}\?from=(\d+)">next steps', html)
        if found is None:
            assert f"of 300 (in tree order) <a href=\"/ui/runs/{TRACE_ID}\">first steps" in html
            break
        assert int(found.group(1)) == first + len(shown)
        first = int(found.group(1))
    assert seen == list(range(300)) and pages > 10


def test_the_route_pages_by_from_and_past_the_end_says_so() -> None:
    body = _run(6000)
    src = Sources(query=lambda _q: None, get=lambda _t: body, issues=lambda: None)
    pattern, view = next((p, v) for p, v in PAGES if "runs" in p and "steps" in p)

    def get(query: str) -> str:
        status, _, data = view(src, re.fullmatch(pattern, f"/ui/runs/{TRACE_ID}"), query)
        assert status == 200
        return data.decode()

    first = _shown(get(""))
    second = get(f"from={len(first)}")
    assert _shown(second)[0] == len(first) and len(second) < PAGE_CHARS + 20_000
    assert f'<a href="/ui/runs/{TRACE_ID}">first steps</a>' in second
    beyond = get("from=7000")
    assert _shown(beyond) == [] and "no step from 7,001: the run has 6,000" in beyond
    assert _shown(get("from=x1")) == first  # not a number: the first page


def test_a_small_run_is_listed_whole_without_a_pages_note() -> None:
    html = run_page(tree(_run(20, values=True)), None)
    assert _shown(html) == list(range(20)) and 'class="pages"' not in html
    _well_formed(page("run", html).decode())


def test_steps_whose_parents_form_a_cycle_are_listed() -> None:
    """Spans that name each other as parents have no root above them: they were left off the
    page (and out of its "of N" count)."""
    body = _run(4)
    steps = body["steps"]
    steps[2]["parent_span_id"], steps[3]["parent_span_id"] = steps[3]["span_id"], \
        steps[2]["span_id"]
    html = run_page(tree(body), None)
    assert sorted(_shown(html)) == [0, 1, 2, 3]
    assert _shown(html)[:2] == [0, 1]  # the roots first


def test_a_step_lists_so_many_findings_critiques_and_calls_and_counts_the_rest() -> None:
    n = LISTED_ON_STEP + 7
    body = _run(1)
    body["steps"][0]["tool_calls"] = [{"name": f"c{i}", "outcome": "never_ran"}
                                      for i in range(n)]
    body["findings"] = [{"detector": "loop", "kind": "repeated_call", "severity": "error",
                         "message": f"f{i}", "step_indexes": [0]} for i in range(n)]
    body["findings"].append({"detector": "loop", "kind": "repeated_call", "severity": "error",
                             "message": "many", "step_indexes": [*range(1, 5001), 0]})
    body["judge"] = {"judges": {"j": {"critiques": [
        {"dimension": "d", "score": 1 - i / n, "text": f"c{i}", "step_index": 0}
        for i in range(n)]}}}
    t = tree(body)
    html = run_page(t, None)
    whole = f'<a href="/ui/runs/{TRACE_ID}/steps/0">whole step</a>'
    assert html.count('class="call"') == LISTED
    assert f"({n - LISTED:,} more calls it asked for: {whole})" in html
    assert html.count('class="finding') == LISTED
    assert f"({n + 1 - LISTED:,} more findings: {whole})" in html
    assert html.count('class="critique"') == LISTED
    assert f"({n - LISTED:,} more critiques: {whole})" in html
    assert f"<summary>judge: {n} critiques, lowest {1 - (n - 1) / n:.2f}</summary>" in html
    _well_formed(html)

    step = step_page(t, 0, None)
    assert step is not None
    api = f"<code>GET /v1/evaluations/{TRACE_ID}</code>"
    assert step.count('class="call"') == LISTED_ON_STEP
    assert f"(7 more calls it asked for: {api})" in step
    assert step.count('class="finding') == LISTED_ON_STEP and f"(8 more findings: {api})" in step
    assert step.count('class="critique"') == LISTED_ON_STEP
    last = t["steps"][0]["findings"][-1]  # the one naming 5,001 steps: its place, 20 others
    assert last["message"] == "many"
    listed = run_page({**t, "steps": [{**t["steps"][0], "findings": [last]}]}, None)
    also = listed.split('<span class="also">', 1)[1].split("</span>", 1)[0]
    # steps 1-5,000 are not in this one-step run: named, not linked (no anchor anywhere)
    assert also == (" (steps " + "".join(f"{i} " for i in range(1, ALSO_LINKS + 1))
                    + f"and {5000 - ALSO_LINKS:,} more)")


def test_the_run_lists_so_many_reasons_findings_and_critiques() -> None:
    body = _run(1, verdict={"passed": False, "reasons": [f"r{i}" for i in range(REASONS + 3)]})
    body["findings"] = [{"detector": "d", "kind": "k", "severity": "info", "message": f"t{i}",
                         "step_indexes": []} for i in range(LISTED + 4)]
    body["judge"] = {"judges": {"j": {"critiques": [{"dimension": "d", "text": f"c{i}"}
                                                   for i in range(LISTED + 5)]}}}
    html = run_page(tree(body), None)
    api = f"<code>GET /v1/evaluations/{TRACE_ID}</code>"
    header = html.split("</header>", 1)[0]
    assert header.count("<li>") == REASONS and f"(3 more reasons: {api})" in header
    assert header.count('class="finding') == LISTED and f"(4 more findings: {api})" in header
    assert header.count('class="critique"') == LISTED and f"(5 more critiques: {api})" in header
    _well_formed(html)


def test_a_sub_agent_s_steps_name_their_agent() -> None:
    """A multi-agent run: a call made by another agent than the run's says which; the run's
    own steps and agent steps say nothing more (the tree already nests them)."""
    run = _run(4, agent="triage_agent")
    for s, node in zip(run["steps"], ("triage_agent", "weather_agent", "weather_agent", None),
                       strict=True):
        s["node"] = node
    heads = re.findall(r'<div class="head">(.*?)</div>', run_page(tree(run), None))
    assert ["agent weather_agent" in h for h in heads] == [False, True, True, False]
    one = step_page(tree(run), 1, None)
    assert one is not None and "agent weather_agent" in one


def test_the_reference_line_shows_the_answer_s_match() -> None:
    """A reference with an expected answer only has no calls' match: the line said "not
    matched (None, score None)"; it shows the answer's, and both when both were compared."""
    def line(ref: dict[str, Any]) -> list[str]:
        run = _run(1, verdict={"passed": False, "reasons": ["r"], "reference": ref})
        return re.findall(r'<p class="match">(.*?)</p>', run_page(tree(run), None))

    assert line({"answer": "mismatch"}) == ["reference: answer mismatch"]
    assert line({"match": "in_order", "matched": True, "score": 1.0, "answer": "unknown"}) == [
        "reference: matched (in_order, score 1.0); answer unknown"]


def test_the_run_page_says_why_a_run_was_cut() -> None:
    """A run released ``truncated`` showed only that: whether otel-eval cut it for room or at
    its maximum duration was in no view. Its status names the reason."""
    html = run_page(tree(_run(1, status="truncated", release_reason="pressure")), None)
    assert "status truncated (pressure)" in html
