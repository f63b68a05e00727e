"""The conversation pages in a real browser (headless Chromium, as ``test_ui_browser``): the
list links to the conversation, the transcript shows each turn with its run linked and the
session findings on their turn, a finding's step link opens the run at that step, the run
links back to its conversation, and hostile content never runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import Browser
from session_server import DOTS, HOSTILE, SECRET, session_admin, stored_conversations
from test_ui_browser import _safe, _shot

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    b = Browser(tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, list[str]]]]:
    store, ids = stored_conversations(tmp_path_factory.mktemp("sessions") / "otel-eval.db")
    with session_admin(store) as url:
        yield url, ids
    store.close()


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ui-session-screenshots")


def _click(b: Browser, selector: str) -> None:
    before = len(b.events)
    b.js(f"document.querySelector({selector!r}).click()")
    b.wait_load(before)


def test_from_the_list_to_a_turn_s_step_and_back(
        browser: Browser, served: tuple[str, dict[str, list[str]]], artefacts: Path) -> None:
    url, ids = served
    browser.open(url + "/ui/sessions")
    _safe(browser)
    rows = browser.js("[...document.querySelectorAll('table.sessions tbody tr')]"
                      ".map(r => r.innerText)")
    [row] = [r for r in rows if "__pwned" in r]
    assert "FAIL" in row and "loop:repeated_across_turns" in row and "\t5\t" in row
    # the hostile id is a link to its conversation, shown as text
    _click(browser, "table.sessions a[href*='__pwned']")
    _safe(browser)
    assert browser.js("document.querySelector('h1').innerText").endswith(HOSTILE)
    assert browser.js("document.querySelectorAll('section.turn').length") == 5
    turns = browser.js("[...document.querySelectorAll('section.turn')].map(s => s.innerText)")
    assert [("loop:repeated_across_turns" in t) for t in turns] == [False] * 3 + [True, False]
    assert "non_termination:pending_tool_call" in turns[4]
    assert all("get_reservation_details" in t for t in turns[:4])
    assert SECRET not in browser.js("document.body.innerText")
    # the transcript's folded messages open and still run nothing
    browser.js("document.querySelectorAll('details').forEach(d => d.open = true)")
    _safe(browser)
    assert "<script>window.__pwned=" in browser.js("document.body.innerText")
    _shot(browser, artefacts, "session")
    # the loop finding's step link opens the run at that step
    _click(browser, "#turn-4 .session-finding a")
    assert browser.js("location.pathname") == f"/ui/runs/{ids[HOSTILE][3]}"
    target = browser.js("document.querySelector(':target').id")
    assert target.startswith("step-")
    assert "get_reservation_details" in browser.js(
        f"document.getElementById('{target}').innerText")
    _safe(browser)
    # and the run links back to its conversation
    _click(browser, "p.session a")
    assert browser.js("document.querySelectorAll('section.turn').length") == 5
    assert browser.js("decodeURIComponent(location.pathname)") == "/ui/sessions/" + HOSTILE


def test_a_dot_conversation_id_is_linked_to_its_own_page(
        browser: Browser, tmp_path: Path) -> None:
    """A conversation id "." or ".." was linked as /ui/sessions/..?service=...: the browser
    resolves a dot segment (its %2E form too, WHATWG URL), so ".." opened the runs list and
    "." a 404. Each link, from the list and from a turn's run, opens its conversation."""
    store, ids = stored_conversations(tmp_path / "otel-eval.db", DOTS)
    with session_admin(store, len(DOTS)) as url:
        for conversation in DOTS:
            browser.open(url + "/ui/sessions")
            links = browser.js("[...document.querySelectorAll('table.sessions tbody a')]"
                               ".map(a => a.innerText)")
            assert sorted(links) == sorted(DOTS)
            _click(browser, f"table.sessions tbody tr:nth-child({links.index(conversation) + 1})"
                            " a")
            assert browser.js("document.querySelector('h1').innerText").endswith(
                " " + conversation), browser.js("location.href")
            assert browser.js("document.querySelectorAll('section.turn').length") == 2
            _click(browser, "#turn-1 a[href^='/ui/runs/']")
            assert browser.js("location.pathname") == f"/ui/runs/{ids[conversation][0]}"
            _click(browser, "p.session a")  # the run's link back to its conversation
            assert browser.js("document.querySelector('h1').innerText").endswith(
                " " + conversation), browser.js("location.href")
    store.close()
