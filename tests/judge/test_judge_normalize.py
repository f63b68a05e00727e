"""``compact.normalize`` (a line as compared for repeats) strips what the loop it had
stripped: a copy kept here, compared on random lines of wrappers, trailers, whitespace and
letters, so that loop can be replaced."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_eval.evaluate.judge.compact import normalize

# normalize as it was (a slice or a search of the rest of the line per token stripped)
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
