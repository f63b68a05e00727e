"""Stage: trajectory (part). Which values that name an agent are names, and which are the
default a framework writes when the user gave the agent none.

A default is no name: every unnamed agent of every service using that framework carries it,
so a run labelled with it cannot be told from another agent's (its metrics, alerts and
per-agent settings would mix them). ``agent_name`` turns a default into None, and the run's
agent is then read elsewhere (a span under it, the service's history) or stays unknown.

``FRAMEWORK_DEFAULT_AGENT_NAMES``, compared without case and surrounding space:

    OpenAI Agent     opentelemetry-instrumentation-openai-agents-v2 (``agent_name_default``)
    Agent workflow   the OpenAI Agents SDK's default trace (workflow) name
    Agent            LlamaIndex's FunctionAgent / ReActAgent default ``name``
    agent            pydantic-ai's name for an unnamed Agent; LangGraph's ReAct node
    LangGraph        LangGraph's default name of a compiled graph
    AgentExecutor    LangChain's AgentExecutor run name
    CodeAgent, ToolCallingAgent, MultiStepAgent   smolagents' class names (``<class>.run``
                     spans of an agent given no ``name=``)
    invoke_agent     the GenAI operation alone, as the span name of an agent with no name
    Crew             CrewAI's default crew name (``Crew.kickoff``)
    FunctionAgent, ReActAgent, CodeActAgent, AgentWorkflow   LlamaIndex's agent classes
                     (Traceloop's LlamaIndex instrumentation names the run
                     ``<class>.workflow``)

``DSPY_MODULE_CLASSES``: DSPy's own module classes (``dspy.ReAct``, ``dspy.ChainOfThought``,
``dspy.Predict``, ...). OpenInference's DSPy instrumentation names a module's span
``<class>.forward``: the class of a module the user wrote (``class WeatherAgent(dspy.Module)``)
names the agent, one of DSPy's is the framework's default (``dspy_agent_name``). Only read on
spans recognised as DSPy's (``openinference.dspy_module``).

``delegated_agent``: CrewAI's coworker tools (``Delegate work to coworker``, ``Ask question to
coworker``, what ``allow_delegation`` gives an agent) run the coworker their ``coworker``
argument names, with no agent span of its own under OpenInference: the steps under such a
tool's span are that agent's.
"""

from __future__ import annotations

__all__ = ["DELEGATION_TOOLS", "DSPY_MODULE_CLASSES", "FRAMEWORK_DEFAULT_AGENT_NAMES",
           "MAX_AGENT_NAME", "TOOL_CALL_METHODS", "WRAPPER_METHODS", "agent_name",
           "delegated_agent", "dspy_agent_name", "from_span_name", "tool_from_span_name"]

FRAMEWORK_DEFAULT_AGENT_NAMES = frozenset({
    "openai agent", "agent workflow", "agent", "langgraph", "agentexecutor", "codeagent",
    "toolcallingagent", "multistepagent", "invoke_agent", "crew",
    "functionagent", "reactagent", "codeactagent", "agentworkflow",
})
# DSPy's module classes (dspy 3.x ``dspy.predict`` and ``dspy.retrieve``; older releases'
# ChainOfThoughtWithHint, Retry), compared without case: a span of one is no agent's name.
DSPY_MODULE_CLASSES = frozenset({
    "module", "predict", "chainofthought", "chainofthoughtwithhint", "react", "programofthought",
    "multichaincomparison", "bestofn", "refine", "parallel", "retrieve", "codeact", "avatar",
    "retry", "knn", "rlm",
})
# Methods a framework names an agent's span after, as ``<agent>.<method>``: the agent is
# what comes before (smolagents ``<name>.run``, OpenLLMetry ``<name>.agent``, CrewAI under
# OpenInference ``<role>._execute_core`` / ``<crew>.kickoff``, ``execute_task``; AutoGen
# AgentChat under OpenInference ``<agent>.on_messages_stream``; LlamaIndex's agent class under
# Traceloop ``<class>.workflow``).
WRAPPER_METHODS = frozenset({
    "run", "arun", "agent", "_execute_core", "kickoff", "kickoff_async", "execute_task",
    "invoke", "ainvoke", "__call__", "_run", "run_stream", "on_messages", "on_messages_stream",
    "workflow",
})
# Characters kept of an agent name (span content: a name is a label, not a document).
MAX_AGENT_NAME = 256


def from_span_name(name: str) -> str:
    """The agent a span name stands for: ``invoke_agent <agent>`` (GenAI), ``<agent>.<method>``
    for a method of ``WRAPPER_METHODS``; else the span name itself."""
    if name.startswith("invoke_agent "):
        return name[len("invoke_agent "):] or name
    head, dot, method = name.rpartition(".")
    if dot and head and method in WRAPPER_METHODS:
        return head
    return name


# The call methods a tool span is named after, as ``<tool>.<method>`` (OpenInference's DSPy
# instrumentation: ``get_weather.__call__``, ``get_weather.acall``; no tool.name attribute).
TOOL_CALL_METHODS = frozenset({"__call__", "acall"})


def tool_from_span_name(name: str) -> str:
    """The tool a tool span's name stands for: ``<tool>.<call method>``'s tool, else the span
    name itself."""
    head, dot, method = name.rpartition(".")
    return head if dot and head and method in TOOL_CALL_METHODS else name


def agent_name(value: str | None) -> str | None:
    """``value`` when it names an agent; None when it is empty or a framework's default."""
    if not value:
        return None
    stripped = value.strip()
    if not stripped or stripped.casefold() in FRAMEWORK_DEFAULT_AGENT_NAMES:
        return None
    return value[:MAX_AGENT_NAME]


# CrewAI's delegation tools, by the name their spans carry and the model's spelling of it
DELEGATION_TOOLS = frozenset({"Delegate work to coworker", "Ask question to coworker",
                              "delegate_work_to_coworker", "ask_question_to_coworker"})


def delegated_agent(arguments: object) -> str | None:
    """The agent a CrewAI delegation tool's call runs: its ``coworker`` argument, when it is a
    name (``agent_name``)."""
    coworker = arguments.get("coworker") if isinstance(arguments, dict) else None
    return agent_name(coworker) if isinstance(coworker, str) else None


def dspy_agent_name(module_class: str | None) -> str | None:
    """The agent a DSPy module's class names: None for one of DSPy's own classes
    (``DSPY_MODULE_CLASSES``) or a framework default, else ``agent_name``'s."""
    if not module_class or module_class.strip().casefold() in DSPY_MODULE_CLASSES:
        return None
    return agent_name(module_class)
