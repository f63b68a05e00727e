"""Tool-call detector (stage: evaluate): wrong tool vs wrong arguments vs failed execution.

Against the tool definitions the model was offered (``Trajectory.tools``): a call to a tool
that was not offered is a *selection* error; arguments that are not JSON or fail the tool's
JSON schema (missing required, wrong type, unknown parameter, ...) are an *argument* error
naming the violated constraint; a failed execution (span error, error payload) is a
*runtime* error. A call of a tool not offered that no step ran (the framework answered the
model with an error) is a selection error on the LLM step that asked for it; the arguments
of a call no step ran are checked there too (a framework that refused them ran nothing).
A call's arguments are checked against the definition its own agent was offered
(``Trajectory.offered_to``); a schema only another agent's offer recorded is no schema for
it (ADK offers each agent its own transfer_to_agent, its enum the agents that one may hand
to), and a tool's own span's description is one only where no offer gave that name a schema.
Without tool definitions, selection and argument checks are skipped; so is
selection for a tool step whose tool no attribute named (its name is a guess from the span's
name: ``step.sources["tool_name"] == "span name"``): an unrecorded name is unknown, never a
tool that was not offered; and selection for a call by an agent (``Step.agent_scope``) none of
whose spans recorded what it was offered (``Trajectory.offered_to``): in a multi-agent run, the
coordinator's offer says nothing of the sub-agent's.
Arguments and schemas are compared in Unicode NFC (a text composed or decomposed is one text,
as the reference detector compares arguments; ``canonical.nfc``). Validation itself is
``detectors.schema`` (no retrieval, RE2 patterns, bounded work); what it
could not check (an unresolvable or recursive ``$ref``, an invalid schema, a pattern RE2
cannot run, the step limit) is a ``schema`` warning: the schema is the application's, so it
does not fail the agent's verdict, but it is counted and said.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from otel_eval.base.results import Finding
from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.detectors.calls import Context, is_action_tool, result_failed
from otel_eval.evaluate.detectors.canonical import nfc
from otel_eval.evaluate.detectors.config import DetectorsConfig, ToolCallConfig
from otel_eval.evaluate.trajectory.links import as_offered

if TYPE_CHECKING:  # schema imports jsonschema and RE2: loaded when a tool offers a schema
    from otel_eval.evaluate.detectors.schema import Budget, Check


def parameters_schema(definition: Any) -> Mapping[str, Any] | None:
    """The JSON schema of a tool's parameters, from the common definition shapes."""
    if not isinstance(definition, Mapping):
        return None
    if isinstance(definition.get("function"), Mapping):  # OpenAI {"type": "function", ...}
        definition = definition["function"]
    for key in ("parameters", "input_schema", "inputSchema", "schema"):
        inner = definition.get(key)
        if isinstance(inner, Mapping):
            return inner
    if "properties" in definition or definition.get("type") == "object":
        return definition
    return None


def argument_problems(arguments: Any, schema: Mapping[str, Any], reject_unknown: bool,
                      budget: Budget | None = None) -> tuple[list[dict[str, str]], Check]:
    """Violations of ``schema`` by ``arguments``: [{constraint, path, message}], best first,
    and the schema check (its ``trouble`` says what could not be checked)."""
    from otel_eval.evaluate.detectors.schema import Check, check_arguments

    if arguments is None:  # not recorded: nothing to check
        return [], Check()
    if isinstance(arguments, str):
        return [{"constraint": "json", "path": "", "message": "arguments are not valid JSON"}], \
            Check()
    args = arguments
    check = check_arguments(args, schema, budget)
    problems = list(check.problems)
    props = schema.get("properties")
    if (reject_unknown and isinstance(args, Mapping) and isinstance(props, Mapping)
            and "additionalProperties" not in schema):
        unknown = set(args) - set(props)  # then in NFC: only names not found as written
        for name in sorted(set(nfc(list(unknown))) - set(nfc(list(props))) if unknown
                           else (), key=str):
            problems.append({"constraint": "additionalProperties", "path": "",
                             "message": f"unknown parameter {name!r}"[:200]})
    return problems, check


