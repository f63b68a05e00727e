"""Per-task rubric criteria cache (J_r output reused by J_v): in memory or SQLite.

Key: ``task:<task id>`` or ``input:<sha256 of the task input>`` (``rubric_key``). Entries
older than ``ttl_s`` (wall clock, since they outlive the process) are ignored and regenerated.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Protocol

Criteria = list[dict[str, str]]  # [{"id": "c1", "criterion": "..."}]


def rubric_key(task_id: str | None, task_input: str | None) -> str | None:
    if task_id:
        return f"task:{task_id}"
    if task_input:
        return "input:" + hashlib.sha256(task_input.encode("utf-8")).hexdigest()
    return None


class RubricCache(Protocol):
    def get(self, key: str) -> Criteria | None: ...

    def put(self, key: str, criteria: Criteria, model: str) -> None: ...


class MemoryRubricCache:
    def __init__(self, ttl_s: float = 0.0, wall_clock: Callable[[], float] = time.time) -> None:
        self.ttl_s = ttl_s  # 0 = entries never expire
        self.wall_clock = wall_clock
        self._entries: dict[str, tuple[float, Criteria]] = {}

    def get(self, key: str) -> Criteria | None:
        entry = self._entries.get(key)
        if entry is None or (self.ttl_s and self.wall_clock() - entry[0] > self.ttl_s):
            return None
        return [dict(c) for c in entry[1]]

    def put(self, key: str, criteria: Criteria, model: str) -> None:
        self._entries[key] = (self.wall_clock(), [dict(c) for c in criteria])


class SqliteRubricCache:
    """Table ``judge_rubrics`` in the store's SQLite file (or any path / ":memory:")."""

    SCHEMA = """CREATE TABLE IF NOT EXISTS judge_rubrics (
        key TEXT PRIMARY KEY,      -- task:<id> | input:<sha256>
        criteria TEXT NOT NULL,    -- JSON list of {id, criterion}
        model TEXT NOT NULL,       -- judge model that wrote them
        created_at REAL NOT NULL   -- unix seconds
    )"""

    def __init__(self, path: str, ttl_s: float = 0.0,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.ttl_s = ttl_s
        self.wall_clock = wall_clock
        # called from worker threads (the judge keeps it off the event loop): one at a time
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, timeout=60.0)
        with self._db:
            self._db.execute(self.SCHEMA)

    def get(self, key: str) -> Criteria | None:
        with self._lock:
            row = self._db.execute(
                "SELECT criteria, created_at FROM judge_rubrics WHERE key = ?",
                (key,)).fetchone()
        if row is None or (self.ttl_s and self.wall_clock() - row[1] > self.ttl_s):
            return None
        data = json.loads(row[0])
        return [dict(c) for c in data] if isinstance(data, list) else None

    def put(self, key: str, criteria: Criteria, model: str) -> None:
        with self._lock, self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO judge_rubrics (key, criteria, model, created_at) "
                "VALUES (?, ?, ?, ?)", (key, json.dumps(criteria), model, self.wall_clock()))

    def close(self) -> None:
        with self._lock:
            self._db.close()
