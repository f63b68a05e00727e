"""The model of what comes in: spans and the traces assembly releases (the bottom layer).

    SpanEvent       an event of a span (name, time, attributes)
    Origin          the resource and scope a decoded span came with, as received
    Span            one received span (ids, times, status eager; attributes decoded lazily)
    LogEvent        an OTLP log record tied to a span (a GenAI event carrying content)
    Trace           the spans of one trace id, as released by assembly, with a status

Promises: ``local_root`` and ``run_span`` are the one definition of a trace's root and of the
span its results are attached to; ``content_digest`` is what a trace's evaluation was made
from, the same for the same spans and records in any order. What is built from a trace is in
``steps`` (Step, Trajectory) and ``results`` (Finding, Verdict, Evaluation).

Attribute values stay as the protobuf/JSON carried them (str, int, float, bool, lists,
dicts); bulky message text is kept as the raw string and parsed only by whoever needs it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

TraceStatus = Literal["complete", "incomplete", "truncated"]

Attributes = Mapping[str, Any]

_TRACE_ID = re.compile("[0-9a-f]{32}")


def is_trace_id(text: object) -> bool:
    """A trace id as otel-eval writes and accepts one: 32 lowercase hex digits, nothing else
    (no trailing newline, which ``^...$`` with ``re.match`` let through)."""
    return isinstance(text, str) and _TRACE_ID.fullmatch(text) is not None


@dataclass(slots=True)
class SpanEvent:
    name: str
    time_unix_nano: int
    attributes: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Origin:
    """Where decoded spans came from, as received: their OTLP ``ResourceSpans`` and
    ``ScopeSpans`` serialized without their spans (resource attributes and dropped count,
    scope name, version and attributes, both schema URLs, fields of a newer OTLP that this
    protobuf does not know). One object per scope of a
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
        "status_message", "trace_id", "unevaluable", "wire",
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
        unevaluable: str | None = None,
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
        # Why otel-eval cannot evaluate this span though it holds the user's data (its times:
        # ``invalid_timestamp``), else None: assembly refuses it with that reason, or, with
        # pass-through, takes it only to pass on (``Trace.passed``); set by assembly to
        # ``foreign_sender`` for another sender's span it passes on for a released run
        self.unevaluable = unevaluable

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


def start_then_longest(span: Span) -> tuple[int, int, str]:
    """The order roots are chosen in: the earliest start, then the longest, then by span id
    (never by arrival: the same spans in another order have the same root)."""
    return span.start_ns, -span.end_ns, span.span_id


def local_root(spans: Sequence[Span]) -> Span | None:
    """The root of what this service sees of a trace: the first two steps of ``run_span``,
    without its last resort. Assembly asks it whether a trace's root has ended, the
    trajectory reads the run's input, output, service and outcome from it, and
    non-termination reports on its step (``Trajectory.root_span_id``).

    An *entry* span (no parent, or a parent flagged remote by the OTLP span flags) is a root;
    the earliest one when there are several (earliest start, then the longest), a span with no
    parent before every one with a remote parent: that one descends from a span upstream, so
    it starting first says only that its service's clock is behind (a trace received whole,
    from every service: the trace's own root is the run's). Nor is an entry with a remote
    parent the root while a span of another service waits for an absent parent its exporter
    flags local: that service's own root, which has not come (an orchestrator still
    running, or hung, after the agent it called there answered), is the run's. Without one,
    a span whose parent is absent and not known to be local (an exporter that sets no flags,
    e.g. a service called by an instrumented upstream) is the root when it encloses every
    other span in time: a real root does, while the first surviving child of a root that
    never arrived (a killed run) does not. Otherwise None: the trace has no root here.
    """
    best: Span | None = None
    remote: Span | None = None  # the earliest entry with a remote parent
    for span in spans:  # ``is_entry`` inlined: every span of every trace comes here
        if span.parent_span_id is None:
            if best is None or start_then_longest(span) < start_then_longest(best):
                best = span
        elif span.parent_remote is True and (
                remote is None or start_then_longest(span) < start_then_longest(remote)):
            remote = span
    if best is not None or not spans:
        return best
    ids = {s.span_id for s in spans}
    if remote is not None:
        return None if _caller_pending(spans, ids, remote) else remote
    orphans = [s for s in spans if s.parent_span_id not in ids and s.parent_remote is None]
    if not orphans:
        return None
    first = min(orphans, key=start_then_longest)
    start, end = first.start_ns, first.end_ns
    if end and all(start <= s.start_ns and 0 < s.end_ns <= end for s in spans):
        return first
    return None


def _caller_pending(spans: Sequence[Span], ids: set[str], entry: Span) -> bool:
    """Whether a span of a service other than ``entry``'s waits for an absent parent flagged
    local (a span of its own service waiting so is one of its spans lost, not its caller)."""
    service = entry.resource.get("service.name")
    return any(s.parent_remote is False and s.parent_span_id not in ids
               and s.resource.get("service.name") != service for s in spans)


