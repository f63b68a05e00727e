"""``GET /v1/evaluations`` and ``Store.query``: filters, cursor pagination newest first, and a
400 naming each bad parameter, through the real admin server of a running service."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.harness import Harness, running_service

from otel_eval.base import model
from otel_eval.base.results import Evaluation, Finding, Verdict
from otel_eval.base.steps import Trajectory
from otel_eval.store import Store, filters
from otel_eval.store.query import Cursor, EvaluationQuery, Page, QueryError, parse_time
from otel_eval.store.sqlite import SqliteStore

T0 = 1_764_547_200 * 10**9  # 2025-12-01T00:00:00Z


def _evaluation(i: int, agent: str, passed: bool | None, detector: str | None = None,
                status: model.TraceStatus = "complete") -> Evaluation:
    traj = Trajectory(f"{i:032x}", "otlp", status, [], service="shop", agent=agent,
                      task_id=f"task-{i % 3}")
    findings = [Finding(detector, "stagnation" if detector == "loop" else "over",
                        "error", "x")] if detector else []
    verdict = None if passed is None else Verdict(passed, [])
    return Evaluation(traj, findings, verdict, evaluated_at_ns=T0 + i * 10**9)


def _fill(store: Store) -> None:
    store.put_many([_evaluation(i, "planner" if i % 2 else "coder", i % 4 != 0,
                                "loop" if i % 5 == 0 else ("budget" if i % 7 == 0 else None),
                                "incomplete" if i == 9 else "complete") for i in range(1, 41)])


def _ids(page: list[dict[str, Any]]) -> list[int]:
    return [int(b["trace_id"], 16) for b in page]


def test_pages_follow_the_cursor_newest_first_without_gaps(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    _fill(store)
    seen: list[int] = []
    cursor = None
    while True:
        page = store.query(EvaluationQuery(limit=7, cursor=cursor))
        seen += _ids(page.evaluations)
        if page.next_cursor is None:
            break
        cursor = EvaluationQuery.from_params({"cursor": [page.next_cursor]}).cursor
    assert seen == list(range(40, 0, -1))
    store.put_many([_evaluation(41, "coder", True)])  # stored meanwhile: pages do not shift
    first = store.query(EvaluationQuery(limit=2))
    second = store.query(EvaluationQuery(limit=2, cursor=EvaluationQuery.from_params(
        {"cursor": [str(first.next_cursor)]}).cursor))
    assert _ids(first.evaluations) == [41, 40] and _ids(second.evaluations) == [39, 38]


@pytest.mark.parametrize(("params", "expected"), [
    ({"agent": "planner", "passed": "true"}, list(range(39, 0, -2))),
    ({"agent": "coder", "passed": "false"}, [40, 36, 32, 28, 24, 20, 16, 12, 8, 4]),
    ({"detector": "loop"}, [40, 35, 30, 25, 20, 15, 10, 5]),
    ({"detector": "budget:over", "agent": "planner"}, [21, 7]),  # 35: a loop
    ({"detector": "loop:over"}, []),
    ({"status": "incomplete"}, [9]),
    ({"task_id": "task-0", "since": str(T0 // 10**9 + 30)}, [39, 36, 33, 30]),
    ({"until": "2025-12-01T00:00:04Z"}, [3, 2, 1]),
    ({"since": "2025-12-01T01:00:36+01:00", "until": "1764547239.5"}, [39, 38, 37, 36]),
    ({"service": "other"}, []),
])
def test_filters_over_http(tmp_path: Path, params: dict[str, str], expected: list[int]) -> None:
    with running_service(tmp_path) as h:
        _fill(h.svc.store)
        body = _get(h, {**params, "limit": "1000"})
        assert _ids(body["evaluations"]) == expected and body["next_cursor"] is None


@pytest.mark.parametrize(("params", "param"), [
    ({"limit": "0"}, "limit"), ({"limit": "1001"}, "limit"), ({"limit": "x"}, "limit"),
    ({"passed": "yes"}, "passed"), ({"status": "done"}, "status"),
    ({"since": "yesterday"}, "since"), ({"until": "2025-12-01T00:00:00"}, "until"),
    ({"since": "inf"}, "since"), ({"cursor": "%%%"}, "cursor"), ({"cursor": "YWJj"}, "cursor"),
    ({"agnet": "coder"}, "agnet"),
    ({"detector": "budget:a,,b"}, "detector"),
    ({"detector": "loop:"}, "detector"), ({"detector": ":stagnation"}, "detector"),
    ({"detector": "budget:" + ",".join(f"k{i}" for i in range(17))}, "detector"),
])
def test_a_bad_parameter_is_a_400_naming_it(tmp_path: Path, params: dict[str, str],
                                            param: str) -> None:
    with running_service(tmp_path) as h:
        with pytest.raises(urllib.error.HTTPError) as err:
            _get(h, params)
        assert err.value.code == 400
        body = json.load(err.value)
        assert body["parameter"] == param and body["error"].startswith(f"{param}: ")
    with pytest.raises(QueryError) as qerr:
        EvaluationQuery.from_params({k: [v] for k, v in params.items()})
    assert qerr.value.param == param


def test_a_write_goes_through_in_the_middle_of_a_scan(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A page's scan held the store's one lock to its last row (``detector=`` over 40k
    bodies: 1 s), and every write waited for it. Here the scan writes after its first row,
    from its own thread: the lock must be free (asked without waiting: held, the write would
    wait forever), the write lands, and the scan reads on in the snapshot it began with."""
    store = Store(str(tmp_path / "s.db"))
    _fill(store)
    read_page = filters.page

    def paused(rows: Iterable[Any], limit: int, max_bytes: int, end: Cursor | None) -> Page:
        def first_row_then_a_write() -> Iterator[Any]:
            it = iter(rows)
            yield next(it)
            assert store._lock.acquire(blocking=False), "the scan holds the writer's lock"
            store._lock.release()
            store.put_many([_evaluation(41, "coder", True)])
            yield from it
        return read_page(first_row_then_a_write(), limit, max_bytes, end)

    monkeypatch.setattr(filters, "page", paused)
    assert _ids(store.query(EvaluationQuery(limit=100)).evaluations) == list(range(40, 0, -1))
    monkeypatch.undo()
    assert _ids(store.query(EvaluationQuery(limit=2)).evaluations) == [41, 40]
    store.close()


