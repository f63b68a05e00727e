"""Stage: trajectory. ``model.Trace`` -> ``steps.Trajectory`` (the normalized agent run).

Each span is read into a step (``_Builder``, with the readers of ``conventions``), then the
passes run over the steps in the one order of ``passes.PASSES``; the run's agent, input and
output are read last. Promises:
- every span of the trace appears exactly once as a step, with its own span id, in tree
  order: depth first, siblings by start time; spans whose parent is missing (orphans) follow
  the root tree at top level in start order; spans caught in a parent cycle follow those;
- spans repeating an earlier span id are dropped (the first one received is kept);
- each step is classified by the convention cascade in ``otel_eval.evaluate.conventions``, its
  fields read from every convention on its span (``conventions.fields``: per field, sources
  in ``Step.sources``), and belongs to a node: the name of the nearest enclosing agent;
- GenAI events sent as log records (``Trace.logs``) or carried as span events are read as if
  their span carried them as attributes (``conventions.events``);
- the envelopes frameworks record around a tool's arguments are taken off
  (``trajectory.envelopes``), and arguments that are not understood are unknown, never a
  call's arguments (``trajectory.arguments``: ``unrecorded["unparsed"]``); so are tool
  results and LLM outputs in a shape no reader understands, a Python repr or a serialized
  object (``trajectory.shapes``), then looked up where the LLM was told the result;
- a tool span directly under a tool span is no call of its own when it is the same call
  recorded twice (same tool: its fields go to the outer step) or the call's error event
  (OpenInference, named ``error``, no tool name, in error: BeeAI): kind ``other``, its error
  the outer step's (``trajectory.links.merge_nested_calls``); so is an MCP client's
  ``tools/call`` span beside the framework's span of the same call;
- tool steps are joined to the LLM tool call they ran (``trajectory.links``: by call id, else
  by name in order), and take its arguments when their own were not recorded, and their
  result from the next LLM call's tool message when the tool span carries none;
- tool calls that exist only inside LLM output messages are rebuilt as tool steps right after
  their LLM step (``rebuilt=True``, same span id) when no tool step ran them and either the
  trace's tool steps carry call ids (so a call no tool step claims did not run as a span), or
  a later LLM call was told its result (it ran, its span was lost), or no tool span exists
  under that agent and none comes from the LLM step's convention: an instrumentation that
  emits tool spans is trusted to emit them (smolagents' ToolCallingAgent answers through a
  ``final_answer`` call that has no span and no result); a rebuilt step's
  result is what a later LLM step of the same agent was told the call returned, found in
  time linear in the trace's bytes (``trajectory.responses``);
- tool calls made by code actions (Python blocks of smolagents' CodeAgent, the bash block of
  mini-swe-agent) that no span ran are rebuilt the same way (``trajectory.code_actions``),
  what was read counted in ``Trajectory.code_actions``;
- the root is ``model.local_root`` (``root_span_id``, ``root_step``), the span results are
  attached to ``model.run_span_id``; the agent is the top agent, descending through wrapper
  agents that do no work of their own (the OpenAI Agents SDK's ``Agent workflow``); its
  name, unless a framework's default (``conventions.agent_names``: never an agent's name),
  else the name that spans under a never-exported agent span carry (``agent_source`` span /
  child_span; unknown when neither: the evaluator may still infer it from the service's
  history, ``otel_eval.evaluate.agent_inference``); in a DSPy trace (every module a CHAIN
  span: ``conventions.openinference``), the outermost module of a class of the user's outside
  every agent is an agent step named by its class (``<Class>.forward``), and a DSPy module's
  result is its Prediction's ``answer`` (another value is unknown, and so is the run's output);
- input/output come from the agent (or root) span, else from the LLM messages (the output is
  the last LLM answer when the agent's result only wraps it, as a graph state or a repr);
  what no span recorded is listed in ``Trajectory.unrecorded`` and stays None;
- an LLM step with model and tokens but no cost is priced from litellm's packaged table;
- the conversation id and user come from every convention that carries one, in the one
  order of ``conventions.conversations`` (``session_id``, ``user_id``);
- never raises on span content; message text stays a raw string.

A trace is an agent run unless every span of it is a setup operation by its convention
(``is_run``: GenAI ``create_agent``, the span some frameworks make when the agent object is
built, in a trace of its own before any invocation). Such a trace is not evaluated at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from otel_eval.base.model import LogEvent, Span, Trace, local_root, run_span_id
from otel_eval.base.steps import AgentSource, Step, Trajectory
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.conventions import (
    UNKNOWN,
    classify,
    dominant,
    is_setup,
    merge_tools,
    read_span,
)
from otel_eval.evaluate.conventions.agent_names import (
    MAX_AGENT_NAME,
    agent_name,
    dspy_agent_name,
)
from otel_eval.evaluate.conventions.conversations import Conversation
from otel_eval.evaluate.conventions.events import overlay, span_events
from otel_eval.evaluate.conventions.fields import merged_agent_name
from otel_eval.evaluate.conventions.messages import (
    answer_of,
    messages,
    request_text,
    task_of,
)
from otel_eval.evaluate.conventions.openinference import (
    dspy_marked,
    dspy_module,
    prediction_answer,
    stamped_agent_name,
)
from otel_eval.evaluate.conventions.openllmetry import llamaindex_agent_name
from otel_eval.evaluate.conventions.values import as_str, first
from otel_eval.evaluate.trajectory.passes import Draft, run_passes

__all__ = ["build_trajectory", "is_run", "tree_order"]

# Attributes that name the enclosing agent on the spans under it (current OpenLLMetry, older
# Traceloop SDKs, the Vercel AI SDK): read for spans outside any agent span that arrived.
_STAMPED_AGENT_KEYS = ("gen_ai.agent.name", "traceloop.workflow.name", "ai.telemetry.functionId")


def _stamped_name(attrs: Any) -> str | None:
    """The agent's name stamped on a span of its run: a key of ``_STAMPED_AGENT_KEYS``, else
    LangChain's ``metadata.lc_agent_name`` (under OpenInference), else a LlamaIndex agent
    workflow step's ``current_agent_name`` (under Traceloop's instrumentation)."""
    if not attrs.keys().isdisjoint(_STAMPED_AGENT_KEYS):
        return as_str(first(attrs, *_STAMPED_AGENT_KEYS))
    return stamped_agent_name(attrs) or llamaindex_agent_name(attrs)


def _dedupe(spans: Iterable[Span]) -> list[Span]:
    seen: set[str] = set()
    out = []
    for span in spans:
        if span.span_id not in seen:
            seen.add(span.span_id)
            out.append(span)
    return out


def _start(span: Span) -> int:
    return span.start_ns


def tree_order(spans: list[Span]) -> list[tuple[Span, int]]:
    """(span, depth) for unique-id ``spans`` in tree order (see module docstring)."""
    ids = {s.span_id for s in spans}
    children: dict[str, list[Span]] = {}
    tops: list[Span] = []
    orphans: list[Span] = []
    for span in spans:
        parent = span.parent_span_id
        if span.is_entry:
            tops.append(span)
        elif parent in ids and parent != span.span_id:
            children.setdefault(parent, []).append(span)
        else:
            orphans.append(span)
    for group in children.values():
        group.sort(key=_start)
    tops.sort(key=_start)
    orphans.sort(key=_start)
    out: list[tuple[Span, int]] = []
    visited: set[str] = set()

    def walk(starts: list[Span]) -> None:
        stack = [(s, 0) for s in reversed(starts)]
        while stack:
            span, depth = stack.pop()
            if span.span_id in visited:
                continue
            visited.add(span.span_id)
            out.append((span, depth))
            kids = children.get(span.span_id)
            if kids:
                below = depth + 1
                stack.extend([(k, below) for k in reversed(kids)])

    walk(tops)
    walk(orphans)
    if len(visited) < len(spans):  # parent cycles: unreachable from any top
        walk(sorted((s for s in spans if s.span_id not in visited), key=_start))
    return out


class _Builder:
    """One pass over the spans in tree order; keeps the enclosing agent of every span."""

    def __init__(self, config: TrajectoryConfig, logs: list[LogEvent],
                 spans: list[Span]) -> None:
        self.spans = spans  # the trace's (deduplicated) spans
        self.task_key = config.task_id_attribute
        self.logs: dict[str, list[LogEvent]] = {}
        for record in logs:
            self.logs.setdefault(record.span_id, []).append(record)
        self.steps: list[Step] = []
        self.tools: dict[str, Any] = {}
        self.task_id: str | None = None
        # span id -> (node name, id of the nearest agent span at or above it)
        self.scope: dict[str, tuple[str | None, str | None]] = {}
        self.agent_attrs: dict[str, Any] = {}  # agent span id -> its attributes
        self.agent_parent: dict[str, str | None] = {}  # agent span id -> enclosing agent
        self.agents_with_tools: set[str | None] = set()
        self.conventions_with_tools: set[str] = set()
        self.errors: list[dict[str, str]] = []  # spans an adapter failed on (see ``add``)
        self.tool_ids = False  # some tool step carries a call id
        self.work: dict[str | None, int] = {}  # agent span id -> its own llm/tool steps
        # the first agent name stamped on a non-agent span (not a framework default), and
        # whether that span was outside every agent span that arrived
        self.named_agent: str | None = None
        self.named_outside = False
        self.unnamed: set[str] = set()  # agent spans carrying only a framework default name
        self.conversation = Conversation()  # the turn's conversation id and user
        self.dspy: bool | None = None  # the trace carries DSPy's markers (None: not looked)
        self.dspy_modules: set[str] = set()  # DSPy module spans outside every agent

    def add(self, span: Span, depth: int) -> None:
        """``_add`` under an error boundary: a span whose content breaks a convention adapter
        still becomes a (plain) step, and the failure goes to ``errors`` (reported as an
        ``evaluation_error`` finding: issue 11)."""
        count = len(self.steps)
        try:
            self._add(span, depth)
        except Exception as e:
            del self.steps[count:]
            self.errors.append({"part": f"conventions.{_adapter_name(span)}",
                                "span_id": span.span_id, "error": type(e).__name__})
            if span.span_id not in self.scope:
                self.scope[span.span_id] = self.scope.get(span.parent_span_id or "",
                                                          (None, None))
            self.steps.append(Step(count, span.span_id, span.parent_span_id, "other",
                                   span.name, node=self.scope[span.span_id][0], depth=depth,
                                   start_ns=span.start_ns, end_ns=span.end_ns))

    def _add(self, span: Span, depth: int) -> None:
        attrs = span.attributes
        records = self.logs.get(span.span_id)
        own = span_events(span)
        if records or own:
            attrs = overlay(attrs, [*(records or ()), *own])
        step = Step(len(self.steps), span.span_id, span.parent_span_id, "other", span.name,
                    depth=depth, start_ns=span.start_ns, end_ns=span.end_ns)
        adapter, found = read_span(step, span, attrs)
        self.conversation.read(attrs)
        if records or own:
            _from_events(step, span.attributes, attrs, "log records" if records else "span events")
        node, agent = self.scope.get(span.parent_span_id or "", (None, None))
        module = (self._dspy_module(step, span, attrs)
                  if agent is None and step.kind == "chain" else None)
        if step.kind != "agent":
            self._stamped(attrs, outside=node is None)
            if node is None:
                # outside any agent span that arrived, but stamped with its name
                # (OpenLLMetry, the Vercel AI SDK): the agent's name, also when its span
                # never arrived
                node = _stamped_name(attrs)
        if step.kind == "agent":
            name = module
            if name is None and adapter is not None:
                enclosing = self.agent_attrs.get(agent) if agent else None
                name, source = merged_agent_name(span, attrs, enclosing, found)
                step.sources["agent_name"] = source
            self.agent_parent[span.span_id] = agent
            self.agent_attrs[span.span_id] = attrs
            node, agent = name or span.name, span.span_id
            if agent_name(node) is None:
                self.unnamed.add(span.span_id)
        self.scope[span.span_id] = (node, agent)
        step.node = node
        if step.kind == "tool":
            self._mark_tools(agent)
            self.conventions_with_tools.add(step.convention)
            self.tool_ids = self.tool_ids or step.call_id is not None
        if step.kind in ("llm", "tool"):
            self.work[agent] = self.work.get(agent, 0) + 1
        for reader in found:
            offered = reader.tools(attrs)
            if offered:
                merge_tools(self.tools, offered)
        if self.task_id is None:
            task = attrs.get(self.task_key)
            if task is None:
                task = span.resource.get(self.task_key)
            self.task_id = as_str(task)
        self.steps.append(step)

    def _dspy_module(self, step: Step, span: Span, attrs: Any) -> str | None:
        """A DSPy module's run outside every agent (``openinference.dspy_module``, in a trace
        carrying DSPy's markers): its result is its Prediction's ``answer`` (any other value
        is unknown); one of a class of the user's becomes an agent step, the outermost one
        the run's agent, named by the class (returned)."""
        module_class = dspy_module(span, attrs)
        if module_class is None or not self._is_dspy(span):
            return None
        self.dspy_modules.add(span.span_id)
        answer = prediction_answer(step.result)
        if answer is not None:
            step.sources["result"] = "openinference output.value (the DSPy Prediction's answer)"
        elif step.result is not None:
            step.sources.pop("result", None)
            step.unknown["result"] = "output.value is no DSPy Prediction with an answer field"
        step.result = answer
        name = dspy_agent_name(module_class)
        if name is not None:
            step.kind = "agent"
            step.sources["agent_name"] = ("openinference span name (<Class>.forward of a DSPy "
                                          "module of the user's)")
        return name

    def _is_dspy(self, span: Span) -> bool:
        """Whether the span or, once looked at, any span of the trace carries DSPy's own
        markers (``openinference.dspy_marked``)."""
        if self.dspy is None:
            self.dspy = dspy_marked(span) or any(dspy_marked(s) for s in self.spans)
        return self.dspy

    def _stamped(self, attrs: Any, outside: bool) -> None:
        """Keep the first real agent name stamped on a non-agent span (one outside every
        agent span wins over one inside)."""
        if self.named_agent is not None and (self.named_outside or not outside):
            return
        name = agent_name(_stamped_name(attrs))
        if name is not None:
            self.named_agent, self.named_outside = name, outside

    def _mark_tools(self, agent: str | None) -> None:
        while agent not in self.agents_with_tools:
            self.agents_with_tools.add(agent)
            if agent is None:
                return
            agent = self.agent_parent.get(agent)


