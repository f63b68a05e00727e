"""The system prompt in either GenAI shape: a ``system`` message in ``gen_ai.input.messages``
(the older shape, OpenAI chat) or apart in ``gen_ai.system_instructions`` (the current
conventions: "provided to the GenAI model separately from the chat history"; Google ADK,
google-genai, the Microsoft Agent Framework, MLflow, pydantic-ai record it so). The judge is
shown it once and the agent's history fingerprints it (``agent_inference``), whichever shape
carried it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from otel_eval.app.config import Config
from otel_eval.base.model import Span, Trace
from otel_eval.evaluate.agent_inference import fingerprints
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.judge.render import render

T = 1_764_547_200 * 10**9
SYSTEM = "You are an Agent that greet users, always use greetings tool to respond"
USER = {"role": "user", "parts": [{"type": "text", "content": "Hi there"}]}
REPLY = [{"role": "assistant", "parts": [{"type": "text", "content": "Hello!"}],
          "finish_reason": "stop"}]


def _run(trace_id: str, chat: dict[str, Any]) -> Trace:
    root = Span(trace_id, "a" * 16, None, "invoke_agent greeter", T, T + 10**7,
                attributes={"gen_ai.operation.name": "invoke_agent",
                            "gen_ai.agent.name": "greeter"},
                resource={"service.name": "shop"})
    call = Span(trace_id, "b" * 16, "a" * 16, "chat gpt-4o", T + 10**6, T + 9 * 10**6,
                attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                            "gen_ai.output.messages": json.dumps(REPLY), **chat},
                resource={"service.name": "shop"})
    return Trace(trace_id, [root, call], "complete")


# the spec's example, as a JSON string and structured (an OTLP array of kvlists, decoded)
_INSTRUCTIONS = [{"type": "text", "content": SYSTEM}]
CURRENT = {
    "json": {"gen_ai.system_instructions": json.dumps(_INSTRUCTIONS),
             "gen_ai.input.messages": json.dumps([USER])},
    "structured": {"gen_ai.system_instructions": _INSTRUCTIONS,
                   "gen_ai.input.messages": [USER]},
}
OLDER = {"gen_ai.input.messages": json.dumps(
    [{"role": "system", "parts": [{"type": "text", "content": SYSTEM}]}, USER])}


@pytest.mark.parametrize("shape", sorted(CURRENT))
def test_system_instructions_apart_are_the_run_s_system_prompt(shape: str) -> None:
    evaluator = Evaluator(Config())
    current = evaluator.evaluate(_run("1" * 32, CURRENT[shape]))
    older = evaluator.evaluate(_run("2" * 32, OLDER))
    assert current is not None and older is not None
    # the agent's history knows the run by its system prompt, as in the older shape
    assert fingerprints(current.trajectory) == fingerprints(older.trajectory)
    assert fingerprints(current.trajectory)[0].startswith("system:")
    # the judge reads the agent's instructions
    view = render(current, JudgeConfig(model="m").compaction).trajectory
    assert f"system: {SYSTEM}" in view
    assert view == render(older, JudgeConfig(model="m").compaction).trajectory
    # the user's request is still the task
    assert current.trajectory.task == "Hi there"


def test_a_system_message_in_the_history_is_not_shown_twice() -> None:
    both = dict(OLDER, **{"gen_ai.system_instructions": json.dumps(_INSTRUCTIONS)})
    ev = Evaluator(Config()).evaluate(_run("3" * 32, both))
    assert ev is not None
    view = render(ev, JudgeConfig(model="m").compaction).trajectory
    assert view.count(SYSTEM) == 1
