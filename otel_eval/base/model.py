"""The data every stage passes on: spans in, trajectories through, evaluations out.

    Span            one received span (ids, times, status eager; attributes decoded lazily)
    Trace           the spans of one trace id, as released by assembly, with a status
    Step, Trajectory the normalized agent run that detectors and the judge read
    Finding, Verdict what the detectors say about a trajectory
    Evaluation      trajectory + findings + verdict (+ judge, + prediction); ``to_json()`` is
                    the v1 object

Attribute values stay as the protobuf/JSON carried them (str, int, float, bool, lists,
dicts); bulky message text is kept as the raw string and parsed only by whoever needs it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

TraceStatus = Literal["complete", "incomplete", "truncated"]
StepKind = Literal["agent", "llm", "tool", "chain", "other"]
Severity = Literal["info", "warning", "error"]
AgentSource = Literal["span", "child_span", "inferred_history", "unknown"]

Attributes = Mapping[str, Any]


@dataclass(slots=True)
class SpanEvent:
    name: str
    time_unix_nano: int
    attributes: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Origin:
    """Where decoded spans came from, as received: their OTLP ``ResourceSpans`` and
    ``ScopeSpans`` serialized without their spans (resource attributes and dropped count,
    scope name, version and attributes, both schema URLs). One object per scope of a
    request, shared by its spans: re-encoding a span from it and the span's own bytes
    (``Span.wire``) loses nothing the sender sent."""
    resource_spans: bytes
    scope_spans: bytes


class Span:
    """One span. Identity and timing are plain fields; ``attributes``, ``events`` and
    ``resource`` may be produced lazily by a decoder (``lazy``), so the receive path only
    pays for what assembly needs (ids, parent, end time)."""

    __slots__ = (
        "_attributes", "_events", "_lazy", "end_ns", "kind", "name", "nbytes", "origin",
        "parent_remote", "parent_span_id", "resource", "scope", "span_id", "start_ns", "status",
        "status_message", "trace_id", "wire",
    )

    def __init__(
        self,
        trace_id: str,
        span_id: str,
        parent_span_id: str | None,
        name: str,
        start_ns: int,
        end_ns: int,
        *,
        kind: str = "internal",
        status: str = "unset",
        status_message: str = "",
        attributes: dict[str, Any] | None = None,
        events: list[SpanEvent] | None = None,
        resource: Attributes | None = None,
        scope: str = "",
        lazy: Callable[[], tuple[dict[str, Any], list[SpanEvent]]] | None = None,
        nbytes: int = 0,
        parent_remote: bool | None = None,
        wire: bytes | None = None,
        origin: Origin | None = None,
    ) -> None:
        self.trace_id = trace_id  # 32 lowercase hex
        self.span_id = span_id  # 16 lowercase hex
        self.parent_span_id = parent_span_id  # None for a root
        # OTLP span flags: True = the parent lives in another process (this span starts what
        # this service sees), False = the parent is local, None = the exporter did not say
        self.parent_remote = parent_remote
        self.name = name
        self.start_ns = start_ns
        self.end_ns = end_ns  # 0 when the span has not ended
        self.kind = kind  # internal | server | client | producer | consumer | unspecified
        self.status = status  # unset | ok | error
        self.status_message = status_message
        self.resource: Attributes = resource if resource is not None else {}
        self.scope = scope
        self._attributes = attributes
        self._events = events
        self._lazy = lazy
        self.nbytes = nbytes  # size as received (OTLP protobuf), for byte bounds; 0 if unknown
        # The OTLP Span message as received and where it came from (both None when the span
        # was built here, not decoded): what is forwarded and spooled, so nothing the model
        # does not hold (trace_state, links, flags, dropped counts...) is lost on the way.
        self.wire = wire
        self.origin = origin

    def _materialize(self) -> None:
        if self._lazy is not None:
            self._attributes, self._events = self._lazy()
            self._lazy = None
        if self._attributes is None:
            self._attributes = {}
        if self._events is None:
            self._events = []

    @property
    def attributes(self) -> dict[str, Any]:
        if self._attributes is None:
            self._materialize()
        assert self._attributes is not None
        return self._attributes

    @property
    def events(self) -> list[SpanEvent]:
        if self._events is None:
            self._materialize()
        assert self._events is not None
        return self._events

    @property
    def is_entry(self) -> bool:
        """Starts a local tree: no parent, or a parent the exporter flagged as remote."""
        return self.parent_span_id is None or self.parent_remote is True

    def __repr__(self) -> str:
        return f"Span({self.name!r}, trace={self.trace_id}, span={self.span_id})"


def _start_then_longest(span: Span) -> tuple[int, int]:
    return span.start_ns, -span.end_ns


def local_root(spans: Sequence[Span]) -> Span | None:
    """The root of what this service sees of a trace: the first two steps of ``run_span``,
    without its last resort. Assembly asks it whether a trace's root has ended, the
    trajectory reads the run's input, output, service and outcome from it, and
    non-termination reports on its step (``Trajectory.root_span_id``).

    An *entry* span (no parent, or a parent flagged remote by the OTLP span flags) is a root;
    the earliest one when there are several (earliest start, then the longest). Without one,
    a span whose parent is absent and not known to be local (an exporter that sets no flags,
    e.g. a service called by an instrumented upstream) is the root when it encloses every
    other span in time: a real root does, while the first surviving child of a root that
    never arrived (a killed run) does not. Otherwise None: the trace has no root here.
    """
    best: Span | None = None
    for span in spans:
        if span.is_entry and (best is None or _start_then_longest(span)
                              < _start_then_longest(best)):
            best = span
    if best is not None or not spans:
        return best
    ids = {s.span_id for s in spans}
    orphans = [s for s in spans if s.parent_span_id not in ids and s.parent_remote is None]
    if not orphans:
        return None
    first = min(orphans, key=_start_then_longest)
    start, end = first.start_ns, first.end_ns
    if end and all(start <= s.start_ns and 0 < s.end_ns <= end for s in spans):
        return first
    return None


def run_span(spans: Sequence[Span]) -> Span | None:
    """The span a run's results are attached to: the ``gen_ai.evaluation.result`` records of
    the findings, the verdict and the judge, a failed evaluation's record, and the summary
    attributes stamped on forwarded spans. The one definition, in this order:

    1. ``local_root``: the earliest entry span (no parent, or a remote one), else an orphan
       that encloses every other span in time;
    2. else the earliest span (earliest start, then the longest): a run whose root never
       arrived (killed before its root span ended, so it was never exported), or whose
       spans all hang under parents elsewhere;
    3. None when there are no spans.
    """
    root = local_root(spans)
    if root is None and spans:
        root = min(spans, key=_start_then_longest)
    return root


def run_span_id(spans: Sequence[Span]) -> str:
    """``run_span``'s id, "" when there are no spans."""
    span = run_span(spans)
    return span.span_id if span is not None else ""