def _offered_as(name: str, offered: Mapping[str, Any]) -> bool:
    """Whether a tool step's ``name`` is an offered tool's display name, the model having
    been offered it by a function name made of it (CrewAI runs its "Delegate work to coworker"
    tool, offered as ``delegate_work_to_coworker``; ``links.as_offered``, as the join reads it)."""
    words = as_offered(name)
    return any(as_offered(n) == words for n in offered)


def _selection(step: Step, name: str, offered: Mapping[str, Any],
               cfg: ToolCallConfig) -> Finding:
    return Finding("tool_call", "selection", cfg.selection_severity,
                   f"called {name}, which was not offered"[:300],
                   [step.span_id], [step.index],
                   {"tool": name, "offered": sorted(offered)[:50]})


def _arguments(step: Step, name: str, problems: list[dict[str, str]],
               cfg: ToolCallConfig) -> Finding:
    first = problems[0]
    where = f" at {first['path']}" if first["path"] else ""
    return Finding("tool_call", "arguments", cfg.argument_severity,
                   f"{name}: invalid arguments ({first['constraint']}{where}: "
                   f"{first['message']})"[:300], [step.span_id], [step.index],
                   {"tool": name, "constraint": first["constraint"], "problems": problems[:10]})


def _schema(step: Step, name: str, check: Check) -> Finding:
    return Finding("tool_call", "schema", "warning",
                   f"{name}: arguments not fully checked against its schema "
                   f"({check.trouble}: {check.detail})"[:300], [step.span_id], [step.index],
                   {"tool": name, "reason": check.trouble, "detail": check.detail})


def check_step(step: Step, offered: Mapping[str, Any], config: DetectorsConfig,
               budget: Budget | None, offer_known: bool, definition: Any) -> list[Finding]:
    """The findings of one call; ``offer_known``: what the calling agent was offered was
    recorded (else a tool absent from ``offered`` was offered to it unsaid, maybe);
    ``definition``: the tool's definition its arguments are checked against (``_definition``;
    None: unknown)."""
    cfg = config.tool_call
    name = step.tool_name or step.name
    action = is_action_tool(name, config.loop)
    recorded = bool(step.tool_name) and step.sources.get("tool_name") != "span name"
    out = []
    if offered and name not in offered and not action:
        if recorded and offer_known and not _offered_as(name, offered):
            out.append(_selection(step, name, offered, cfg))
    elif definition is not None:
        schema = parameters_schema(definition)
        if schema is not None:
            problems, check = argument_problems(step.arguments, schema,
                                                cfg.reject_unknown_parameters, budget)
            if problems:
                out.append(_arguments(step, name, problems, cfg))
            if check.trouble is not None:
                out.append(_schema(step, name, check))
    failure = result_failed(step, action, cfg)
    if failure is not None:
        out.append(Finding("tool_call", "runtime", cfg.runtime_severity,
                           f"{name} failed: {failure}"[:300], [step.span_id], [step.index],
                           {"tool": name, "error": failure}))
    return out


def detect(trajectory: Trajectory, config: DetectorsConfig, context: Context) -> list[Finding]:
    out: list[Finding] = []
    budget = None  # schema work shared by all calls of this trajectory; schemas come only
    if trajectory.tools:  # from offered tools, so a run without any imports no validator
        from otel_eval.evaluate.detectors.schema import Budget

        budget = Budget()
    known, tools = trajectory.offered_to, trajectory.tools
    offered = {n: s for n, s in tools.items() if n not in trajectory.unoffered} \
        if trajectory.unoffered else tools
    with_schema = _offered_with_schema(known)
    for step in trajectory.tool_steps:
        name = step.tool_name or step.name
        # ``Step.agent_scope``, inlined: read for every call of every run
        own = known.get((step.node, step.within_unknown))
        out += check_step(step, offered, config, budget, own is not None,
                          _definition(name, own, tools, with_schema))
    if offered:
        out += _unran_selection(trajectory, offered, config)
    if tools:
        out += _unran_arguments(trajectory, tools, config, budget, with_schema)
    return out


