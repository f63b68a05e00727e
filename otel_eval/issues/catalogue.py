"""Issue stage, step 6: the issue catalogue, which keeps issue ids stable.

Every issue found is stored in SQLite (table ``issues_catalogue``) with its centroid as a
sparse map feature -> weight (terms for TF-IDF, dimension numbers for dense models, so a
centroid stays comparable after the TF-IDF vocabulary changes). A new run's cluster takes
the id of the most similar stored issue of the same level, node and embedding when the
cosine similarity reaches ``match_similarity`` (greedy one-to-one, best pairs first);
otherwise it gets a new id. Issues not seen for ``age_out_s`` are deleted.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from dataclasses import dataclass

Centroid = dict[str, float]

_KEEP_FEATURES = 512  # largest-weight features stored per centroid (MiniLM has 384)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS issues_catalogue (
    issue_id    TEXT PRIMARY KEY,
    level       TEXT NOT NULL,
    node        TEXT NOT NULL,
    embedding   TEXT NOT NULL,
    title       TEXT NOT NULL,
    description TEXT NOT NULL,
    centroid    TEXT NOT NULL,   -- JSON {feature: weight}
    first_seen  REAL NOT NULL,   -- unix seconds
    last_seen   REAL NOT NULL,   -- unix seconds
    last_share  REAL NOT NULL    -- share of traces in the last run that saw the issue
)
"""


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


def sparse_centroid(values: dict[str, float]) -> Centroid:
    """Keep the largest features and renormalize to unit length."""
    top = sorted(values.items(), key=lambda kv: (-abs(kv[1]), kv[0]))[:_KEEP_FEATURES]
    norm = math.sqrt(sum(v * v for _, v in top))
    return {k: v / norm for k, v in top} if norm > 0 else {}


def cosine(a: Centroid, b: Centroid) -> float:
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    dot = sum(v * large.get(k, 0.0) for k, v in small.items())
    na = math.sqrt(sum(v * v for v in a.values()))
    nb = math.sqrt(sum(v * v for v in b.values()))
    return dot / (na * nb) if na > 0 and nb > 0 else 0.0


def blend(old: Centroid, new: Centroid, weight: float) -> Centroid:
    """Move a stored centroid towards the new window's one (``weight`` of the new)."""
    keys = set(old) | set(new)
    return sparse_centroid({k: (1 - weight) * old.get(k, 0.0) + weight * new.get(k, 0.0)
                            for k in keys})


def new_issue_id(level: str, node: str, seed_text: str, taken: set[str]) -> str:
    """Deterministic id from level, node and the cluster's central critique; unique."""
    base = hashlib.sha1(f"{level}\x00{node}\x00{seed_text}".encode()).hexdigest()
    for i in range(0, len(base) - 10):
        candidate = "iss_" + base[i : i + 10]
        if candidate not in taken:
            return candidate
    raise RuntimeError("issue id space exhausted")  # 30 collisions of 40-bit ids: a bug


def match(clusters: list[Centroid], stored: list[StoredIssue],
          threshold: float) -> dict[int, StoredIssue]:
    """Greedy one-to-one matching: cluster index -> stored issue, best similarity first."""
    pairs = sorted(((cosine(c, s.centroid), i, j) for i, c in enumerate(clusters)
                    for j, s in enumerate(stored)), key=lambda p: (-p[0], p[1], p[2]))
    out: dict[int, StoredIssue] = {}
    used: set[int] = set()
    for sim, i, j in pairs:
        if sim < threshold:
            break
        if i not in out and j not in used:
            out[i] = stored[j]
            used.add(j)
    return out


class Catalogue:
    """The ``issues_catalogue`` table on a caller-owned (or path-opened) SQLite connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._conn.execute(_SCHEMA)
        self._conn.commit()

    @classmethod
    def open(cls, path: str) -> Catalogue:
        return cls(sqlite3.connect(path, check_same_thread=False, timeout=60.0))

    def close(self) -> None:
        self._conn.close()

    def load(self, embedding: str) -> list[StoredIssue]:
        rows = self._conn.execute(
            "SELECT issue_id, level, node, embedding, title, description, centroid,"
            " first_seen, last_seen, last_share FROM issues_catalogue WHERE embedding = ?"
            " ORDER BY issue_id", (embedding,)).fetchall()
        return [StoredIssue(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]), r[7], r[8],
                            r[9]) for r in rows]

    def ids(self) -> set[str]:
        return {r[0] for r in self._conn.execute("SELECT issue_id FROM issues_catalogue")}

    def save(self, issues: list[StoredIssue]) -> None:
        self._conn.executemany(
            "INSERT OR REPLACE INTO issues_catalogue VALUES (?,?,?,?,?,?,?,?,?,?)",
            [(s.issue_id, s.level, s.node, s.embedding, s.title, s.description,
              json.dumps(s.centroid, sort_keys=True), s.first_seen, s.last_seen, s.last_share)
             for s in issues])
        self._conn.commit()

    def age_out(self, now: float, age_out_s: float) -> list[str]:
        """Delete issues last seen more than ``age_out_s`` before ``now``; their ids."""
        cutoff = now - age_out_s
        gone = [r[0] for r in self._conn.execute(
            "SELECT issue_id FROM issues_catalogue WHERE last_seen < ? ORDER BY issue_id",
            (cutoff,))]
        self._conn.execute("DELETE FROM issues_catalogue WHERE last_seen < ?", (cutoff,))
        self._conn.commit()
        return gone
