"""Output (part): the pages of an issue's runs (``GET /v1/issues/{id}/runs``, the web view's
``/ui/issues/{id}/runs``) over the clustering runs the issues job keeps.

    ?offset=N&limit=L    the last clustering run's list of the issue's runs from N (the first
                         form; a re-clustering between two pages shifts them)
    ?cursor=C&limit=L    the ``next_cursor`` of the page before: its clustering run's list,
                         after that page

A clustering run's list of an issue's runs is its trace ids, sorted once when it runs. The job
re-clusters every ``issues.interval_s``, and the next run's list is another one (runs came
into the issue, others aged out of the window or left it), so offsets into whichever run is
last repeat or skip runs when a run lands between two pages. A cursor names its clustering run
(``generated_at``, the identity ``GET /v1/issues`` gives it, and the job's number for the
run, ``IssuesResult.run``: two runs of one stamp, from a coarse clock or a re-run within its
tick, are two lists) and the position in that run's list: the pages read that list to its
end whatever ran meanwhile, as ``/v1/evaluations``' cursor reads its stable order whatever
is stored meanwhile. The job keeps its last ``KEPT_RUNS`` runs for them (a cursor stays good
until the run after the next one lands: about an interval at the least); a cursor of a run
no longer kept is ``RunsGone`` (the API's 410: start again), never a page of another list.
The cursor is opaque to clients (``store.query.encode_cursor``: URL-safe base64 of
``generated_at`` in ns, then the run's number and the offset, ``RUN.OFFSET``; a cursor of an
earlier release, the offset alone, names no kept run: 410).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qs

from otel_eval.base.configcheck import ascii_int
from otel_eval.base.printable import quoted
from otel_eval.outputs.issues.result import IssuesResult
from otel_eval.store.query import QueryError, decode_cursor, encode_cursor, single_values

MAX_RUNS_PAGE = 1000  # trace ids per page of GET /v1/issues/{id}/runs
DEFAULT_RUNS_PAGE = 100  # without ?limit=
MAX_OFFSET = 10**9
# Clustering runs kept for the cursors that page them: the last one, and the one before it
# (its issues' lists only: ``kept``), so a cursor outlives one re-clustering.
KEPT_RUNS = 2


@dataclass(frozen=True)
class RunsAt:
    """Where a page of an issue's runs starts, and its size."""

    offset: int = 0  # in the list of the clustering run ``run_ns`` names
    limit: int = DEFAULT_RUNS_PAGE  # 1..MAX_RUNS_PAGE
    run_ns: int | None = None  # a cursor's clustering run (``generated_at``, ns); None: the last
    run: int | None = None  # and its number (``IssuesResult.run``); None: no kept run has it

    @classmethod
    def from_query(cls, query: str, default_limit: int = DEFAULT_RUNS_PAGE) -> RunsAt:
        """``?offset=&limit=`` or ``?cursor=&limit=``; ``QueryError`` naming the bad
        parameter (digits 0-9 only: ``int`` refuses the superscripts ``str.isdigit`` takes,
        and 4,300 digits), as ``/v1/evaluations`` names it: an unknown, repeated or empty one
        too (taken silently, a client's ``?ofset=100`` paged from 0 again), and ``offset``
        beside ``cursor`` (which of the two would say where the page starts?)."""
        params = single_values(parse_qs(query, keep_blank_values=True),
                               ("offset", "limit", "cursor"))
        limit = _number(params, "limit", default_limit, 1, MAX_RUNS_PAGE)
        if "cursor" not in params:
            return cls(_number(params, "offset", 0, 0, MAX_OFFSET), limit)
        if "offset" in params:
            raise QueryError("offset", "not with cursor: the cursor says where the page starts")
        return cls.of_cursor(params["cursor"], limit)

    @classmethod
    def of_cursor(cls, cursor: str, limit: int) -> RunsAt:
        """The page a ``next_cursor`` names; ``QueryError`` for any other text."""
        run_ns, key = decode_cursor(cursor, _is_position)
        run, _, after = key.rpartition(".")
        return cls(int(after), limit, run_ns, int(run) if run else None)

    def paged(self) -> str:
        """The clustering run the page is of, as an answer names it: the last, or the
        cursor's (which the last may no longer be)."""
        if self.run_ns is None:
            return "the last clustering run"
        return f"the clustering run its cursor pages (generated_at {self.run_ns / 1e9})"


