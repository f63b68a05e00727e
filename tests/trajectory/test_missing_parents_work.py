"""The steps under a missing parent span: an LLM step's input is read once a run, however
many groups look at it (no work that grows as groups x inputs)."""

from __future__ import annotations

import re

import pytest

from otel_eval.base.steps import Step
from otel_eval.evaluate.trajectory import missing_parents


class _CountedWords:
    def __init__(self) -> None:
        self.read = 0

    def findall(self, text: str) -> list[str]:
        self.read += 1
        return re.findall(r"[^\s\"'`,;{}\[\]()<>=\\]+", text)


def _steps(groups: int, later: int) -> tuple[list[Step], dict[str, tuple[str | None, str | None]]]:
    agent = Step(0, "A", None, "agent", "a", node="a", depth=0)
    steps = [agent, Step(1, "L", "A", "llm", "chat", node="a", depth=1)]
    for g in range(groups):
        steps.append(Step(len(steps), f"T{g}", f"M{g}", "tool", "search", depth=1,
                          call_id=f"call_{g:024d}"))
    told = f'[{{"role": "tool", "tool_call_id": "call_{groups - 1:024d}"}}]'
    for k in range(later):
        text = told if k == later - 1 else "no ids here " * 100
        steps.append(Step(len(steps), f"L{k}", "A", "llm", "chat", node="a", depth=1,
                          input_text=text))
    scope = {s.span_id: ("a", "A") for s in steps if s.node == "a"}
    return steps, scope


def test_each_later_llm_input_is_read_once_whatever_the_number_of_groups(
        monkeypatch: pytest.MonkeyPatch) -> None:
    words = _CountedWords()
    monkeypatch.setattr(missing_parents, "_WORDS", words)
    steps, scope = _steps(groups=50, later=64)
    missing_parents.place_missing_parents(steps, scope)
    assert words.read == 64
    placed = [s.span_id for s in steps if s.kind == "tool" and s.node == "a"]
    assert placed == ["T49"]  # the group whose call id its agent's later call was sent
