"""The files of one ``eval`` input through one assembler (``FileAssembly``): the work at the
end of each file is for the traces that file touched, not every run still waiting."""

from __future__ import annotations

import pytest

from otel_eval.assemble import assembler
from otel_eval.base.model import Span
from otel_eval.receive.loaders import files as file_loading
from otel_eval.receive.loaders.files import FileAssembly


def _waiting_run(n: int) -> list[Span]:
    """A run whose root ended while one span waits for a parent that never came."""
    trace = f"{n:032x}"
    return [Span(trace, f"{1:016x}", None, "root", 1, 2, kind="server"),
            Span(trace, f"{2:016x}", f"{9:016x}", "orphan", 1, 2)]


def test_each_file_asks_only_about_the_runs_it_touched(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = 0
    surely_ended = assembler._surely_ended

    def counted(tr: object) -> bool:
        nonlocal asked
        asked += 1
        return surely_ended(tr)  # type: ignore[arg-type]

    monkeypatch.setattr(assembler, "_surely_ended", counted)
    monkeypatch.setattr(file_loading, "HELD_SPANS", 0)  # a large input: released file by file
    files = 300
    assembly = FileAssembly()
    for n in range(files):  # one file each, none surely ended: all wait for the input's end
        assembly.add(_waiting_run(n), f"f{n}.jsonl")
        assert assembly.ended() == []
    assert asked == files  # once each, not once per file after it (45,150 before)
    rest = assembly.rest()
    assert [t.trace_id for t in rest] == [f"{n:032x}" for n in range(files)]
