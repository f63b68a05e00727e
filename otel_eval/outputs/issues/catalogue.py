"""Issue stage, step 6: the issue catalogue, which keeps issue ids stable.

Every issue found is stored (table ``issues_catalogue``: in SQLite, or in the fleet's
PostgreSQL store when ``store.url`` is set) with its centroid as a
sparse map feature -> weight (terms for TF-IDF, dimension numbers for dense models, the
texts' digests for texts with no term, so a
centroid stays comparable after the TF-IDF vocabulary changes). A new run's cluster takes
the id of the most similar stored issue of the same level, node and embedding when the
cosine similarity reaches ``match_similarity`` (greedy one-to-one, best pairs first);
otherwise it gets a new id. Issues not seen for ``age_out_s`` are deleted, and past
``max_issues`` the least recently seen: each run loads and matches against the whole
catalogue, so a flood of distinct critiques must not grow it for ``age_out_s``.

Each clustering run also records every catalogued issue's share in it (table
``issue_shares``; 0 for an issue the run did not see), the last ``HISTORY_RUNS`` runs per issue:
the history the issues view draws. It goes with its issue when that ages out.

In a shared PostgreSQL store one issues job runs at a time over the fleet's critiques:
``lead()`` takes a session advisory lock (``pg_try_advisory_lock``) and keeps it while the
connection lives, so the first worker to ask runs the job and the others skip their runs
until it stops (its connection closes and the lock with it). A SQLite catalogue always leads.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from otel_eval.base.text import valid_text
from otel_eval.store import catalogue_connection, is_postgresql_url
from otel_eval.store.base import SessionLimits, stored_args
from otel_eval.store.migrations import make_sqlite_catalogue

Centroid = dict[str, float]

_KEEP_FEATURES = 512  # largest-weight features stored per centroid (MiniLM has 384)
_BLOCK_ROWS = 256  # centroids compared with every stored issue at once (cosine_blocks)
# Clustering runs of share history kept per issue: four hours at the default 300 s interval.
HISTORY_RUNS = 48
_IDS_PER_QUERY = 500
_PRUNE = ("DELETE FROM issue_shares WHERE (issue_id, at) IN (SELECT issue_id, at FROM"
          " (SELECT issue_id, at, ROW_NUMBER() OVER (PARTITION BY issue_id ORDER BY at DESC)"
          " AS n FROM issue_shares) AS ranked WHERE n > ?)")

# pg_try_advisory_lock key of the fleet's issues job ("otel-eval issues").
ISSUES_LOCK = 0x6F74656C5F697373

_COLUMNS = ("issue_id, level, node, embedding, title, description, centroid, first_seen,"
            " last_seen, last_share, service, unnamed")
_UPSERT = (f"INSERT INTO issues_catalogue ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
           " ON CONFLICT (issue_id) DO UPDATE SET level = excluded.level,"
           " node = excluded.node, service = excluded.service,"
           " embedding = excluded.embedding, title = excluded.title,"
           " description = excluded.description, centroid = excluded.centroid,"
           " first_seen = excluded.first_seen, last_seen = excluded.last_seen,"
           " last_share = excluded.last_share, unnamed = excluded.unnamed")

@dataclass(slots=True)
class StoredIssue:
    issue_id: str
    level: str
    node: str
    embedding: str
    title: str
    description: str
    centroid: Centroid
    first_seen: float
    last_seen: float
    last_share: float
    # the service of its node ("" unknown, or stored before migration 12): an agent node is
    # a name within its service
    service: str = ""
    # the judge is still to name it (a run's naming_max_calls or naming deadline left it its
    # evidence title): the next run with calls left names it, whichever process runs it
    unnamed: bool = False


def sparse_centroid(values: dict[str, float]) -> Centroid:
    """Keep the largest features and renormalize to unit length."""
    top = sorted(values.items(), key=lambda kv: (-abs(kv[1]), kv[0]))[:_KEEP_FEATURES]
    norm = math.sqrt(sum(v * v for _, v in top))
    return {k: v / norm for k, v in top} if norm > 0 else {}


def blend(old: Centroid, new: Centroid, weight: float) -> Centroid:
    """Move a stored centroid towards the new window's one (``weight`` of the new)."""
    keys = set(old) | set(new)
    return sparse_centroid({k: (1 - weight) * old.get(k, 0.0) + weight * new.get(k, 0.0)
                            for k in keys})


def new_issue_id(level: str, node: str, seed_text: str, taken: set[str],
                 service: str = "") -> str:
    """Deterministic id from level, node (and its service, when known) and the cluster's
    central critique; unique."""
    seed = valid_text(f"{level}\x00{node}\x00{seed_text}"
                      + (f"\x00{service}" if service else ""))  # a hash never fails on text
    base = hashlib.sha1(seed.encode()).hexdigest()
    for i in range(0, len(base) - 10):
        candidate = "iss_" + base[i : i + 10]
        if candidate not in taken:
            return candidate
    raise RuntimeError("issue id space exhausted")  # 30 collisions of 40-bit ids: a bug


