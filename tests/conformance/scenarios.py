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
- ``multi_agent``: a coordinator agent (``COORDINATOR``, offered no get_weather) hands the
  question to the weather agent (offered get_weather) through the one tool it is offered, the
  framework's own (a hand-off, a transfer, a sub-agent or an agent called as a tool): the
  coordinator calls it (``Reply(delegate=True)``; arguments in ``delegation_arguments``),
  the weather agent calls get_weather{"city": "Paris"} until a conversation it is sent holds
  Paris' weather, then answers; a coordinator sent a tool result (the weather agent's answer,
  where the sub-agent returns to it) answers too. Who asks is told by what the request offers,
  not by ``k``: a hand-off gives the weather agent the coordinator's history.
- ``parallel``: k=0 calls get_weather for Paris and for London in one reply (parallel tool
  calls, as OpenAI's models make by default); after any result, the final text. An agent
  that runs one call only ends too, with one city.
- ``max_turns``: like ``non_terminating`` the model never stops calling get_weather (cycling
  cities), but nothing kills the run: the agent runs under its framework's own cap on turns
  (``max_turns``, ``max_steps``, ``recursion_limit``, ``max_iter``..., set to
  ``LIMITED_TURNS``), which ends it the framework's way (an error, or an answer forced out of
  the model). A request that offers no tool (a framework asking for that last answer) gets
  ``GAVE_UP``.
- ``wrong_tool``: k=0 calls ``WRONG_TOOL`` (get_forecast, never offered) for Paris; the
  framework answers it as it answers a call to a tool it does not have (an error result,
  or an error that ends the run); after that, get_weather{"city": "Paris"}, then the final
  text.
- ``wrong_args``: k=0 calls get_weather with its city under another name,
  ``{"town": "Paris"}`` (``WRONG_ARGUMENT``: the required ``city`` missing, a parameter the
  schema does not have); the framework answers it as it answers arguments that fail the
  tool's schema (a validation error as the tool's result, the tool raising on an unexpected
  keyword, or an error that ends the run); after that, get_weather{"city": "Paris"}, then
  the final text.
- ``length_stop``: k=0 calls get_weather{"city": "Paris"}; the answer after it is cut off at
  the model's output token limit (``TRUNCATED``, mid-word), as each API says it: finish reason
  ``length`` (chat completions), a response ``incomplete`` for ``max_output_tokens`` (the
  Responses API), stop reason ``max_tokens`` (Anthropic), ``MAX_TOKENS`` (Gemini).
- ``empty_answer``: k=0 calls get_weather{"city": "Paris"}; the answer after it is empty
  (``""``, a stop), as a model gives when its reply was filtered or it had nothing to add;
  a framework that ends on a tool (``final_answer``) is answered ``""`` through it.
- ``llm_error``: k=0 calls get_weather{"city": "Paris"}; the next request fails: the API
  answers HTTP 400, the context window exceeded, in its own error shape (``LLM_ERRORS``), as
  a provider does when a run's history outgrows the model. No framework retries a 400: the
  run ends on it, without an answer.
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
             "streaming", "multi_agent", "parallel", "max_turns", "wrong_tool",
             "wrong_args", "length_stop", "empty_answer", "llm_error", "conversation")
# The multi_agent scenario's coordinator (the run's agent: the one the user asked).
COORDINATOR = "triage_agent"
WEATHER_AGENT = "weather_agent"
# The conversation scenario: its id, and the city each user turn asks about.
TURN_MARKER = re.compile(r"\[turn:([1-9])\]")
CONVERSATION_ID = "conv-weather-0001"
CONVERSATION_CITIES = ("Paris", "London", "Tokyo")
# The max_turns scenario: the frameworks' cap on model turns, and the answer to a request that
# offers no tool (the last answer a framework asks for at its cap).
LIMITED_TURNS = 3
GAVE_UP = "I could not finish looking up the weather."
# The wrong_tool scenario's first call: a tool no agent is offered.
WRONG_TOOL = "get_forecast"
# The length_stop scenario's answer, cut off at the output token limit.
TRUNCATED = "It is sunny in Par"
# The wrong_args scenario's first call: the city passed under a name get_weather does not take.
WRONG_ARGUMENT = "town"
# The parallel scenario: the cities of its one reply's calls, and its final text.
PARALLEL_CITIES = ("Paris", "London")
PARALLEL_FINAL = "It is sunny in Paris and London."
# The llm_error scenario: each API's own 400 for a context window exceeded, as its providers
# word it (OpenAI's also carries code context_length_exceeded).
LLM_ERRORS = {
    "openai": "This model's maximum context length is 128000 tokens. However, your messages "
              "resulted in 131072 tokens. Please reduce the length of the messages.",
    "anthropic": "prompt is too long: 210000 tokens > 200000 maximum",
    "gemini": "The input token count (1200000) exceeds the maximum number of tokens allowed "
              "(1048576).",
}
_QUESTIONS = ("What is the weather in Paris?", "And in London?", "And in Tokyo?")


