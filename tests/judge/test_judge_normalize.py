"""``compact.normalize`` (a line as compared for repeats) is linear in the line: every line of
every tool result and LLM output reaches it uncut, on the judge's event loop. It strips what
the loop it replaced stripped (a copy kept here, compared on random lines of wrappers,
trailers, whitespace and letters), and the work is counted, not timed: the characters handed
to the module's regexes, which the old loop handed the whole rest of the line per backtick
(the trailers are now walked by index, with no regex and no slice per token)."""

from __future__ import annotations

import re
import sys
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from judge_fixtures import evaluation

from otel_eval.evaluate.judge import compact
from otel_eval.evaluate.judge.compact import normalize
from otel_eval.evaluate.judge.config import CompactionConfig
from otel_eval.evaluate.judge.render import render

# normalize as it was before it was made linear (quadratic on a run of wrappers or trailers)
_OLD_WRAPPER = re.compile(
    r"^(?:\[[A-Z][A-Z ]{1,30}\]:|(?:Thought|Code|Observation|Calling tools|Execution logs"
    r"|Last output from code snippet|Output|Result):|Call id: \S+|```\w*|<end_code>"
    r"|Here are the facts that I know so far:"
    r"|Here is the plan of action that I will follow to solve the task:)\s*")
_OLD_TRAILER = re.compile(r"\s*(?:```|<end_code>|<end_plan>)$")


def old_normalize(line: str) -> str:
    text = " ".join(line.split())
    while (m := _OLD_WRAPPER.match(text)) and m.end():
        text = text[m.end():]
    while (m := _OLD_TRAILER.search(text)) and m.end() > m.start():
        text = text[:m.start()]
    return text


TOKENS = ["```", "```py", "```\n", "<end_code>", "<end_plan>", "<end_", "[PLAN]:", "[FACTS LIST]:",
          "[A]:", "Thought:", "Code:", "Observation:", "Output:", "Result:", "Calling tools:",
          "Execution logs:", "Last output from code snippet:", "Call id: ", "call_1",
          "Here are the facts that I know so far:",
          "Here is the plan of action that I will follow to solve the task:",
          " ", "  ", "\t", "\n", "\r\n", "\x1c", "\u00a0", "\u3000", "\u2028",
          "x", "A", "PLAN", "_", ":", "[", "]", "`", "``", "<", ">", "end_code", "1."]
LINES = st.lists(st.one_of(st.sampled_from(TOKENS), st.text(max_size=3)), max_size=12
                 ).map("".join)


@settings(max_examples=1500, derandomize=True, database=None, deadline=None)
@given(LINES)
def test_normalize_strips_what_the_old_loop_stripped(line: str) -> None:
    assert normalize(line) == old_normalize(line)


@pytest.mark.parametrize(("line", "expected"), [
    ("[PLAN]:   1. Search  USGS <end_code>", "1. Search USGS"),
    ("Observation: Call id: call_7 ```py x = 1 ``` <end_code>", "x = 1"),
    ("Thought: Code: ```", ""),
    ("  plain text, no wrapper  ", "plain text, no wrapper"),
    ("``` ``` x ```<end_plan> ```", "x"),
    ("x" + "`" * 7, "x`"),
    ("[NOT A WRAPPER] x", "[NOT A WRAPPER] x"),
    ("Here is the plan of action that I will follow to solve the task:\n1. go <end_plan>",
     "1. go"),
])
def test_normalize_examples(line: str, expected: str) -> None:
    assert normalize(line) == expected == old_normalize(line)


class _Counted:
    """A compiled pattern that counts the characters it is handed: from each call's start to
    the end of the string (what a search scans; for a match of a slice, what the slice
    copied)."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern, self.chars = pattern, 0

    def match(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> Any:
        self.chars += len(string) - pos
        return self.pattern.match(string, pos, endpos)

    def search(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> Any:
        self.chars += len(string) - pos
        return self.pattern.search(string, pos, endpos)


def _count_regex_chars(monkeypatch: pytest.MonkeyPatch) -> list[_Counted]:
    counted = [_Counted(v) for v in vars(compact).values() if isinstance(v, re.Pattern)]
    for c in counted:
        name = next(k for k, v in vars(compact).items() if v is c.pattern)
        monkeypatch.setattr(compact, name, c)
    return counted


N = 20_000  # the old loop: ~2 s and N * N / 6 characters on the first line; now N


@pytest.mark.parametrize(("line", "expected"), [
    ("x" + "`" * N, "x" + "`" * (N % 3)),
    ("`" * N, "`" * (N % 3)),
    ("x" + " <end_code>" * (N // 11), "x"),
    ("Observation: " * (N // 13) + "x", "x"),
    ("Call id: 1 ```py " * (N // 17) + "x" + " ```" * (N // 4), "x"),
], ids=["backticks-after-text", "backticks", "end-codes", "observations", "both-ends"])
def test_normalize_reads_a_hostile_line_once(monkeypatch: pytest.MonkeyPatch, line: str,
                                             expected: str) -> None:
    counted = _count_regex_chars(monkeypatch)
    assert normalize(line) == expected
    assert sum(c.chars for c in counted) <= len(line)


def test_render_of_a_hostile_tool_result_is_linear_in_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a tool result of one line "x```...```" (uncut when marked seen) through the whole view
    e = evaluation()
    steps = e.trajectory.steps
    steps[2] = replace(steps[2], result="x" + "`" * N)
    counted = _count_regex_chars(monkeypatch)
    rendered = render(e, CompactionConfig())
    assert "[step 2] tool get_reservation" in rendered.trajectory
    # each line is normalized a few times (marked seen, compared); never once per backtick
    assert sum(c.chars for c in counted) <= 4 * N
