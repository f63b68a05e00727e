"""Stage: trajectory. ``model.Trace`` -> ``steps.Trajectory`` (the normalized agent run).

Each span is read into a step (``StepBuilder``, with the readers of ``conventions``), then the
passes run over the steps in the one order of ``passes.PASSES``; the run's agent, input and
output are read last. Promises:
- every span of the trace appears exactly once as a step, with its own span id, in tree
  order: depth first, siblings by start time (ties by content, never by arrival: the one
  that ends first, then span id; ``spans.sibling_key``); a span whose parent is missing (an
  orphan, or a called service's entry whose client span was lost) goes under the innermost
  span of the root tree whose time encloses it (where it ran), else follows the root tree
  at top level in start order; spans caught in a parent cycle follow those;
- of the copies of a repeated span id one is kept by content, never by arrival (ended,
  the more attributes and events, then a content-only comparison: ``spans.dedupe``);
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
  ``tools/call`` span beside the framework's span of the same call; and an LLM span that is
  another instrumentation's record of an LLM call already a step (nested, the same response
  id, or beside it in its time with its input tokens: ``trajectory.llm_twins``);
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
- an agent step that a tool call of the agent above it ran, its span beside the call's (in
  the call's time, or a rebuilt call's: before its agent's next LLM call), is
  ``Step.delegated`` (``trajectory.delegations``): its steps are the call's, not the run's;
- the root is ``model.local_root`` (``root_span_id``, ``root_step``), the span results are
  attached to ``model.run_span_id``; the agent is the top agent (never a called service's
  whose client span is lost, nor a remote agent, kind client, whose caller is not in the
  trace: that caller may be the run's agent), descending through wrapper
  agents that do no work of their own (the OpenAI Agents SDK's ``Agent workflow``; under a
  framework's default name around several agents, into the first to start: a hand-off's); its
  name, unless a framework's default (``conventions.agent_names``: never an agent's name),
  else the name that spans under a never-exported agent span carry (``agent_source`` span /
  child_span; unknown when neither: the evaluator may still infer it from the service's
  history, ``otel_eval.evaluate.agent_inference``); in a DSPy trace (every module a CHAIN
  span: ``conventions.openinference``), the outermost module of a class of the user's outside
  every agent is an agent step named by its class (``<Class>.forward``), and a DSPy module's
  result is its Prediction's ``answer`` (another value is unknown, and so is the run's output);
- input/output come from the agent (or root) span (a GenAI workflow root's own first: its
  agents are steps of it), else from the LLM messages, never those of a called service
  whose client span is not in the trace (``_left_out``: their place is unknown) (the output is
  the last LLM answer when the agent's result only wraps it, as a graph state or a repr); the
  task read from messages (the agent's or root's input, else the first LLM call's) is the last
  user request there, the messages before it history;
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

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from otel_eval.base.model import Span, Trace, local_root, run_span, run_span_id
from otel_eval.base.service_name import service_name
from otel_eval.base.steps import AgentSource, Step, Trajectory
from otel_eval.decode.otlp import MAX_SPAN_DURATION_NS
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.conventions import dominant, is_setup
from otel_eval.evaluate.conventions.agent_names import MAX_AGENT_NAME
from otel_eval.evaluate.conventions.conversations import Conversation
from otel_eval.evaluate.conventions.messages import (
    answer_of,
    messages,
    reply_text,
    request_of,
    request_text,
)
from otel_eval.evaluate.conventions.span_readers import cost_unread
from otel_eval.evaluate.conventions.values import MAX_OUTPUT_CALLS, as_str, parse_json
from otel_eval.evaluate.trajectory.passes import Draft, run_passes
from otel_eval.evaluate.trajectory.shapes import unrecognised
from otel_eval.evaluate.trajectory.spans import StepBuilder, dedupe, tree_order
from otel_eval.store.sessions import MAX_SERVICE_CHARS

__all__ = ["build_trajectory", "is_run", "tree_order"]


def _agent_step(builder: StepBuilder, outside: set[str]) -> Step | None:
    """The run's agent: the shallowest agent step, then down through wrappers (an agent with
    no LLM or tool step of its own around exactly one agent, or, under a framework's default
    name, around several: the first of them to start is the one the run began with, as the
    OpenAI Agents SDK's ``Agent workflow`` holds the agent the user ran and the agents it
    handed off to). One that does work under a framework's default name is still the run's
    agent: its name is unknown, not the inner agent's. The agent steps of ``outside`` (span
    ids: other runs' parts, ``_left_out``) are none of the run's."""
    top = None
    for step in builder.steps:
        if step.kind == "agent" and step.span_id not in outside \
                and (top is None or step.depth < top.depth):
            top = step
    if top is None:
        return None
    inner: dict[str | None, list[str]] = {}
    for agent, parent in builder.agent_parent.items():
        inner.setdefault(parent, []).append(agent)
    by_id = {s.span_id: s for s in builder.steps if s.kind == "agent"}
    seen = 0
    while not builder.work.get(top.span_id) and seen < len(by_id):
        below = inner.get(top.span_id, ())
        if len(below) != 1 and not (below and top.span_id in builder.unnamed):
            break
        top = min((by_id[a] for a in below), key=lambda s: (s.start_ns, s.index))
        seen += 1
    return top


def _answer(result: str | None, llm: list[Step], steps: list[Step]) -> str | None:
    """The run's answer: the agent's (or root's) result, unless that wraps the last LLM
    call's answer in more (LangGraph's whole graph state, a LlamaIndex event repr): then the
    answer itself, also when that reply was recorded with empty text ("": not when a step of
    unknown kind came after it, which may have been the call that answered, nor a tool step
    started after it ended (not one inside it: google-genai's one span for a whole loop): the
    run went on after that reply, its last LLM call a span not received). The LLM's answer
    when no span recorded a result; when that call asked for tools and said nothing, the
    run's answer is unknown, not empty. (``Step.answer``: the readable pass read it from the
    reply or the output, and every LLM step went through it.)"""
    last = llm[-1] if llm else None
    said = last.answer if last is not None else None
    # the last reply said nothing (no text or blanks only), as recorded, with a stop and no
    # step of unknown kind nor tool step run after it (``steps``: the run's, in order)
    reply = reply_text(said, last.output_text, last.finish_reasons) if last else None
    empty = last is not None and not last.tool_calls and not last.calls_unknown \
        and reply is not None and not reply.strip() \
        and not any(s.kind_unknown or (s.kind == "tool" and s.start_ns >= last.end_ns)
                    for s in steps if s.index > last.index)
    if result is None:
        return said if said and said.strip() else "" if empty else None
    if last is not None and last.tool_calls:
        said = None  # the last call asked for tools: its text is no answer
    if said and said.strip() and said != result and _holds(result, said):
        return said
    return "" if empty and _wrapper(result) else result


def _wrapper(result: str) -> bool:
    """Whether a run's result is a structure (JSON, a Python repr, also one its
    instrumentation cut: LlamaIndex's ``StopEvent(result=...`` to 200 characters) rather
    than text."""
    head = result.lstrip()
    return head[:1] in ("{", "[") or _CLASS_CALL.match(head) is not None \
        or unrecognised(result) is not None


_CLASS_CALL = re.compile(r"[A-Z]\w{0,99}\(")  # a repr's start: a class called


_CUT = "..."  # how an instrumentation ends a repr it cut to its length
_CUT_PROBE = 8  # characters of the answer that must show before the cut


def _holds(result: str, said: str) -> bool:
    """Whether ``result`` wraps ``said``: holds it whole, or was cut inside it by its
    instrumentation (LlamaIndex's ``StopEvent(result=AgentOutput(...))`` repr, cut to 200
    characters and ended with "..."), the text before the cut ending with the answer's start.
    Whole, also as the result's JSON or repr escapes it (a graph state's JSON: its newlines
    and quotes escaped, and every character past ASCII by Python's json.dumps default; a
    repr's ``'...'``). A few searches and one comparison, each linear; an answer escaped in
    the repr (a quote, a newline) before the cut does not match, and the result stays the
    run's answer."""
    if said in result:
        return True
    # escaped in a structure; messages the answer is read from stay the result (``_text_of``
    # keeps their text and the messages)
    if any(form in result for form in _escaped(said)) \
            and _text_of(result, answer_of)[1] is None:
        return True
    if not result.endswith(_CUT) or len(said) < _CUT_PROBE:
        return False
    body = result[:-len(_CUT)]
    at = body.find(said[:_CUT_PROBE], max(0, len(body) - len(said)))
    return at >= 0 and said.startswith(body[at:])


