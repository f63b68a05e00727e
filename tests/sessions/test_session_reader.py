"""``SessionReader``: open until the session job completed it, the passed filter's bounded
scan and its cursor, turns cut to ``sessions.max_turns``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from otel_eval.base.results import Evaluation, Verdict
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.job import SessionJob
from otel_eval.evaluate.sessions.reader import SessionReader
from otel_eval.store import EvaluationStore, open_store
from otel_eval.store.query import QueryError
from otel_eval.store.sessions import SessionCursor, SessionQuery, session_key
from otel_eval.telemetry.metrics import Metrics

T0 = 1_764_547_200 * 10**9
S = 10**9


def _store(tmp_path: Path, sessions: int, turns: int, failing: set[int]) -> EvaluationStore:
    store = open_store(str(tmp_path / "s.db"))
    rows = []
    for s in range(sessions):
        for n in range(turns):
            i = s * turns + n
            t = Trajectory(f"{i:032x}", "otlp", "complete", [], service="shop",
                           agent="a", start_ns=T0 + i * S, session_id=f"s{s:02d}")
            verdict = Verdict(s not in failing or n > 0, [] if s not in failing
                              or n > 0 else ["bad"])
            rows.append(Evaluation(t, [], verdict, evaluated_at_ns=T0 + i * S))
    store.put_many(rows)
    return store


def test_status_and_cut_turns(tmp_path: Path) -> None:
    store = _store(tmp_path, 1, 5, set())
    config = SessionsConfig(idle_timeout_s=60, max_turns=3)
    reader = SessionReader(store, config)
    record = reader.get("s00")
    assert record is not None
    assert (record["status"], record["turns"], record["counts"]["turns_cut"]) == ("open", 5, 2)
    assert record["traces"] == [f"{i:032x}" for i in (2, 3, 4)]  # the newest, in turn order
    metrics = Metrics()
    SessionJob(store, config, metrics).tick((T0 + 4 * S) / 1e9 + 61)
    record = reader.get("s00")
    assert record is not None and record["status"] == "complete"
    assert record["cut_by"] == "max_turns"
    assert metrics.registry.get_sample_value("otel_eval_session_turns_dropped_total",
                                             {"reason": "max_turns"}) == 2
    assert reader.get("nope") is None
    store.close()


def test_the_passed_filter_looks_at_a_bounded_window_and_goes_on_by_cursor(
        tmp_path: Path) -> None:
    store = _store(tmp_path, 12, 1, failing={0})  # only the oldest session failed
    reader = SessionReader(store, SessionsConfig())
    first = reader.page(SessionQuery(passed=False, limit=2))  # looks at 10 of 12
    assert first["sessions"] == []
    assert SessionCursor.decode(first["next_cursor"]).session_id == session_key("shop", "s02")
    second = reader.page(SessionQuery(passed=False, limit=2,
                                      cursor=SessionCursor.decode(first["next_cursor"])))
    assert [s["session_id"] for s in second["sessions"]] == ["s00"]
    assert second["next_cursor"] is None
    assert second["sessions"][0]["verdict"] == {
        "passed": False, "reasons": [f"turn 1 ({0:032x}) failed: bad"]}
    everything = reader.page(SessionQuery(limit=12))
    assert len(everything["sessions"]) == 12 and everything["next_cursor"] is None
    store.close()


def test_the_detector_filter_keeps_sessions_with_that_session_finding(
        tmp_path: Path) -> None:
    """``detector=budget`` / ``budget:session_turns``: only the sessions past the session
    budget (two turns, the budget one); an unknown kind or detector keeps none. Several
    kinds, ``budget:session_steps,session_turns``, are any of them, as ``/v1/evaluations``
    reads them (the sessions' filter took one kind only: the list was read as one kind
    named "session_steps,session_turns", an empty page)."""
    store = open_store(str(tmp_path / "s.db"))
    rows = []
    for s, turns in enumerate((1, 2, 1, 2, 1)):
        for n in range(turns):
            i = s * 10 + n
            t = Trajectory(f"{i:032x}", "otlp", "complete", [], service="shop",
                           agent="a", start_ns=T0 + i * S, session_id=f"s{s:02d}")
            rows.append(Evaluation(t, [], Verdict(True, []),
                                   evaluated_at_ns=T0 + i * S))
    store.put_many(rows)
    reader = SessionReader(store, SessionsConfig(session_turns=1))

    def ids(detector: str, limit: int = 20) -> list[str]:
        q = SessionQuery.from_params({"detector": [detector], "limit": [str(limit)]})
        return [r["session_id"] for r in reader.page(q)["sessions"]]

    assert ids("budget") == ids("budget:session_turns") == ["s03", "s01"]
    assert ids("budget:session_steps") == ids("loop") == []
    assert ids("budget:session_steps,session_turns") == ["s03", "s01"]
    assert ids("budget:" + ",".join(f"k{i}" for i in range(15)) + ",session_turns") \
        == ["s03", "s01"]  # MAX_KINDS, as /v1/evaluations takes
    first = reader.page(SessionQuery(detector="budget", limit=1))
    assert [r["session_id"] for r in first["sessions"]] == ["s03"]
    rest = reader.page(SessionQuery(detector="budget", limit=1,
                                    cursor=SessionCursor.decode(first["next_cursor"])))
    assert [r["session_id"] for r in rest["sessions"]] == ["s01"]
    for malformed in ("loop:", ":repeated_across_turns", "budget:a,,b",
                      "budget:" + ",".join(f"k{i}" for i in range(17))):
        # the first two were read as "loop" (any kind) and as no detector's finding
        with pytest.raises(QueryError, match="detector: expected detector, detector:kind "
                                             "or detector:kind,kind"):
            SessionQuery.from_params({"detector": [malformed]})
        with pytest.raises(QueryError, match="detector"):  # the Python API's too
            SessionQuery(detector=malformed)
    store.close()


def test_a_service_name_of_any_length_neither_stops_the_list_nor_hides_its_session(
        tmp_path: Path) -> None:
    """service.name is span content: a sender may make it 5,000 characters. The session's
    key held it whole, so a page that ended on that session gave a cursor the API then
    refused (400, "not a cursor returned by this API"), and ``?service=`` with the name was
    refused too. The key holds its first ``MAX_SERVICE_CHARS``: the cursor goes on, and the
    name, whole or as the record shows it, finds the session."""
    from otel_eval.store.sessions import MAX_SERVICE_CHARS, session_service

    store = open_store(str(tmp_path / "s.db"))
    long = "x" * 5000
    rows = []
    for i, service in enumerate(["shop", long, "other"]):
        t = Trajectory(f"{i:032x}", "otlp", "complete", [], service=service, agent="a",
                       start_ns=T0 + i * S, session_id="1")
        rows.append(Evaluation(t, [], Verdict(True, []), evaluated_at_ns=T0 + i * S))
    store.put_many(rows)
    reader = SessionReader(store, SessionsConfig())
    seen, params = [], dict[str, list[str]]()
    for _ in range(4):  # one session a page, the cursor as a client sends it back
        page = reader.page(SessionQuery.from_params({**params, "limit": ["1"]}))
        seen += [len(s["service"]) for s in page["sessions"]]
        if page["next_cursor"] is None:
            break
        params = {"cursor": [page["next_cursor"]]}
    assert seen == [len("other"), MAX_SERVICE_CHARS, len("shop")]
    for name in (long, long[:MAX_SERVICE_CHARS]):
        record = reader.get("1", session_service({"service": [name]}))
        assert record is not None and record["traces"] == [f"{1:032x}"]
    store.close()


def test_a_record_an_earlier_versions_job_completed_under_a_migrated_key_is_named_by_its_id(
        tmp_path: Path) -> None:
    """A rolling upgrade on one PostgreSQL: once a new worker migrated the store (sessions
    keyed by ``session_key``), a worker of the earlier version still running completes those
    sessions too, and its job names the record by the row's key as it reads it (conversation
    id, U+001F, service). Before, the API listed that key as the session's id, and the link
    built from it (``/v1/sessions/{id}?service=``) answered 404; the record is read named by
    its conversation id, as this version's job names it."""
    store = _store(tmp_path, 1, 2, set())
    reader = SessionReader(store, SessionsConfig())
    key = session_key("shop", "s00")
    record = reader.get("s00", "shop")
    assert record is not None
    last = T0 + 1 * S
    assert store.claim_session(key, last, "old-worker", last + 61 * S, last)
    earlier = {**record, "session_id": key, "status": "complete"}  # as the earlier job wrote
    assert store.complete_session(key, "old-worker", earlier, last + 61 * S)
    got = reader.get("s00", "shop")
    assert got is not None and (got["session_id"], got["service"], got["status"]) == (
        "s00", "shop", "complete")
    listed = reader.page(SessionQuery(limit=5))["sessions"]
    assert [(s["session_id"], s["service"]) for s in listed] == [("s00", "shop")]
    store.close()


