"""Text in a terminal's columns: a Chinese, Japanese or Korean character (and an emoji) takes
two. ``eval``'s and ``issues``' tables padded their cells by ``len()`` and ``show`` folded
values to ``--width`` characters, so a wide agent name pushed every later column of its row
right, and a Chinese tool result ran to twice the width asked for."""

from __future__ import annotations

import io
import json
import unicodedata
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from otel_eval.app.cli import main
from otel_eval.app.issues import print_table
from otel_eval.app.show import render_text
from otel_eval.base.words import columns, wide_len, wrapped
from otel_eval.outputs.ui.run import tree

DATA = Path(__file__).resolve().parents[1] / "data" / "detectors"
TRACE = DATA / "guide_lucky_recovery.otlp.json"


def _starts(lines: list[str], header: str, column: str) -> set[int]:
    """The terminal column where ``column`` starts on each line (the header's word)."""
    at = header.index(column)
    return {_column_of(line, at, header) for line in lines}


def _column_of(line: str, at: int, header: str) -> int:
    """The column of the cell at the header's ``at``-th column: the cells before it, each
    followed by two spaces (the tables' separator)."""
    cells_before = len(header[:at].split())
    pos = 0
    for _ in range(cells_before):
        pos = line.index("  ", pos)
        while line[pos] == " ":
            pos += 1
    return _cols(line[:pos])


def _cols(text: str) -> int:
    """A terminal's columns, measured here apart from the code under test."""
    return sum(0 if unicodedata.category(c) in ("Mn", "Me", "Cf")
               else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def test_eval_table_aligns_a_wide_agent_name(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    doc = TRACE.read_text().replace("docs-fixer", "文档修复代理")
    path = tmp_path / "wide.json"
    path.write_text(doc)
    other = tmp_path / "narrow.json"
    other.write_text(TRACE.read_text().replace("6e0c63257de34c926f9efcd03899a81d",
                                               "7e0c63257de34c926f9efcd03899a81d"))
    thai = tmp_path / "thai.json"  # 12 characters, 8 columns: 4 tone and vowel marks
    thai.write_text(TRACE.read_text().replace("docs-fixer", "ผู้ช่วยค้นหา").replace(
        "6e0c63257de34c926f9efcd03899a81d", "8e0c63257de34c926f9efcd03899a81d"))
    main(["eval", str(path), str(other), str(thai)])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()][:4]
    assert "文档修复代理" in "".join(lines) and "ผู้ช่วยค้นหา" in "".join(lines)
    assert len(_starts(lines, lines[0], "status")) == 1, lines
    assert len(_starts(lines, lines[0], "findings")) == 1, lines


def test_issues_table_aligns_a_wide_node() -> None:
    def issue(node: str, title: str) -> Any:
        return SimpleNamespace(level="agent", node=node, issue_id="i-" + title, share=0.5,
                               trend=None, status="open", severity="error", traces=3,
                               exemplars=("e" * 32,), title=title)
    result = SimpleNamespace(issues=(issue("检索代理", "a"), issue("search", "b")),
                             resolved=(), assignments=(), critiques=2, traces=2, skipped=0)
    out = io.StringIO()
    print_table(cast(Any, result), out)
    lines = out.getvalue().splitlines()[:3]
    assert len(_starts(lines, lines[0], "id")) == 1, lines
    assert len(_starts(lines, lines[0], "title")) == 1, lines


def test_show_folds_wide_text_to_the_width_in_columns() -> None:
    result = "北京是中国的首都\uff0c也是一座历史悠久的城市。" * 6 + " 東京 and Tokyo"
    body = {"trace_id": "e" * 32, "status": "complete", "verdict": None,
            "steps": [{"index": 0, "span_id": "1" * 16, "parent_span_id": None,
                       "kind": "tool", "name": "lookup", "status": "ok", "result": result}],
            "counts": {"spans": 1, "llm_calls": 0, "tool_calls": 1, "errors": 0},
            "usage": {}, "findings": []}
    text = render_text(tree(body), width=40, full=True)
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "result: " in line)
    indent = lines[start].index("result: ") + len("result: ")
    folded = [line[indent:] for line in lines[start:] if line.strip()]
    assert "".join(folded).replace(" ", "") == result.replace(" ", "")  # every character
    assert max(wide_len(line) for line in folded) <= 40, folded
    assert max(wide_len(line) for line in folded) >= 38  # the width used, not half of it


def test_wrapped_is_textwrap_on_ascii_and_keeps_every_word_in_columns() -> None:
    assert wrapped("a bb ccc dddd", 5) == ["a bb", "ccc", "dddd"]
    assert wrapped("  代码 x = 1", 6) == ["  代码", "x = 1"]  # the first line's indent
    assert wrapped("   ", 5) == [] and wrapped("", 5) == []
    assert wrapped("😀😀😀", 4) == ["😀😀", "😀"]
    assert wrapped("ผู้ช่วย ค้นหา", 5) == ["ผู้ช่วย", "ค้นหา"]  # 5 and 4 columns
    assert columns("ผู้ช่วยค้นหา") == 8 and columns("文档") == 4 and columns("ab") == 2
    assert json.dumps(wrapped("é " * 5, 3)) == json.dumps(["é é", "é é", "é"])


def test_eval_table_cuts_an_agent_name_between_escapes(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The agent cell is cut to 24 characters: cut after escaping, an escape at the cut was
    left half (``aaa…\\x``: a backslash that names no control, read as the name's). The cut
    now falls before the escape it would split."""
    path = tmp_path / "escaped.json"
    path.write_text(TRACE.read_text().replace("docs-fixer", "a" * 22 + "\\u001b[2J"))
    main(["eval", str(path)])
    row = [line for line in capsys.readouterr().out.splitlines() if line.strip()][1]
    assert row.split()[1] == "a" * 22, row
