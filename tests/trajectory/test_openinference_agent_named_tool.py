"""A LangChain tool whose name holds "agent" (an agent called as a tool, ``ask_weather_agent``)
is a tool step: OpenInference's LangChain instrumentation marks every run so named AGENT, a
tool run too, and read as an agent the tool's call had no span of its own (rebuilt) and the
sub-agent's tools under it counted as the run's own steps (``--budget steps``)."""

from __future__ import annotations

from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.detectors import Detectors
from otel_eval.evaluate.detectors.config import DetectorsConfig
from otel_eval.evaluate.trajectory import build_trajectory


def test_a_tool_named_like_an_agent_is_a_step_with_the_sub_agent_under_it() -> None:
    from cost import work

    [run] = work.decode_recordings([work.recording_requests("langgraph", "multi_agent")])
    t = build_trajectory(run, TrajectoryConfig())
    [ask] = [s for s in t.steps if s.name == "ask_weather_agent"]
    assert (ask.kind, ask.tool_name, ask.rebuilt) == ("tool", "ask_weather_agent", False)
    # the steps as every other stack's agent-as-tool run counts them (crewai, langchain-js):
    # the coordinator's one call; the weather agent's get_weather is nested under it
    assert [s.tool_name for s in t.action_steps] == ["ask_weather_agent"]
    assert t.counts()["steps"] == 1 and t.counts()["tool_calls"] == 2
    findings, _ = Detectors(DetectorsConfig(budget_overrides={"steps": 1})).evaluate(t)
    assert [f.kind for f in findings if f.detector == "budget"] == []