def _escaped(said: str) -> Iterator[str]:
    """``said`` as a JSON string's body (characters past ASCII kept, then escaped) and as a
    repr's, each different from ``said`` (one made only when the one before was not found)."""
    seen = {said}
    for make in (lambda t: json.dumps(t, ensure_ascii=False)[1:-1],
                 lambda t: json.dumps(t)[1:-1], lambda t: repr(t)[1:-1]):
        form = make(said)
        if form not in seen:
            seen.add(form)
            yield form


def _output(builder: StepBuilder, run: tuple[Step | None, Step | None],
            llm: list[Step]) -> str | None:
    """The run's answer (``_answer``) from the first of ``run`` (its agent and root step, in
    the order they are read) that recorded a result; a DSPy module's run
    (``StepBuilder._dspy_module``) gives its Prediction's answer or nothing: the last LLM
    call's text is DSPy's template then."""
    first_step = run[0] if run[0] is not None else run[1]
    if first_step is not None and first_step.span_id in builder.dspy_modules:
        return first_step.result
    return _answer(_first_text(run, "result"), llm, builder.steps)


# The GenAI conventions' workflow operation ("Invoke GenAI workflow"), on a run's root span.
_WORKFLOW = "invoke_workflow"


def _workflow(root: Span | None) -> bool:
    return root is not None and root.attributes.get("gen_ai.operation.name") == _WORKFLOW


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
        elif step.kind_unknown:  # a marker value no convention defines
            out["unparsed"] = out.get("unparsed", 0) + 1
        if step.kind == "llm" and len(step.tool_calls) >= MAX_OUTPUT_CALLS \
                and step.calls_unknown:  # its calls past the bound (``read_span``)
            out["unparsed"] = out.get("unparsed", 0) + 1
        if "cost_usd" in step.unknown and cost_unread(step):  # a recorded cost not read
            out["unparsed"] = out.get("unparsed", 0) + 1
    if output is None:
        out["output"] = 1
    return out


