"""Conversations for the web view tests: turns as a chat service sends them (one OTLP/JSON
trace per user turn, ``tests/sessions/conversations.py``), evaluated by the service's
evaluator, stored in a real store and read back through a real admin server with the
session reader the service uses. One conversation is hostile in every value it carries
(its id, the user's messages, the tool arguments, the agent's replies) and loops across
turns; one is clean; one has more turns than a page shows."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hostile import XSS
from prometheus_client import CollectorRegistry
from sessions.conversations import Message, call, scripted

from otel_eval.app.admin import AdminApi, AdminConfig, AdminServer
from otel_eval.app.config import Config
from otel_eval.base.model import Trace
from otel_eval.decode.otlp import decode_request
from otel_eval.decode.otlp_json import request_from_json
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.judge.config import RedactionConfig
from otel_eval.evaluate.judge.redact import Redactor
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.job import SessionJob
from otel_eval.evaluate.sessions.reader import SessionReader
from otel_eval.outputs.ui.sessions import TURNS_PER_PAGE
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics

HOSTILE = "<script>window.__pwned='session id'</script>/a b"  # "/" and " " URL-encoded
CLEAN = "clean-conversation"
LONG = "long-conversation"
LONG_TURNS = TURNS_PER_PAGE + 5
SECRET = "sk-" + "a" * 40  # an OpenAI-style key: the judge's redaction hides it
KEY = "session.id"


def _hostile_turns() -> list[tuple[str, list[Message]]]:
    same = {"reservation_id": XSS}
    turns: list[tuple[str, list[Message]]] = [
        (f"question {n}: {XSS} my key is {SECRET}",
         [call("get_reservation_details", same, f"c{n}"),
          {"role": "assistant", "content": f"answer {n}: {XSS}"}]) for n in range(4)]
    turns.append(("please change my seat to 12A on flight HAT001",
                  [call("update_seat", {"seat": "12A"}, "c9", pending=True)]))
    return turns


def _clean_turns() -> list[tuple[str, list[Message]]]:
    return [(f"a different question about booking number {n}",
             [call("get_reservation_details", {"reservation_id": f"R{n}"}, f"c{n}"),
              {"role": "assistant", "content": "Done."}]) for n in range(2)]


def _long_turns() -> list[tuple[str, list[Message]]]:
    return [(f"turn number {n} of a long talk", [{"role": "assistant", "content": "Sure."}])
            for n in range(LONG_TURNS)]


Turns = Callable[[], list[tuple[str, list[Message]]]]
CONVERSATIONS: dict[str, Turns] = {HOSTILE: _hostile_turns, CLEAN: _clean_turns,
                                   LONG: _long_turns}
# Ids a browser would resolve as a path's dot segments ("%2E" too), and one that is not
DOTS: dict[str, Turns] = {".": _clean_turns, "..": _clean_turns, "%2E%2E": _clean_turns}


def stored_conversations(path: Path, conversations: Mapping[str, Turns] = CONVERSATIONS
                         ) -> tuple[Store, dict[str, list[str]]]:
    """A store holding the conversations' turns; (the store, {conversation: trace ids})."""
    evaluator = Evaluator(Config())
    store = Store(str(path))
    ids: dict[str, list[str]] = {}
    for conversation, turns in conversations.items():
        for trace_id, body in scripted(conversation, KEY, turns()):
            spans = decode_request(request_from_json(json.dumps(body))).spans
            evaluation = evaluator.evaluate(Trace(trace_id, spans, "complete"))
            assert evaluation is not None
            store.put_many([evaluation])
            ids.setdefault(conversation, []).append(trace_id)
    return store, ids


@contextmanager
def session_admin(store: Store, sessions: int = len(CONVERSATIONS)) -> Iterator[str]:
    """The admin endpoint over ``store`` (holding ``sessions`` conversations) with sessions
    served, every session completed by the session job as long idle; yields its base URL."""
    config = SessionsConfig()
    later = time.time() + config.idle_timeout_s + 1
    assert SessionJob(store, config, Metrics(CollectorRegistry())).tick(later) == sessions
    reader = SessionReader(store, config)
    api = AdminApi(CollectorRegistry(), store.query, store.get, lambda _t, _o: None,
                   lambda: True, lambda: True, redact=Redactor(RedactionConfig()).redact,
                   sessions=reader.page, session=reader.get)
    server = AdminServer("127.0.0.1:0", api, AdminConfig(endpoint="127.0.0.1:0"))
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def record(url: str, conversation: str) -> dict[str, Any]:
    """The conversation's ``/v1/sessions/{id}`` object."""
    from urllib.parse import quote

    from ui_server import get

    status, _, body = get(url + "/v1/sessions/" + quote(conversation, safe=""))
    assert status == 200, body
    data: dict[str, Any] = json.loads(body)
    return data
