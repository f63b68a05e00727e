"""One LLM call recorded by two instrumentations is one call (``trajectory.llm_twins``):
nested, the same response id, or beside it under the same parent (another convention or scope,
within its time, the same input tokens, the only such step). Shapes of the Anthropic SDK's
own spans beside OpenLLMetry's and OpenInference's (tests/conformance/recordings/
openllmetry-anthropic, openinference-anthropic); calls that only look alike stay two."""

from __future__ import annotations

from typing import Any

import pytest
from trajectory_factory import span, trace

from otel_eval.base.model import Span
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.trajectory import build_trajectory

CFG = TrajectoryConfig()
AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}


def _sdk(name: str, start: int, end: int, tokens: int = 59, rid: str | None = "msg_1",
         parent: str = "agent") -> Span:
    """The Anthropic SDK's own span: GenAI model and tokens, no content."""
    attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "claude",
                             "gen_ai.usage.input_tokens": tokens,
                             "gen_ai.usage.output_tokens": 42}
    if rid is not None:
        attrs["gen_ai.response.id"] = rid
    return span(name, parent, start, attrs, end=end)


def _chat(name: str, start: int, end: int, tokens: int = 59, rid: str | None = "msg_1",
          parent: str = "agent") -> Span:
    """OpenLLMetry's span of the call: GenAI, with its messages."""
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "claude",
        "gen_ai.usage.input_tokens": tokens, "gen_ai.usage.output_tokens": 43,
        "gen_ai.output.messages": '[{"role": "assistant", "parts": [{"type": "text", '
                                  '"content": "It is sunny."}]}]'}
    if rid is not None:
        attrs["gen_ai.response.id"] = rid
    return span(name, parent, start, attrs, end=end)


def _stream(name: str, start: int, end: int, tokens: int = 59, parent: str = "agent") -> Span:
    """OpenInference's span of a streamed call: no response id."""
    return span(name, parent, start, {
        "openinference.span.kind": "LLM", "llm.model_name": "claude",
        "llm.token_count.prompt": tokens, "llm.token_count.completion": 42,
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "It is sunny."}, end=end)


def _calls(*spans: Span) -> list[str]:
    t = build_trajectory(trace(span("agent", None, 0, AGENT, end=1000), *spans), CFG)
    return [s.name for s in t.llm_steps]


@pytest.mark.parametrize(("spans", "calls"), [
    # OpenLLMetry's chat span and the SDK's, siblings with one response id: one call
    ([_chat("chat", 10, 100), _sdk("sdk", 20, 90)], ["chat"]),
    # the SDK's span first (it holds no other's time): still the one reply, one call
    ([_sdk("sdk", 10, 100), _chat("chat", 20, 90)], ["sdk"]),
    # two calls, two replies
    ([_chat("chat1", 10, 100), _sdk("sdk1", 20, 90), _chat("chat2", 110, 200, rid="msg_2"),
      _sdk("sdk2", 120, 190, rid="msg_2")], ["chat1", "chat2"]),
    # the same reply one call after the other (an LLM cache answering a repeat): two calls
    ([_chat("chat1", 10, 100), _chat("chat2", 110, 200)], ["chat1", "chat2"]),
    ([_chat("chat1", 10, 100), _sdk("sdk1", 20, 90), _chat("chat2", 110, 200),
      _sdk("sdk2", 120, 190)], ["chat1", "chat2"]),
    # OpenInference's stream span and the SDK's: no shared id, same parent, within its time,
    # same input tokens, another convention
    ([_stream("stream", 10, 100), _sdk("sdk", 20, 90)], ["stream"]),
    # different response ids: two calls, whatever the times and tokens
    ([_chat("chat", 10, 100), _sdk("sdk", 20, 90, rid="msg_2")], ["chat", "sdk"]),
    # one convention, no ids (two real calls of one agent, one inside the other's time)
    ([_sdk("sdk1", 10, 100, rid=None), _sdk("sdk2", 20, 90, rid=None)], ["sdk1", "sdk2"]),
    # other input tokens: another call
    ([_stream("stream", 10, 100), _sdk("sdk", 20, 90, tokens=60)], ["stream", "sdk"]),
    # not within its time: another call
    ([_stream("stream", 10, 100), _sdk("sdk", 20, 120)], ["stream", "sdk"]),
    # under another parent: another call
    ([_stream("stream", 10, 100), span("tool", "agent", 15, {"gen_ai.operation.name":
                                                              "execute_tool"}, end=95),
      _sdk("sdk", 20, 90, parent="tool")], ["stream", "sdk"]),
    # two calls running side by side, each could hold the SDK span: which is unknown, so
    # nothing is merged (two streams, one SDK span: three steps stay)
    ([_stream("s1", 10, 100), _stream("s2", 12, 100), _sdk("sdk", 20, 90)],
     ["s1", "s2", "sdk"]),
])
def test_one_call_recorded_twice_is_one_call(spans: list[Span], calls: list[str]) -> None:
    assert _calls(*spans) == calls