def is_run(trace: Trace) -> bool:
    """Whether ``trace`` is an agent run: not when every span is a setup operation (no
    action: ``conventions.is_setup``). A trace with no spans is judged a run (its log
    records, its status)."""
    return not trace.spans or not all(is_setup(s) for s in trace.spans)


def build_trajectory(trace: Trace, config: TrajectoryConfig) -> Trajectory:
    spans = dedupe(trace.spans)
    builder = StepBuilder(config, trace.logs, spans)
    order = tree_order(spans)
    for span, depth in order:
        builder.add(span, depth)
    draft = Draft(builder.steps, builder.tools, config.max_rebuilt_steps,
                  config.max_rebuilt_calls, builder.scope, builder.agents_with_tools,
                  builder.conventions_with_tools, builder.tool_ids)
    run_passes(draft)
    steps = draft.steps
    root_span = local_root(spans)
    root_step = next((s for s in builder.steps if root_span is not None
                      and s.span_id == root_span.span_id), None)
    # the run's agent: not a called service's whose client span was lost, nor a remote agent
    # called by a caller not in the trace
    detached, outside = _left_out(order, spans, builder.steps, root_span)
    agent = _agent_step(builder, outside)
    if builder.named_span in outside:  # the name stamped on another run's spans
        builder.restamp(order, outside)
    name, source = _agent_name(builder, agent)
    # the run's LLM calls: not a called service's whose client span is not in the trace (its
    # place in the run only guessed from its own clock: its last reply no answer)
    llm = [s for s in builder.steps if s.kind == "llm" and s.span_id not in detached]
    # the run's own messages: its agent's, then its root's; a workflow root's first (the
    # GenAI conventions' ``invoke_workflow``: the workflow's input and output, where its
    # agents' are the steps of it, the first agent's result no answer of the run's)
    run = (agent, root_step) if not _workflow(root_span) else (root_step, agent)
    output = _output(builder, run, llm)
    said = _first_with(run, "input_text")
    raw_input = said.input_text if said is not None else \
        (request_text(llm[0].input_text) if llm else None)
    # a run's input, its agent's (an invoke_agent span's messages: "the chat history
    # provided") or its first LLM call's, holds the earlier turns as history: its request is
    # the last user request there
    task, input_messages = _text_of(raw_input, request_of)
    if input_messages is None and task is not None and task[:1] in ("{", "["):
        task = _request(task, llm)
    answer, output_messages = _text_of(output, answer_of)
    start_ns, end_ns = extent(spans)
    return Trajectory(
        trace_id=trace.trace_id, source=trace.source, status=trace.status, steps=steps,
        release_reason=trace.release_reason,
        service=_service(root_span, spans),
        agent=name,
        agent_source=source,
        task_id=builder.task_id,
        convention=dominant([s.convention for s in builder.steps]),
        start_ns=start_ns, end_ns=end_ns,
        input=raw_input,
        output=output,
        task=task, answer=answer, input_messages=input_messages,
        output_messages=output_messages,
        tools=builder.tools,
        unoffered=builder.described - builder.offered,
        offered_to=builder.offered_to,
        root_attributes=dict(root_span.attributes) if root_span else {},
        revision=trace.revision,
        span_count=len(spans),
        errors=builder.errors,
        root_span_id=root_span.span_id if root_span else None,
        run_span_id=run_span_id(spans),
        unrecorded=_unrecorded(steps, output),
        code_actions=draft.code_actions,
        calls_over_limit=draft.calls_over_limit,
        session_id=builder.conversation.session_id,
        user_id=builder.conversation.user.value,
        conversation_sources=builder.conversation.sources,
        other_session_ids=builder.conversation.session.others,
    )


