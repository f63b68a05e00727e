"""A turn whose evaluation failed is still a turn of its conversation: the stand-in stored for
it (``Evaluator.failed``) keeps the run's session id, user, service and start, so the session
counts it, fails on it (a failed turn fails the session) and orders it by its start. Before,
it was stored with no session id: the session passed without it, and a re-evaluation of a
turn that failed took the turn out of its session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conversations import turn_body

from otel_eval.app.config import load_config
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.reader import SessionReader
from otel_eval.evaluate.stage import evaluate_and_store
from otel_eval.receive.loaders import load_path
from otel_eval.store import open_store

T0 = 1_700_000_000_000_000_000


def _turns(tmp_path: Path) -> list[Any]:
    traces = []
    for n in range(2):
        body = turn_body(f"{n + 1:032x}", T0 + n * 60_000_000_000, "gen_ai.conversation.id",
                         "conv-1", f"please help me with request {n}", [{"content": "done."}],
                         {})
        path = tmp_path / f"t{n}.json"
        path.write_text(json.dumps(body))
        traces += list(load_path(str(path)))
    return traces


def _boom(*_: Any, **__: Any) -> Any:
    raise RuntimeError("a detector crashed")


def test_a_failed_turn_stays_in_its_session_and_fails_it(tmp_path: Path) -> None:
    first, second = _turns(tmp_path)
    store = open_store(str(tmp_path / "s.db"))
    evaluator = Evaluator(load_config(None))
    evaluate_and_store(evaluator, store, [first])
    evaluator.evaluate = _boom  # type: ignore[method-assign]
    [out] = evaluate_and_store(evaluator, store, [second])
    assert out.evaluation is not None and out.evaluation.trajectory.session_id == "conv-1"
    session = SessionReader(store, SessionsConfig()).get("conv-1")
    assert session is not None
    assert session["turns"] == 2 and session["traces"] == [first.trace_id, second.trace_id]
    assert session["verdict"]["passed"] is False and session["counts"]["failed_turns"] == 1
    assert session["service"] == "airline"
    store.close()
