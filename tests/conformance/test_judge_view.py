"""What the judge is shown of every run of the conformance corpus: each message part read.

The judge's view of a run (``judge.render``) shows each LLM call's new input and its output
as messages. A part its parser does not read is shown as a placeholder (``[part]``,
``[tool-call]``), and an output recorded apart from its calls as an empty ``raw:`` line: the
judge then grades a call it cannot see. Before 2026-12-05 the AI SDK's ``tool-call`` /
``tool-result`` parts and Bedrock Converse's ``toolUse`` / ``toolResult`` (Strands) were such
placeholders, and the AI SDK's reply to a call an empty ``raw:`` output.
"""

from __future__ import annotations

import logging
import re
from functools import cache

import pytest
from conformance import corpus
from cost import work

from otel_eval.app.config import Config
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.judge.render import render

# A part the parser did not read, by its type, or an output with nothing read in it.
UNREAD = re.compile(r"\[(?:part|tool-call|tool-result|tool_result|tool_use)\]"
                    r"|^ {2}raw:\s*$", re.M)


@cache
def _views() -> dict[tuple[str, str], str]:
    """(stack, scenario) -> the judge's view of its run (the trace with the most spans)."""
    logging.disable(logging.WARNING)
    try:
        evaluator = Evaluator(Config())
        limits = JudgeConfig(model="m").compaction
        out = {}
        cells = corpus.recorded()
        for (stack, scenario), trace_list in zip(
                cells, (work.decode_recordings([r]) for r in work.conformance_requests()),
                strict=True):
            run = max(trace_list, key=lambda t: len(t.spans))
            ev = evaluator.evaluate(run)
            assert ev is not None, (stack, scenario)
            rendered = render(ev, limits)
            out[(stack, scenario)] = "\n".join(
                (rendered.task, rendered.trajectory, rendered.final_output))
        return out
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.parametrize(("stack", "scenario"), corpus.recorded(),
                         ids=[f"{s}/{c}" for s, c in corpus.recorded()])
def test_the_judge_is_shown_every_part_it_grades(stack: str, scenario: str) -> None:
    view = _views()[(stack, scenario)]
    assert not UNREAD.findall(view), view
    want = corpus.expectation(stack, scenario).get("result")
    if want is not None:  # what the last call returned is in front of the judge
        assert want in view, view