@pytest.mark.parametrize("completed", [False, True])
def test_turns_an_earlier_version_stored_under_the_bare_id_are_a_session_reached_by_its_link(
        tmp_path: Path, completed: bool) -> None:
    """During a rolling upgrade a worker of the earlier version stores its turns (and the
    sessions row) under the bare conversation id, which no ``session_key`` is: they make a
    session of their own, without a service (docs/store.md). Before, the list named it, and
    its link (``?service=``, the turns without one) answered 404, after the roll too; and a
    record the earlier job completed there named the turns' service, whose link led to
    another session. It is listed without a service and read by that link."""
    store = _store(tmp_path, 1, 2, set())
    reader = SessionReader(store, SessionsConfig())
    if completed:  # the earlier version's job completed it (its record names the turns')
        record = reader.get("s00", "shop")
        assert record is not None
        key, last = session_key("shop", "s00"), T0 + 1 * S
        assert store.claim_session(key, last, "old-worker", last + 61 * S, last)
        assert store.complete_session(key, "old-worker", {**record, "session_id": "s00",
                                                          "status": "complete"}, last + 61 * S)
    store.close()
    with sqlite3.connect(tmp_path / "s.db") as db:  # the keys as the earlier version wrote them
        db.execute("UPDATE evaluations SET session_id = 's00'")
        db.execute("UPDATE sessions SET session_id = 's00'")
    db.close()
    store = open_store(str(tmp_path / "s.db"))
    reader = SessionReader(store, SessionsConfig())
    listed = reader.page(SessionQuery(limit=5))["sessions"]
    assert [(s["session_id"], s["service"]) for s in listed] == [("s00", None)]
    for service in ("", None):
        got = reader.get("s00", service)
        assert got is not None and got["service"] is None and got["turns"] == 2
        assert got["status"] == ("complete" if completed else "open")
    assert reader.get("s00", "shop") is None
    store.close()


