"""``show`` cuts a long value after escaping its controls (``\\x1b``): the cut fell inside an
escape, leaving ``\\x`` or ``\\u20`` before the ellipsis, a backslash that names no control
(read as the value's own text). An escape that does not fit whole is now left out."""

from __future__ import annotations

import re
from typing import Any

from otel_eval.app.show import render_text
from otel_eval.base.printable import printable
from otel_eval.outputs.ui.run import tree

# a backslash followed by less than a whole escape, right before the ellipsis
_BROKEN = re.compile(r"\\(?:x[0-9a-f]?|u[0-9a-f]{0,3})?…")


def _body(name: str) -> dict[str, Any]:
    steps = [{"index": 0, "span_id": "a" * 16, "parent_span_id": None, "kind": "agent",
              "name": name, "status": "ok"}]
    return {"trace_id": "e" * 32, "status": "complete", "steps": steps,
            "verdict": {"passed": True, "reasons": []},
            "counts": {"spans": 1, "llm_calls": 0, "tool_calls": 0, "errors": 0},
            "usage": {"input_tokens": 0, "output_tokens": 0}, "findings": []}


def test_a_cut_name_never_ends_inside_an_escape() -> None:
    for control in ("\x1b", "\u202e", "\n"):
        for pad in range(70, 79):  # the name is cut to 79 columns and "…": every offset
            name = "a" * pad + control + "b" * 20
            text = render_text(tree(_body(name)), width=120)
            line = next(ln for ln in text.splitlines() if "aaaa" in ln)
            assert not _BROKEN.search(line), (pad, repr(control), line)
            shown = line[line.index("a" * pad):line.index("…") + 1]
            assert len(shown) <= 80, (pad, shown)
            assert printable(name).startswith(shown[:-1]), shown  # whole escapes only
