"""A trace's times when a sender's clock is wrong: the run's wall time (``duration_s``, the
``duration_s`` budget, the duration histogram, the session's time budget) never takes
decades from a span whose clock cannot be right (a monotonic clock sent as Unix time, a
start left 0, a host's clock years ahead): the spans then disagree by more than any span
may last, and the run's own span, measured on one clock, says how long it took."""

from __future__ import annotations

import json

import pytest
from trajectory_factory import TRACE_ID, sid

from otel_eval.base.model import Span, Trace
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.detectors import budget
from otel_eval.evaluate.detectors.calls import Context
from otel_eval.evaluate.detectors.config import DetectorsConfig
from otel_eval.evaluate.trajectory import build_trajectory

T = 1_765_000_000 * 10**9  # a Unix time in ns (December 2025)
S = 10**9
LLM = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}


def _trace(child_start: int, child_end: int) -> Trace:
    root = Span(TRACE_ID, sid("agent"), None, "invoke_agent", T, T + 10 * S,
                attributes={"gen_ai.operation.name": "invoke_agent"})
    child = Span(TRACE_ID, sid("llm"), sid("agent"), "chat", child_start, child_end,
                 attributes=dict(LLM))
    return Trace(TRACE_ID, [root, child], "complete")


@pytest.mark.parametrize(("child_start", "child_end"), [
    (3 * 3600 * S, 3 * 3600 * S + S),  # a monotonic clock (3 h since boot) sent as Unix time
    (0, 0),  # no times at all
    (0, T + S),  # no start: over a year long, refused by the OTLP decoder; a file may say so
    (T + 80 * 365 * 86400 * S, T + 80 * 365 * 86400 * S + S),  # a clock 80 years ahead
], ids=["monotonic", "zero", "no-start", "far-future"])
def test_a_wrong_clock_adds_no_decades(child_start: int, child_end: int) -> None:
    t = build_trajectory(_trace(child_start, child_end), TrajectoryConfig())
    assert t.duration_s == 10.0
    assert t.start_ns == T
    found = budget.detect(t, DetectorsConfig(), Context(budgets={"duration_s": 60}))
    assert found == []


def test_clocks_that_agree_give_the_whole_trace() -> None:
    """A child ending after its root (a straggler, a few seconds' skew) still counts."""
    t = build_trajectory(_trace(T + 2 * S, T + 25 * S), TrajectoryConfig())
    assert (t.start_ns, t.duration_s) == (T, 25.0)


def test_a_downstream_service_on_a_clock_behind_is_not_the_run() -> None:
    """A trace received from every service (the collector's fan-out): the tool server's entry
    span (its parent flagged remote) starts "before" the agent's root on its clock. The run is
    still the agent's: its service, its root, where its results go."""
    agent = {"service.name": "agent-svc"}
    root = Span(TRACE_ID, sid("agent"), None, "invoke_agent", T, T + 10 * S,
                attributes={"gen_ai.operation.name": "invoke_agent"}, resource=agent)
    client = Span(TRACE_ID, sid("client"), sid("agent"), "POST /search", T + S, T + 3 * S,
                  kind="client", resource=agent)
    server = Span(TRACE_ID, sid("server"), sid("client"), "POST /search", T - S, T + S // 2,
                  kind="server", resource={"service.name": "search-svc"}, parent_remote=True)
    t = build_trajectory(Trace(TRACE_ID, [root, client, server], "complete"),
                         TrajectoryConfig())
    assert (t.service, t.root_span_id, t.run_span_id) == ("agent-svc", sid("agent"),
                                                         sid("agent"))


def test_an_orchestrator_whose_root_never_came_is_not_its_remote_agents_run() -> None:
    """An orchestrator hung (or was killed) after the agent it called in another service
    answered: its root never came; its own spans wait for it (parent flagged local). The
    called agent's entry span (parent flagged remote; its clock 2 s behind, so it starts
    first) was taken for the run's root: the run was the research service's, its
    non-termination reported on the research agent's span, which ended. The run has no root
    here; it is the orchestrator's, whatever the order the spans came in."""
    orch, research = {"service.name": "orch"}, {"service.name": "research"}
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
    call = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "researcher"}
    spans = [
        Span(TRACE_ID, sid("served"), sid("call"), "invoke_agent researcher", T - 2 * S,
             T + 5 * S, kind="server", attributes=call, resource=research,
             parent_remote=True),
        Span(TRACE_ID, sid("b-chat"), sid("served"), "chat", T, T + 4 * S,
             attributes=chat, resource=research, parent_remote=False),
        Span(TRACE_ID, sid("a-chat"), sid("root"), "chat", T - S, T, attributes=chat,
             resource=orch, parent_remote=False),
        Span(TRACE_ID, sid("call"), sid("root"), "invoke_agent researcher", T, T + 8 * S,
             kind="client", attributes=call, resource=orch, parent_remote=False),
    ]
    for order in (spans, spans[::-1]):
        t = build_trajectory(Trace(TRACE_ID, order, "incomplete"), TrajectoryConfig())
        assert (t.service, t.root_span_id, t.run_span_id) == ("orch", None, sid("a-chat"))