def run_span(spans: Sequence[Span]) -> Span | None:
    """The span a run's results are attached to: the ``gen_ai.evaluation.result`` records of
    the findings, the verdict and the judge, a failed evaluation's record, and the summary
    attributes stamped on forwarded spans. The one definition, in this order:

    1. ``local_root``: the earliest entry span (no parent, or a remote one), else an orphan
       that encloses every other span in time;
    2. else the earliest span (earliest start, then the longest) that is not an entry with a
       remote parent (one descends from a span upstream: its start before the others' says
       only that its clock is behind), else the earliest span: a run whose root never
       arrived (killed before its root span ended, so it was never exported), or whose
       spans all hang under parents elsewhere;
    3. None when there are no spans.
    """
    root = local_root(spans)
    if root is None and spans:
        local = [s for s in spans if s.parent_remote is not True or s.parent_span_id is None]
        root = min(local or spans, key=start_then_longest)
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
    # the service.name of its resource ("" when it names none, or not known): whose share
    # of the pending log records it counts in until its trace is evaluated (assembly)
    service: str = ""
    # when its sender's SDK took it (OTLP ``observed_time_unix_nano``; 0 = not sent): what
    # orders records of one span stamped alike that came in different requests
    # (``evaluate.conventions.events``)
    observed_time_unix_nano: int = 0


@dataclass(slots=True)
class Finished:
    """What finishing made of one released revision of a trace (``Trace.finished``), read by
    assembly when late spans re-open it: a revision skipped as ``late`` (a fragment of a run
    stored before a restart) makes the next one late if stored too."""

    late: bool = False  # skipped as ``late``: the store held another run of that id


@dataclass(slots=True)
class Trace:
    """All spans of one trace id, as released by assembly."""

    trace_id: str
    spans: list[Span]
    status: TraceStatus
    source: str = "otlp"  # otlp | kafka | file name for offline runs
    revision: int = 0  # > 0 when late spans re-opened an already released trace
    # root_ended | idle_timeout | max_duration | overflow | service_share | trace_too_large
    # | shutdown | eof
    release_reason: str = ""
    # Called once each when this trace's evaluation is stored (Kafka offset tracking): of
    # the requests that fed it, and of those delivered again while it was being stored
    # (``Finishing.wait_for``)
    waiters: list[Callable[[], None]] = field(default_factory=list)
    logs: list[LogEvent] = field(default_factory=list)  # GenAI events sent as log records
    # ``content_digest`` of what was released (set by finishing at release; "" = not yet):
    # stored with the evaluation, so a redelivered trace of the same content is not
    # evaluated again (Kafka rebalance, spool replay)
    digest: str = ""
    # Set by assembly on a trace its process started from spans that arrived live (not a
    # re-open, not a restart's replay): if the store already holds an evaluation of this
    # trace id, these spans came after that run was released, to a process that no longer
    # holds it (a restart, or a trace id assembly no longer remembers). They are ``late``,
    # as assembly refuses them while it remembers the id: a fragment never replaces a run.
    # ``evaluate.stage`` decides by the stored run's span ids and records (``content_ids``:
    # a trace holding them all is more of the run, in process and in a worker alike); this
    # mark decides only for a row stored before they were kept.
    late_if_stored: bool = False
    finished: Finished = field(default_factory=Finished)
    # Spans taken only to be passed on (pass-through: past ``max_spans_per_trace``, or
    # ``Span.unevaluable``, which without it are refused as ``trace_too_large`` or with that
    # reason, ``foreign_sender`` included): never evaluated nor in ``digest``,
    # forwarded unstamped with the trace's spans
    passed: list[Span] = field(default_factory=list)


def content_digest(trace: Trace) -> str:
    """What a trace's evaluation was made from, as a short hex digest: its span ids with
    their end times, and its log records (span id, time, name, body, attributes), each set
    in a canonical order, so the same spans and records redelivered in another order or
    batching give the same digest, and a span that ended later or one more record does not;
    nor does the same content released ``truncated`` (a run re-opened by an item it had no
    room for: judged whole before, cut now). Linear in the trace's size."""
    h = hashlib.blake2b(digest_size=16)
    if trace.status == "truncated":  # (complete and incomplete hash as before it was kept)
        h.update(b"truncated;")
    for span_id, end_ns in sorted((s.span_id, s.end_ns) for s in trace.spans):
        h.update(f"s{span_id}:{end_ns};".encode())
    for rec in sorted(_record_key(r) for r in trace.logs):
        h.update(repr(rec).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def _record_key(record: LogEvent) -> tuple[str, int, str, str, str]:
    """What tells one log record from another (span id, time, name, body, attributes). Not
    its observed time: the same record keeps it when delivered again (its bytes), but a spool
    row an earlier release re-encoded from the decoded record lost it, and keys stored by
    earlier releases lack it; records alike but for it count apart in ``content_ids``."""
    return (record.span_id, record.time_unix_nano, record.name, repr(record.body),
            repr(record.attributes))


def content_ids(trace: Trace) -> set[str]:
    """What a trace's evaluation was made from, item by item: its span ids and, for each log
    record, ``r`` and a short hash of what tells it apart (never a span id: those are hex).
    A trace whose ids include a stored evaluation's holds all that run was made from (more
    of it); one lacking some is a fragment (``evaluate.stage``). Records alike (the same
    key: assembly holds two whose bytes differ, such as two equal messages of a call's
    history told apart only by their observed time) are as many items: the n-th such one,
    in any order, hashes with ``#n`` from the second on, so a trace lacking one of them is
    a fragment, and a lone record's id is what earlier releases stored. Linear in the
    trace's size."""
    ids = {s.span_id for s in trace.spans}
    alike: dict[bytes, int] = {}
    for r in trace.logs:
        key = repr(_record_key(r)).encode("utf-8", "surrogatepass")
        n = alike[key] = alike.get(key, 0) + 1
        ids.add("r" + hashlib.blake2b(key if n == 1 else b"%s#%d" % (key, n),
                                      digest_size=8).hexdigest())
    return ids
