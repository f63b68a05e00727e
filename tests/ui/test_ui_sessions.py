"""The conversation pages over HTTP (``/ui/sessions``, ``/ui/sessions/{id}``): a transcript
of the turns in order, each turn's run and tool calls linked, the session findings on their
turn and step, the verdict and counts; hostile ids and content escaped, secrets redacted,
pages bounded; and a run that is a turn links back to its conversation."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlencode, urljoin

import pytest
from hostile import XSS
from session_server import (
    CLEAN,
    DOTS,
    HOSTILE,
    LONG,
    LONG_TURNS,
    SECRET,
    record,
    session_admin,
    stored_conversations,
)
from ui_server import get

from otel_eval.evaluate.judge.config import RedactionConfig
from otel_eval.evaluate.judge.redact import Redactor
from otel_eval.outputs.ui.html import CSP
from otel_eval.outputs.ui.sessions import TURNS_PER_PAGE


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, list[str]]]]:
    store, ids = stored_conversations(tmp_path_factory.mktemp("sessions") / "otel-eval.db")
    with session_admin(store) as url:
        yield url, ids
    store.close()


def _page(url: str) -> str:
    status, headers, body = get(url)
    assert status == 200, body[:500]
    assert headers["Content-Security-Policy"] == CSP
    text = body.decode()
    # every value escaped: the one script is the web view's own file (the outcome form's)
    assert text.count("<script") == text.count('<script src="/ui/static/')
    assert " style=" not in text
    return text


def _link(conversation: str, turn: int | None = None) -> str:
    """The conversation's page: within its service (the scripted turns' "airline")."""
    return ("/ui/sessions/" + quote(conversation, safe="") + "?service=airline"
            + (f"&turn={turn}" if turn is not None else ""))


def _sections(text: str) -> list[str]:
    return text.split('<section class="turn"')[1:]


def test_the_list_links_every_conversation(served: tuple[str, dict[str, list[str]]]) -> None:
    url, _ = served
    text = _page(url + "/ui/sessions")
    for conversation in (HOSTILE, CLEAN, LONG):
        assert f'href="{_link(conversation)}"'.replace("&", "&amp;") in text
    assert "&lt;script&gt;window.__pwned=&#x27;session id&#x27;&lt;/script&gt;" in text
    assert "loop:repeated_across_turns" in text and "non_termination:pending_tool_call" in text


def test_a_conversation_is_its_turns_in_order(served: tuple[str, dict[str, list[str]]]) -> None:
    url, ids = served
    text = _page(url + _link(HOSTILE))
    head, turns = text.split('<section class="turn"')[0], _sections(text)
    assert "FAIL" in head and "complete" in head
    assert "5 turns" in head and "2 session findings" in head and "5 tool calls" in head
    assert len(turns) == 5
    for number, (trace_id, turn) in enumerate(zip(ids[HOSTILE], turns, strict=True)):
        assert turn.startswith(f' id="turn-{number + 1}"')
        assert f'href="/ui/runs/{trace_id}"' in turn  # the turn's run
        assert (f"question {number}" in turn) == (number < 4)  # the user's message
    # tool calls in brief, each linked to its step of the run view
    calls = re.findall(r'<ul class="calls">(.*?)</ul>', turns[0])
    assert len(calls) == 1 and "get_reservation_details" in calls[0]
    # (the page of the run that holds the step: a long run is several pages)
    step = re.search(rf'href="(/ui/runs/{ids[HOSTILE][0]}\?step=(\d+)#step-\2)"', calls[0])
    assert step and f'<section id="step-{step.group(2)}"' in _page(url + step.group(1))
    assert "update_seat" not in turns[4].split('class="calls"')[0]  # it never ran
    # the session findings on the turn (and step) they point at
    assert [("loop:repeated_across_turns" in t) for t in turns] == [False] * 3 + [True, False]
    assert [("non_termination:pending_tool_call" in t) for t in turns] == [False] * 4 + [True]
    loop = turns[3].split("loop:repeated_across_turns")[1]
    assert re.search(rf'href="/ui/runs/{ids[HOSTILE][3]}\?step=(\d+)#step-\1">step \1', loop)


def test_hostile_content_is_text_and_secrets_are_redacted(
        served: tuple[str, dict[str, list[str]]]) -> None:
    url, _ = served
    text = _page(url + _link(HOSTILE))
    assert XSS not in text and "&lt;img src=x onerror=" in text
    assert 'href="javascript:' not in text
    assert SECRET not in text and "question 0" in text


def test_a_filter_past_4096_characters_is_read(
        served: tuple[str, dict[str, list[str]]]) -> None:
    """The list parsed its query cut at 4,096 characters: a filter past the cut vanished."""
    url, _ = served
    status, _, body = get(url + "/ui/sessions?" + "agent=&" * 600 + "passed=maybe")
    assert status == 400 and b"passed: must be true or false" in body


def test_a_clean_conversation_passes(served: tuple[str, dict[str, list[str]]]) -> None:
    url, ids = served
    text = _page(url + _link(CLEAN))
    assert "PASS" in text.split('<section class="turn"')[0]
    assert len(_sections(text)) == len(ids[CLEAN]) == 2
    assert "session-finding" not in text
    assert record(url, CLEAN)["findings"] == []


def test_a_long_conversation_is_paged_by_turns(
        served: tuple[str, dict[str, list[str]]]) -> None:
    url, ids = served
    first = _page(url + _link(LONG))
    assert len(_sections(first)) == TURNS_PER_PAGE
    assert f"turns 1-{TURNS_PER_PAGE} of {LONG_TURNS}" in first
    nxt = f'href="{_link(LONG, TURNS_PER_PAGE)}"'.replace("&", "&amp;")
    assert nxt in first and 'rel="prev"' not in first
    second = _page(url + _link(LONG, TURNS_PER_PAGE))
    turns = _sections(second)
    assert len(turns) == LONG_TURNS - TURNS_PER_PAGE
    assert turns[0].startswith(f' id="turn-{TURNS_PER_PAGE + 1}"')
    assert f'href="/ui/runs/{ids[LONG][-1]}"' in turns[-1]
    assert f'href="{_link(LONG)}"' in second and 'rel="next"' not in second
    for junk in ("x", "-1", "9" * 20):  # anything else starts at the first turn
        assert len(_sections(_page(url + f"{_link(LONG)}&turn={junk}"))) == TURNS_PER_PAGE
    assert len(_sections(_page(url + _link(LONG, 9999)))) == 1  # the last one


def test_a_run_of_a_conversation_links_to_it(
        served: tuple[str, dict[str, list[str]]]) -> None:
    url, ids = served
    text = _page(url + f"/ui/runs/{ids[HOSTILE][2]}")
    assert f'href="{_link(HOSTILE)}"'.replace("&", "&amp;") in text


def test_unknown_conversations_are_404(served: tuple[str, dict[str, list[str]]]) -> None:
    url, _ = served
    status, _, body = get(url + "/ui/sessions/" + quote("<b>nope</b>", safe=""))
    assert status == 404 and b"<b>nope" not in body
    assert get(url + "/ui/sessions?limit=0")[0] == 400


def test_an_unknown_conversation_is_named_as_the_api_names_it(
        served: tuple[str, dict[str, list[str]]]) -> None:
    """The 404 quotes the client's id as a JSON string, as ``GET /v1/sessions/{id}`` does
    (``quoted``); before, Python's repr of it escaped: ``'it"s \\\\x1b'``, its escape's
    backslash doubled."""
    url, _ = served
    status, _, body = get(url + "/ui/sessions/" + quote('it"s \x1b', safe=""))
    assert status == 404
    assert 'No conversation "it\\"s \\u001b".' in html.unescape(body.decode()), body


def test_a_turn_no_longer_stored_is_said(tmp_path: Path) -> None:
    """A session whose turn's run is gone (retention) still shows the turn, saying so."""
    from otel_eval.outputs.ui.sessions import session_page

    body = session_page({"session_id": "s", "traces": ["a" * 32, "b" * 32],
                         "findings": [{"detector": "loop", "kind": "repeated_across_turns",
                                       "severity": "error", "message": "<i>m</i>",
                                       "trace_id": "b" * 32, "step": True}],
                         "verdict": {"passed": False, "reasons": ["<i>r</i>"]}},
                        lambda t: None, None)
    assert body.count("no longer stored") == 2
    assert "&lt;i&gt;m&lt;/i&gt;" in body and "&lt;i&gt;r&lt;/i&gt;" in body
    assert "#step-True" not in body  # a step that is not an index links nowhere