def _left_out(order: list[tuple[Span, int]], spans: list[Span], steps: list[Step],
              root: Span | None) -> tuple[set[str], set[str]]:
    """(``detached``, ``outside``): the span ids not the run's own, both empty (the common
    case, found with no call a span) when no span's parent is absent.

    ``detached``: under an entry of another service than the run's (``model.run_span``'s)
    whose parent is upstream (flagged remote, not in the trace), the entry's included: a
    called service's spans whose client span was lost, put where their own clock says they
    ran (``tree_order``), their place in the run only guessed. Entries of the run's own service (the
    run called from upstream: a framework's spans under one remote parent) are the run's.

    ``outside``: ``detached`` and the spans under a call of a remote agent (an agent span of
    kind client) whose caller is not in the trace (its parent absent; not the root), the
    call included: the caller, which may be the run's agent (an orchestrator whose root never
    came), is unknown, and the agent it called is not the run's."""
    ids = {span.span_id for span, _ in order}
    orphans = [span for span, _ in order
               if span.parent_span_id is not None and span.parent_span_id not in ids]
    if not orphans:
        return set(), set()
    run = run_span(spans)
    service = run.resource.get("service.name") if run is not None else None
    entries = {s.span_id for s in orphans if s.parent_remote is True
               and s.resource.get("service.name") != service}
    agents = {s.span_id for s in steps if s.kind == "agent"}
    calls = {s.span_id for s in orphans
             if s.kind == "client" and s.span_id in agents and s is not root}
    detached = _subtrees(order, entries)
    return detached, detached | _subtrees(order, calls)


def _subtrees(order: list[tuple[Span, int]], starts: set[str]) -> set[str]:
    """The span ids of ``starts`` and of every span under them (``order``: ``tree_order``)."""
    out: set[str] = set()
    if not starts:
        return out
    inside = -1  # the depth of the span whose subtree is being read, else -1
    for span, depth in order:
        if inside >= 0 and depth > inside:
            out.add(span.span_id)
            continue
        inside = -1
        if span.span_id in starts:
            inside = depth
            out.add(span.span_id)
    return out


def _text_of(raw: str | None,
             pick: Callable[[list[Any]], str | None]) -> tuple[str | None, list[Any] | None]:
    """(the user's text of ``raw``, the messages it holds): the raw value and no messages when
    it is not messages or none of them has text (a state object, a tool's JSON). ``raw`` is
    parsed once: ``pick`` reads the messages found."""
    found = messages(raw)
    text = pick(found) if found is not None else None
    return (raw, None) if text is None else (text, found)


_SCALARS = (str, bool, int, float, type(None))
# Argument names that name the user's request (smolagents' ``run(task)``, DSPy's and
# MLflow's ``question``, and the usual others), in a run method's recorded arguments.
_REQUEST_KEYS = frozenset({"task", "question", "query", "input", "prompt", "request",
                           "message", "goal", "instruction", "instructions", "user_input"})