def _from_events(step: Step, own: Any, attrs: Any, origin: str) -> None:
    """Say in ``Step.sources`` which fields were read from GenAI events, not attributes."""
    for name, source in step.sources.items():
        key = source.rpartition(" ")[2]
        if key in attrs and key not in own:
            step.sources[name] = f"{source} (from {origin})"


def _adapter_name(span: Span) -> str:
    """The convention a span was classified as, for an error report (``unknown`` if even
    classifying fails)."""
    try:
        adapter = classify(span, span.attributes)[1]
    except Exception:
        return UNKNOWN
    return adapter.name if adapter is not None else UNKNOWN


def _agent_step(builder: _Builder) -> Step | None:
    """The run's agent: the shallowest agent step, then down through wrappers (an agent with
    no LLM or tool step of its own around exactly one agent). One that does work under a
    framework's default name is still the run's agent: its name is unknown, not the inner
    agent's."""
    top = None
    for step in builder.steps:
        if step.kind == "agent" and (top is None or step.depth < top.depth):
            top = step
    if top is None:
        return None
    inner: dict[str | None, list[str]] = {}
    for agent, parent in builder.agent_parent.items():
        inner.setdefault(parent, []).append(agent)
    by_id = {s.span_id: s for s in builder.steps if s.kind == "agent"}
    seen = 0
    while (not builder.work.get(top.span_id) and len(inner.get(top.span_id, ())) == 1
           and seen < len(by_id)):
        top, seen = by_id[inner[top.span_id][0]], seen + 1
    return top


