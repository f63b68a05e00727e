"""DSPy under OpenInference: every module is a CHAIN span, the user's module named only by the
root span's ``<Class>.forward``, the run's answer the ``answer`` field of the Prediction JSON
(``conventions.openinference``: ``dspy_marked``, ``dspy_module``, ``prediction_answer``;
``trajectory.spans``: ``StepBuilder._dspy_module``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from trajectory_factory import span, trace

from otel_eval.base.model import Span
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.conventions.agent_names import dspy_agent_name
from otel_eval.evaluate.conventions.openinference import (
    DSPY_SCOPE,
    dspy_marked,
    dspy_module,
    prediction_answer,
)
from otel_eval.evaluate.trajectory import build_trajectory

_CHAIN = {"openinference.span.kind": "CHAIN"}
_PREDICTION = json.dumps({"trajectory": {"thought_0": "call get_weather"},
                          "reasoning": "The observations give the answer.",
                          "answer": "It is sunny in Paris."})
_TEMPLATE = "[[ ## reasoning ## ]]\nok\n\n[[ ## answer ## ]]\nIt is sunny in Paris.\n\n" \
            "[[ ## completed ## ]]"


def _scoped(s: Span, scope: str) -> Span:
    s.scope = scope
    return s


def _run(root: str, *, scope: str = DSPY_SCOPE, inner: str = "ReAct.forward",
         output: str | None = _PREDICTION, marked_child: bool = True) -> Trajectory:
    """A DSPy-shaped run: ``root`` (CHAIN) > ``inner`` (CHAIN) > a predictor > the LM call,
    every span of instrumentation scope ``scope``; ``marked_child``: the predictor and LM
    carry DSPy's own span names (else plain ones)."""
    root_attrs = {**_CHAIN, "input.value": '{"question": "Weather in Paris?"}'}
    if output is not None:
        root_attrs["output.value"] = output
    predictor, lm = ("Predict.forward", "LM.__call__") if marked_child else ("step", "call")
    spans = [
        span(root, attrs=root_attrs),
        span(inner, root, start=1, attrs={**_CHAIN, "output.value": _PREDICTION}),
        span(predictor, inner, start=2, attrs=dict(_CHAIN)),
        span(lm, predictor, start=3, attrs={
            "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": _TEMPLATE}),
    ]
    return build_trajectory(trace(*[_scoped(s, scope) for s in spans]), TrajectoryConfig())


@pytest.mark.parametrize(("root", "scope", "marked_child", "agent"), [
    ("WeatherAgent.forward", DSPY_SCOPE, True, "WeatherAgent"),   # the user's module
    ("WeatherAgent.aforward", DSPY_SCOPE, True, "WeatherAgent"),  # its async run
    ("WeatherAgent.forward", "", True, "WeatherAgent"),  # no scope: DSPy's own span names
    ("WeatherAgent.forward", DSPY_SCOPE, False, "WeatherAgent"),  # the scope alone
    ("WeatherAgent.forward", "other.instrumentation", False, None),  # no DSPy marker
    ("ReAct.forward", DSPY_SCOPE, True, None),  # DSPy's classes: framework defaults
    ("ChainOfThought.forward", DSPY_SCOPE, True, None),
    ("Predict(StringSignature).forward", DSPY_SCOPE, True, None),
    ("Module.forward", DSPY_SCOPE, True, None),
    ("WeatherAgent.__call__", DSPY_SCOPE, True, None),  # no module's run
    ("Weather Agent.forward", DSPY_SCOPE, True, None),  # no class name
])
def test_the_users_module_names_the_agent(root: str, scope: str, marked_child: bool,
                                          agent: str | None) -> None:
    t = _run(root, scope=scope, marked_child=marked_child)
    assert t.agent == agent
    assert t.agent_source == ("span" if agent else "unknown")
    kinds = [s.kind for s in t.steps]
    assert kinds.count("agent") == (1 if agent else 0), kinds
    if agent:
        assert t.steps[0].kind == "agent" and t.steps[0].node == agent
        assert all(s.node == agent for s in t.steps)
        assert "DSPy" in t.steps[0].sources["agent_name"]


def test_the_outermost_module_of_the_users_is_the_agent() -> None:
    """A module of the user's inside another: the outer one is the run's agent, the inner one
    stays a chain step of it."""
    t = _run("Pipeline.forward", inner="Summarizer.forward")
    assert t.agent == "Pipeline"
    assert [s.kind for s in t.steps[:2]] == ["agent", "chain"]