def test_rfc3339_and_unix_seconds_agree() -> None:
    assert parse_time("since", "2025-12-01T00:00:00Z") == T0
    assert parse_time("since", "2025-12-01T01:00:00.25+01:00") == T0 + 250_000_000
    assert parse_time("since", "1764547200") == T0


@pytest.mark.parametrize(("text", "ns"), [
    # to the nanosecond (was: through a float, 1764547201000000000; RFC 3339 cut to 6 digits)
    ("1764547200.999999999", T0 + 999_999_999),
    ("2025-12-01T00:00:00.999999999Z", T0 + 999_999_999),
    ("2025-12-01T00:00:00,5Z", T0 + 500_000_000),
    # between two nanoseconds: up to the next (since <= t, t < until read the same of every
    # row stored at a whole nanosecond)
    ("1764547200.0000000001", T0 + 1),
    ("2025-12-01T00:00:00.0000000001Z", T0 + 1),
    ("9223372036.854775807", 2**63 - 1),
])
def test_a_time_is_read_to_the_nanosecond(text: str, ns: int) -> None:
    assert parse_time("since", text) == ns


@pytest.mark.parametrize("text", [
    "1969-12-31T23:59:59.5Z",  # was 500000000: half a second before the epoch
    "-0.5", "9223372036.854775808", "1e1000000000", "-1e1000000000", "9999-12-31T23:59:59Z",
])
def test_a_time_out_of_range_is_refused(text: str) -> None:
    with pytest.raises(QueryError, match="out of range"):
        parse_time("since", text)