def cosine_blocks(rows: list[Centroid], cols: list[Centroid]) -> Iterator[tuple[int, Any]]:
    """Cosines of every (row, col) pair of unit-length centroids (``sparse_centroid``; an
    empty one gives 0), as dense numpy blocks of at most ``_BLOCK_ROWS`` rows: (index of
    the block's first row, block). One sparse product per block, so memory is a block
    times ``len(cols)`` whatever ``len(rows)``; numpy and scipy are imported on use."""
    import numpy as np
    from scipy import sparse

    index: dict[str, int] = {}
    for c in (*rows, *cols):
        for feature in c:
            index.setdefault(feature, len(index))

    def matrix(cs: list[Centroid]) -> Any:
        data = np.fromiter((v for c in cs for v in c.values()), dtype=np.float64)
        features = np.fromiter((index[f] for c in cs for f in c), dtype=np.int64,
                               count=data.size)
        ptr = np.cumsum([0, *(len(c) for c in cs)])
        return sparse.csr_matrix((data, features, ptr), shape=(len(cs), max(len(index), 1)))
    right = matrix(cols).T
    for start in range(0, len(rows), _BLOCK_ROWS):
        yield start, np.asarray((matrix(rows[start:start + _BLOCK_ROWS]) @ right).toarray())


def nearest(rows: list[Centroid], cols: list[Centroid]) -> list[tuple[int, float]]:
    """For each row, its most similar col (the first of equals) and their cosine (``cols``
    not empty)."""
    import numpy as np

    out: list[tuple[int, float]] = []
    for _, block in cosine_blocks(rows, cols):
        best = block.argmax(axis=1)
        out += zip(best.tolist(), block[np.arange(best.size), best].tolist(), strict=True)
    return out


def match(clusters: list[Centroid], stored: list[StoredIssue],
          threshold: float) -> dict[int, StoredIssue]:
    """Greedy one-to-one matching: cluster index -> stored issue, best similarity first
    (ties: the smaller cluster index, then stored index). Only the pairs reaching
    ``threshold`` are held (a Python tuple per pair of ~3,000 clusters x 5,000 stored
    issues was gigabytes)."""
    import numpy as np

    sims, rows, cols = [], [], []
    for start, block in cosine_blocks(clusters, [s.centroid for s in stored]):
        at, to = np.nonzero(block >= threshold)
        sims.append(block[at, to])
        rows.append(at + start)
        cols.append(to)
    out: dict[int, StoredIssue] = {}
    if not sims:
        return out
    sim, row, col = np.concatenate(sims), np.concatenate(rows), np.concatenate(cols)
    used: set[int] = set()
    order = np.lexsort((col, row, -sim))  # best first; ties: smaller cluster, stored
    for i, j in zip(row[order].tolist(), col[order].tolist(), strict=True):
        if i not in out and j not in used:
            out[i] = stored[j]
            used.add(j)
    return out


