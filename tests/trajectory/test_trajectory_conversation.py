"""The conversation id and user of a turn, from every convention, in one reader order."""

from __future__ import annotations

from typing import Any

import pytest
from trajectory_factory import span, trace

from otel_eval.base.results import Evaluation
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.trajectory.build import build_trajectory, is_run

_AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"}


def _build(root: dict[str, Any], child: dict[str, Any] | None = None):  # type: ignore[no-untyped-def]
    spans = [span("root", attrs={**_AGENT, **root})]
    if child is not None:
        spans.append(span("chat", "root", 1, {"gen_ai.operation.name": "chat", **child}))
    return build_trajectory(trace(*spans), TrajectoryConfig())


@pytest.mark.parametrize(("root", "child", "session", "source"), [
    ({"gen_ai.conversation.id": "c1"}, None, "c1", "genai gen_ai.conversation.id"),
    ({"session.id": "s1"}, None, "s1", "openinference session.id"),
    ({"langfuse.session.id": "l1"}, None, "l1", "langfuse langfuse.session.id"),
    ({"traceloop.association.properties.session_id": "t1"}, None, "t1",
     "openllmetry traceloop.association.properties.session_id"),
    ({"traceloop.association.properties.thread_id": "t2"}, None, "t2",
     "openllmetry traceloop.association.properties.thread_id"),
    ({"ai.telemetry.metadata.conversationId": "v1"}, None, "v1",
     "vercel_ai ai.telemetry.metadata.conversationId"),
    # the order holds across spans: GenAI on a child beats OpenInference on the root
    ({"session.id": "s1"}, {"gen_ai.conversation.id": "c1"}, "c1",
     "genai gen_ai.conversation.id"),
    ({"session.id": 42}, None, "42", "openinference session.id"),  # a number, as its text
    ({"session.id": ""}, None, None, None),  # empty: no id
    ({"session.id": "x" * 257}, None, None, None),  # a payload, not an id
    ({"session.id": True}, None, None, None),
    ({}, {"session.id": "late"}, "late", "openinference session.id"),
])
def test_reader_order(root: dict[str, Any], child: dict[str, Any] | None,
                      session: str | None, source: str | None) -> None:
    t = _build(root, child)
    assert t.session_id == session
    assert t.conversation_sources.get("session_id") == source


def test_user_is_the_conversations_user() -> None:
    t = _build({"session.id": "s1", "user.id": "u7"},
               {"traceloop.association.properties.user_id": "other"})
    assert (t.user_id, t.conversation_sources["user_id"]) == ("u7", "openinference user.id")
    assert Evaluation(t).to_json()["user_id"] == "u7"
    alone = _build({"user.id": "u7"})  # a user but no conversation: the v1 object as before
    assert alone.user_id == "u7" and "user_id" not in Evaluation(alone).to_json()


def test_session_id_in_the_evaluation_only_when_known() -> None:
    with_id = Evaluation(_build({"gen_ai.conversation.id": "c1"})).to_json()
    without = Evaluation(_build({})).to_json()
    assert with_id["session_id"] == "c1"
    assert "session_id" not in without
    assert list(with_id) == [*without, "session_id"]  # nothing else moves


@pytest.mark.parametrize("operation", ["handle_conversation_turn", "gen_ai.invocation.internal"])
def test_a_conversation_turn_root_is_a_run(operation: str) -> None:
    turn = trace(span("turn", attrs={"gen_ai.operation.name": operation,
                                     "gen_ai.conversation.id": "c9"}),
                 span("agent", "turn", 1, _AGENT))
    assert is_run(turn)
    t = build_trajectory(turn, TrajectoryConfig())
    assert (t.session_id, t.agent) == ("c9", "support")
    assert t.steps[0].kind == "chain"


@pytest.mark.parametrize(("root", "child", "session", "others"), [
    # two keys, two values: the reader order picks one, the other is kept on the record
    ({"session.id": "s2"}, {"gen_ai.conversation.id": "c1"}, "c1", ["s2"]),
    # one key, two values: the root-most span's wins
    ({"session.id": "s1"}, {"session.id": "s2"}, "s1", ["s2"]),
    # the same id under two keys is no conflict
    ({"session.id": "c1"}, {"gen_ai.conversation.id": "c1"}, "c1", None),
    ({"session.id": "s1"}, None, "s1", None),
])
def test_a_second_conversation_id_is_on_the_record(
        root: dict[str, Any], child: dict[str, Any] | None, session: str,
        others: list[str] | None) -> None:
    """A trace carrying two conversation ids was counted under one of them, the other lost
    without a word. The one picked is the reader order's (root-most first on equal keys); the
    others are on the record (``other_session_ids``), whichever order the spans came in."""
    for order in (1, -1):
        spans = [span("root", attrs={**_AGENT, **root})]
        if child is not None:
            spans.append(span("chat", "root", 1, {"gen_ai.operation.name": "chat", **child}))
        t = build_trajectory(trace(*spans[::order]), TrajectoryConfig())
        out = Evaluation(t).to_json()
        assert (t.session_id, out.get("other_session_ids")) == (session, others)


def test_a_distributed_turn_is_its_entry_service_s() -> None:
    """docs/sessions.md: a front service calling the agent service (one trace) is a turn of
    the front service, whichever service's span carries the conversation id; a turn whose
    front span never came is the agent service's (a session of its own)."""
    agent = span("agent", "front", 1, {**_AGENT, "session.id": "c1"},
                 resource={"service.name": "agent"})
    whole = build_trajectory(trace(span("front", resource={"service.name": "front"}), agent),
                             TrajectoryConfig())
    assert (whole.service, whole.session_id) == ("front", "c1")
    alone = span("agent", None, 1, {**_AGENT, "session.id": "c1"},
                 resource={"service.name": "agent"})
    assert build_trajectory(trace(alone), TrajectoryConfig()).service == "agent"
