"""The conversation scenario of the conformance corpus as sessions: three user turns recorded
from a real instrumentation stack, each its own run (trace), all under the conversation id a
user of that stack sets (``scenarios.CONVERSATION_ID``), replayed through a real ``Service``,
come back from ``GET /v1/sessions/{id}`` as one session of the three turns in order; and the
same conversation carried by OpenInference's ``session.id`` or by GenAI's
``gen_ai.conversation.id`` gives the same session record.
"""

from __future__ import annotations

import copy
import json
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conformance import corpus, scenarios
from conformance.replay import replay
from support.harness import Harness, running_service

from otel_eval.evaluate.conventions.conversations import CONVERSATION_KEYS

_KEYS = frozenset(k for k, _ in CONVERSATION_KEYS)


def _get(h: Harness, path: str) -> Any:
    with urllib.request.urlopen(h.admin_url + path, timeout=30) as r:
        return json.loads(r.read())


def _session(tmp_path: Path, rec: dict[str, Any]) -> tuple[dict[str, Any], list[Any], dict]:
    """(GET /v1/sessions/{id}, GET /v1/sessions' sessions, the stored evaluations by trace)."""
    with running_service(tmp_path) as h:
        replay(h, rec)
        h.release(after_s=h.svc.config.assembly.idle_timeout_s + 1)
        # long after the last turn: the session job completes the conversation, once
        assert h.svc.session_job.tick(time.time() + h.svc.config.sessions.idle_timeout_s + 1) == 1
        record = _get(h, "/v1/sessions/" + urllib.parse.quote(scenarios.CONVERSATION_ID))
        listed = _get(h, "/v1/sessions")["sessions"]
        evaluations = {e["trace_id"]: e for e in h.svc.store.latest(100)}
    for when in ("last_turn_evaluated_at_unix_nano", "completed_at_unix_nano"):
        record.pop(when)
    return record, listed, evaluations


def _stacks() -> list[Any]:
    """The stacks with a conversation recording; a known_wrong one as a strict xfail."""
    out = []
    for stack in corpus.conversation_stacks():
        reason = corpus.known_wrong().get(f"{stack}/{corpus.CONVERSATION}")
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        out.append(pytest.param(stack, id=stack, marks=marks))
    return out


@pytest.mark.parametrize("stack", _stacks())
def test_conversation_is_one_session_of_its_turns_in_order(tmp_path: Path, stack: str) -> None:
    record, listed, evaluations = _session(tmp_path, corpus.recording(stack, "conversation"))
    assert [s["session_id"] for s in listed] == [scenarios.CONVERSATION_ID]
    assert record["session_id"] == scenarios.CONVERSATION_ID
    assert (record["status"], record["turns"]) == ("complete", 3)
    assert sorted(record["traces"]) == sorted(evaluations)  # every run is a turn of it
    # in order: turn n asked about the n-th city, and its run called get_weather for it
    assert [corpus.observed(evaluations[t])["cities"] for t in record["traces"]] == [
        [city] for city in scenarios.CONVERSATION_CITIES]
    assert [evaluations[t]["output"] for t in record["traces"]] == [
        f"It is sunny in {city}." for city in scenarios.CONVERSATION_CITIES]
    assert {e.get("session_id") for e in evaluations.values()} == {scenarios.CONVERSATION_ID}
    # the agent a careful human reads from each turn (as from the stack's clean run)
    assert record["agent"] == corpus.expectation(stack, "clean")["agent"]
    assert record["verdict"]["passed"] is True, record["findings"]
    assert record["findings"] == []


def _carried_by(rec: dict[str, Any], key: str) -> dict[str, Any]:
    """The recording with the conversation-id attributes of each span (any convention's keys,
    all the same id) replaced by one under ``key``."""
    out = copy.deepcopy(rec)
    renamed = 0
    for item in out["requests"]:
        for rs in item["body"].get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    attrs = span.get("attributes", [])
                    ids = [a for a in attrs if a["key"] in _KEYS]
                    if not ids:
                        continue
                    assert len({json.dumps(a["value"]) for a in ids}) == 1, (span["name"], ids)
                    span["attributes"] = [a for a in attrs if a["key"] not in _KEYS] + [
                        {"key": key, "value": ids[0]["value"]}]
                    renamed += 1
    assert renamed, "no span carries a conversation id"
    return out


@pytest.mark.parametrize("stack", corpus.conversation_stacks())
def test_session_id_and_gen_ai_conversation_id_give_the_same_session(tmp_path: Path,
                                                                     stack: str) -> None:
    rec = corpus.recording(stack, "conversation")
    records = [_session(tmp_path / key, _carried_by(rec, key))[0]
               for key in ("session.id", "gen_ai.conversation.id")]
    assert records[0] == records[1]
    assert records[0]["turns"] == 3
