"""The scripted agent scenarios of the conformance corpus: what the scripted LLM answers.

Every stack's agent program sends a user prompt containing ``[scenario:NAME]`` and offers one
tool, ``get_weather(city)``. The scripted LLM finds the marker in any message of the
conversation and counts the tool results already in it (turn ``k``); ``reply(name, k)`` is the
whole behaviour, as data:

- ``clean``: k=0 calls get_weather{"city": "Paris"}; then the final text.
- ``loop``: four identical get_weather{"city": "Paris"} calls; then the final text.
- ``distinct``: six calls with six cities; then a final text summarizing them.
- ``tool_error``: get_weather{"city": "Atlantis"} (the agent's tool raises
  ``ValueError("unknown city: Atlantis")``), then Paris; then the final text.
- ``non_terminating``: never stops calling get_weather (cycling cities); the agent program's
  tool flushes its telemetry and ``os._exit(0)``s on its 3rd call, so the run never ends.
- ``remote_parent``: as clean; the agent runs under a remote W3C ``traceparent``.
- ``streaming``: as clean; the agent asks for streamed completions where the stack can.
- ``conversation``: three user turns, each its own run (trace), all carrying the conversation
  id ``CONVERSATION_ID`` where the stack's users set one (``stack.yaml`` ``conversation``).
  Turn ``n``'s prompt (``turn_prompt(n)``) asks for ``CONVERSATION_CITIES[n-1]`` and carries
  ``[turn:n]``; in turn n, k=0 calls get_weather for that city, then the final text. ``k``
  counts the tool results after the last ``[turn:n]`` marker, so an agent that sends the
  earlier turns as history is answered as one that does not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MARKER = re.compile(r"\[scenario:([a-z_]+)\]")
TOOL_NAME = "get_weather"
# The tool as offered to the LLM (OpenAI function-tool JSON schema).
TOOL_PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}
TOOL_DESCRIPTION = "Get the current weather for a city."
CITIES = ("Paris", "London", "Tokyo", "Berlin", "Rome", "Madrid")
FINAL = "It is sunny in Paris."
# The remote parent of the remote_parent scenario (W3C traceparent, sampled).
REMOTE_TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
REMOTE_SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{REMOTE_TRACE_ID}-{REMOTE_SPAN_ID}-01"
SCENARIOS = ("clean", "loop", "distinct", "tool_error", "non_terminating", "remote_parent",
             "streaming", "conversation")
# The conversation scenario: its id, and the city each user turn asks about.
TURN_MARKER = re.compile(r"\[turn:([1-9])\]")
CONVERSATION_ID = "conv-weather-0001"
CONVERSATION_CITIES = ("Paris", "London", "Tokyo")
_QUESTIONS = ("What is the weather in Paris?", "And in London?", "And in Tokyo?")


@dataclass(frozen=True)
class Reply:
    """One assistant turn: a get_weather call for ``city``, or the final ``text``."""

    city: str | None = None
    text: str | None = None


def prompt(scenario: str) -> str:
    """The user's prompt of a one-run scenario (the run's expected ``input``)."""
    return f"{_QUESTIONS[0]} [scenario:{scenario}]"


def turn_prompt(n: int) -> str:
    """The user's prompt of turn ``n`` (1-based) of the conversation scenario."""
    return f"{_QUESTIONS[n - 1]} [scenario:conversation] [turn:{n}]"


def reply(scenario: str, k: int, turn: int = 1) -> Reply:
    """The scripted assistant turn of ``scenario`` after ``k`` tool results (in user turn
    ``turn`` of the conversation scenario)."""
    if scenario == "conversation":
        city = CONVERSATION_CITIES[turn - 1]
        return Reply(city=city) if k == 0 else Reply(text=f"It is sunny in {city}.")
    if scenario in ("clean", "remote_parent", "streaming"):
        return Reply(city="Paris") if k == 0 else Reply(text=FINAL)
    if scenario == "loop":
        return Reply(city="Paris") if k < 4 else Reply(text=FINAL)
    if scenario == "distinct":
        if k < len(CITIES):
            return Reply(city=CITIES[k])
        return Reply(text="It is sunny in " + ", ".join(CITIES[:-1]) + f" and {CITIES[-1]}.")
    if scenario == "tool_error":
        return Reply(city=("Atlantis", "Paris")[k]) if k < 2 else Reply(text=FINAL)
    if scenario == "non_terminating":
        return Reply(city=CITIES[k % len(CITIES)])
    raise KeyError(scenario)


def weather(city: str) -> str:
    """The agent side's tool body (each stack's agent program calls this)."""
    if city == "Atlantis":
        raise ValueError("unknown city: Atlantis")
    return f"sunny, 22 C in {city}"
