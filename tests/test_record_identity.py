"""What tells one log record of a trace from another (``model.content_ids``,
``content_digest``) agrees with assembly, which holds two records whose bytes differ as two
(``duplicate_log_record`` is the same bytes only): the per-message shape logs a call's
history one record per message, stamped alike, so two equal messages ("continue" said
twice) differ only in their observed time. Both are items of the run: a replay holding one
of them lacks a record the stored run was made from and is ``late``, as one lacking any
other record is. Before, ``content_ids`` was a set of the records' keys, so the two were
one id and the replay holding one superseded the stored run with a poorer evaluation.

The observed time itself stays out of a record's key: the same record redelivered keeps it
(its bytes), and keys of rows stored before stay what they were."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from otel_eval.app.config import Config
from otel_eval.base.model import LogEvent, Span, Trace, content_digest, content_ids
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import evaluate_and_store
from otel_eval.store import Store

TID = "c" * 32


def _spans() -> list[Span]:
    resource = {"service.name": "agents"}
    root = Span(TID, f"{1:016x}", None, "invoke_agent", 1, 10, resource=resource,
                attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"})
    chat = Span(TID, f"{2:016x}", root.span_id, "chat", 2, 3, resource=resource,
                attributes={"gen_ai.operation.name": "chat"})
    return [root, chat]


def _records() -> list[LogEvent]:
    """A call's history as the per-message shape logs it: one time, observed times apart."""
    sid = f"{2:016x}"
    said = [("gen_ai.user.message", "continue"), ("gen_ai.assistant.message", "done 1"),
            ("gen_ai.user.message", "continue")]
    return [LogEvent(TID, sid, name, 5, {}, {"content": text}, observed_time_unix_nano=5 + i)
            for i, (name, text) in enumerate(said)]


def _released(logs: list[LogEvent]) -> Trace:
    t = Trace(TID, _spans(), "complete", logs=logs)
    t.digest = content_digest(t)
    return t


def test_two_records_alike_but_for_their_observed_time_are_two_items() -> None:
    whole, [first, reply, again] = _released(_records()), _records()
    assert not content_ids(whole) <= content_ids(_released([first, reply]))
    assert not content_ids(whole) <= content_ids(_released([reply, again]))
    # in any order, and the same records redelivered, the same items and digest
    assert content_ids(_released([again, reply, first])) == content_ids(whole)
    assert content_digest(_released([again, reply, first])) == whole.digest
    # one record's key as before (rows stored by earlier releases still match)
    assert content_ids(_released([first])) == content_ids(
        _released([dataclasses.replace(first, observed_time_unix_nano=0)]))


def test_a_replay_lacking_one_of_two_records_alike_is_late(tmp_path: Path) -> None:
    evaluator = Evaluator(Config())
    store = Store(str(tmp_path / "s.db"))
    first, reply, again = _records()
    try:
        [stored] = evaluate_and_store(evaluator, store, [_released([first, reply, again])])
        assert stored.evaluation is not None
        stamp = store.stamp(TID)
        for fewer in ([first, reply], [reply, again]):
            [out] = evaluate_and_store(evaluator, store, [_released(fewer)])
            assert (out.evaluation, out.skipped) == (None, "late"), fewer
            assert store.stamp(TID) == stamp
        [same] = evaluate_and_store(evaluator, store, [_released([again, first, reply])])
        assert same.skipped == "already_evaluated"
        more = dataclasses.replace(first, observed_time_unix_nano=9)
        [out] = evaluate_and_store(evaluator, store, [_released([first, reply, again, more])])
        assert out.evaluation is not None and out.superseded
    finally:
        store.close()