@dataclass(slots=True)
class LogEvent:
    """An OTLP log record tied to a span (a GenAI event such as ``gen_ai.choice`` or
    ``gen_ai.client.inference.operation.details``): what instrumentations send when message
    content goes to logs instead of span attributes."""

    trace_id: str
    span_id: str
    name: str  # the record's event_name, else its ``event.name`` attribute
    time_unix_nano: int
    attributes: dict[str, Any]
    body: Any  # the record's body as a Python value (None when empty)


@dataclass(slots=True)
class Trace:
    """All spans of one trace id, as released by assembly."""

    trace_id: str
    spans: list[Span]
    status: TraceStatus
    source: str = "otlp"  # otlp | kafka | file name for offline runs
    revision: int = 0  # > 0 when late spans re-opened an already released trace
    release_reason: str = ""  # root_ended | idle_timeout | max_duration | overflow | shutdown | eof
    # Called once each when this trace's evaluation is stored (Kafka offset tracking).
    waiters: list[Callable[[], None]] = field(default_factory=list)
    logs: list[LogEvent] = field(default_factory=list)  # GenAI events sent as log records
    # ``content_digest`` of what was released (set by finishing at release; "" = not yet):
    # stored with the evaluation, so a redelivered trace of the same content is not
    # evaluated again (Kafka rebalance, spool replay)
    digest: str = ""