@pytest.mark.parametrize(("output", "answer"), [
    (_PREDICTION, "It is sunny in Paris."),                 # the Prediction's answer field
    (json.dumps({"reasoning": "r", "answer": "Sunny."}), "Sunny."),  # ChainOfThought's
    (json.dumps({"answer": 42}), None),                      # no text: unknown
    (json.dumps({"response": "Sunny."}), None),              # no answer field: unknown
    ("It is sunny in Paris.", None),                         # no Prediction: unknown
    ('{"answer": "Sunny."', None),                           # cut JSON: unknown
    (None, None),                                            # not recorded
])
def test_the_runs_answer_is_the_predictions_answer(output: str | None,
                                                   answer: str | None) -> None:
    """Never the whole Prediction, and never the LM's template text in its place."""
    t = _run("WeatherAgent.forward", output=output)
    assert t.output == answer
    assert ("output" in t.unrecorded) == (answer is None)
    root = t.steps[0]
    if answer is not None:
        assert root.sources["result"].endswith("(the DSPy Prediction's answer)")
    elif output is not None:
        assert "result" in root.unknown and "result" not in root.sources


def test_a_builtin_module_root_still_gives_the_predictions_answer() -> None:
    """A ``dspy.ReAct`` run directly: no agent's name, the answer read all the same."""
    t = _run("ReAct.forward", inner="ChainOfThought.forward")
    assert t.agent is None
    assert t.output == "It is sunny in Paris."


def test_a_prediction_shaped_output_outside_dspy_is_taken_as_carried() -> None:
    """The reading is DSPy's: another framework's CHAIN root with the same JSON is not read."""
    t = _run("WeatherAgent.forward", scope="other.instrumentation", marked_child=False)
    assert t.output == _PREDICTION


@pytest.mark.parametrize(("name", "scope", "marked"), [
    ("Predict.forward", "", True),
    ("Predict(StringSignature).forward", "", True),
    ("ChatAdapter.__call__", "", True),
    ("JSONAdapter.__call__", "", True),
    ("LM.__call__", "", True),
    ("anything", DSPY_SCOPE, True),
    ("MyAdapter.__call__", "", False),
    ("Predict.forward.x", "", False),
    ("Predict(" + "S" * 300 + ").forward", "", False),  # bounded: longer names are no marker
    ("completion", "openinference.instrumentation.litellm", False),
])
def test_dspy_markers(name: str, scope: str, marked: bool) -> None:
    assert dspy_marked(_scoped(span(name), scope)) is marked


@pytest.mark.parametrize(("name", "attrs", "module_class"), [
    ("WeatherAgent.forward", _CHAIN, "WeatherAgent"),
    ("Predict(StringSignature).forward", _CHAIN, "Predict"),
    ("WeatherAgent.forward", {"openinference.span.kind": "AGENT"}, None),
    ("get_weather.__call__", {"openinference.span.kind": "TOOL"}, None),
    ("forward", _CHAIN, None),
    (".forward", _CHAIN, None),
    ("WeatherAgent.forward", {}, None),
])
def test_dspy_module(name: str, attrs: dict[str, Any], module_class: str | None) -> None:
    assert dspy_module(span(name, attrs=attrs), attrs) == module_class


@pytest.mark.parametrize(("module_class", "agent"), [
    ("WeatherAgent", "WeatherAgent"), ("react", None), ("ReAct", None), ("BestOfN", None),
    ("Refine", None), ("ProgramOfThought", None), ("Agent", None), ("", None), (None, None),
])
def test_dspy_agent_name(module_class: str | None, agent: str | None) -> None:
    assert dspy_agent_name(module_class) == agent


@pytest.mark.parametrize(("value", "answer"), [
    ('{"answer": "Sunny."}', "Sunny."), ('{"answer": null}', None), ('["answer"]', None),
    ("answer", None), (None, None), ("", None),
])
def test_prediction_answer(value: str | None, answer: str | None) -> None:
    assert prediction_answer(value) == answer


@pytest.mark.parametrize(("parent_kind", "nested_agent"), [
    ("TOOL", True),    # a module of the user's run by a ReAct tool: a sub-agent
    ("CHAIN", False),  # a module of the user's inside the agent: a part of it
])
def test_a_module_a_tool_runs_is_a_sub_agent(parent_kind: str, nested_agent: bool) -> None:
    """The multi_agent recording: TriageAgent's ReAct calls ask_weather_agent, whose TOOL span
    runs WeatherAgent.forward; the weather agent's calls are its own."""
    tool = {"openinference.span.kind": "TOOL", "tool.name": "get_weather"}
    spans = [span("TriageAgent.forward", attrs={**_CHAIN, "output.value": _PREDICTION}),
             span("ReAct.forward", "TriageAgent.forward", start=1, attrs=dict(_CHAIN)),
             span("ask", "ReAct.forward", start=2, attrs={
                 "openinference.span.kind": parent_kind, "tool.name": "ask_weather_agent"}),
             span("WeatherAgent.forward", "ask", start=3,
                  attrs={**_CHAIN, "output.value": _PREDICTION}),
             span("get_weather.__call__", "WeatherAgent.forward", start=4, attrs=tool)]
    t = build_trajectory(trace(*[_scoped(s, DSPY_SCOPE) for s in spans]), TrajectoryConfig())
    assert t.agent == "TriageAgent"
    calls = {s.tool_name: s.node for s in t.steps if s.kind == "tool"}
    assert calls["get_weather"] == ("WeatherAgent" if nested_agent else "TriageAgent")