def _answer(result: str | None, llm: list[Step]) -> str | None:
    """The run's answer: the agent's (or root's) result, unless that wraps the last LLM
    call's answer in more (LangGraph's whole graph state, a LlamaIndex event repr): then the
    answer itself. The LLM's answer when no span recorded a result. (``Step.answer``: the
    readable pass read it from the reply or the output, and every LLM step went through it.)"""
    last = llm[-1] if llm else None
    said = last.answer if last is not None else None
    if result is None:
        return said
    if last is not None and last.tool_calls:
        said = None  # the last call asked for tools: its text is no answer
    if said and said.strip() and said != result and said in result:
        return said
    return result


def _output(builder: _Builder, agent: Step | None, root_step: Step | None,
            llm: list[Step]) -> str | None:
    """The run's answer (``_answer``); a DSPy module's run (``_Builder._dspy_module``) gives
    its Prediction's answer or nothing: the last LLM call's text is DSPy's template then."""
    first_step = agent if agent is not None else root_step
    if first_step is not None and first_step.span_id in builder.dspy_modules:
        return first_step.result
    return _answer(_first_text((agent, root_step), "result"), llm)


def _unrecorded(steps: list[Step], output: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for step in steps:
        # ``unparsed``: values present but not understood (``trajectory.arguments``,
        # ``trajectory.shapes``), one per value; the others were not recorded
        if step.kind == "tool":
            if step.arguments is None:
                key = "unparsed" if "arguments" in step.unknown else "arguments"
                out[key] = out.get(key, 0) + 1
            if step.result is None and step.status != "error":
                key = "unparsed" if "result" in step.unknown else "tool_results"
                out[key] = out.get(key, 0) + 1
        elif step.kind == "llm" and step.output_text is None:
            key = "unparsed" if "output_text" in step.unknown else "llm_output"
            out[key] = out.get(key, 0) + 1
    if output is None:
        out["output"] = 1
    return out


def is_run(trace: Trace) -> bool:
    """Whether ``trace`` is an agent run: not when every span is a setup operation (no
    action: ``conventions.is_setup``). A trace with no spans is judged a run (its log
    records, its status)."""
    return not trace.spans or not all(is_setup(s) for s in trace.spans)


def build_trajectory(trace: Trace, config: TrajectoryConfig) -> Trajectory:
    spans = _dedupe(trace.spans)
    builder = _Builder(config, trace.logs, spans)
    for span, depth in tree_order(spans):
        builder.add(span, depth)
    draft = Draft(builder.steps, builder.tools, config.max_rebuilt_steps, builder.scope,
                  builder.agents_with_tools, builder.conventions_with_tools, builder.tool_ids)
    run_passes(draft)
    steps = draft.steps
    root_span = local_root(spans)
    root_step = next((s for s in builder.steps if root_span is not None
                      and s.span_id == root_span.span_id), None)
    agent = _agent_step(builder)
    name, source = _agent_name(builder, agent)
    llm = [s for s in builder.steps if s.kind == "llm"]
    output = _output(builder, agent, root_step, llm)
    ends = [s.end_ns for s in spans if s.end_ns]
    raw_input = _first_text((agent, root_step), "input_text") or \
        (request_text(llm[0].input_text) if llm else None)
    task, input_messages = _text_of(raw_input, task_of)
    answer, output_messages = _text_of(output, answer_of)
    return Trajectory(
        trace_id=trace.trace_id, source=trace.source, status=trace.status, steps=steps,
        service=_service(root_span, spans),
        agent=name,
        agent_source=source,
        task_id=builder.task_id,
        convention=dominant([s.convention for s in builder.steps]),
        start_ns=min((s.start_ns for s in spans), default=0),
        end_ns=max(ends, default=0),
        input=raw_input,
        output=output,
        task=task, answer=answer, input_messages=input_messages,
        output_messages=output_messages,
        tools=builder.tools,
        root_attributes=dict(root_span.attributes) if root_span else {},
        revision=trace.revision,
        span_count=len(spans),
        errors=builder.errors,
        root_span_id=root_span.span_id if root_span else None,
        run_span_id=run_span_id(spans),
        unrecorded=_unrecorded(steps, output),
        code_actions=draft.code_actions,
        session_id=builder.conversation.session_id,
        user_id=builder.conversation.user.value,
        conversation_sources=builder.conversation.sources,
    )


def _text_of(raw: str | None,
             pick: Callable[[list[Any]], str | None]) -> tuple[str | None, list[Any] | None]:
    """(the user's text of ``raw``, the messages it holds): the raw value and no messages when
    it is not messages or none of them has text (a state object, a tool's JSON). ``raw`` is
    parsed once: ``pick`` reads the messages found."""
    found = messages(raw)
    text = pick(found) if found is not None else None
    return (raw, None) if text is None else (text, found)


def _agent_name(builder: _Builder, agent: Step | None) -> tuple[str | None, AgentSource]:
    """The run's agent name and where it came from: the agent step's own name, else one
    stamped on the spans (a framework default is neither)."""
    if agent is not None and agent.span_id not in builder.unnamed and agent.node:
        return agent.node[:MAX_AGENT_NAME], "span"
    if builder.named_agent is not None:
        return builder.named_agent, "child_span"
    return None, "unknown"


def _service(root: Span | None, spans: list[Span]) -> str | None:
    """``service.name`` of the root's resource, else of the first span that has one."""
    for span in ([root] if root else []) + spans:
        name = span.resource.get("service.name")
        if name is not None:
            return as_str(name)
    return None


def _first_text(steps: tuple[Step | None, ...], field: str) -> str | None:
    for step in steps:
        value = getattr(step, field) if step is not None else None
        if value is not None:
            return str(value)
    return None
