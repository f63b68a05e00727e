"""Per-task rubric criteria cache (J_r output reused by J_v): in memory or SQLite.

Key: ``task:<sha256 of the writer, service and task id>`` or ``input:<sha256 of the writer
and task input>`` (``rubric_key``): span content sets both, so a key is of a fixed length
whatever they hold. A task id is its service's own (two teams' task "7" are two tasks); the
input is the task. The writer (``rubric_writer``: the judge model and a digest of the prompts
that ask for criteria) is in the key: criteria are reused only by the model and prompt that
wrote them (after a change of either they are written again; the old ones are no longer read
and go as the oldest or expired).
Entries older than ``ttl_s`` (wall clock, since they outlive the process) are ignored and
regenerated, and deleted at the next write. Bounded as the other caches: at most
``MAX_RUBRICS`` entries (past it the oldest written go), each of at most ``MAX_ENTRY_CHARS``
of criteria JSON (a larger one is used, not kept): every task id a sender makes up is a new
entry. A cache file that refuses a read or a write (a full disk, a read-only file, a lock held
past the busy timeout) is a miss, or an entry not kept, logged: never a judgement lost (its
calls are made and paid).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)

Criteria = list[dict[str, str]]  # [{"id": "c1", "criterion": "..."}]

MAX_RUBRICS = 10_000  # entries (tasks): a few hundred bytes to a few kB each
MAX_ENTRY_CHARS = 16 * 1024  # of an entry's criteria JSON (20 criteria of ~800 characters)
MAX_KEY_CHARS = 70  # "input:" and a sha256 in hex; longer keys are of an older version


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def rubric_writer(model: str, prompts_digest: str) -> str:
    """Who writes a task's criteria: the judge ``model`` and the digest of its prompts."""
    return f"{model}\x00{prompts_digest}"


def rubric_key(task_id: str | None, task_input: str | None,
               service: str | None = None, writer: str = "") -> str | None:
    """The cache key of a run's task: its id within its ``service`` (``service.name``), else
    its input text, as written by ``writer`` (``rubric_writer``); None without either."""
    own = f"{writer}\x00" if writer else ""
    if task_id:
        # a service's ids are its own: one service's "7" is not another's
        return "task:" + _sha256(own + (task_id if service is None
                                        else f"{service}\x00{task_id}"))
    if task_input:
        return "input:" + _sha256(own + task_input)
    return None


def _kept(criteria: Criteria) -> str | None:
    """The criteria as stored, None when past ``MAX_ENTRY_CHARS``."""
    text = json.dumps(criteria)
    return text if len(text) <= MAX_ENTRY_CHARS else None


class RubricCache(Protocol):
    def get(self, key: str) -> Criteria | None: ...

    def put(self, key: str, criteria: Criteria, model: str) -> None: ...


class MemoryRubricCache:
    def __init__(self, ttl_s: float = 0.0, wall_clock: Callable[[], float] = time.time) -> None:
        self.ttl_s = ttl_s  # 0 = entries never expire
        self.wall_clock = wall_clock
        self._entries: OrderedDict[str, tuple[float, Criteria]] = OrderedDict()  # oldest first

    def get(self, key: str) -> Criteria | None:
        entry = self._entries.get(key)
        if entry is None or (self.ttl_s and self.wall_clock() - entry[0] > self.ttl_s):
            return None
        return [dict(c) for c in entry[1]]

    def put(self, key: str, criteria: Criteria, model: str) -> None:
        self._entries.pop(key, None)
        if _kept(criteria) is None:
            return
        self._entries[key] = (self.wall_clock(), [dict(c) for c in criteria])
        while len(self._entries) > MAX_RUBRICS:
            self._entries.popitem(last=False)


class SqliteRubricCache:
    """Table ``judge_rubrics`` in the store's SQLite file (or any path / ":memory:")."""

    SCHEMA = """CREATE TABLE IF NOT EXISTS judge_rubrics (
        key TEXT PRIMARY KEY,      -- task:<id> | input:<sha256>
        criteria TEXT NOT NULL,    -- JSON list of {id, criterion}
        model TEXT NOT NULL,       -- judge model that wrote them
        created_at REAL NOT NULL   -- unix seconds
    )"""
    INDEX = "CREATE INDEX IF NOT EXISTS judge_rubrics_by_time ON judge_rubrics (created_at)"

    def __init__(self, path: str, ttl_s: float = 0.0,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.ttl_s = ttl_s
        self.wall_clock = wall_clock
        # called from worker threads (the judge keeps it off the event loop): one at a time
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, timeout=60.0)
        with self._db:
            self._db.execute(self.SCHEMA)
            self._db.execute(self.INDEX)
            # keys an older version wrote with the whole task id: never read again
            self._db.execute("DELETE FROM judge_rubrics WHERE LENGTH(key) > ?",
                             (MAX_KEY_CHARS,))

    def get(self, key: str) -> Criteria | None:
        try:
            with self._lock:
                row = self._db.execute(
                    "SELECT criteria, created_at FROM judge_rubrics WHERE key = ?",
                    (key,)).fetchone()
        except sqlite3.Error as e:  # locked, an I/O error: a miss (the criteria are made)
            log.warning("rubric cache %s not read: %s", self.path, e)
            return None
        if row is None or (self.ttl_s and self.wall_clock() - row[1] > self.ttl_s):
            return None
        data = json.loads(row[0])
        return [dict(c) for c in data] if isinstance(data, list) else None

    def put(self, key: str, criteria: Criteria, model: str) -> None:
        """Keep ``criteria`` under ``key`` (not when past ``MAX_ENTRY_CHARS``); then delete
        the expired entries and those past ``MAX_RUBRICS``, the oldest written first."""
        try:
            self._put(key, _kept(criteria), model)
        except sqlite3.Error as e:  # a full disk, a read-only file: used, not kept
            log.warning("rubric cache %s not written: %s", self.path, e)

    def _put(self, key: str, text: str | None, model: str) -> None:
        now = self.wall_clock()
        with self._lock, self._db:
            if text is not None:
                self._db.execute(
                    "INSERT OR REPLACE INTO judge_rubrics (key, criteria, model, created_at) "
                    "VALUES (?, ?, ?, ?)", (key, text, model, now))
            if self.ttl_s:
                self._db.execute("DELETE FROM judge_rubrics WHERE created_at < ?",
                                 (now - self.ttl_s,))
            over = self._db.execute("SELECT COUNT(*) FROM judge_rubrics").fetchone()[0] \
                - MAX_RUBRICS
            if over > 0:
                self._db.execute("DELETE FROM judge_rubrics WHERE key IN (SELECT key FROM "
                                 "judge_rubrics ORDER BY created_at, key LIMIT ?)", (over,))

    def close(self) -> None:
        with self._lock:
            self._db.close()