class Catalogue:
    """The ``issues_catalogue`` table on a caller-owned SQLite connection, or on the connection
    the store opens for it from a path or a ``postgresql://`` URL
    (``store.catalogue_connection``: the store's connect and migrations)."""

    def __init__(self, conn: Any, reconnect: Any = None) -> None:
        self._conn = conn
        self._reconnect = reconnect  # PostgreSQL: () -> a new connection, after one broke
        self._pg = not isinstance(conn, sqlite3.Connection)
        self._leading = not self._pg
        if not self._pg:
            make_sqlite_catalogue(self._conn)

    @classmethod
    def open(cls, target: str, session: SessionLimits | None = None) -> Catalogue:
        """``session``: the limits of a PostgreSQL connection (``store.session``; the
        defaults when None)."""
        def reconnect() -> Any:
            return catalogue_connection(target, session)

        return cls(reconnect(), reconnect if is_postgresql_url(target) else None)

    def close(self) -> None:
        """Release the lock (if leading) and close the connection. A session the server
        ended (psycopg learns it at this unlock) held no lock any more: closing it is quiet."""
        leading, self._leading = self._pg and self._leading, not self._pg
        try:
            if leading and not (self._conn.closed or self._conn.broken):
                # released now, not when the server notices the session ended: the next
                # worker to ask takes over at once
                self._conn.execute("SELECT pg_advisory_unlock(%s)", (ISSUES_LOCK,))
        except Exception:
            if not (self._conn.closed or self._conn.broken):
                raise  # not a lost session
        finally:
            self._conn.close()

    def lead(self) -> bool:
        """Whether this catalogue's job is the one to run (see the module docstring). The
        session the lock lives in may have been ended by the server since the last run (a
        restart, a failover, an idle kill: psycopg sees it at the next statement): then the
        lock went with it, and this asks again once, on a new connection, as the next
        worker does, instead of failing the run (a leader's, or a follower's that would
        have taken over)."""
        if not self._pg:
            return True
        try:
            return self._lead()
        except Exception:
            if self._reconnect is None or not (self._conn.closed or self._conn.broken):
                raise  # not a lost session
        return self._lead()

    def _lead(self) -> bool:
        if self._reconnect is not None and (self._conn.closed or self._conn.broken):
            self._conn.close()
            self._conn, self._leading = self._reconnect(), False  # the lock went with it
        if self._leading:  # it holds the lock while its session lives: is it still there?
            self._conn.execute("SELECT 1")
        else:
            row = self._conn.execute("SELECT pg_try_advisory_lock(%s)",
                                     (ISSUES_LOCK,)).fetchone()
            self._leading = bool(row[0])
        return self._leading

    def _execute(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        cur = self._conn.execute(sql.replace("?", "%s") if self._pg else sql, stored_args(args))
        return cur.fetchall() if cur.description else []

    def load(self, embedding: str) -> list[StoredIssue]:
        rows = self._execute(f"SELECT {_COLUMNS} FROM issues_catalogue WHERE embedding = ?"
                             " ORDER BY issue_id", (embedding,))
        return [StoredIssue(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]), r[7], r[8],
                            r[9], r[10], bool(r[11])) for r in rows]

    def ids(self) -> set[str]:
        return {r[0] for r in self._execute("SELECT issue_id FROM issues_catalogue")}

    def save(self, issues: list[StoredIssue]) -> None:
        rows = [stored_args((s.issue_id, s.level, s.node, s.embedding, s.title, s.description,
                             json.dumps(s.centroid, sort_keys=True), s.first_seen,
                             s.last_seen, s.last_share, s.service, int(s.unnamed)))
                for s in issues]
        if self._pg:
            with self._conn.transaction(), self._conn.cursor() as cur:
                cur.executemany(_UPSERT.replace("?", "%s"), rows)
            return
        self._conn.executemany(_UPSERT, rows)
        self._conn.commit()

    def age_out(self, now: float, age_out_s: float, max_issues: int | None = None) -> list[str]:
        """Delete issues last seen more than ``age_out_s`` before ``now``, and past the
        ``max_issues`` most recently seen (ties: the smaller id stays), with their share
        history; their ids."""
        rows = self._execute("DELETE FROM issues_catalogue WHERE last_seen < ? "
                             "RETURNING issue_id", (now - age_out_s,))
        if max_issues is not None:
            rows += self._execute(
                "DELETE FROM issues_catalogue WHERE issue_id NOT IN (SELECT issue_id FROM"
                " issues_catalogue ORDER BY last_seen DESC, issue_id LIMIT ?)"
                " RETURNING issue_id", (max_issues,))
        self._execute("DELETE FROM issue_shares WHERE issue_id NOT IN "
                      "(SELECT issue_id FROM issues_catalogue)")
        if not self._pg:
            self._conn.commit()
        return sorted(r[0] for r in rows)

    def record_shares(self, at: float, shares: dict[str, float]) -> None:
        """Each issue's share in the run at ``at``; only the last ``HISTORY_RUNS`` stay."""
        rows = [(issue_id, at, share) for issue_id, share in sorted(shares.items())]
        insert = "INSERT INTO issue_shares VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
        if self._pg:
            with self._conn.transaction(), self._conn.cursor() as cur:
                cur.executemany(insert.replace("?", "%s"), rows)
                cur.execute(_PRUNE.replace("?", "%s"), (HISTORY_RUNS,))
            return
        self._conn.executemany(insert, rows)
        self._conn.execute(_PRUNE, (HISTORY_RUNS,))
        self._conn.commit()

    def last_run(self) -> float | None:
        """The time of the newest clustering run recorded (``record_shares``), by whichever
        process ran it; None before any."""
        rows = self._execute("SELECT MAX(at) FROM issue_shares")
        return None if not rows or rows[0][0] is None else float(rows[0][0])

    def history(self, ids: list[str]) -> dict[str, list[tuple[float, float]]]:
        """Issue id -> its recorded (run time, share), oldest first."""
        out: dict[str, list[tuple[float, float]]] = {}
        for i in range(0, len(ids), _IDS_PER_QUERY):
            chunk = ids[i:i + _IDS_PER_QUERY]
            marks = ",".join("?" * len(chunk))
            for issue_id, at, share in self._execute(
                    f"SELECT issue_id, at, share FROM issue_shares WHERE issue_id IN ({marks})"
                    " ORDER BY issue_id, at", tuple(chunk)):
                out.setdefault(issue_id, []).append((at, share))
        return out