def test_a_conversation_shows_its_p_success_and_its_judge() -> None:
    """The API's record of a complete session carries the predictor's p_success and the
    session judge's score and critique; the page showed neither (the run page shows both
    for a run). Now its header does, the critique redacted and escaped as every value."""
    from otel_eval.outputs.ui.sessions import session_page

    redact = Redactor(RedactionConfig()).redact
    critique = f"Turn 2 asked again: <b>{SECRET}</b>"
    judged = {"session_id": "s", "status": "complete", "traces": [],
              "verdict": {"passed": True, "reasons": []},
              "prediction": {"p_success": 0.3141, "model": "success-default@abc"},
              "judge": {"mode": "combined", "model": "gpt-4o-mini",
                        "judges": {"session": {"status": "ok", "scores": {"session": 0.25},
                                               "critiques": [{"dimension": "session",
                                                              "score": 0.25,
                                                              "text": critique}]}},
                        "overall": {"status": "ok", "session_score": 0.25, "passed": False,
                                    "tau_task": 0.5},
                        "totals": {"tokens": {"input": 2000, "output": 60}, "calls": 1,
                                   "cost_usd": 0.0004}}}
    body = session_page(judged, lambda t: None, redact, threshold=0.5)
    assert "p(success)" in body and "0.31" in body and "predicted to fail" in body
    assert "success-default@abc" in body
    assert "judge: failed (session score 0.25 &lt; 0.5)" in body
    assert "Turn 2 asked again: &lt;b&gt;" in body and SECRET not in body
    assert "2,000+60 tokens" in body
    skipped = {**judged, "prediction": None,
               "judge": {"judges": {}, "overall": {"status": "skipped", "reason": "one_turn"}}}
    body = session_page(skipped, lambda t: None, redact, threshold=0.5)
    assert "judge: skipped (one_turn)" in body and "p(success)" not in body
    opened = {"session_id": "s", "status": "open", "traces": [], "verdict": {"passed": True}}
    assert "p(success)" not in session_page(opened, lambda t: None, redact)