def test_the_kept_step_takes_what_only_the_twin_recorded() -> None:
    stream = _stream("stream", 10, 100)
    del stream.attributes["llm.token_count.completion"]
    t = build_trajectory(trace(span("agent", None, 0, AGENT, end=1000), stream,
                               _sdk("sdk", 20, 90)), CFG)
    kept, twin = (next(s for s in t.steps if s.name == n) for n in ("stream", "sdk"))
    assert (kept.kind, kept.input_tokens, kept.output_tokens) == ("llm", 59, 42)
    assert twin.kind == "other"
    assert twin.sources["kind"] == (f"the call of LLM step {kept.span_id} (recorded beside it "
                                    "by another instrumentation)")
    assert t.usage()["input_tokens"] == 59  # counted once
    # the reply's id, recorded only by the SDK's span: the call's (its evaluation names it)
    assert kept.response_id == "msg_1"


def test_pairs_are_found_in_linear_work() -> None:
    """5,000 calls, each recorded twice: each SDK span is looked for among a few steps
    before it, never the whole parent."""
    spans = []
    for i in range(5000):
        spans += [_stream(f"s{i}", 10 * i, 10 * i + 9, tokens=i),
                  _sdk(f"k{i}", 10 * i + 1, 10 * i + 8, tokens=i, rid=None)]
    assert len(_calls(*spans)) == 5000


def _failed(name: str, start: int, end: int, scope: str, error: str) -> Span:
    """A model call the API refused (a 400): GenAI, no reply, no response id, no tokens."""
    s = span(name, "agent", start, {"gen_ai.operation.name": "chat",
                                    "gen_ai.request.model": "claude", "error.type": error},
             end=end, status="error", message=error)
    s.scope = scope
    return s


def test_a_failed_call_recorded_by_two_instrumentations_is_one_call() -> None:
    """openllmetry-anthropic/llm_error: OpenLLMetry's anthropic.chat and the SDK's own
    anthropic.messages.create both speak GenAI (one convention, two scopes), and a refused call
    has no response id or tokens: both failed, one within the other's time, is one call; the
    outer keeps its error (the API's words)."""
    words = "Error code: 400 - prompt is too long: 210000 tokens > 200000 maximum"
    chat = _failed("anthropic.chat", 10, 40, "opentelemetry.instrumentation.anthropic", words)
    sdk = _failed("anthropic.messages.create", 11, 39, "com.anthropic.sdk.python",
                  "invalid_request_error")
    t = build_trajectory(trace(span("agent", None, 0, AGENT, end=1000), chat, sdk), CFG)
    assert [(s.name, s.error) for s in t.llm_steps] == [("anthropic.chat", words)]
    # two failed calls of one instrumentation are two calls, however they overlap
    twice = _failed("anthropic.chat again", 11, 39, "opentelemetry.instrumentation.anthropic",
                    words)
    t = build_trajectory(trace(span("agent", None, 0, AGENT, end=1000), chat, twice), CFG)
    assert len(t.llm_steps) == 2
    # a failed call beside a call that answered is two calls
    ok = _sdk("anthropic.messages.create", 11, 39, rid=None)
    ok.scope = "com.anthropic.sdk.python"
    t = build_trajectory(trace(span("agent", None, 0, AGENT, end=1000), chat, ok), CFG)
    assert len(t.llm_steps) == 2


def test_one_call_recorded_three_times_nested_is_one_step() -> None:
    """Three LLM spans each directly under the other (an outer wrapper, a client and the
    SDK's own): the innermost's tokens went to the middle step, already no call of its own,
    and the run's usage read unknown."""
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
    t = build_trajectory(trace(
        span("agent", None, 0, {"gen_ai.operation.name": "invoke_agent"}, end=100),
        span("outer", "agent", 1, chat, end=50), span("middle", "outer", 2, chat, end=40),
        span("sdk", "middle", 3, {**chat, "gen_ai.usage.input_tokens": 100,
                                  "gen_ai.usage.output_tokens": 5}, end=30)), CFG)
    assert [(s.name, s.input_tokens) for s in t.llm_steps] == [("outer", 100)]
    assert (t.usage()["input_tokens"], t.usage()["output_tokens"]) == (100, 5)
