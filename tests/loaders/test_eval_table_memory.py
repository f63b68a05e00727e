"""``otel-eval eval --format table`` over many runs: the table is printed once every width is
known, so a line is kept per trace, never its whole result."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path

import pytest

from otel_eval.app.cli import build_parser, cmd_eval
from otel_eval.receive.loaders import files

DATA = Path(__file__).resolve().parents[1] / "data" / "loaders"
RUNS = 30
STEPS = 150
RESULT_BYTES = 100_000  # about what each run's result holds (as JSON text)


class _Held(io.StringIO):
    """Discards the output, noting the most memory held while it was written."""

    most = 0

    def write(self, text: str) -> int:
        self.most = max(self.most, tracemalloc.get_traced_memory()[0])
        return len(text)


def _held(paths: list[Path], fmt: str) -> int:
    """The most memory ``eval`` held while it printed."""
    args = build_parser().parse_args(["eval", *map(str, paths), "--format", fmt])
    out = _Held()
    tracemalloc.start()
    try:
        assert cmd_eval(args, out) == 0
    finally:
        tracemalloc.stop()
    return out.most


def _run(i: int) -> dict[str, object]:
    """A run of ``STEPS`` tool calls: its result ~100 KB, its table line ~100 bytes."""
    trace_id = f"{i:032x}"

    def span(n: int, **fields: object) -> dict[str, object]:
        return {"trace_id": trace_id, "span_id": f"{n:016x}", "span_kind": "Internal",
                "timestamp": f"2025-03-19T16:32:{n % 60:02}Z", "duration": "PT0.5S",
                "status_code": "Ok", **fields}

    tools = [span(n, parent_span_id=f"{1:016x}", span_name="FinalAnswerTool",
                  span_attributes={"openinference.span.kind": "TOOL", "tool.name": f"t{n}",
                                   "input.value": json.dumps({"q": f"{n}" * 40}),
                                   "output.value": f"{n}" * 80})
             for n in range(2, STEPS + 2)]
    root = span(1, span_name="CodeAgent.run", span_attributes={
        "openinference.span.kind": "AGENT", "input.value": "task", "output.value": "3"},
        child_spans=tools)
    root["duration"] = "PT60S"
    return {"trace_id": trace_id, "spans": [root]}


def test_the_table_keeps_a_line_per_trace_not_its_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The table kept every trace's whole result (``to_json``: its steps, their arguments
    and results, up to ``max_result_bytes`` each) until the end to print ~100 bytes of it:
    over a week of runs, gigabytes where jsonl holds one result at a time."""
    monkeypatch.setattr(files, "HELD_TRACES", 0)  # each run released at the end of its file
    paths = []
    for i in range(RUNS):
        paths.append(tmp_path / f"run{i:02}.json")
        paths[-1].write_text(json.dumps(_run(i)))
    jsonl, table = _held(paths, "jsonl"), _held(paths, "table")
    assert table < jsonl + RESULT_BYTES * RUNS // 2, (table, jsonl)