def _offered_with_schema(offered_to: Mapping[Any, Mapping[str, Any]]) -> set[str]:
    """The tool names some agent's offer recorded a schema for."""
    return {name for tools in offered_to.values() for name, schema in tools.items() if schema}


def _definition(name: str, own: Mapping[str, Any] | None, tools: Mapping[str, Any],
                with_schema: set[str]) -> Any:
    """The definition a call of ``name`` is checked against: the one its own agent was
    offered (``own``); else none when another agent's offer gave that name a schema (it may
    be that agent's alone: ADK offers each agent its own transfer_to_agent, its enum the
    agents it may hand to); else the one known by that name (a tool's own span's
    description)."""
    if own:
        schema = own.get(name)
        if schema:
            return schema
    return None if name in with_schema else tools.get(name)


def _unran_arguments(trajectory: Trajectory, schemas: Mapping[str, Any], config: DetectorsConfig,
                     budget: Budget | None, with_schema: set[str]) -> list[Finding]:
    """Arguments of calls no step ran, checked on the LLM step that asked: a framework that
    refuses arguments before running the tool (smolagents' schema check, LangChain.js's)
    answers the model with an error and records no tool span, so no tool step is checked.
    Only calls the join says never ran (``never_ran``): one that ran, or was rebuilt as a step,
    is checked on that step; and only by an agent whose offer some span recorded, as for
    selection, against the definition ``_definition`` gives."""
    out = []
    cfg, known = config.tool_call, trajectory.offered_to
    for step in trajectory.steps:
        if step.kind != "llm" or not step.tool_calls:
            continue
        own = known.get((step.node, step.within_unknown))
        if own is None:
            continue
        for call in step.tool_calls:
            if call.outcome != "never_ran":
                continue
            schema = parameters_schema(_definition(call.name, own, schemas, with_schema))
            if schema is None:
                continue
            problems, check = argument_problems(call.arguments, schema,
                                                cfg.reject_unknown_parameters, budget)
            if problems:
                out.append(_arguments(step, call.name, problems, cfg))
            if check.trouble is not None:
                out.append(_schema(step, call.name, check))
    return out


def _unran_selection(trajectory: Trajectory, offered: Mapping[str, Any],
                     config: DetectorsConfig) -> list[Finding]:
    """Calls of a tool not offered that no step ran: a framework that has no such tool
    answers the model with an error and runs nothing (LangGraph's ToolNode, smolagents,
    pydantic-ai), so no tool step is checked; the call the model asked for is, on its LLM
    step. A call that ran, or was rebuilt as a step, is checked on that step."""
    known, out = trajectory.offered_to, []
    # a call naming an agent of the run ran as that agent's steps (smolagents' managed
    # agents are offered to the model as tools and recorded in no tool list); a later step
    # of unknown kind may have run it (an agent, a tool: its marker unknown), and so may a
    # later step whose parent span is not in the trace (sampled out, filtered: the managed
    # agent's own span, its steps left). Two passes, no call per step: this runs for every
    # run with an offer.
    agents: set[str | None] = set()
    asking: list[Step] = []
    ids: set[str] = set()
    last_unknown = -1
    for s in trajectory.steps:
        ids.add(s.span_id)
        if s.kind == "agent":
            agents.add(s.node)
        elif s.kind == "llm" and s.tool_calls:
            asking.append(s)
        if "kind" in s.unknown:  # ``Step.kind_unknown``, inlined
            last_unknown = s.index
    for s in trajectory.steps:
        if s.parent_span_id is not None and s.parent_span_id not in ids:
            last_unknown = max(last_unknown, s.index)
    for step in asking:
        if (step.node, step.within_unknown) not in known or step.index < last_unknown:
            continue
        for call in step.tool_calls:
            if not call.name.strip():  # a name recorded empty is unknown, no tool's
                continue
            if call.outcome in ("ran", "rebuilt") or call.name in offered \
                    or call.name in agents or is_action_tool(call.name, config.loop):
                continue
            out.append(_selection(step, call.name, offered, config.tool_call))
    return out