def content_digest(trace: Trace) -> str:
    """What a trace's evaluation was made from, as a short hex digest: its span ids with
    their end times, and its log records (span id, time, name, body, attributes), each set
    in a canonical order, so the same spans and records redelivered in another order or
    batching give the same digest, and a span that ended later or one more record does not.
    Linear in the trace's size."""
    h = hashlib.blake2b(digest_size=16)
    for span_id, end_ns in sorted((s.span_id, s.end_ns) for s in trace.spans):
        h.update(f"s{span_id}:{end_ns};".encode())
    records = sorted((r.span_id, r.time_unix_nano, r.name, repr(r.body), repr(r.attributes))
                     for r in trace.logs)
    for rec in records:
        h.update(repr(rec).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


@dataclass(slots=True)
class ToolCall:
    """A tool call an LLM step asked for (from its output messages)."""

    name: str
    arguments: Any  # parsed JSON when possible, else the raw string
    call_id: str | None = None
    # ran (a tool step ran it) | rebuilt (no span; rebuilt from the output or a later input) |
    # never_ran (asked for, and neither a span nor a later call says it ran) | "" = not known
    outcome: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments, "call_id": self.call_id,
                "outcome": self.outcome or None}


# Longest message text, tool result or LLM reply kept per step in the v1 object, characters:
# enough to read a step; the rest is counted (``truncated``), so a 20 MB tool output is not a
# 20 MB result row. Arguments and names are kept as they came (detectors report on them).
CONTENT_CHARS = 4096


def _kept(out: dict[str, Any], name: str, text: str | None) -> None:
    """``out[name] = text``, cut to ``CONTENT_CHARS``; the full length of a cut value goes to
    ``out["truncated"][name]``."""
    if text is None:
        return
    if len(text) > CONTENT_CHARS:
        out.setdefault("truncated", {})[name] = len(text)
        text = text[:CONTENT_CHARS]
    out[name] = text


@dataclass(slots=True)
class Step:
    index: int
    span_id: str
    parent_span_id: str | None
    kind: StepKind
    name: str
    node: str | None = None  # the agent / sub-agent this step belongs to
    depth: int = 0
    status: Literal["ok", "error"] = "ok"
    error: str | None = None
    start_ns: int = 0
    end_ns: int = 0
    # tool steps
    tool_name: str | None = None
    arguments: Any = None  # parsed JSON when possible, else the raw string; None = not recorded
    result: str | None = None  # raw text of the tool result (or agent/chain output)
    call_id: str | None = None  # the tool-call id this tool step ran (joins it to its LLM call)
    # the decision taken on the call before it ran (``gen_ai.tool.call.decision.outcome``):
    # allow | deny | require_approval; None = not recorded. A denied call is no tool error
    decision: str | None = None
    # llm steps
    model: str | None = None
    finish_reasons: list[str] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    # input tokens written to the provider's cache (``gen_ai.usage.cache_write.input_tokens``,
    # formerly ``cache_creation``); part of ``input_tokens``; None = not recorded
    cache_write_tokens: int | None = None
    input_text: str | None = None  # raw input messages / prompt as carried by the span
    output_text: str | None = None  # raw output / completion text
    reply: str | None = None  # the reply's text, when the convention records it apart
    tool_calls: list[ToolCall] = field(default_factory=list)  # calls an llm step requested
    rebuilt: bool = False  # a tool step rebuilt from an LLM's output (no span of its own)
    # a tool call made from inside a code action step (``trajectory.code_actions``): a step
    # of that action, not one of the run's own (budgets and the steps histogram count the
    # action once); the loop rules still compare it with the other calls of its tool
    in_code: bool = False
    # a code action an LLM reply wrote, made a step of its own (``trajectory.code_actions``:
    # smolagents' python_interpreter block): a step of the run, not a tool call (the calls of
    # known tools in it are, marked ``in_code``)
    code_block: bool = False
    convention: str = "unknown"
    # llm steps, readable (``conventions.messages``): the last message it was sent (user or
    # tool) and the text of its reply; None when not recorded
    prompt: str | None = None
    answer: str | None = None
    # llm steps: the output messages as its reader parsed them (a JSON list: GenAI reads the
    # calls they request), handed to the readable pass, which reads ``answer`` from them and
    # drops them: the output is parsed once. They are the parse of ``output_text`` while that
    # is not None (an output is never replaced once read, only made unknown: ``shapes``)
    parsed_output: list[Any] | None = None
    # which convention and attribute supplied each field ("genai gen_ai.tool.call.arguments",
    # "span name", "llm call <id>"), and the fields read but not understood (field -> reason);
    # for ``otel-eval inspect``, not part of the v1 object
    sources: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)
    # values cut to the result bounds (``evaluate.bounds``): field -> its full size, bytes of
    # JSON; written into the v1 object's ``truncated`` beside the texts cut there
    cut: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
            "kind": self.kind,
            "node": self.node,
            "name": self.name,
            "tool_name": self.tool_name,
            "arguments": self.arguments,
            "status": self.status,
            "error": self.error,
            "start_time_unix_nano": self.start_ns,
            "end_time_unix_nano": self.end_ns,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
        }
        if self.model is not None:
            out["model"] = self.model
        if self.finish_reasons:
            out["finish_reasons"] = list(self.finish_reasons)
        if self.cost_usd is not None:
            out["cost_usd"] = round(self.cost_usd, 12)  # 5.55e-05, not 5.5499999999999994e-05
        if self.call_id is not None:
            out["call_id"] = self.call_id
        if self.rebuilt:
            out["rebuilt"] = True
        if self.cut:
            out["truncated"] = dict(self.cut)
        if self.kind == "tool":
            _kept(out, "result", self.result)
        elif self.kind == "llm":
            _kept(out, "prompt", self.prompt)
            _kept(out, "answer", self.answer)
            if self.tool_calls:
                out["tool_calls"] = [c.to_json() for c in self.tool_calls]
        return out


