"""Stage: store, the interface. What every store does, and what both implementations share.

``EvaluationStore`` is the one interface the engine, the judge, the results API, feedback,
retention and the issues job use; ``SqliteStore`` and ``PostgresStore`` implement it and pass
one contract test (tests/store/test_store_contract.py). Revision rules, the same in both:

- ``put_many`` writes whole rows: a new evaluation, or a re-evaluation of the trace (re-opened
  by late spans, or replayed after a crash), which supersedes the stored row whatever its
  revision (a replay restarts at revision 0 and carries every span the crash left pending).
- ``put_judge`` and ``put_verdict`` each change their own part of a row, and only when the
  stored row is still the revision they read; otherwise nothing is written and they answer
  False (the judge's work belongs to that revision; feedback reads again and retries).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from otel_eval.model import Evaluation
from otel_eval.query import EvaluationQuery, Page

POSTGRESQL_SCHEMES = ("postgresql", "postgres")

Row = tuple[str, int, int, str | None, str | None, str | None, str, bool | None, str]


class EvaluationStore(Protocol):
    """Evaluations keyed by trace id. Thread-safe; one per process (never shared across
    processes: each opens its own connection from the path or URL)."""

    # Where it is, for logs: a file path, or the URL without its password.
    location: str

    def put_many(self, evaluations: Iterable[Evaluation]) -> list[bool]:
        """Store in one transaction; per evaluation, whether it superseded a stored row."""
        ...

    def put_judge(self, trace_id: str, revision: int, judge: dict[str, Any]) -> bool:
        """Attach the judge's object to ``revision``; False when re-evaluated since or gone."""
        ...

    def put_verdict(self, trace_id: str, revision: int, findings: list[dict[str, Any]],
                    verdict: dict[str, Any]) -> bool:
        """Replace findings and verdict of ``revision``; False when re-evaluated or gone."""
        ...

    def get(self, trace_id: str) -> dict[str, Any] | None: ...

    def stamp(self, trace_id: str) -> tuple[int, int] | None:
        """(revision, evaluated_at_ns) of the stored evaluation, or None: a worker that
        re-evaluates a dead one's traces tells that worker's commit from an older row."""
        ...

    def latest(self, limit: int) -> list[dict[str, Any]]: ...

    def query(self, q: EvaluationQuery) -> Page:
        """One page of evaluations matching ``q``, newest first (``otel_eval.query``)."""
        ...

    def since(self, evaluated_after_ns: int, limit: int = 100_000) -> list[dict[str, Any]]:
        """Evaluated after a time, oldest first; past ``limit`` the newest ``limit``."""
        ...

    def count(self) -> int: ...

    def put_feedback(self, trace_id: str, outcome: str, now_ns: int) -> None: ...

    def feedback(self, trace_id: str) -> str | None: ...

    def feedback_many(self, trace_ids: Collection[str]) -> dict[str, str]:
        """The known outcomes of those of ``trace_ids`` that have one (one query per batch:
        the engine reads them for every batch it evaluates)."""
        ...

    def delete_older_than(self, cutoff_ns: int) -> int: ...

    def close(self) -> None: ...


def evaluation_row(ev: Evaluation) -> Row:
    """The row of an evaluation: the pulled-out columns, then the JSON body as text."""
    t, v = ev.trajectory, ev.verdict
    return (ev.trace_id, t.revision, ev.evaluated_at_ns, t.service, t.agent, t.task_id,
            t.status, None if v is None else bool(v.passed), ev.to_json_text())


def is_postgresql_url(target: str) -> bool:
    return target.partition("://")[0].lower() in POSTGRESQL_SCHEMES and "://" in target


def redact_url(url: str) -> str:
    """The URL without its password (userinfo or ``password=`` query parameter)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:***@{host}" if ":" in user else netloc
    query = "&".join("password=***" if p.lower().startswith("password=") else p
                     for p in parts.query.split("&")) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