def _is_position(key: str) -> bool:
    """``RUN.OFFSET`` (or an earlier release's ``OFFSET``): digits 0-9 only."""
    run, dot, after = key.rpartition(".")
    return ascii_int(after, 10) is not None and (not dot or ascii_int(run, 19) is not None)


def _number(params: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = params.get(name, str(default))
    value = ascii_int(raw, len(str(high)))
    if value is None or not low <= value <= high:
        raise QueryError(name, f"must be an integer in [{low}, {high}], got {quoted(raw)}")
    return value


class RunsGone(Exception):
    """A cursor's clustering run is no longer kept: its pages cannot go on; the client
    starts again (from the last run, ``latest``: its ``generated_at``, None without one)."""

    def __init__(self, paged: float, latest: float | None) -> None:
        super().__init__(f"the clustering run it pages (generated_at {paged}) is no longer "
                         "kept (issues are clustered again every issues.interval_s): start "
                         "again without cursor")
        self.paged = paged
        self.latest = latest


class NoRun(Exception):
    """No clustering run to page on this process: none yet, the issues job off, or another
    worker of the fleet runs it (the runs lists are its memory, not the store's: store.md);
    the message says which. Not a cursor's answer: that is ``RunsGone``."""

    NOT_YET = ("no clustering run yet: the issues job runs at start, then every "
               "issues.interval_s")
    FOLLOWING = ("no clustering run on this worker: another worker of the fleet runs the "
                 "issues job (it holds the catalogue's lock) and serves the issues and "
                 "their runs")
    # as GET /v1/issues says it (the same words for the issues and their runs)
    OFF = "issue clustering is not enabled (issues.interval_s)"


def no_runs(_issue_id: str, _at: RunsAt) -> dict[str, Any] | None:
    """The runs of an issue where the issues job is off (``issues.interval_s: 0``): none, and
    not for want of the issue (``NoRun.OFF``)."""
    raise NoRun(NoRun.OFF)


def run_ns(result: IssuesResult) -> int:
    """The clustering run's stamp in a cursor: its ``generated_at`` in ns."""
    return round(result.generated_at * 1e9)


def kept(result: IssuesResult, before: Sequence[IssuesResult]) -> tuple[IssuesResult, ...]:
    """The runs to keep once ``result`` lands, newest first: it, and the newest of ``before``
    up to ``KEPT_RUNS`` in all, each holding what its readers read only (the issues; not
    the assignments, one per critique of the window, nor the events: the run's caller has
    them, and no reader of a kept run does). A cursor names its run by stamp and number, so
    a run of the same ``generated_at`` (a coarse clock, a clock set back) is another run."""
    return (replace(result, assignments=(), events=()), *before[:KEPT_RUNS - 1])


def page(runs: Sequence[IssuesResult], issue_id: str, at: RunsAt) -> dict[str, Any] | None:
    """The page ``at`` of the issue's runs in the kept ``runs`` (newest first): of the last
    run, or of the run its cursor names; None when that run has no such issue (or there is
    no run yet); ``RunsGone`` when the cursor's run is no longer kept."""
    if at.run_ns is None:
        return issue_runs(runs[0], issue_id, at.offset, at.limit) if runs else None
    paged = next((r for r in runs if run_ns(r) == at.run_ns and r.run == at.run), None)
    if paged is None:
        raise RunsGone(at.run_ns / 1e9, runs[0].generated_at if runs else None)
    return issue_runs(paged, issue_id, at.offset, at.limit)


def issue_runs(result: IssuesResult, issue_id: str, offset: int,
               limit: int) -> dict[str, Any] | None:
    """The ``GET /v1/issues/{id}/runs`` object: the trace ids of every run of the issue in
    the clustering run ``result``'s window, sorted (stable pages; sorted by the run, not per
    request), ``limit`` from ``offset``; ``next_offset`` and ``next_cursor`` None on the last
    page. None when the issue is not in ``result``."""
    issue = next((i for i in result.issues if i.issue_id == issue_id), None)
    if issue is None:
        return None
    ordered = issue.trace_ids
    page = ordered[offset : offset + limit]
    end = offset + len(page)
    more = end < len(ordered)
    return {"issue_id": issue_id, "title": issue.title, "generated_at": result.generated_at,
            "runs": len(ordered), "offset": offset, "limit": limit, "trace_ids": list(page),
            "next_offset": end if more else None,
            "next_cursor": (encode_cursor(run_ns(result), f"{result.run}.{end}") if more
                            else None)}
