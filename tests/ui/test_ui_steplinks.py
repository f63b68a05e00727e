"""Links to a run's steps land where the step is listed. A long run is several pages
(``?from=N``), each with the anchors (``#step-N``) of its own steps only: a link to a step
is ``#step-N`` on the page that lists it, else ``/ui/runs/{id}?step=N#step-N``, which the
server answers with the page holding step N. Each test follows every link to a step of the
run from every page of it (and from each page those links reach) and parses the page it
lands on for the anchor."""

from __future__ import annotations

import re
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

from test_ui_runpage import TRACE_ID, _run
from ui_server import get

from otel_eval.outputs.ui.html import page
from otel_eval.outputs.ui.run import tree
from otel_eval.outputs.ui.runview import ALSO_LINKS, run_page, step_page
from otel_eval.outputs.ui.values import Budget


class _Page(HTMLParser):
    """A page's element ids and link targets."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.hrefs: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        given = dict(attrs)
        if given.get("id"):
            self.ids.add(str(given["id"]))
        if tag == "a" and given.get("href"):
            self.hrefs.append(str(given["href"]))


def _follow(fetch: Callable[[str], str], start: str, run: str) -> dict[str, int]:
    """Every page of the run reachable from ``start`` (its address, as the page links are
    resolved against it) through links to ``run`` (its path); asserts that each link to a
    step lands on a page that has the step's anchor. Counts the pages, the step links, and
    those that leave their page."""
    pages: dict[str, _Page] = {}
    todo, steps = [start], []
    while todo:
        url = todo.pop()
        if url in pages:
            continue
        pages[url] = shown = _Page(fetch(url))
        for link in shown.hrefs:
            target, _, anchor = urljoin(url, link).partition("#")
            if not urlsplit(target).path.startswith(run):
                continue  # the conversation, the API, the stylesheet
            todo.append(target)
            if anchor.startswith("step-"):
                steps.append((url, link, target, anchor))
    for url, link, target, anchor in steps:
        assert anchor in pages[target].ids, (url, link, target)
    return {"pages": len(pages), "step links": len(steps),
            "away": sum(1 for url, _, target, _ in steps if target != url)}


def _in_process(t: dict[str, Any], budget: int) -> Callable[[str], str]:
    """The run's pages as ``routes`` serves them, each page's budget ``budget`` (a few
    hundred steps make many pages)."""
    def fetch(url: str) -> str:
        parts = urlsplit(url)
        found = re.fullmatch(rf"/ui/runs/{TRACE_ID}(?:/steps/(\d+))?", parts.path)
        assert found, url
        if found.group(1):
            shown = step_page(t, int(found.group(1)), None)
            assert shown is not None
            return page("step", shown).decode()
        query = {k: int(v[0]) for k, v in parse_qs(parts.query).items()}
        return page("run", run_page(t, None, budget=Budget(budget), first=query.get("from", 0),
                                    step=query.get("step"))).decode()
    return fetch


def _crossing(steps: int) -> dict[str, Any]:
    """``_run``'s steps, each seventh with a finding that names two steps far from it,
    before and after (a finding is listed on the last step it names: ``run.tree``)."""
    body = _run(steps, values=True)
    body["findings"] += [{"detector": "loop", "kind": "repeated_call", "severity": "error",
                          "message": "again", "step_indexes": [(i * 53) % steps,
                                                               (i * 101 + 7) % steps, i]}
                         for i in range(0, steps, 7)]
    return tree(body)


def test_every_step_link_on_every_page_lands_on_its_step() -> None:
    fetch = _in_process(_crossing(300), 100_000)
    seen = _follow(fetch, f"/ui/runs/{TRACE_ID}", f"/ui/runs/{TRACE_ID}")
    # ?step=N pages and step pages are followed too, not only the run's ?from=N ones
    assert seen["pages"] > 100 and seen["step links"] > 1000 and seen["away"] > 300, seen


def test_a_page_links_its_own_steps_by_anchor_and_another_page_s_by_the_server() -> None:
    fetch = _in_process(_crossing(300), 100_000)
    first = _Page(fetch(f"/ui/runs/{TRACE_ID}"))
    listed = {int(i.removeprefix("step-")) for i in first.ids if i.startswith("step-")}
    linked = [(int(m.group(2)), m.group(1)) for h in first.hrefs
              if (m := re.fullmatch(r"(.*)#step-(\d+)", h))]
    assert 0 < len(listed) < 300 and {i for i, _ in linked} - listed
    for index, url in linked:
        assert url == ("" if index in listed else f"/ui/runs/{TRACE_ID}?step={index}")
    # the page holding a step is the same page as the pager's: ?step=N of the second page's
    # first step is that page, byte for byte
    second = re.search(rf'href="/ui/runs/{TRACE_ID}\?from=(\d+)">next steps', fetch(
        f"/ui/runs/{TRACE_ID}"))
    assert second
    assert fetch(f"/ui/runs/{TRACE_ID}?from={second.group(1)}") == fetch(
        f"/ui/runs/{TRACE_ID}?step={second.group(1)}")


def test_a_run_on_one_page_keeps_its_anchors() -> None:
    shown = run_page(_crossing(20), None)
    links = re.findall(r'href="([^"]*#step-\d+)"', shown)
    assert len(links) > 20 and all(h.startswith("#step-") for h in links)
    assert 'class="pages"' not in shown


def test_a_step_that_is_not_listed_or_not_a_number_is_the_first_page() -> None:
    fetch = _in_process(_crossing(300), 100_000)
    assert fetch(f"/ui/runs/{TRACE_ID}?step=5000") == fetch(f"/ui/runs/{TRACE_ID}")


def test_a_long_run_s_links_land_over_http(long_run: tuple[str, str]) -> None:
    url, trace_id = long_run

    def fetch(address: str) -> str:
        status, _, body = get(address)
        assert status == 200, address
        return body.decode()

    first = fetch(f"{url}/ui/runs/{trace_id}")
    assert re.search(rf'href="/ui/runs/{trace_id}\?from=\d+">next steps', first)
    seen = _follow(fetch, f"{url}/ui/runs/{trace_id}", f"/ui/runs/{trace_id}")
    # the loop finding on the last page names ALSO_LINKS steps of the first
    assert seen["away"] >= ALSO_LINKS and seen["pages"] > ALSO_LINKS, seen
    junk = fetch(f"{url}/ui/runs/{trace_id}?step=x1")
    assert junk == first  # not a number: the first page, as ?from= does


def test_a_step_the_run_does_not_list_is_named_not_linked() -> None:
    """A finding naming a step cut from the stored record (its index past the steps kept)
    linked to an anchor on no page; it is now its number, without a link."""
    body = _run(5)
    body["findings"].append({"detector": "loop", "kind": "repeated_call", "severity": "error",
                             "message": "again", "step_indexes": [900, 901]})
    shown = run_page(tree(body), None)
    assert "#step-900" not in shown and "#step-901" not in shown
    assert re.search(r'\(steps 900 901 \)', shown), shown[-2000:]
    assert not set(re.findall(r'href="#(step-\d+)"', shown)) - set(_Page(shown).ids)
