"""Stage: trajectory, its first half. A trace's spans in tree order, each read into a step.

    spans -> dedupe -> tree_order -> StepBuilder.add(span, depth) -> steps (+ what the run
    needs of them: tools offered, the agent of every span, the work under each agent)

``build.build_trajectory`` runs this, then the passes, then reads the run (agent, input,
output). Promises (the module docstring of ``build`` gives them for the whole stage):
- of the copies of a repeated span id one is kept by content, never by arrival (``dedupe``:
  ended, the more attributes and events, then a content-only comparison);
- tree order: depth first, siblings by start time, then the one that ends first, then span
  id (``sibling_key``: never arrival order, so the same spans in any order read the same);
  a span whose parent is in the trace is under it, its parent remote (OTLP span flags) or
  not; entries (no parent, or a remote one
  not in the trace) are the top level, those with no parent first, but for an entry of
  another service than the first entry's (a called service whose client span was lost),
  which goes where it ran as an orphan does (``_place_called``); an orphan (its parent
  absent, not flagged remote: a span a collector's filter or sampler dropped, or one not
  yet come) goes where it ran, under the innermost span of that tree whose time encloses
  its own (``_adopt``: the steps stay in the order they ran, so no later step is taken for
  an earlier one); the others follow at top level in start order; spans caught in a parent
  cycle follow those;
- each step is classified and its fields read by the convention readers
  (``conventions.read_span``), GenAI events (log records, span events) read as attributes of
  their span; its node is the name of the nearest enclosing agent;
- a span whose content breaks a convention adapter is still a (plain) step, and the failure
  is kept in ``StepBuilder.errors`` (never raised).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from operator import attrgetter
from typing import Any

from otel_eval.base.model import LogEvent, Span
from otel_eval.base.steps import Step
from otel_eval.evaluate.config import MAX_TASK_ID_CHARS, TrajectoryConfig
from otel_eval.evaluate.conventions import UNKNOWN, classify, merge_tools, read_span
from otel_eval.evaluate.conventions.agent_names import (
    DELEGATION_TOOLS,
    agent_name,
    delegated_agent,
    dspy_agent_name,
)
from otel_eval.evaluate.conventions.conversations import Conversation
from otel_eval.evaluate.conventions.events import overlay, span_events
from otel_eval.evaluate.conventions.fields import merged_agent_name
from otel_eval.evaluate.conventions.openinference import (
    LLAMA_INDEX_SCOPE,
    dspy_marked,
    dspy_module,
    haystack_agent,
    haystack_component,
    haystack_pipeline,
    prediction_answer,
    stamped_agent_name,
    workflow_agent_name,
)
from otel_eval.evaluate.conventions.openllmetry import is_workflow_agent, llamaindex_agent_name
from otel_eval.evaluate.conventions.values import UnreadOffer, as_str, first
from otel_eval.evaluate.trajectory.prices import provider

__all__ = ["StepBuilder", "dedupe", "tree_order"]

# Attributes that name the enclosing agent on the spans under it (current OpenLLMetry, older
# Traceloop SDKs, the Vercel AI SDK): read for spans outside any agent span that arrived.
_STAMPED_AGENT_KEYS = ("gen_ai.agent.name", "traceloop.workflow.name", "ai.telemetry.functionId")


def _stamped_name(span: Span, attrs: Any) -> str | None:
    """The agent's name stamped on a span of its run: a key of ``_STAMPED_AGENT_KEYS``, else
    LangChain's ``metadata.lc_agent_name`` (under OpenInference), else a LlamaIndex agent
    workflow step's ``current_agent_name`` (under Traceloop's instrumentation, in its JSON;
    under OpenInference's, in its event's repr)."""
    if not attrs.keys().isdisjoint(_STAMPED_AGENT_KEYS):
        return as_str(first(attrs, *_STAMPED_AGENT_KEYS))
    return (stamped_agent_name(attrs) or llamaindex_agent_name(attrs)
            or (workflow_agent_name(span, attrs) if span.scope == LLAMA_INDEX_SCOPE else None))


def dedupe(spans: Iterable[Span]) -> list[Span]:
    """One copy of each span id, chosen by content (``_completeness``), never by arrival,
    the copies kept in a canonical order (by start, then span id): what is read of them
    first (a service name, a stamped agent) is the same in whatever order they came."""
    kept: dict[str, Span] = {}
    for span in spans:
        other = kept.setdefault(span.span_id, span)
        if other is not span and _completeness(span) > _completeness(other):
            kept[span.span_id] = span
    return sorted(kept.values(), key=_CANONICAL)


def _completeness(span: Span) -> tuple[bool, int, int, bytes, str]:
    """How complete a copy of a repeated span id is: ended, then the more attributes and
    events, the later end, then its bytes as received (else its text) as a last, arbitrary
    but content-only, comparison. Only repeated ids come here (a second pipeline, a file
    holding a span twice: assembly refuses a retry's copy as a ``duplicate_span``)."""
    return (span.end_ns > 0, len(span.attributes) + len(span.events), span.end_ns,
            span.wire or b"", repr((span.name, span.status, span.status_message,
                                    sorted(span.attributes.items(), key=repr))))


_CANONICAL = attrgetter("start_ns", "span_id")  # C-level: no Python call a span


def _start(span: Span) -> int:
    return span.start_ns


_NOT_ENDED = 1 << 64  # a span not ended (end 0) ends after every one that did


def sibling_key(span: Span) -> tuple[int, int, str]:
    """Where a span goes among its siblings: by start, then the one that ends first (a tool
    span that starts and ends in the millisecond its model call starts ran before that call:
    JavaScript SDKs write whole milliseconds), then by span id; never by arrival (spans
    exported in concurrent batches arrive in any order)."""
    return span.start_ns, span.end_ns or _NOT_ENDED, span.span_id


# How deep an orphan's enclosing span is looked for, and how many siblings starting before it
# are tried at each level (parallel siblings overlap): O(orphans x log spans), whatever the tree.
_ADOPT_DEPTH = 64
_ADOPT_SIBLINGS = 4


def _encloses(outer: Span, inner: Span) -> bool:
    return 0 < inner.end_ns <= outer.end_ns and outer.start_ns <= inner.start_ns


def _encloser(span: Span, tops: list[Span], children: dict[str, list[Span]]) -> Span | None:
    """The innermost span under ``tops`` (each list sorted by start) whose time encloses
    ``span``'s, found level by level (bounded: ``_ADOPT_DEPTH``, ``_ADOPT_SIBLINGS``)."""
    found: Span | None = None
    level = tops
    for _ in range(_ADOPT_DEPTH):
        at = bisect_right(level, span.start_ns, key=_start)
        inner = next((c for c in reversed(level[max(0, at - _ADOPT_SIBLINGS):at])
                      if _encloses(c, span)), None)
        if inner is None:
            break
        found = inner
        level = children.get(inner.span_id, [])
    return found


def _adopt(orphans: list[Span], tops: list[Span], children: dict[str, list[Span]]
           ) -> list[Span]:
    """Each orphan put under its ``_encloser`` in ``children`` (kept sorted by start); the
    orphans no span encloses, returned (a run whose root never came: they stay top level)."""
    if not tops or not orphans:
        return orphans
    by_start = sorted(tops, key=_start)
    adopted: list[tuple[str, Span]] = []
    left = []
    for span in orphans:
        parent = _encloser(span, by_start, children)
        if parent is None:
            left.append(span)
        else:
            adopted.append((parent.span_id, span))
    for parent_id, span in adopted:
        children.setdefault(parent_id, []).append(span)
    for parent_id in {p for p, _ in adopted}:
        children[parent_id].sort(key=sibling_key)
    return left


def _place_called(tops: list[Span], children: dict[str, list[Span]]) -> list[Span]:
    """``tops`` (sorted) without the entries of another service than the first's (a called
    service's, its client span lost) that a span of the others encloses: those go where they
    ran (``_adopt``), as an orphan does; an entry of the first's service is a span of the run
    called from upstream, a sibling, not a call inside it."""
    service = tops[0].resource.get("service.name")
    called = [s for s in tops[1:] if s.parent_span_id is not None
              and s.resource.get("service.name") != service]
    if not called:
        return tops
    placed = {s.span_id for s in called}
    own = [s for s in tops if s.span_id not in placed]
    placed -= {s.span_id for s in _adopt(called, own, children)}
    return [s for s in tops if s.span_id not in placed]


def tree_order(spans: list[Span]) -> list[tuple[Span, int]]:
    """(span, depth) for unique-id ``spans`` in tree order (see module docstring)."""
    ids = {s.span_id for s in spans}
    children: dict[str, list[Span]] = {}
    tops: list[Span] = []
    orphans: list[Span] = []
    for span in spans:
        parent = span.parent_span_id
        if parent is None:
            tops.append(span)
        elif parent in ids and parent != span.span_id:
            # under its parent whatever the remote flag says: a downstream service's span is
            # part of the call that reached it, not placed by the downstream clock
            children.setdefault(parent, []).append(span)
        elif span.parent_remote is True:  # an entry whose parent is upstream, not here
            tops.append(span)
        else:
            orphans.append(span)
    for group in children.values():
        group.sort(key=sibling_key)
    # a span with no parent before an entry from upstream (``model.local_root``): one
    # starting first says only that its service's clock is behind; then as the root is
    # chosen (the earliest, then the longest, then by span id)
    tops.sort(key=lambda s: (s.parent_span_id is not None, s.start_ns, -s.end_ns, s.span_id))
    if len(tops) > 1:
        tops = _place_called(tops, children)
    orphans = _adopt(orphans, tops, children)
    orphans.sort(key=sibling_key)
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
        walk(sorted((s for s in spans if s.span_id not in visited), key=sibling_key))
    return out


class StepBuilder:
    """One pass over the spans in tree order; keeps the enclosing agent of every span."""

    def __init__(self, config: TrajectoryConfig, logs: list[LogEvent],
                 spans: list[Span]) -> None:
        self.spans = spans  # the trace's (deduplicated) spans
        self.task_key = config.task_id_attribute
        self.logs: dict[str, list[LogEvent]] = {}
        for record in logs:
            self.logs.setdefault(record.span_id, []).append(record)
        self.steps: list[Step] = []
        self.tools: dict[str, Any] = {}  # offered, and described by their own spans
        self.offered: set[str] = set()  # the names of ``tools`` a span offered
        self.described: set[str] = set()  # those a tool span described as its own
        self.task_id: str | None = None
        # span id -> (node name, id of the nearest agent span at or above it)
        self.scope: dict[str, tuple[str | None, str | None]] = {}
        self.agent_attrs: dict[str, Any] = {}  # agent span id -> its attributes
        self.agent_parent: dict[str, str | None] = {}  # agent span id -> enclosing agent
        self.agents_with_tools: set[str | None] = set()
        # agent key (``Step.agent_scope``) -> the tools its own spans recorded it was offered
        self.offered_to: dict[tuple[str | None, str | None], dict[str, Any]] = {}
        # the agent keys one of whose spans recorded an offer that could not be read: what
        # they were offered is unknown (no ``offered_to`` entry), whatever their other spans say
        self.unread_offers: set[tuple[str | None, str | None]] = set()
        # Traceloop's LlamaIndex agent workflow spans (agent steps), by span id
        self.workflows: dict[str, Step] = {}
        # LlamaIndex workflow run span id -> the agent its last named step ran for
        self.workflow_agents: dict[str, str] = {}
        # span id -> the span of unknown kind it is within (``Step.within_unknown``)
        self.within_unknown: dict[str, str] = {}
        self.conventions_with_tools: set[str] = set()
        self.errors: list[dict[str, str]] = []  # spans an adapter failed on (see ``add``)
        self.tool_ids = False  # some tool step carries a call id
        self.work: dict[str | None, int] = {}  # agent span id -> its own llm/tool steps
        # the first agent name stamped on a non-agent span (not a framework default), and
        # whether that span was outside every agent span that arrived
        self.named_agent: str | None = None
        self.named_outside = False
        self.named_span: str | None = None  # the span that stamp is on
        self.unnamed: set[str] = set()  # agent spans carrying only a framework default name
        self.conversation = Conversation()  # the turn's conversation id and user
        self.dspy: bool | None = None  # the trace carries DSPy's markers (None: not looked)
        self.dspy_modules: set[str] = set()  # DSPy module spans outside every agent
        self.tool_spans: set[str] = set()  # the span ids of tool steps
        self.by_id: dict[str, Span] | None = None  # the spans by id (made on first use)
        # Haystack Pipeline.run span id -> its components' inputs and outputs, parsed once
        self.pipelines: dict[str, tuple[Any, Any]] = {}

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

    def _attrs(self, span: Span) -> tuple[Any, bool]:
        """(the span's attributes with its GenAI events read as attributes, whether they came
        from log records)."""
        records = self.logs.get(span.span_id)
        own = span_events(span)
        if records or own:
            return overlay(span.attributes, [*(records or ()), *own]), bool(records)
        return span.attributes, False

    def restamp(self, order: list[tuple[Span, int]], skip: set[str]) -> None:
        """The stamped agent name (``_stamped``) again, over the non-agent spans of ``order``
        not in ``skip`` (another run's parts: ``build._agent_step``'s ``outside``)."""
        self.named_agent, self.named_outside, self.named_span = None, False, None
        kinds = {s.span_id: s.kind for s in self.steps if not s.rebuilt}
        for span, _ in order:
            if span.span_id not in skip and kinds.get(span.span_id) != "agent":
                node = self.scope.get(span.parent_span_id or "", (None, None))[0]
                self._stamped(span, self._attrs(span)[0], outside=node is None)

    def _add(self, span: Span, depth: int) -> None:
        attrs = span.attributes  # ``_attrs`` inlined: every span of every trace comes here
        records = self.logs.get(span.span_id)
        own = span_events(span)
        from_events = bool(records or own)
        if from_events:
            attrs = overlay(attrs, [*(records or ()), *own])
        step = Step(len(self.steps), span.span_id, span.parent_span_id, "other", span.name,
                    depth=depth, start_ns=span.start_ns, end_ns=span.end_ns, scope=span.scope)
        adapter, shape = read_span(step, span, attrs)
        self.conversation.read(attrs)
        if from_events:
            _from_events(step, span.attributes, attrs, "log records" if records else "span events")
        node, agent = self.scope.get(span.parent_span_id or "", (None, None))
        # a DSPy module outside every agent, or run by a tool (an agent called as a tool)
        module = (self._dspy_module(step, span, attrs) if step.kind == "chain" and (
            agent is None or span.parent_span_id in self.tool_spans) else None)
        if step.kind != "agent":
            self._stamped(span, attrs, outside=node is None)
            if agent is None:
                # outside any agent span that arrived, but stamped with its name
                # (OpenLLMetry, the Vercel AI SDK, LangChain's lc_agent_name): the agent's
                # name, also when its span never arrived; a span's own stamp wins over its
                # parent's (a sub-agent run from a tool stamps its own name)
                stamp = _stamped_name(span, attrs)
                if span.scope == LLAMA_INDEX_SCOPE:
                    stamp = self._workflow_agent(span, stamp)
                node = stamp or node
            elif span.parent_span_id in self.workflows:
                node = self._workflow_step(span, attrs) or node
        if step.kind == "agent":
            name = module or self._haystack_component(step, span, attrs)
            if name is None and adapter is not None:
                enclosing = self.agent_attrs.get(agent) if agent else None
                name, source = merged_agent_name(span, attrs, enclosing, shape.found)
                step.sources["agent_name"] = source
            self.agent_parent[span.span_id] = agent
            self.agent_attrs[span.span_id] = attrs
            node, agent = name or span.name, span.span_id
            if agent_name(node) is None:  # a framework's default names no agent: the node
                self.unnamed.add(span.span_id)  # of its steps is unknown, as the run's agent
                node = None
        if step.kind == "agent" and is_workflow_agent(span):
            self.workflows[span.span_id] = step
        self.scope[span.span_id] = (node, agent)
        step.node = node
        if step.kind == "tool" and step.tool_name in DELEGATION_TOOLS:
            coworker = delegated_agent(step.arguments)
            if coworker is not None:  # the steps under it are the coworker's
                self.scope[span.span_id] = (coworker, agent)
        if self.within_unknown or "kind" in step.unknown:
            self._within_unknown(step, span)
        if step.kind == "tool":
            self.tool_spans.add(span.span_id)
            self._mark_tools(agent)
            self.conventions_with_tools.add(step.convention)
            self.tool_ids = self.tool_ids or step.call_id is not None
        if step.kind in ("llm", "tool"):
            self.work[agent] = self.work.get(agent, 0) + 1
            if step.kind == "llm":
                rid = attrs.get("gen_ai.response.id")
                step.response_id = rid if isinstance(rid, str) and rid else None
                step.provider = provider(attrs)
        for tools in shape.offers:
            offered = tools(attrs)
            key = (node, step.within_unknown)
            if isinstance(offered, UnreadOffer):  # what this agent was offered is unknown
                self.unread_offers.add(key)
                self.offered_to.pop(key, None)
            elif offered:
                merge_tools(self.tools, offered)
                self.offered.update(offered)
                if key not in self.unread_offers:
                    merge_tools(self.offered_to.setdefault(key, {}), offered)
        for tools in shape.described:
            described = tools(attrs)
            if described:
                merge_tools(self.tools, described)
                self.described.update(described)
        if self.task_id is None:
            task = attrs.get(self.task_key)
            if task is None:
                task = span.resource.get(self.task_key)
            if task is not None:  # most runs carry none: no call per span to say so
                text = as_str(task)
                if text is not None and len(text) <= MAX_TASK_ID_CHARS:  # else no id
                    self.task_id = text
        self.steps.append(step)

    def _workflow_agent(self, span: Span, named: str | None) -> str | None:
        """A LlamaIndex agent workflow's steps run one after another under its run span, each
        for the agent its state names (``workflow_agent_name``): a step that names none
        (``call_tool``, ``aggregate_tool_results``) is the agent of the last step that did, so
        a call is the agent's that asked for it, before and after a hand-off."""
        parent = span.parent_span_id or ""
        if named is not None:
            self.workflow_agents[parent] = named
            return named
        return self.workflow_agents.get(parent)

    def _workflow_step(self, span: Span, attrs: Any) -> str | None:
        """A step of Traceloop's LlamaIndex agent workflow (the agent span, named by its final
        state: the agent that finished) is the agent its own state names, else the last named
        (``_workflow_agent``); the workflow is the agent its first named step ran for, the one
        the run began with (the same one when no hand-off happened)."""
        stamp = agent_name(llamaindex_agent_name(attrs))
        parent = span.parent_span_id or ""
        if stamp is not None and parent not in self.workflow_agents:
            self.workflows[parent].node = stamp
        return self._workflow_agent(span, stamp)

    def _within_unknown(self, step: Step, span: Span) -> None:
        """A span whose marker was not understood may have been an agent: the steps under it
        (up to the next known agent) are marked within it, so no rule takes them for the
        enclosing agent's own (``Step.agent_scope``)."""
        if step.kind == "agent":
            return
        inner = (span.span_id if "kind" in step.unknown
                 else self.within_unknown.get(span.parent_span_id or ""))
        if inner is not None:
            self.within_unknown[span.span_id] = step.within_unknown = inner

    def _dspy_module(self, step: Step, span: Span, attrs: Any) -> str | None:
        """A DSPy module's run outside every agent, or run by a tool
        (``openinference.dspy_module``, in a trace carrying DSPy's markers): its result is its
        Prediction's ``answer`` (any other value is unknown); one of a class of the user's
        becomes an agent step, the outermost one the run's agent, one a tool ran a sub-agent,
        named by the class (returned)."""
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

    def _haystack_component(self, step: Step, span: Span, attrs: Any) -> str | None:
        """A Haystack ``Agent`` component's name in the pipeline that ran it (its parent
        span's inputs or outputs: ``openinference.haystack_component``), or None."""
        parent_id = span.parent_span_id
        if not parent_id or not haystack_agent(span):
            return None
        pipeline = self.pipelines.get(parent_id)
        if pipeline is None:
            if self.by_id is None:
                self.by_id = {s.span_id: s for s in self.spans}
            parent = self.by_id.get(parent_id)
            if parent is None:
                return None
            pipeline = self.pipelines[parent_id] = haystack_pipeline(parent.attributes)
        name = haystack_component(pipeline, attrs)
        if name is not None:
            step.sources["agent_name"] = ("openinference Pipeline.run input.value / "
                                          "output.value (the pipeline's component name)")
        return name

    def _is_dspy(self, span: Span) -> bool:
        """Whether the span or, once looked at, any span of the trace carries DSPy's own
        markers (``openinference.dspy_marked``)."""
        if self.dspy is None:
            self.dspy = dspy_marked(span) or any(dspy_marked(s) for s in self.spans)
        return self.dspy

    def _stamped(self, span: Span, attrs: Any, outside: bool) -> None:
        """Keep the first real agent name stamped on a non-agent span (one outside every
        agent span wins over one inside)."""
        if self.named_agent is not None and (self.named_outside or not outside):
            return
        name = agent_name(_stamped_name(span, attrs))
        if name is not None:
            self.named_agent, self.named_outside, self.named_span = name, outside, span.span_id

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
