"""store.md's backup of a SQLite store, taken the documented way while serve writes."""

from __future__ import annotations

import re
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

from otel_eval.base.results import Evaluation, Verdict
from otel_eval.base.steps import Trajectory
from otel_eval.store import Store, open_store

DOC = Path(__file__).resolve().parents[2] / "docs" / "store.md"
T0 = 1_764_547_200 * 10**9


def _ev(i: int) -> Evaluation:
    return Evaluation(Trajectory(f"{i:032x}", "otlp", "complete", [], service="shop"), [],
                      Verdict(True, []), evaluated_at_ns=T0 + i)


def _documented_backup() -> list[str]:
    """The command store.md gives, its arguments (the store, the copy) left off."""
    section = DOC.read_text().split("## Backing up and restoring a SQLite store", 1)[1]
    block = re.search(r"```sh\n(python -c .*)\n```", section)
    assert block is not None, "store.md gives no backup command"
    return shlex.split(block.group(1))[:-2]


def test_a_backup_taken_while_a_writer_is_active_is_a_store_of_the_committed_rows(
        tmp_path: Path) -> None:
    path, out = tmp_path / "otel-eval.db", tmp_path / "backup.db"
    store = Store(str(path))
    store.put_many([_ev(1), _ev(2)])  # committed, in the WAL (not checkpointed yet)
    assert Path(f"{path}-wal").stat().st_size > 0
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # a writer in the middle of its transaction
    writer.execute("DELETE FROM evaluations")
    command = _documented_backup()
    assert command[0] == "python"
    subprocess.run([sys.executable, *command[1:], str(path), str(out)], check=True,
                   capture_output=True, timeout=60)
    writer.execute("COMMIT")
    writer.close()
    assert store.count() == 0
    store.close()
    assert not Path(f"{out}-wal").exists()  # one self-contained file
    check = sqlite3.connect(out)
    assert check.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    check.close()
    copy = open_store(str(out), read_only=True)  # as `otel-eval show --store` opens it
    try:
        assert copy.count() == 2
        assert copy.get(f"{1:032x}") is not None and copy.get(f"{2:032x}") is not None
    finally:
        copy.close()
