"""Configuration of the store (stage: store), the ``store:`` section: where evaluations are
kept, for how long, and the spool beside them."""

from __future__ import annotations

from dataclasses import dataclass, field

from otel_eval.base.configcheck import FieldErrors, validate
from otel_eval.store.base import SessionLimits, is_postgresql_url


@dataclass(frozen=True)
class StoreConfig:
    # SQLite file for evaluations (survives restarts). ":memory:" keeps nothing. With `url`
    # set it only places the local files: the spool and the judge's rubric cache.
    path: str = "otel-eval.db"
    # PostgreSQL URL (postgresql://USER@HOST:5432/DB?sslmode=verify-full; libpq's PGPASSWORD
    # and other PG* variables apply, or use ${ENV} substitution for the password): every
    # worker and replica keeps evaluations, feedback and the issues catalogue there, so the
    # results API of any shows the fleet's traces and one issues job runs at a time. Each
    # process opens its own connection. Empty: SQLite at `path`.
    url: str = field(default="", repr=False)
    # Evaluations older than this are deleted, days (0 keeps everything); a conversation's
    # too while it goes on: its next completion is judged on the turns kept, the others
    # counted in `counts.turns_cut` (`cut_by: retention`).
    retention_days: float = 7.0
    # Acknowledged means durable: each OTLP request's accepted spans are written to a spool
    # (SQLite, one transaction per request) before the request is acknowledged, and what was
    # not yet evaluated is replayed at start. false: faster, but a crash (kill -9, OOM kill)
    # loses acknowledged traces not yet evaluated. Kafka ingest needs none (the topic is the log).
    spool: bool = True
    # Spool file; empty: "<path>-spool" beside the store (no spool when path is ":memory:").
    spool_path: str = ""
    # Bytes of requests held in the spool (accepted, not yet evaluated). Past it the receivers
    # throttle (reason `spool_full`; gRPC RESOURCE_EXHAUSTED, HTTP 429) and exporters retry.
    # One service's share of it: assembly.max_service_share (throttle reason `service_share`).
    spool_max_bytes: int = 512 * 1024 * 1024
    # fsync every spooled request: survives power loss too, not only a crash of the process
    # (a SQLite store then flushes each commit too: a request leaves the spool once stored).
    spool_fsync: bool = False
    # When the store refuses a write (disk full, read-only, locked, connection lost), the
    # batch is kept (in memory and the spool: not acknowledged as done) and written again
    # after this back-off, seconds, doubling up to `write_retry_max_interval_s`; meanwhile the
    # receivers throttle (reason `store_unavailable`: gRPC RESOURCE_EXHAUSTED, HTTP 429 with
    # Retry-After, which OTLP exporters retry) and /readyz answers 503 naming the store.
    write_retry_initial_interval_s: float = 1.0
    write_retry_max_interval_s: float = 30.0
    # How long the store may refuse every write before serve gives up, seconds: it stops and
    # exits 1 with one line naming the store (what it did not store stays in the spool for
    # the next start; a supervisor's Restart=on-failure restarts it). 0: never give up.
    write_retry_max_elapsed_s: float = 300.0
    # PostgreSQL only: the longest one statement of otel-eval's sessions may run, seconds
    # (statement_timeout; 0: no limit). A write held past it by another client (a lock, a
    # stuck server) is a refused write (reason `timeout`): kept, retried with back-off, the
    # receivers throttled and /readyz 503, instead of acknowledging while nothing is stored;
    # a read past it answers 503.
    statement_timeout_s: float = 30.0
    # PostgreSQL only: the longest a statement waits for a lock, seconds (lock_timeout; 0: no
    # limit). Another client holding ACCESS EXCLUSIVE on evaluations is then a refused
    # write after this long, not a write that hangs serve, the results API and SIGTERM.
    lock_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        order = ({} if self.write_retry_max_interval_s >= self.write_retry_initial_interval_s
                 else {"write_retry_max_interval_s":
                       "must be at least write_retry_initial_interval_s"})
        validate(self, minimum={"retention_days": 0, "spool_max_bytes": 1,
                                "write_retry_max_elapsed_s": 0, "statement_timeout_s": 0,
                                "lock_timeout_s": 0},
                 above={"write_retry_initial_interval_s": 0, "write_retry_max_interval_s": 0},
                 finite=("write_retry_initial_interval_s", "write_retry_max_interval_s",
                         "write_retry_max_elapsed_s", "statement_timeout_s", "lock_timeout_s"),
                 problems=order)
        if not self.path:
            raise FieldErrors({"path": "must name a file (or :memory:)"})
        if self.url and not is_postgresql_url(self.url):
            raise FieldErrors({"url": "must be a postgresql:// URL (or empty for SQLite)"})

    @property
    def session(self) -> SessionLimits:
        """What each of the store's database sessions is limited to (PostgreSQL)."""
        return SessionLimits(self.statement_timeout_s, self.lock_timeout_s, self.spool_fsync)

    @property
    def target(self) -> str:
        """What ``otel_eval.store.open_store`` opens: the URL, else the SQLite file."""
        return self.url or self.path

    def spool_file(self) -> str | None:
        """Where the spool lives, or None when there is none (off, or an in-memory store)."""
        if not self.spool or self.path == ":memory:":
            return None
        return self.spool_path or f"{self.path}-spool"