@dataclass(slots=True)
class Trajectory:
    trace_id: str
    source: str
    status: TraceStatus
    steps: list[Step]
    service: str | None = None
    agent: str | None = None
    # where ``agent`` came from: span (an agent span that arrived) | child_span (a name
    # stamped on the spans under it) | inferred_history (the service's completed runs) |
    # unknown (agent None)
    agent_source: AgentSource = "unknown"
    task_id: str | None = None
    convention: str = "unknown"
    start_ns: int = 0
    end_ns: int = 0
    input: str | None = None  # raw, as the spans carried it (messages, state, text)
    output: str | None = None
    # the user's text of ``input`` / ``output`` (the first user message, the last reply's
    # text; the raw value when it is not messages), and the messages when it is
    task: str | None = None
    answer: str | None = None
    input_messages: list[Any] | None = None
    output_messages: list[Any] | None = None
    tools: dict[str, Any] = field(default_factory=dict)  # offered tool name -> JSON schema
    root_attributes: dict[str, Any] = field(default_factory=dict)
    revision: int = 0
    span_count: int = 0
    # parts of building that failed on this trace's content, each {part, span_id, error};
    # the detectors report each as an ``evaluation_error`` finding (issue 11)
    errors: list[dict[str, str]] = field(default_factory=list)
    root_span_id: str | None = None  # ``local_root`` of the trace; None when it has none
    run_span_id: str = ""  # ``run_span_id`` of the trace: where its results are attached
    # What the instrumentation did not record, by field: how many steps lack it (``output``: 1
    # when the run's answer is unknown); ``unparsed``: values present but not understood
    # (arguments, results, LLM outputs: one per value). Detectors draw no conclusion from these.
    unrecorded: dict[str, int] = field(default_factory=dict)
    # Code actions read from LLM replies (``trajectory.code_actions``): blocks, calls, calls
    # that are steps, rebuilt steps, ``unparsed_<reason>``. Empty when no reply holds code.
    code_actions: dict[str, int] = field(default_factory=dict)
    # The conversation (session, thread) this turn belongs to and the conversation's user,
    # read from every convention that carries one (``conventions.conversations``); None
    # when no span carries one. ``conversation_sources``: field -> "<convention> <key>".
    session_id: str | None = None
    user_id: str | None = None
    conversation_sources: dict[str, str] = field(default_factory=dict)

    @property
    def root_step(self) -> Step | None:
        """The step of the local root (``root_span_id``); None when the trace has none."""
        if self.root_span_id is None:
            return None
        return next((s for s in self.steps if s.span_id == self.root_span_id), None)

    @property
    def duration_s(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9

    @property
    def llm_steps(self) -> list[Step]:
        return [s for s in self.steps if s.kind == "llm"]

    @property
    def tool_steps(self) -> list[Step]:
        return [s for s in self.steps if s.kind == "tool"]

    def top_level_tool_steps(self) -> list[Step]:
        """Tool steps not nested (at any depth) under another tool step, but for the calls an
        interpreter tool's code made (``Step.in_code``: ``code_actions``).

        One pass in step order (tree order: a parent comes before its children) remembers for
        each span whether a tool step is at or above it, so a chain of n nested spans costs n,
        not n x depth. A parent not seen yet (spans caught in a parent cycle, or a parent that
        is no step) is walked up, at most 1000 levels. Plain loops, no Python call per step:
        ``to_json`` counts the steps of every run it writes (tests/cost)."""
        tools: set[str] = set()
        parent: dict[str, str | None] = {}
        for s in self.steps:
            if s.kind == "tool":
                tools.add(s.span_id)
            parent.setdefault(s.span_id, s.parent_span_id)
        under_tool: dict[str, bool] = {}  # span id -> a tool step is at or above it
        out = []
        for s in self.steps:
            p = s.parent_span_id
            if p is None:
                known = False
            elif p in under_tool:
                known = under_tool[p]
            else:  # parent after its child (only in a cycle) or no step: walk up
                known, seen = False, 0
                while p is not None and seen < 1000:
                    if p in tools:
                        known = True
                        break
                    p, seen = parent.get(p), seen + 1
            if s.kind == "tool" and (not known or s.in_code):
                out.append(s)  # a call made from an interpreter tool's code is a call
            # rebuilt tool steps share their LLM step's span id: the first entry decides
            if s.span_id not in under_tool:
                under_tool[s.span_id] = known or s.span_id in tools
        return out

    @property
    def action_steps(self) -> list[Step]:
        """The run's steps, the one meaning of "steps" everywhere (``counts()["steps"]``, the
        run list, ``show``, ``--budget steps``, ``otel_eval_trace_steps``): the agent's own
        actions, its top-level tool steps, a code action counted once (not the calls of known
        tools made from its code, nor the tool spans nested under a tool, such as a
        sub-agent's). LLM calls are not steps: they are counted as LLM calls."""
        out = []
        for s in self.top_level_tool_steps():
            if not s.in_code:
                out.append(s)
        return out

    @property
    def tool_call_steps(self) -> list[Step]:
        """The tool calls: tool steps but the code blocks an LLM reply wrote (a block is a
        step, the calls of known tools in it are the calls; an interpreter tool's span, which
        the LLM called, is one)."""
        return [s for s in self.steps if s.kind == "tool" and not s.code_block]

    def usage(self) -> dict[str, Any]:
        llm = self.llm_steps
        costs = [s.cost_usd for s in llm if s.cost_usd is not None]
        return {
            "input_tokens": sum(s.input_tokens or 0 for s in llm),
            "output_tokens": sum(s.output_tokens or 0 for s in llm),
            "cost_usd": round(sum(costs), 12) if costs else None,
        }

    def counts(self) -> dict[str, int]:
        """``llm_calls`` as ``llm_steps``, ``tool_calls`` as ``tool_call_steps``, ``steps`` as
        ``action_steps``, counted in one loop (no Python call per step: every stored run pays
        it, tests/cost)."""
        llm = tool_calls = errors = 0
        for s in self.steps:
            if s.kind == "llm":
                llm += 1
            elif s.kind == "tool" and not s.code_block:
                tool_calls += 1
            if s.status == "error":
                errors += 1
        return {"spans": self.span_count, "steps": len(self.action_steps), "llm_calls": llm,
                "tool_calls": tool_calls, "errors": errors}


# Finding kinds (of the non-termination detector) that mean the run did not end; they alone
# count as a non-terminated trace in metrics and alerts (a failed or silent run did end).
NOT_ENDED_KINDS = frozenset({"incomplete", "truncated", "halted", "length_stop",
                             "pending_tool_calls"})


@dataclass(slots=True)
class Finding:
    detector: str  # loop | non_termination | budget | tool_call | reference | recovery | lucky_pass
    kind: str
    severity: Severity
    message: str
    span_ids: list[str] = field(default_factory=list)
    step_indexes: list[int] = field(default_factory=list)
    attributes: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "detector": self.detector,
            "kind": self.kind,
            "severity": self.severity,
            "message": self.message,
            "span_ids": list(self.span_ids),
            "step_indexes": list(self.step_indexes),
            "attributes": dict(self.attributes),
        }