def test_a_page_takes_a_trailing_slash_as_the_api_does(
        served: tuple[str, dict[str, list[str]]]) -> None:
    """``/ui/issues/``, ``/ui/sessions/`` and ``/ui/calibration/`` were 404 where the API's
    routes (``/v1/issues/``, ``/v1/sessions/``) take a trailing slash: every page is the same
    page with one."""
    url, ids = served
    run = ids[CLEAN][0]
    conversation = _link(CLEAN)
    for path, query in (("/ui", ""), ("/ui/issues", ""), ("/ui/sessions", "?passed=true"),
                        ("/ui/calibration", ""), (f"/ui/runs/{run}", "?from=1"),
                        (f"/ui/runs/{run}/steps/1", ""), ("/ui/issues/iss-x/runs", ""),
                        (conversation.split("?")[0], "?" + conversation.split("?")[1])):
        plain, slashed = get(url + path + query), get(url + path + "/" + query)
        assert slashed[0] == plain[0] and slashed[2] == plain[2], path
        assert plain[0] == (404 if "iss-x" in path else 200), path
    assert get(url + "/ui/sessions/")[0] == get(url + "/v1/sessions/")[0] == 200


def test_a_dot_conversation_id_s_link_round_trips(tmp_path: Path) -> None:
    """Its link was /ui/sessions/..?service=airline, which a client resolves (RFC 3986
    5.2.4; a browser, test_ui_sessions_browser) to the runs list. Each id's link, resolved,
    opens that conversation."""
    store, _ = stored_conversations(tmp_path / "otel-eval.db", DOTS)
    with session_admin(store, len(DOTS)) as url:
        listed = _page(url + "/ui/sessions")
        links = re.findall(r'<td><a href="([^"]+)">([^<]*)</a>', listed)
        assert sorted(name for _, name in links) == sorted(DOTS)
        for link, name in links:
            target = urljoin(url + "/ui/sessions", html.unescape(link))
            heading = re.findall(r"<h1>(.*?)</h1>", _page(target))[0]
            assert heading.endswith(" " + name), (link, heading)
    store.close()


def test_the_api_serves_a_conversation_by_its_id_in_the_query(tmp_path: Path) -> None:
    """GET /v1/sessions/{id} had no query form: a client that resolves dot segments itself
    (curl, requests, a browser: RFC 3986 5.2.4) turned /v1/sessions/.. into /v1/ and
    /v1/sessions/. into /v1/sessions/, so conversations "." and ".." could not be read.
    /v1/sessions?id=ID&service=S is the same answer, as the web view's
    /ui/sessions?id=ID&service=S is its page."""
    store, _ = stored_conversations(tmp_path / "otel-eval.db", DOTS)
    with session_admin(store, len(DOTS)) as url:
        for name in DOTS:
            status, _, body = get(url + "/v1/sessions?" + urlencode({"id": name}))
            assert status == 200, body
            record = json.loads(body)
            assert record["session_id"] == name
            service = record["service"]
            with_service = get(url + "/v1/sessions?" + urlencode({"id": name,
                                                                   "service": service}))
            assert with_service[0] == 200 and json.loads(with_service[2]) == record
        by_path = get(url + "/v1/sessions/" + quote("%2E%2E", safe=""))
        by_query = get(url + "/v1/sessions/?" + urlencode({"id": "%2E%2E"}))
        assert by_path[0] == by_query[0] == 200 and by_path[2] == by_query[2]
        missing = get(url + "/v1/sessions?" + urlencode({"id": "nobody"}))
        assert missing[0] == 404
        for query, parameter in (("id=.&id=..", "id"), ("id=.&limit=2", "limit")):
            status, _, body = get(url + "/v1/sessions?" + query)
            assert status == 400 and json.loads(body)["parameter"] == parameter, body
    store.close()


def test_an_empty_id_in_the_query_is_a_400(
        served: tuple[str, dict[str, list[str]]]) -> None:
    """GET /v1/sessions?id= (empty) answered 404 "no session", not the 400
    {"error", "parameter"} every other bad parameter is."""
    url, _ = served
    for query in ("id=", "id=&service=airline"):
        status, _, body = get(url + "/v1/sessions?" + query)
        assert status == 400, body
        assert json.loads(body)["parameter"] == "id", body
