"""The stores' contract tests run on both stores: ``target`` is a SQLite file or a fresh
PostgreSQL database on the real server the suite starts; ``stores`` opens stores on it, each
its own connection (as separate processes)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from otel_eval.store import EvaluationStore, open_store

Open = Callable[[], EvaluationStore]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    return str(request.getfixturevalue("postgresql_url"))


@pytest.fixture
def stores(target: str) -> Iterator[Open]:
    """Opens stores on the same target (each its own connection, as separate processes)."""
    opened: list[EvaluationStore] = []

    def open_one() -> EvaluationStore:
        opened.append(open_store(target))
        return opened[-1]

    yield open_one
    for s in opened:
        s.close()
