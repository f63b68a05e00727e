"""Stage: store, reads. The results API's query (``otel_eval.store.query``) as SQL, for both stores.

One builder, two dialects: the same filters, the same newest-first keyset order and the same
cursor condition, so a page of ``/v1/evaluations`` is the same whichever store holds the rows
(the contract test checks it). Only the placeholder, the boolean and the JSON functions of the
``detector`` filter differ. The ``detector`` filter reads each row's JSON body, so a page with
it looks at most ``SCAN_FACTOR`` x ``limit`` rows (those the other filters select, newest
first: ``window_sql`` finds the last of them on the index, without reading a body) and ends
there, with its cursor: one request's work is bounded by its ``limit``, not by the size of
the store (before, a detector no run had read every stored body on each request).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from otel_eval.base.jsontext import ascii_json
from otel_eval.store.query import (
    Cursor,
    EvaluationQuery,
    Page,
    detector_kinds,
    first_evaluated,
    in_window,
    label_condition,
)


@dataclass(frozen=True)
class Dialect:
    # Parameter placeholder ("?" for sqlite3, "%s" for psycopg).
    mark: str
    # The stored form of a verdict's passed flag (SQLite INTEGER, PostgreSQL BOOLEAN).
    passed_int: bool
    # EXISTS condition over the body's findings; {m} is the placeholder, {kind} the optional
    # kind condition ({marks}: a placeholder per kind).
    finding: str
    kind: str


SQLITE = Dialect(
    "?", True,
    "EXISTS (SELECT 1 FROM json_each(body, '$.findings') WHERE "
    "json_extract(value, '$.detector') = {m}{kind})",
    " AND json_extract(value, '$.kind') IN ({marks})")

# body is TEXT (see migrations): cast to json (not jsonb, which refuses "\u0000") per row.
POSTGRESQL = Dialect(
    "%s", False,
    "EXISTS (SELECT 1 FROM json_array_elements(body::json -> 'findings') AS f WHERE "
    "f ->> 'detector' = {m}{kind})",
    " AND f ->> 'kind' IN ({marks})")

SELECT_PAGE = ("SELECT evaluated_at_ns, trace_id, body FROM evaluations{where}"
               " ORDER BY evaluated_at_ns DESC, trace_id LIMIT {m}")
# With ``detector``: the newest rows the other filters select, at most the scan (and one
# more: is there a next page?), each with its body when it has such a finding, else NULL.
# With ``detector``: the last row a page may look at (the ``SCAN_FACTOR`` x limit-th the
# other filters select) and the row after it, if any (then the page ends there).
SELECT_WINDOW = ("SELECT evaluated_at_ns, trace_id FROM evaluations{where}"
                 " ORDER BY evaluated_at_ns DESC, trace_id LIMIT 2 OFFSET {m}")
# Rows looked at per page with a ``detector`` filter, times its limit (as /v1/sessions).
SCAN_FACTOR = 5


def window_sql(q: EvaluationQuery, d: Dialect) -> tuple[str, list[Any]] | None:
    """The SELECT of the end of the rows a page of ``q`` looks at (``window_end``); None
    without a ``detector`` filter (a page then reads up to its ``limit`` of matches)."""
    if q.detector is None:
        return None
    where, args = conditions(q, d)
    text = " WHERE " + " AND ".join(where) if where else ""
    return SELECT_WINDOW.format(where=text, m=d.mark), [*args, q.limit * SCAN_FACTOR - 1]


def window_end(rows: Iterable[Sequence[Any]]) -> Cursor | None:
    """The last row a page looks at, of the ``window_sql`` rows; None when no row follows
    it (the page may read to the end)."""
    found = list(rows)
    return Cursor(found[0][0], found[0][1]) if len(found) == 2 else None


def page_sql(q: EvaluationQuery, d: Dialect,
             end: Cursor | None = None) -> tuple[str, list[Any]]:
    """The SELECT of one page (one row more than ``q.limit``: is there a next page?), up to
    ``end`` (``window_end``) when given."""
    m = d.mark
    where, args = conditions(q, d)
    if q.detector is not None:
        detector, kinds = detector_kinds(q.detector)
        marks = ", ".join([m] * len(kinds))
        where.append(d.finding.format(m=m, kind=d.kind.format(marks=marks) if kinds else ""))
        args += [detector, *kinds]
    if end is not None:  # up to that row, included (the first term ends the index range)
        where.append(f"evaluated_at_ns >= {m} AND (evaluated_at_ns > {m} OR "
                     f"(evaluated_at_ns = {m} AND trace_id <= {m}))")
        args += [end.evaluated_at_ns] * 3 + [end.trace_id]
    sql = SELECT_PAGE.format(where=" WHERE " + " AND ".join(where) if where else "", m=m)
    return sql, [*args, q.limit + 1]


def page(rows: Iterable[Sequence[Any]], limit: int, max_bytes: int,
         end: Cursor | None = None) -> Page:
    """The page of the rows ``page_sql`` selects (evaluated_at_ns, trace_id, body), read one
    at a time: the first ``limit`` bodies, fewer when the next would take the page past
    ``max_bytes`` of JSON as the API sends it (``ascii_json``: a stored "日" is 6 bytes
    there), never fewer than one, and a cursor after the last body when a row is left. The
    rows after the one that ends the page are never read. Read up to ``end`` (the rows a
    page looks at end there and more follow): without a row left, the cursor is after
    ``end``."""
    bodies: list[Any] = []
    size = 0
    last: Sequence[Any] | None = None
    more = False
    for row in rows:
        text: str = row[2]
        sent = len(text) if text.isascii() else len(ascii_json(text))
        if len(bodies) == limit or (bodies and size + sent > max_bytes):
            more = True
            break
        size += sent
        bodies.append(json.loads(text))
        last = row
    if more and last is not None:
        return Page(bodies, Cursor(last[0], last[1]).encode())
    return Page(bodies, end.encode() if end is not None else None)


def conditions(q: EvaluationQuery, d: Dialect) -> tuple[list[str], list[Any]]:
    """SQL conditions and their arguments for the filters and cursor of ``q``."""
    m = d.mark
    where: list[str] = []
    args: list[Any] = []
    for column in ("service", "agent"):  # as the metrics label them (dashboard links)
        value = getattr(q, column)
        if value is not None:
            condition, given = label_condition(column, value, m)
            where += [condition] if condition else []
            args += given
    for column in ("task_id", "status"):
        value = getattr(q, column)
        if value is not None:
            where.append(f"{column} = {m}")
            args.append(value)
    if q.passed is not None:
        where.append(f"passed = {m}")
        args.append(int(q.passed) if d.passed_int else q.passed)
    given, given_ns = in_window("evaluated_at_ns", q.since_ns, q.until_ns, m)
    where += given
    args += given_ns
    if q.counted_since_ns is not None:  # a run is evaluated again after its first, never
        # before: the time index bounds the rows looked at
        where.append(f"{first_evaluated()} >= {m} AND evaluated_at_ns >= {m}")
        args += [q.counted_since_ns] * 2
    if q.counted_until_ns is not None:
        where.append(f"{first_evaluated()} < {m}")
        args.append(q.counted_until_ns)
    if q.cursor is not None:  # strictly after the previous page's last row (the first term
        # starts the index range there: no newer row is looked at, nor its body read)
        where.append(f"evaluated_at_ns <= {m} AND (evaluated_at_ns < {m} OR "
                     f"(evaluated_at_ns = {m} AND trace_id > {m}))")
        args += [q.cursor.evaluated_at_ns] * 3 + [q.cursor.trace_id]
    return where, args


# The labelled runs (``EvaluationStore.labelled``): the outcomes recorded last joined to their
# evaluations, and of each body only what calibration reads: every judge's scores and
# p_success, as JSON text (a stored body is up to max_result_bytes: reading whole ones held
# the SQLite writer's lock for seconds and took ~100 kB of memory per run). The newest
# ``limit`` rows are picked first, so the body of no other row is read.
_LABELLED_NEWEST = ("SELECT f.outcome, f.received_at_ns, e.service, e.agent, e.body "
                    "FROM feedback f JOIN evaluations e ON e.trace_id = f.trace_id "
                    "ORDER BY f.received_at_ns DESC LIMIT {m}")
# json_extract and json_each, not ->, which SQLite has only since 3.38 (Debian 11 ships 3.34);
# an object json_extract returns keeps its numbers as written
LABELLED_SQLITE = (
    "SELECT r.outcome, r.service, r.agent, "
    "(SELECT json_group_object(j.key, CASE j.type WHEN 'object' "
    "THEN json_extract(j.value, '$.scores') END)"
    " FROM json_each(r.body, '$.judge.judges') AS j"
    " WHERE json_type(r.body, '$.judge.judges') = 'object'), "
    "CASE json_type(r.body, '$.prediction') WHEN 'object' "
    "THEN json_extract(r.body, '$.prediction') END "
    f"FROM ({_LABELLED_NEWEST.format(m='?')}) AS r ORDER BY r.received_at_ns DESC")
# body is TEXT (see migrations): cast to json once per row picked
LABELLED_POSTGRESQL = (
    "SELECT r.outcome, r.service, r.agent, "
    "(SELECT json_object_agg(j.key, j.value -> 'scores') FROM json_each("
    "CASE json_typeof(b.doc -> 'judge' -> 'judges') WHEN 'object' "
    "THEN b.doc -> 'judge' -> 'judges' END) AS j)::text, "
    "CASE json_typeof(b.doc -> 'prediction') WHEN 'object' "
    "THEN (b.doc -> 'prediction')::text END "
    f"FROM ({_LABELLED_NEWEST.format(m='%s')}) AS r, LATERAL (SELECT r.body::json AS doc) AS b "
    "ORDER BY r.received_at_ns DESC")


# What changes when a feedback row is inserted, replaced (a new time) or deleted: the rows, the
# newest time and a sum of the times (modulo a prime: no overflow in SQLite's 64-bit sum).
# Same text in SQLite and PostgreSQL.
FEEDBACK_VERSION = ("SELECT COUNT(*), COALESCE(MAX(received_at_ns), 0), "
                    "COALESCE(SUM(received_at_ns % 1000000007), 0) FROM feedback")


def feedback_version(row: Sequence[Any] | None) -> tuple[int, ...]:
    return tuple(int(v) for v in row) if row is not None else ()


def labelled_run(row: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """(outcome, the parts of the body calibration reads) of a ``LABELLED_*`` row: service,
    agent, ``judge.judges.<name>.scores`` and ``prediction.p_success`` with its ``model``,
    shaped as in the body."""
    outcome, service, agent, scores, prediction = row
    judges = json.loads(scores) if scores is not None else None
    body: dict[str, Any] = {"service": service, "agent": agent, "judge": {"judges": {
        name: {"scores": s} for name, s in judges.items()} if isinstance(judges, dict) else {}}}
    found = json.loads(prediction) if prediction is not None else None
    if isinstance(found, dict) and "p_success" in found:
        model = found.get("model")
        body["prediction"] = {"p_success": found["p_success"],
                              "model": model if isinstance(model, str) else None}
    return str(outcome), body