def test_a_row_at_the_bound_s_nanosecond_is_in_since_and_out_of_until(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    evaluation = _evaluation(1, "planner", True)
    evaluation.evaluated_at_ns = T0 + 999_999_999
    store.put_many([evaluation])
    since = EvaluationQuery.from_params({"since": ["1764547200.999999999"]})
    until = EvaluationQuery.from_params({"until": ["2025-12-01T00:00:00.999999999Z"]})
    assert (len(store.query(since).evaluations), len(store.query(until).evaluations)) == (1, 0)
    store.close()


def _get(h: Harness, params: dict[str, str]) -> dict[str, Any]:
    from urllib.parse import urlencode
    with urllib.request.urlopen(f"{h.admin_url}/v1/evaluations?{urlencode(params)}") as r:
        return dict(json.load(r))


def test_a_detector_filter_reads_a_bounded_number_of_bodies_per_page(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``detector=`` reads each row's JSON body: a page of it read every stored body (a
    detector no run had, 300 rows here: 300 bodies parsed per request, growing with the
    store, for whoever may read). Now a page looks at most ``SCAN_FACTOR`` x ``limit`` rows
    and ends early with its cursor; following the cursors still finds every match."""
    parsed: list[int] = []
    connect = SqliteStore._connect

    def counting(self: SqliteStore) -> sqlite3.Connection:
        db = connect(self)
        db.create_function("parsed", 1, lambda body: parsed.append(1) or 1)
        return db

    monkeypatch.setattr(SqliteStore, "_connect", counting)
    monkeypatch.setattr(filters, "SQLITE", dataclasses.replace(
        filters.SQLITE, finding="parsed(body) AND " + filters.SQLITE.finding))
    store = Store(str(tmp_path / "s.db"))
    store.put_many([_evaluation(i, "coder", True, "loop" if i == 1 else None)
                    for i in range(1, 301)])
    first = store.query(EvaluationQuery(detector="loop", limit=1))
    assert first.evaluations == [] and first.next_cursor is not None
    assert len(parsed) <= filters.SCAN_FACTOR + 1
    found, cursor, pages = [], None, 0
    while True:
        parsed.clear()
        page = store.query(EvaluationQuery(detector="loop", limit=20, cursor=cursor))
        assert len(parsed) <= 20 * filters.SCAN_FACTOR + 1  # deep pages too
        found += _ids(page.evaluations)
        pages += 1
        if page.next_cursor is None:
            break
        cursor = EvaluationQuery.from_params({"cursor": [page.next_cursor]}).cursor
    assert found == [1] and pages == 3
    store.close()


@pytest.mark.parametrize(("window", "span_s"), [
    ("15m", 900), ("1h", 3600), ("6h", 21_600), ("24h", 86_400), ("1d", 86_400),
    ("1h30m", 5400), ("1w", 604_800), ("90s", 90)])
def test_a_window_ends_at_until(window: str, span_s: int) -> None:
    """``window`` (a dashboard link's ``${window}``, a Prometheus duration) with ``until`` (the
    clicked point's time) is the window that point counts: since = until - window, the
    later of the two with ``since``."""
    until = str(T0 // 10**9)
    q = EvaluationQuery.from_params({"until": [until], "window": [window]})
    assert (q.since_ns, q.until_ns) == (T0 - span_s * 10**9, T0)
    later = str(T0 // 10**9 - 60)
    q = EvaluationQuery.from_params({"until": [until], "window": [window], "since": [later]})
    assert q.since_ns == T0 - 60 * 10**9


@pytest.mark.parametrize(("params", "message"), [
    ({"window": "1h"}, "needs until"), ({"until": "1", "window": "1x"}, "duration"),
    ({"until": "1", "window": "h"}, "duration"), ({"until": "1", "window": "0m"}, "longer"),
    ({"until": "1", "window": "-1h"}, "duration"), ({"until": "1", "window": "1" * 60 + "s"},
                                                     "duration"),
    ({"until": "1", "window": "1h" * 6}, "duration"), ({"until": "1", "window": "500ms"},
                                                       "duration")])
def test_a_bad_window_is_refused(params: dict[str, str], message: str) -> None:
    with pytest.raises(QueryError, match=message) as err:
        EvaluationQuery.from_params({k: [v] for k, v in params.items()})
    assert err.value.param == "window"
