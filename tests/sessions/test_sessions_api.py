"""``GET /v1/sessions`` and ``/v1/sessions/{id}`` on a real serve: tau-bench conversations
replayed one OTLP/JSON trace per user turn, the conversation id under GenAI's
``gen_ai.conversation.id`` or OpenInference's ``session.id``; turns spread over two serves
sharing one PostgreSQL store (two workers of a fleet) make the same sessions."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from conversations import call, scripted, tau_turns
from support.harness import Harness, running_service

RUNS = 3  # tau-bench airline conversations replayed
IDLE_S = 1800


def _complete(h: Harness) -> int:
    """One check of the serve's session job long after the last turn: every session is idle;
    how many this serve completed."""
    return h.svc.session_job.tick(time.time() + IDLE_S + 1)


def _post(url: str, body: dict[str, Any]) -> None:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200


def _get(h: Harness, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(h.admin_url + path, timeout=30) as r:
            return int(r.status), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return int(e.code), json.loads(e.read())


def _conversations(datasets: Path, key: str) -> list[tuple[str, list[tuple[str, Any]]]]:
    runs = json.loads((datasets / "tau-bench" / "airline" / "gpt-4o-airline.runs.json")
                      .read_text())
    out = []
    for index, run in enumerate(runs[:RUNS]):
        conversation = f"tau-airline-{index}"
        out.append((conversation, tau_turns(run, index, key, conversation)))
    return out


@contextmanager
def _serves(tmp_path: Path, target: str, n: int) -> Iterator[list[Harness]]:
    with ExitStack() as stack:
        yield [stack.enter_context(running_service(
            tmp_path / f"s{i}", **({"store.url": target} if target else {}))) for i in range(n)]


def _replay(serves: list[Harness], conversations: list[tuple[str, list[Any]]]) -> None:
    """Each turn to the next serve in turn (round robin: a conversation's turns land on
    different serves when there are two), then every serve releases what it holds."""
    posted = 0
    for _, turns in conversations:
        for _, body in turns:
            _post(serves[posted % len(serves)].http_url, body)
            posted += 1
    for h in serves:
        h.release(after_s=h.svc.config.assembly.idle_timeout_s + 1)


def _sessions(h: Harness, key: str, datasets: Path,
              conversations: list[tuple[str, list[Any]]]) -> dict[str, Any]:
    out = {}
    for conversation, turns in conversations:
        code, record = _get(h, "/v1/sessions/" + urllib.parse.quote(conversation))
        assert code == 200, record
        assert record["traces"] == [trace_id for trace_id, _ in turns]  # every turn, in order
        assert record["turns"] == len(turns) > 1
        record.pop("last_turn_evaluated_at_unix_nano")
        out[conversation] = record
    return out


@pytest.mark.parametrize("key", ["gen_ai.conversation.id", "session.id"])
def test_tau_bench_conversations_come_back_as_sessions(tmp_path: Path, datasets: Path,
                                                       key: str) -> None:
    conversations = _conversations(datasets, key)
    with running_service(tmp_path) as h:
        _replay([h], conversations)
        code, page = _get(h, "/v1/sessions")
        assert code == 200
        assert sorted(s["session_id"] for s in page["sessions"]) == sorted(
            c for c, _ in conversations)
        assert {s["status"] for s in page["sessions"]} == {"open"}  # turns just stored
        [one] = [s for s in page["sessions"] if s["session_id"] == "tau-airline-0"]
        assert (one["service"], one["agent"]) == ("airline", "airline_agent")
        assert set(one["verdict"]) == {"passed", "reasons"}
        for f in one["findings"]:
            assert {"detector", "kind", "severity", "message", "trace_id", "step"} <= set(f)
        assert _complete(h) == len(conversations)  # long after: complete, each once
        assert _complete(h) == 0
        sessions = _sessions(h, key, datasets, conversations)
        assert {s["status"] for s in sessions.values()} == {"complete"}
        assert h.sample("otel_eval_sessions_completed_total", service="airline",
                        agent="airline_agent") == len(conversations)
        model = _get(h, f"/v1/evaluations/{conversations[0][1][0][0]}")[1]["prediction"]
        for s in sessions.values():  # the same model as the traces', on the conversation
            assert 0 < s["prediction"]["p_success"] < 1
            assert s["prediction"]["model"] == model["model"]
        code, turn = _get(h, f"/v1/evaluations/{conversations[0][1][0][0]}")
        assert turn["session_id"] == "tau-airline-0"
    # the same conversations carried by the other convention give the same sessions
    other = "session.id" if key == "gen_ai.conversation.id" else "gen_ai.conversation.id"
    with running_service(tmp_path / "other") as h:
        _replay([h], _conversations(datasets, other))
        _complete(h)
        again = _sessions(h, other, datasets, _conversations(datasets, other))
        for record in (*again.values(), *sessions.values()):
            record.pop("completed_at_unix_nano")
        assert again == sessions


def test_turns_on_two_serves_of_one_postgresql_store_make_one_session(
        tmp_path: Path, datasets: Path, postgresql_url: str) -> None:
    conversations = _conversations(datasets, "gen_ai.conversation.id")
    with _serves(tmp_path, postgresql_url, 2) as serves:
        _replay(serves, conversations)
        # both serves check at once: each session is completed by one of them, once
        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(_complete, serves))
        assert sum(done) == len(conversations)
        for h in serves:  # either serve answers with every turn
            records = _sessions(h, "gen_ai.conversation.id", datasets, conversations)
            assert {(r["status"], r["completion"]) for r in records.values()} == {
                ("complete", 0)}


def test_session_loop_filters_and_pages(tmp_path: Path) -> None:
    same = {"reservation_id": "ZFA04Y"}
    looping = scripted("loops", "gen_ai.conversation.id", [
        (f"what is the status of my booking, question {n}",
         [call("get_reservation_details", same, f"c{n}"), {"role": "assistant",
                                                          "content": "Confirmed."}])
        for n in range(4)])
    control = scripted("control", "gen_ai.conversation.id", [
        (f"what is the status of my booking, question {n}",
         [call("get_reservation_details", {"reservation_id": f"R{n}"}, f"c{n}"),
          {"role": "assistant", "content": "Confirmed."}]) for n in range(4)])
    with running_service(tmp_path) as h:
        _replay([h], [("loops", looping), ("control", control)])
        code, record = _get(h, "/v1/sessions/loops")
        assert record["status"] == "open"
        assert [(f["detector"], f["kind"], f["trace_id"]) for f in record["findings"]] == [
            ("loop", "repeated_across_turns", looping[-1][0])]
        assert _complete(h) == 2
        code, record = _get(h, "/v1/sessions/loops")
        assert record["status"] == "complete"
        assert ("loop", "repeated_across_turns") in [(f["detector"], f["kind"])
                                                     for f in record["findings"]]
        loops = "otel_eval_session_findings_total"
        assert h.sample(loops, service="airline", agent="airline_agent", detector="loop",
                        kind="repeated_across_turns") == 1  # the control has none
        assert h.sample("otel_eval_traces_with_loop_total", service="airline",
                        agent="airline_agent") == 0
        assert not any(f["detector"] == "loop" for f in
                       _get(h, "/v1/sessions/control")[1]["findings"])
        assert not any(f["detector"] == "loop" for t, _ in looping
                       for f in _get(h, f"/v1/evaluations/{t}")[1]["findings"])
        assert _get(h, "/v1/sessions/control")[1]["findings"] == []
        failed = _get(h, "/v1/sessions?passed=false")[1]
        assert [s["session_id"] for s in failed["sessions"]] == ["loops"]
        first = _get(h, "/v1/sessions?limit=1")[1]
        second = _get(h, "/v1/sessions?limit=1&cursor=" + first["next_cursor"])[1]
        assert len(first["sessions"]) == len(second["sessions"]) == 1
        assert {first["sessions"][0]["session_id"], second["sessions"][0]["session_id"]} == {
            "loops", "control"}
        assert second["next_cursor"] is None
        assert _get(h, "/v1/sessions?service=nope")[1] == {"sessions": [],
                                                          "next_cursor": None}
        assert _get(h, "/v1/sessions/unknown")[0] == 404
        code, bad = _get(h, "/v1/sessions?limit=0")
        assert (code, bad["parameter"]) == (400, "limit")


def test_two_services_with_one_conversation_id_make_two_sessions(tmp_path: Path) -> None:
    """Two services both name their conversation "1" (LangGraph's example thread_id), and
    one of them loops. Before, their turns made one session: the loop failed the other
    service's conversation, and the session finding was counted on whichever service's turn
    came last, paging its owners. Sessions are now per service: the API asks which (409,
    naming them), ``?service=`` picks one, and each is counted on its own service."""
    same = {"reservation_id": "ZFA04Y"}
    looping = scripted("1", "gen_ai.conversation.id", [
        (f"what is the status of my booking, question {n}",
         [call("get_reservation_details", same, f"c{n}"), {"role": "assistant",
                                                          "content": "Confirmed."}])
        for n in range(4)], service="other-team")
    clean = scripted("1", "gen_ai.conversation.id", [
        (f"please change my seat, request {n}",
         [call("update_seat", {"seat": f"{n}A"}, f"s{n}"),
          {"role": "assistant", "content": "Done."}]) for n in range(2)])
    with running_service(tmp_path) as h:
        _replay([h], [("1", looping), ("1", clean)])
        code, body = _get(h, "/v1/sessions/1")
        assert code == 409 and body["services"] == ["airline", "other-team"], body
        code, mine = _get(h, "/v1/sessions/1?service=airline")
        assert code == 200 and mine["service"] == "airline" and mine["findings"] == []
        assert mine["traces"] == [t for t, _ in clean]
        assert _complete(h) == 2
        mine = _get(h, "/v1/sessions/1?service=airline")[1]
        theirs = _get(h, "/v1/sessions/1?service=other-team")[1]
        assert (mine["status"], mine["verdict"]["passed"], mine["turns"]) == ("complete", True, 2)
        assert theirs["verdict"]["passed"] is False and theirs["turns"] == 4
        loops = {"detector": "loop", "kind": "repeated_across_turns"}
        assert h.sample("otel_eval_session_findings_total", service="airline",
                        agent="airline_agent", **loops) == 0
        assert h.sample("otel_eval_session_findings_total", service="other-team",
                        agent="airline_agent", **loops) == 1
        assert h.sample("otel_eval_sessions_failed_total", service="airline",
                        agent="airline_agent") == 0
        listed = _get(h, "/v1/sessions")[1]["sessions"]
        assert sorted((s["session_id"], s["service"]) for s in listed) == [
            ("1", "airline"), ("1", "other-team")]
        code, page = _page(h, "/ui/sessions/1")
        assert code == 409 and 'href="/ui/sessions/1?service=other-team"' in page
        code, page = _page(h, "/ui/sessions/1?service=other-team")
        assert code == 200 and "loop:repeated_across_turns" in page
        assert _get(h, "/v1/sessions/1?service=nope")[0] == 404
        assert _get(h, "/v1/sessions/1?services=airline")[0] == 400


def _page(h: Harness, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(h.admin_url + path, timeout=30) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode()


def test_web_view_shows_a_conversation_as_its_turns(tmp_path: Path) -> None:
    hostile = "<script>alert(1)</script>"
    turns = scripted(hostile, "session.id", [
        (f"what is the status of my booking, question {n}",
         [call("get_reservation_details", {"reservation_id": "ZFA04Y"}, f"c{n}"),
          {"role": "assistant", "content": "Confirmed."}]) for n in range(3)])
    with running_service(tmp_path) as h:
        _replay([h], [(hostile, turns)])
        code, listing = _page(h, "/ui/sessions")
        assert code == 200
        link = "/ui/sessions/" + urllib.parse.quote(hostile, safe="") + "?service=airline"
        assert f'href="{link}"' in listing.replace("&amp;", "&")
        assert hostile not in listing  # escaped
        code, page = _page(h, link)
        assert code == 200 and hostile not in page
        sections = page.split('class="turn"')[1:]
        assert len(sections) == 3
        for number, (trace_id, _) in enumerate(turns):
            assert f'href="/ui/runs/{trace_id}"' in sections[number]
            assert "question " + str(number) in sections[number]
        assert "loop:repeated_across_turns" in sections[2]
        assert "loop:repeated_across_turns" not in sections[0] + sections[1]
        code, run = _page(h, f"/ui/runs/{turns[0][0]}")
        assert f'href="{link}"' in run.replace("&amp;", "&")
        assert _page(h, "/ui/sessions/nope")[0] == 404
        assert _page(h, "/ui/sessions?limit=0")[0] == 400
        # once complete, the page says what the API says of it: its p_success and model
        assert "p(success)" not in page
        assert _complete(h) == 1
        prediction = _get(h, "/v1/sessions/" + urllib.parse.quote(hostile, safe=""))[1][
            "prediction"]
        code, page = _page(h, link)
        head = page.split('class="turn"')[0]
        assert code == 200 and "p(success)" in head
        assert f"{prediction['p_success']:.2f}" in head and prediction["model"] in head