@dataclass(slots=True)
class Verdict:
    passed: bool
    reasons: list[str]
    outcome: str | None = None  # success | failure when known
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. "reference": {...}

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "reasons": list(self.reasons), "outcome": self.outcome,
                **self.extra}


@dataclass(slots=True)
class Evaluation:
    """What the pipeline stores and exports for one trace."""

    trajectory: Trajectory
    findings: list[Finding] = field(default_factory=list)
    verdict: Verdict | None = None
    judge: dict[str, Any] | None = None
    evaluated_at_ns: int = 0
    error: str | None = None  # set when evaluation itself failed (the trace is still stored)
    # {"p_success", "model"} from the success predictor; None without a model (no default)
    prediction: dict[str, Any] | None = None
    # The v1 object as cut to ``trajectory.max_result_bytes`` (``evaluate.bounds``), when
    # the whole one was larger; ``to_json`` returns it instead of building the object anew
    bounded: dict[str, Any] | None = None
    # the released trace's ``content_digest``, stored in its own column (not in the v1 object)
    content_digest: str | None = None
    # ``json_text`` of the v1 object as ``evaluate.bounds`` encoded it, with the judge, the
    # prediction and the number of findings it was made with: ``to_json_text`` reuses it while
    # they are the same (issue 34: a stored body is encoded once); None: encode anew
    encoded: tuple[str, Any, Any, int] | None = None

    @property
    def trace_id(self) -> str:
        return self.trajectory.trace_id

    def to_json(self, finite_floats: bool = True) -> dict[str, Any]:
        """The v1 per-trace object; ``finite_floats=False`` leaves NaN / +-Infinity floats
        as they are (``to_json_text`` replaces them only when there is one)."""
        if self.bounded is not None:
            out = dict(self.bounded)
            return finite(out) if finite_floats else out
        t = self.trajectory
        out = {
            "trace_id": t.trace_id,
            "source": t.source,
            "service": t.service,
            "agent": t.agent,
            "agent_source": t.agent_source,
            "task_id": t.task_id,
            "status": t.status,
            "convention": t.convention,
            "revision": t.revision,
            "start_time_unix_nano": t.start_ns,
            "duration_s": round(t.duration_s, 6),
            "input": t.task,
            "output": t.answer,
            "counts": t.counts(),
            "usage": t.usage(),
            "steps": [s.to_json() for s in t.steps],
            "findings": [f.to_json() for f in self.findings],
            "verdict": self.verdict.to_json() if self.verdict else None,
        }
        if t.input_messages is not None:
            out["input_messages"] = t.input_messages
        if t.output_messages is not None:
            out["output_messages"] = t.output_messages
        if t.unrecorded:
            out["unrecorded"] = dict(t.unrecorded)
        if t.code_actions:
            out["code_actions"] = dict(t.code_actions)
        if t.session_id is not None:  # a turn of a conversation, and the conversation's user
            out["session_id"] = t.session_id
            if t.user_id is not None:
                out["user_id"] = t.user_id
        if self.judge is not None:
            out["judge"] = self.judge
        if self.error is not None:
            out["error"] = self.error
        if self.prediction is not None:
            out["prediction"] = self.prediction
        return finite(out) if finite_floats else out

    def to_json_text(self) -> str:
        """``json.dumps(self.to_json())``, without first walking the whole object for
        non-finite floats (~4 us a span): strict encoding raises on one, and only then is the
        object walked and encoded again. Nearly every object has none. The text ``bound``
        encoded is reused while the judge, prediction and findings it saw are the same."""
        done = self.encoded
        if (done is not None and done[1] is self.judge and done[2] is self.prediction
                and done[3] == len(self.findings)):
            return done[0]
        return json_text(self.to_json(finite_floats=False))

    def to_json_ascii(self) -> str:
        """``json.dumps(self.to_json())`` (non-ASCII escaped), from ``to_json_text``."""
        return ascii_json(self.to_json_text())


