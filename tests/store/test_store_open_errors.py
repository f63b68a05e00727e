"""Serve's one line when the SQLite store cannot be opened: the damage hint only for damage."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from otel_eval.base.configcheck import StartupError
from otel_eval.store import SqliteStore, open_store


def _disk_full() -> sqlite3.Error:
    """A real SQLITE_FULL, as a first start on a full disk meets it."""
    db = sqlite3.connect(":memory:")
    db.execute("PRAGMA max_page_count = 1")
    try:
        db.execute("CREATE TABLE a (x)")
        db.execute("CREATE TABLE b (x)")
        db.execute("INSERT INTO a VALUES (zeroblob(100000))")
    except sqlite3.Error as e:
        return e
    raise AssertionError("SQLite wrote past max_page_count")


def test_a_full_disk_is_not_said_to_be_a_damaged_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    full = _disk_full()
    assert full.sqlite_errorname == "SQLITE_FULL"  # type: ignore[attr-defined]

    def refuse(self: SqliteStore) -> None:
        raise full

    monkeypatch.setattr(SqliteStore, "open", refuse)
    with pytest.raises(StartupError) as refused:
        open_store(str(tmp_path / "store.db"))
    assert "full" in str(refused.value)
    assert "damaged" not in str(refused.value)


def test_a_file_that_is_no_database_is_said_to_be_no_store(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    path.write_bytes(b"not a database at all, " * 100)
    with pytest.raises(StartupError, match=r"not an otel-eval SQLite store, or damaged"):
        open_store(str(path))