def _request(raw: str, llm: list[Step]) -> str:
    """The user's request of a run whose recorded input is a structure with no messages (the
    run method's arguments, a framework's state) as JSON: its one text among scalar values,
    under a name of the request (``_REQUEST_KEYS``: smolagents' ``{"task": ..., "stream":
    false, ...}``, DSPy's ``{"question": ...}``); else
    the first LLM call's request, when that call's input is messages (``request_of``:
    LlamaIndex's workflow state, Haystack's ``ChatMessage`` reprs, CrewAI's agent object);
    else the input as recorded. Read for display and the judge's task; ``input`` stays raw."""
    parsed = parse_json(raw)
    if isinstance(parsed, dict) and all(isinstance(v, _SCALARS) for v in parsed.values()):
        texts = [(k, v) for k, v in parsed.items() if isinstance(v, str) and v.strip()]
        if len(texts) == 1 and texts[0][0].lower() in _REQUEST_KEYS:
            return str(texts[0][1])
    found = messages(llm[0].input_text) if llm and llm[0].input_text is not None else None
    return (request_of(found) or raw) if found is not None else raw


def _agent_name(builder: StepBuilder, agent: Step | None) -> tuple[str | None, AgentSource]:
    """The run's agent name and where it came from: the agent step's own name, else one
    stamped on the spans (a framework default is neither)."""
    if agent is not None and agent.span_id not in builder.unnamed and agent.node:
        return agent.node[:MAX_AGENT_NAME], "span"
    if builder.named_agent is not None:
        return builder.named_agent, "child_span"
    return None, "unknown"


def bare_trajectory(trace: Trace) -> Trajectory:
    """No steps, for a trace whose evaluation failed (the stand-in ``Evaluator.failed``
    stores): still its run span, service and conversation, so a failed turn stays a turn of
    its session. Read best-effort: the spans that failed the evaluation may fail this too."""
    spans = dedupe(list(trace.spans))
    bare = Trajectory(trace.trace_id, trace.source, trace.status, steps=[],
                      release_reason=trace.release_reason,
                      revision=trace.revision, span_count=len(trace.spans),
                      run_span_id=run_span_id(trace.spans))
    try:
        conversation = Conversation()
        for span, _ in tree_order(spans):
            conversation.read(span.attributes)
        bare.service = _service(local_root(spans), spans)
        bare.start_ns, bare.end_ns = extent(spans)  # its place among turns
        bare.session_id, bare.user_id = conversation.session_id, conversation.user.value
        bare.conversation_sources = conversation.sources
        bare.other_session_ids = conversation.session.others
    except Exception:  # a stand-in never fails: it is what failure stores
        pass
    return bare


def extent(spans: list[Span]) -> tuple[int, int]:
    """(start, end) of the run in Unix ns: the earliest start and the latest end (0: none
    ended). Senders' clocks may be wrong (a monotonic clock sent as Unix time, a start left
    0, a host years ahead): spans that disagree by more than any span may last
    (``MAX_SPAN_DURATION_NS``, a year) cannot all be right, and which one is wrong is
    unknown, so the run's own span (``model.run_span``), whose times are of one clock, is
    the run's extent: a wrong clock never adds decades to its wall time (the duration budget,
    histogram and session time)."""
    start = min([s.start_ns for s in spans], default=0)  # lists: one call, not one a span
    end = max([s.end_ns for s in spans if s.end_ns], default=0)
    if end - start <= MAX_SPAN_DURATION_NS:
        return start, end
    run = run_span(spans)
    return (run.start_ns, run.end_ns) if run is not None else (0, 0)


def _service(root: Span | None, spans: list[Span]) -> str | None:
    """``service.name`` of the root's resource, else of the run's span (``model.run_span``),
    else of the first span that has one (the SDK's default ``unknown_service[:exe]`` is none:
    ``base.service_name``), cut to ``MAX_SERVICE_CHARS`` as the session key cuts it (it is
    content: whole, a long one made a stored result past ``max_result_bytes``)."""
    first = root if root is not None else run_span(spans)
    for span in ([first] if first else []) + spans:
        name = service_name(span.resource)
        if name is not None:
            text = as_str(name)
            return text[:MAX_SERVICE_CHARS] if text is not None else None
    return None


def _first_with(steps: tuple[Step | None, ...], field: str) -> Step | None:
    """The first of ``steps`` that recorded ``field`` (``_first_text``'s step)."""
    return next((s for s in steps if s is not None and getattr(s, field) is not None), None)


def _first_text(steps: tuple[Step | None, ...], field: str) -> str | None:
    for step in steps:
        value = getattr(step, field) if step is not None else None
        if value is not None:
            return str(value)
    return None