def json_text(value: Any) -> str:
    """``value`` as JSON text for storing: UTF-8 text as it is (``ensure_ascii=False``: an
    "é" is 2 bytes, not the 6 of ``\\u00e9``; control characters are ``\\u0001`` either
    way), non-finite floats replaced (``finite``, walked only when strict encoding fails).
    Text holding a lone surrogate (which UTF-8 cannot carry; JSON input can) is written
    with ``ensure_ascii`` instead."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except ValueError:
        value = finite(value)
        text = json.dumps(value, ensure_ascii=False)
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            return json.dumps(value)
    return text


# what ``ensure_ascii`` escapes and ``ensure_ascii=False`` keeps (DEL too)
_NOT_ASCII = re.compile("[^\x00-\x7e]")


def _escaped(match: re.Match[str]) -> str:
    c = ord(match.group())
    if c < 0x10000:
        return f"\\u{c:04x}"
    c -= 0x10000
    return f"\\u{0xd800 | (c >> 10):04x}\\u{0xdc00 | (c & 0x3ff):04x}"


def ascii_json(text: str) -> str:
    """``json_text``'s text as ``json.dumps`` writes it by default (``ensure_ascii``): each
    character past ``~`` as ``\\uXXXX`` (a surrogate pair above U+FFFF). Outside strings JSON
    text is ASCII, so escaping every such character is what the encoder does."""
    if text.isascii() and "\x7f" not in text:
        return text
    return _NOT_ASCII.sub(_escaped, text)


_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def finite(value: Any) -> Any:
    """``value`` with each NaN / +-Infinity float replaced by the string the protobuf JSON
    mapping uses ("NaN", "Infinity", "-Infinity"): Python writes bare ``NaN`` tokens that
    strict JSON parsers reject (tool arguments may carry them). ``value`` itself is returned
    when it holds none; else a copy (tuples as lists). Walked iteratively: a value nested
    deeper than the interpreter's stack (JSON 600 levels deep) is no ``RecursionError``."""
    kind = type(value)
    if kind is float:
        return "NaN" if value != value else _NON_FINITE.get(value, value)
    if kind not in _CONTAINERS or not _any_non_finite(value):
        return value
    root = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]  # (container copied, key of a value in it)
    while stack:
        parent, key = stack.pop()
        v = parent[key]
        kind = type(v)
        if kind is float:
            parent[key] = "NaN" if v != v else _NON_FINITE.get(v, v)
        elif kind is dict:
            parent[key] = held = dict(v)
            stack.extend((held, k) for k, x in held.items() if type(x) in _CONTAINERS)
        elif kind is list or kind is tuple:
            parent[key] = items = list(v)
            stack.extend((items, i) for i, x in enumerate(items) if type(x) in _CONTAINERS)
    return root[0]


def _any_non_finite(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        kind = type(v)
        if kind is float:
            if v != v or v in _NON_FINITE:
                return True
        elif kind is dict:
            stack.extend(x for x in v.values() if type(x) in _CONTAINERS)
        elif kind is not str:  # list or tuple
            stack.extend(x for x in v if type(x) in _CONTAINERS)
    return False


_CONTAINERS = frozenset((float, dict, list, tuple))
