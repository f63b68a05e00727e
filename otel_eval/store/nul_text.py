"""Stage: store, schema. Migration 15 on SQLite: text stored with NUL before every statement's
text arguments held U+FFFD in its place (``base.stored_args``) gets U+FFFD, as it is written
and looked up since; PostgreSQL text never held NUL (nothing to do there).

Rewritten: the evaluations' pulled-out text (service, agent, task id, session key), the
session keys, the agent history and the issues catalogue. Otherwise an upgraded store split
a conversation (its old turns under the NUL key, its new ones under U+FFFD), lost the agent
history of a service whose name holds NUL and listed its old runs under another service.

A session key that only its NUL told apart from another (both stored: "a\\x00" and
"a\\ufffd") is one session: both rows go and an open one is made from its turns, completed
anew (as migration 11 re-keys). An agent-history row that becomes one already there is
dropped (the one there names the same agent). SQLite's ``REPLACE`` does not see a NUL, so the
rows holding one are found by their bytes and rewritten from Python.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from otel_eval.store.base import stored_text

Execute = Callable[..., Any]

_EVALUATION_TEXT = ("service", "agent", "task_id", "session_id")
_HISTORY = ("service", "fingerprint", "agent")
CATALOGUE_TEXT = ("level", "node", "embedding", "title", "description", "service")


def _has_nul(columns: tuple[str, ...]) -> str:
    return " OR ".join(f"instr(CAST({c} AS BLOB), x'00') > 0" for c in columns)


def _rewrite(execute: Execute, table: str, columns: tuple[str, ...], verb: str = "UPDATE") -> None:
    """Each row of ``table`` with NUL in ``columns``: those columns with U+FFFD instead."""
    found = execute(f"SELECT rowid, {', '.join(columns)} FROM {table} "
                    f"WHERE {_has_nul(columns)}").fetchall()
    assign = ", ".join(f"{c} = ?" for c in columns)
    for rowid, *values in found:
        execute(f"{verb} {table} SET {assign} WHERE rowid = ?",
                (*(stored_text(v) for v in values), rowid))


def rewrite_catalogue(execute: Execute) -> None:
    """The issues catalogue's text (in the store's file, or a file of its own)."""
    _rewrite(execute, "issues_catalogue", CATALOGUE_TEXT)


def rewrite_sqlite(execute: Execute) -> None:
    """Migration 15's step on SQLite."""
    _rewrite(execute, "evaluations", _EVALUATION_TEXT)
    _rewrite(execute, "agent_history", _HISTORY, "UPDATE OR IGNORE")
    execute(f"DELETE FROM agent_history WHERE {_has_nul(_HISTORY)}")
    _rewrite(execute, "sessions", ("session_id",), "UPDATE OR IGNORE")
    for rowid, key in execute("SELECT rowid, session_id FROM sessions WHERE "
                              f"{_has_nul(('session_id',))}").fetchall():
        kept = stored_text(key)  # another row holds it: the two are one session
        execute("DELETE FROM sessions WHERE rowid = ? OR session_id = ?", (rowid, kept))
        execute("INSERT INTO sessions (session_id, state, first_turn_ns, last_turn_ns, turns, "
                "bytes) SELECT session_id, 'open', MIN(evaluated_at_ns), MAX(evaluated_at_ns), "
                "COUNT(*), SUM(LENGTH(body)) FROM evaluations WHERE session_id = ? "
                "GROUP BY session_id", (kept,))
    rewrite_catalogue(execute)
