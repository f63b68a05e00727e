"""The run list's finding-kind links keep the page's filters: on ``/ui/?service=checkout``
a run's ``loop:stagnation`` link listed every service's runs with that finding (the link
was ``/ui/?detector=loop:stagnation`` whatever the page filtered)."""

from __future__ import annotations

import html as htmllib
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

from otel_eval.outputs.ui.routes import PAGES, Sources
from otel_eval.store.query import Page, encode_cursor

BODY: dict[str, Any] = {
    "trace_id": "ab" * 16, "service": "checkout", "agent": "planner",
    "findings": [{"detector": "loop", "kind": "stagnation", "severity": "error"}]}


def _runs(query: str) -> str:
    sources = Sources(query=lambda _q: Page([BODY], "c1"), get=lambda _t: BODY,
                      issues=lambda: None)
    for pattern, view in PAGES:
        found = re.fullmatch(pattern, "/ui/")
        if found:
            status, _, data = view(sources, found, query)
            assert status == 200
            return data.decode()
    raise AssertionError("no /ui/ page")


def _kind_links(page: str) -> list[dict[str, list[str]]]:
    links = re.findall(r'<a class="kind[^"]*" href="([^"]*)"', page)
    assert links, page
    return [parse_qs(urlsplit(htmllib.unescape(link)).query) for link in links]


def test_a_finding_kind_link_keeps_the_page_s_service_and_agent() -> None:
    cursor = encode_cursor(1, "cd" * 16)
    page = _runs(f"service=checkout&agent=planner&passed=false&cursor={cursor}")
    for params in _kind_links(page):
        assert params == {"service": ["checkout"], "agent": ["planner"],
                          "passed": ["false"], "detector": ["loop:stagnation"]}


def test_a_finding_kind_link_replaces_the_page_s_detector() -> None:
    page = _runs("service=checkout&detector=budget")
    for params in _kind_links(page):
        assert params == {"service": ["checkout"], "detector": ["loop:stagnation"]}


def test_a_turn_s_finding_kind_link_keeps_the_conversation_s_service() -> None:
    """A conversation's turn linked its finding kinds to every service's runs too."""
    from otel_eval.outputs.ui.sessions import _turn

    for service, label in (("checkout", "checkout"), (None, "unknown")):
        turn = _turn(1, BODY["trace_id"], {**BODY, "service": service}, [], None)
        for params in _kind_links(turn):
            assert params == {"service": [label], "detector": ["loop:stagnation"]}
