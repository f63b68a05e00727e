"""One delegation is one step of the run, in every stack of the conformance corpus: the
coordinator's call of the weather agent, not the calls the weather agent made for it, whether
the sub-agent's span is under the delegating call's (an agent called as a tool) or beside it
(agno's team member, a Haystack Agent run by a ComponentTool, a CrewAI coworker, an agent an
MCP tool runs, a smolagents managed agent). A hand-off is no delegation: the agent handed to
runs the rest of the run, its calls the run's steps (docs/instrumentations.md)."""

from __future__ import annotations

import pytest
from conformance import corpus, hung

from otel_eval.app.config import Config
from otel_eval.base.model import Trace
from otel_eval.evaluate.evaluator import Evaluator

# the stacks whose coordinator hands the run to the weather agent (it never returns)
HAND_OFFS = {"openai-agents", "google-adk", "google-adk-legacy", "llamaindex",
             "openllmetry-llamaindex"}
# the stacks whose coordinator answers through a call of its own after the delegation
# (a final_answer / finish tool)
ANSWER_TOOLS = {"beeai", "dspy", "smolagents", "smolagents-code"}
STACKS = [s for s in sorted(corpus.stacks())
          if corpus.recording_path(s, corpus.MULTI_AGENT).is_file() and s not in HAND_OFFS]


def _top_level(stack: str) -> list[str | None]:
    spans, logs = hung.load(stack, corpus.MULTI_AGENT)
    ev = Evaluator(Config()).evaluate(Trace("de" * 16, spans, "complete", logs=logs))
    assert ev is not None
    return [s.node for s in ev.trajectory.action_steps]


@pytest.mark.parametrize("stack", STACKS)
def test_a_delegation_is_one_step_of_the_coordinator(stack: str) -> None:
    nodes = _top_level(stack)
    want = 2 if stack in ANSWER_TOOLS else 1
    assert len(nodes) == want, nodes
    assert "weather_agent" not in nodes


@pytest.mark.parametrize("stack", sorted(HAND_OFFS))
def test_a_hand_off_leaves_the_agent_handed_to_its_steps(stack: str) -> None:
    nodes = _top_level(stack)
    assert nodes[-1] == "weather_agent", nodes