def test_a_page_reads_no_more_turns_than_one_session_may(tmp_path: Path) -> None:
    """``GET /v1/sessions`` computed each open session of its page from its stored turns,
    each up to ``max_turns_chars`` (64 Mi characters): 200 such sessions (1,000 with a
    filter) were read for one request. A page now ends, with its cursor, once the turns read
    for it reach ``max_turns_chars``; it always holds at least one session."""
    store = _store(tmp_path, 3, 2, set())
    one = store.session_turns(session_key("shop", "s02"), 500)[3]  # a session's 2 turns
    reader = SessionReader(store, SessionsConfig(max_turns_chars=one))
    first = reader.page(SessionQuery(limit=3))
    assert [s["session_id"] for s in first["sessions"]] == ["s02"]
    assert first["sessions"][0]["counts"]["turns_cut"] == 0  # its turns all read
    cursor = SessionCursor.decode(first["next_cursor"])
    rest = reader.page(SessionQuery(limit=3, cursor=cursor))
    assert [s["session_id"] for s in rest["sessions"]] == ["s01"]
    assert SessionCursor.decode(rest["next_cursor"]).session_id == session_key("shop", "s01")
    everything = SessionReader(store, SessionsConfig()).page(SessionQuery(limit=3))
    assert len(everything["sessions"]) == 3 and everything["next_cursor"] is None
    store.close()
