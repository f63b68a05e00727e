"""``otel-eval inspect`` shows each field's value beside its source, cut to 80 characters after
its controls are escaped (``\\x1b``): the cut fell inside an escape, leaving ``\\x1`` before the
"...", a backslash that names no control. An escape that does not fit whole is left out."""

from __future__ import annotations

from otel_eval.app.config import Config
from otel_eval.app.inspection import report
from otel_eval.base.model import Span, Trace
from otel_eval.base.printable import printable
from otel_eval.evaluate.evaluator import Evaluator

TRACE = "0af7651916cd43dd8448eb211c80319c"


def _model_shown(model: str) -> str:
    spans = [Span(TRACE, "a0", None, "agent", 0, 100,
                  attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}),
             Span(TRACE, "a1", "a0", "chat", 1, 2,
                  attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": model})]
    trajectory = Evaluator(Config()).trajectory(Trace(TRACE, spans, "complete"))
    step = next(s for s in report(trajectory, {})["steps"] if "model" in s["fields"])
    value: str = step["fields"]["model"]["value"]
    return value


def test_a_cut_value_never_ends_inside_an_escape() -> None:
    for control in ("\x1b", "\u202e"):
        for pad in range(74, 80):  # every offset an escape can cross the cut at
            model = "m" * pad + control + "x" * 20
            shown = _model_shown(model)
            assert shown.endswith("..."), shown
            kept = shown[:-3]
            assert len(kept) <= 80 and printable(model).startswith(kept), (pad, shown)
            assert kept == "m" * pad or kept.startswith("m" * pad + "\\"), (pad, shown)
            assert not kept.endswith(("\\", "\\x", "\\x1", "\\u", "\\u2", "\\u20", "\\u202"))