def test_a_remote_agent_on_a_clock_behind_its_client_span_lost_is_not_the_runs_agent() -> None:
    """The orchestrator's root arrived; the agent it called in another service has its entry
    span (parent flagged remote) at the top level, its client span not in the trace, and its
    clock 1 s behind, so it starts "before" the root. The root is the orchestrator's (its
    service, its root span) but the run's agent was the called one: the top level was
    ordered by start alone. A span with no parent comes before an entry from upstream, as
    ``model.local_root`` orders them."""
    orch, research = {"service.name": "orch"}, {"service.name": "research"}
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
    spans = [
        Span(TRACE_ID, sid("root"), None, "invoke_agent orchestrator", T, T + 10 * S,
             attributes={"gen_ai.operation.name": "invoke_agent",
                         "gen_ai.agent.name": "orchestrator"}, resource=orch),
        Span(TRACE_ID, sid("a-chat"), sid("root"), "chat", T + 8 * S, T + 9 * S,
             attributes=chat, resource=orch, parent_remote=False),
        Span(TRACE_ID, sid("served"), sid("call"), "invoke_agent researcher", T - S,
             T + 2 * S, kind="server", resource=research, parent_remote=True,
             attributes={"gen_ai.operation.name": "invoke_agent",
                         "gen_ai.agent.name": "researcher"}),
        Span(TRACE_ID, sid("b-chat"), sid("served"), "chat", T, T + S, attributes=chat,
             resource=research, parent_remote=False),
    ]
    t = build_trajectory(Trace(TRACE_ID, spans, "complete"), TrajectoryConfig())
    assert (t.service, t.root_span_id, t.agent) == ("orch", sid("root"), "orchestrator")
    assert [s.span_id for s in t.steps][:2] == [sid("root"), sid("a-chat")]


def _said(text: str) -> dict[str, str]:
    return {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
            "gen_ai.output.messages": json.dumps([{
                "role": "assistant", "parts": [{"type": "text", "content": text}],
                "finish_reason": "stop"}])}


def test_a_remote_agents_reply_its_client_span_lost_is_not_the_runs_answer() -> None:
    """The orchestrator's root recorded no result; the agent it called in another service has
    its entry span (parent flagged remote) at the top level, its client span not in the trace,
    its clock ahead. Its steps follow the orchestrator's (their place in the run is unknown),
    so its last model call ("research notes") was read as the run's answer. The answer is the
    orchestrator's own last reply."""
    orch, research = {"service.name": "orch"}, {"service.name": "research"}
    spans = [
        Span(TRACE_ID, sid("root"), None, "invoke_agent orchestrator", T, T + 10 * S,
             attributes={"gen_ai.operation.name": "invoke_agent",
                         "gen_ai.agent.name": "orchestrator"}, resource=orch),
        Span(TRACE_ID, sid("a-chat"), sid("root"), "chat", T + 8 * S, T + 9 * S,
             attributes=_said("final answer"), resource=orch, parent_remote=False),
        Span(TRACE_ID, sid("served"), sid("call"), "invoke_agent researcher", T + 3 * S,
             T + 20 * S, kind="server", resource=research, parent_remote=True,
             attributes={"gen_ai.operation.name": "invoke_agent",
                         "gen_ai.agent.name": "researcher"}),
        Span(TRACE_ID, sid("b-chat"), sid("served"), "chat", T + 18 * S, T + 19 * S,
             attributes=_said("research notes"), resource=research, parent_remote=False),
    ]
    t = build_trajectory(Trace(TRACE_ID, spans, "complete"), TrajectoryConfig())
    assert (t.agent, t.answer, t.output) == ("orchestrator", "final answer", "final answer")