@dataclass(frozen=True)
class Reply:
    """One assistant turn: a get_weather call for ``city`` (and for each of ``also``, in the
    same reply), or the final ``text``."""

    city: str | None = None
    text: str | None = None
    delegate: bool = False  # multi_agent: the coordinator calls its one delegation tool
    also: tuple[str, ...] = ()  # parallel: the cities of the reply's further calls
    tool: str | None = None  # wrong_tool: the tool called instead of get_weather
    failed: bool = False  # llm_error: the API answers an error, not a reply
    argument: str = "city"  # wrong_args: the name the call passes the city under
    truncated: bool = False  # length_stop: the reply was cut off at the output token limit

    @property
    def cities(self) -> tuple[str, ...]:
        """The cities of the reply's get_weather calls, in order."""
        return () if self.city is None else (self.city, *self.also)


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
    if scenario in ("non_terminating", "max_turns"):
        return Reply(city=CITIES[k % len(CITIES)])
    if scenario == "wrong_tool":
        if k == 0:
            return Reply(city="Paris", tool=WRONG_TOOL)
        return Reply(city="Paris") if k == 1 else Reply(text=FINAL)
    if scenario == "wrong_args":
        if k == 0:
            return Reply(city="Paris", argument=WRONG_ARGUMENT)
        return Reply(city="Paris") if k == 1 else Reply(text=FINAL)
    if scenario == "empty_answer":
        return Reply(city="Paris") if k == 0 else Reply(text="")
    if scenario == "length_stop":
        return Reply(city="Paris") if k == 0 else Reply(text=TRUNCATED, truncated=True)
    if scenario == "llm_error":
        return Reply(city="Paris") if k == 0 else Reply(failed=True)
    if scenario == "parallel":
        first, *rest = PARALLEL_CITIES
        return Reply(city=first, also=tuple(rest)) if k == 0 else Reply(text=PARALLEL_FINAL)
    raise KeyError(scenario)


def multi_agent_reply(offers_weather: bool, weather_seen: bool, k: int) -> Reply:
    """The multi_agent scenario's turn: the weather agent's (``offers_weather``: the request
    offers get_weather) or the coordinator's; ``weather_seen``: the conversation holds
    Paris' weather; ``k``: the tool results in it."""
    if offers_weather:
        return Reply(text=FINAL) if weather_seen else Reply(city="Paris")
    return Reply(delegate=True) if k == 0 else Reply(text=FINAL)


def delegation_arguments(parameters: object) -> dict[str, object]:
    """What the coordinator passes its delegation tool, from the tool's JSON schema: a
    parameter naming an agent (agent, member, coworker, assistant) gets ``WEATHER_AGENT``,
    any other string parameter the user's prompt (marker included: an agent called as a tool
    is sent only what it is given); one with an ``enum`` the weather agent if listed, else its
    first value; an array named ``messages`` one user message (Haystack's Agent run as a
    ComponentTool takes its ``ChatMessage`` list: role, content parts with text). Only the
    required ones when the schema lists them."""
    schema = parameters if isinstance(parameters, dict) else {}
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = schema.get("required")
    names = [n for n in (required if isinstance(required, list) else props)
             if isinstance(n, str)]
    out: dict[str, object] = {}
    for name in names:
        kind = (props.get(name) or {}).get("type") if isinstance(props.get(name), dict) else None
        if kind == "array" and name == "messages":  # an agent's run(messages) as a tool
            out[name] = [{"role": "user", "content": [{"text": prompt("multi_agent")}]}]
            continue
        if kind not in (None, "string", "STRING"):
            continue
        choices = props[name].get("enum") if isinstance(props.get(name), dict) else None
        named = re.search(r"agent|member|coworker|assistant", name, re.I)
        if isinstance(choices, list) and choices:  # ADK's transfer_to_agent: the agents
            out[name] = WEATHER_AGENT if WEATHER_AGENT in choices else str(choices[0])
        else:
            out[name] = WEATHER_AGENT if named else prompt("multi_agent")
    return out


def weather(city: str) -> str:
    """The agent side's tool body (each stack's agent program calls this)."""
    if city == "Atlantis":
        raise ValueError("unknown city: Atlantis")
    return f"sunny, 22 C in {city}"