def test_a_remote_agent_called_by_an_orchestrator_whose_root_never_came_is_not_its_agent() -> None:
    """The orchestrator's root (its agent span) never came; its call of the agent of another
    service (an ``invoke_agent`` span of kind client) is the shallowest agent span left, so
    the run's agent was the called one ("researcher": its metrics, history and issues). The
    caller, not in the trace, is the run's agent: unknown here (the service's history may
    name it), named when the orchestrator's own spans carry its name."""
    orch, research = {"service.name": "orch"}, {"service.name": "research"}
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
    call = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "researcher"}
    spans = [
        Span(TRACE_ID, sid("served"), sid("call"), "invoke_agent researcher", T, T + 5 * S,
             kind="server", attributes=call, resource=research, parent_remote=True),
        Span(TRACE_ID, sid("b-chat"), sid("served"), "chat", T, T + 4 * S,
             attributes=chat, resource=research, parent_remote=False),
        Span(TRACE_ID, sid("a-chat"), sid("root"), "chat", T - S, T, attributes=chat,
             resource=orch, parent_remote=False),
        Span(TRACE_ID, sid("call"), sid("root"), "invoke_agent researcher", T, T + 8 * S,
             kind="client", attributes=call, resource=orch, parent_remote=False),
    ]
    t = build_trajectory(Trace(TRACE_ID, spans, "incomplete"), TrajectoryConfig())
    assert (t.service, t.agent, t.agent_source) == ("orch", None, "unknown")
    spans[2] = Span(TRACE_ID, sid("a-chat"), sid("root"), "chat", T - S, T,
                    attributes={**chat, "gen_ai.agent.name": "orchestrator"}, resource=orch,
                    parent_remote=False)
    t = build_trajectory(Trace(TRACE_ID, spans, "incomplete"), TrajectoryConfig())
    assert (t.agent, t.agent_source) == ("orchestrator", "child_span")


def test_a_name_stamped_on_a_remote_agents_spans_is_not_the_runs_agent() -> None:
    """As above (the orchestrator's root never came; its call of the researcher in another
    service is in the trace), the researcher's own spans carrying its name (an
    instrumentation stamping ``gen_ai.agent.name`` on its model calls): with the call's agent
    spans left out, that stamp named the run's agent "researcher" (``child_span``). A name
    stamped on another run's spans is none of the run's: unknown here."""
    orch, research = {"service.name": "orch"}, {"service.name": "research"}
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
    call = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "researcher"}
    spans = [
        Span(TRACE_ID, sid("call"), sid("root"), "invoke_agent researcher", T, T + 8 * S,
             kind="client", attributes=call, resource=orch, parent_remote=False),
        Span(TRACE_ID, sid("served"), sid("call"), "invoke_agent researcher", T, T + 5 * S,
             kind="server", attributes=call, resource=research, parent_remote=True),
        Span(TRACE_ID, sid("b-chat"), sid("served"), "chat", T, T + 4 * S,
             attributes={**chat, "gen_ai.agent.name": "researcher"}, resource=research,
             parent_remote=False),
        Span(TRACE_ID, sid("a-chat"), sid("root"), "chat", T - S, T, attributes=chat,
             resource=orch, parent_remote=False),
    ]
    t = build_trajectory(Trace(TRACE_ID, spans, "incomplete"), TrajectoryConfig())
    assert (t.service, t.agent, t.agent_source) == ("orch", None, "unknown")


def test_a_called_services_entry_its_client_span_lost_goes_where_it_ran() -> None:
    """The agent called a search service (its client span filtered out by the collector);
    the service's entry span (parent flagged remote) and the failed call under it ran
    before the agent's own successful lookup. They were put after the whole run, so the
    failed search read as the run's last call (recovery: gave_up, the run failed). Inside
    the root's time, they go where they ran, as an orphan does."""
    orch, svc = {"service.name": "orch"}, {"service.name": "search-svc"}

    def tool(name: str, key: str, parent: str, start: int, end: int, resource: dict[str, str],
             status: str = "ok") -> Span:
        return Span(TRACE_ID, sid(key), sid(parent), f"execute_tool {name}", start, end,
                    attributes={"gen_ai.operation.name": "execute_tool",
                                "gen_ai.tool.name": name}, status=status, resource=resource)

    spans = [
        Span(TRACE_ID, sid("root"), None, "invoke_agent orchestrator", T, T + 10 * S,
             attributes={"gen_ai.operation.name": "invoke_agent",
                         "gen_ai.agent.name": "orchestrator"}, resource=orch),
        Span(TRACE_ID, sid("served"), sid("client"), "POST /search", T + S, T + 3 * S,
             kind="server", resource=svc, parent_remote=True),
        tool("search", "search", "served", T + S + 1, T + 2 * S, svc, "error"),
        tool("lookup", "lookup", "root", T + 4 * S, T + 5 * S, orch),
    ]
    t = build_trajectory(Trace(TRACE_ID, spans, "complete"), TrajectoryConfig())
    assert [s.span_id for s in t.steps] == [sid(k) for k in ("root", "served", "search",
                                                              "lookup")]
    assert (t.service, t.agent) == ("orch", "orchestrator")
