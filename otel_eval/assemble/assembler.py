"""Stage: assembly. Groups spans by trace id and decides when a trace is finished.

A trace is released
- ``complete``   when its root span has ended and no span arrived for ``grace_s``;
- ``incomplete`` when its root has not ended and no span arrived for ``idle_timeout_s``
                 (the agent never finished: the non-termination case);
- ``truncated``  when it has been open ``max_trace_duration_s``, or was pushed out by the
                 ``release_oldest`` overflow policy or slot pressure (``give_way``) before
                 its run ended (one that had ended is ``complete``), or when spans of it
                 were refused for their service's share (``cut``: reason
                 ``service_share``) whatever else, or when spans of it past
                 ``max_spans_per_trace`` were refused (or, with pass-through, only passed
                 on: ``full``, reason ``trace_too_large``) and it would otherwise be
                 ``complete`` (a run whose root never ended, the root always taken, stays
                 ``incomplete``).
The root is ``model.local_root``: a span without a parent, or whose parent the exporter flagged
as remote, ends the run as soon as it ends (not a called service's entry while a span of
another service waits for an absent parent flagged local: the orchestrator whose remote agent
answered goes on, due as a run whose root has not ended); a root whose absent parent
carries no flag (an exporter without span flags, called from an instrumented upstream) is
recognised when the trace goes idle, and the trace is then released ``complete`` instead of
``incomplete``.

GenAI events sent as OTLP log records (``add_logs``) join their trace whether they arrive
before or after its spans: a record for an unknown trace opens it (it is released with the
spans that follow, or dropped as ``no_spans`` if none do). Records are held as their bytes
(``decode.otlp_logs.HeldRecord``, counted in ``open_log_bytes``) and decoded when their
trace is released.
Spans for a trace released less than ``reopen_window_s`` ago re-open it (``revision`` + 1;
the newest ``max_released_traces``, holding ``max_released_bytes`` at most, are kept: their
bytes as received and ``SPAN_HELD_BYTES`` per span);
its evaluation is then superseded. A span it already holds is a ``duplicate_span`` there too
(a client retrying an acknowledged request re-opens nothing), and so is a log record it holds
(``duplicate_log_record``: the same record's bytes; held twice, its event would read as the
run's twice). Later spans are rejected as
``late`` while the trace id is remembered (``max_tombstones`` ids, ``ID_HELD_BYTES`` each);
beyond that they start a new trace.

Pass-through (``pass_through``: otel-eval in the trace path) owes the backend every span
that assembly refuses only because otel-eval cannot *evaluate* it; those are taken and passed
on unstamped instead: ``late`` (a fragment of its own, skipped as late),
``trace_too_large`` (past ``max_spans_per_trace``: held in ``Trace.passed``, counted in
pending as any span, released with the trace, never evaluated) and ``invalid_timestamp``
(``Span.unevaluable``: longer than a year or with no start; held in ``Trace.passed`` too).
So is a ``foreign_sender``'s span (a sender other than the one that opened a released run,
such as a second service of the same distributed trace whose spans come after the run was
released): it may not add to that run, but its span is the user's telemetry. It opens a
``passing`` trace in front of the run, not re-opening it: the span is held to pass on
(``Trace.passed``, marked ``Span.unevaluable`` ``foreign_sender``), and so are another
sender's further spans, its records refused (``foreign_sender``). Released, that trace holds
only what it passes on (finishing passes it on as ``foreign_sender``): the run is neither
evaluated nor forwarded again, nor are its events sent again, and it stays re-openable as
released. When the run's own span or record joins first, the run is re-opened there
(``_join``), as without pass-through, and what was passed on goes with it. The passing trace
takes a revision of its own, so the spool tells its rows from the run's (released, it lets
only its own go: ``Held.alone``; the run's may still be in delivery), and a re-open after
it is a revision later still; nothing of the run is spooled again for it, so a restart's
replay holds only what it passes on: the spool marks the pairs of the spans taken so
(``AddResult.foreign``), and a replay passes them on again (``foreign_sender``), even
after the run's own sender joined them before the crash.
Only a ``duplicate_span`` stays refused (the backend has it).

Time is injected: ``add(spans, now)`` and ``tick(now)`` take the clock reading, so tests drive
time by hand. Deadlines sit in a heap with lazy re-scheduling: the spans of an ``add`` only
move their traces' own deadlines (once per trace, after the last of its spans); the heap entry
is re-pushed when it surfaces too early. That is O(1) per span and O(log n) per release,
with no timer per trace (the collector's id batcher achieves the same with a ring of
one-second batches).

Not thread-safe: the engine serializes calls.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from otel_eval.assemble.config import AssemblyConfig
from otel_eval.assemble.service_load import ServiceLoad, service_of
from otel_eval.base.model import Finished, Span, Trace, TraceStatus, local_root

if TYPE_CHECKING:  # records come held (decode.otlp_logs); the assembler only reads them
    from otel_eval.decode.otlp_logs import HeldRecord

# Memory one held span costs beyond its bytes as received (``Span.nbytes``): the ``Span``, its
# ids, its wire slice and lazy reader, its place in its trace's dict; ~1 KB measured for a
# small span (tests/test_assembly.py). Charged to ``max_released_bytes``, which bounds the
# memory of released traces kept for re-opening: a trace of many small spans held ~16x its
# bytes as received.
SPAN_HELD_BYTES = 1024
# Memory one held GenAI log record costs beyond its bytes as received (``HeldRecord``, its
# ids and name, its key in its trace's set): ~350 bytes measured for a small one. Charged to
# max_released_bytes with the record's bytes (tests/test_assembly.py).
RECORD_HELD_BYTES = 512
# Memory one remembered trace id costs (a tombstone, or a cut mark): its 32-character str
# and its place in an ordered dict, ~180-250 bytes measured as the table fills
# (tests/test_assembly.py); the default million tombstones hold up to ~250 MB, and as many
# cut marks as much again.
ID_HELD_BYTES = 256

# Reasons a span is refused by assembly (counted as rejected; never acknowledged).
ASSEMBLY_REJECT_REASONS = ("duplicate_span", "trace_too_large", "late", "foreign_sender")
# Reasons a log record held by assembly is dropped: its trace ended without any span; or so
# did one of a run the store holds (``late``: the stored run stands), told by the engine,
# which reads the store (``dropped_logs_only``).
LOG_DROP_REASONS = ("no_spans", "late")


@dataclass(slots=True)
class _Open:
    trace_id: str
    spans: dict[str, Span]
    logs: list[HeldRecord]
    first_seen: float
    last_seen: float
    root_ended: bool = False
    revision: int = 0
    source: str = "otlp"  # where its first span came from: otlp | kafka
    sender: str = ""  # authenticated sender (token name) of its first span; "" without auth
    service: str = ""  # service.name of its first span (per-service share of slots)
    nbytes: int = 0  # received size of its spans
    log_bytes: int = 0  # received size of its log records
    deadline: float = 0.0  # when the trace is due, given what has arrived so far
    resumed_at: float | None = None  # when a restart's replay handed it back (``resume``)
    # spans past max_spans_per_trace taken only to pass on (pass-through): ``Trace.passed``
    passed: dict[str, Span] = field(default_factory=dict)
    fresh: bool = True  # opened anew, not re-opened: its run may be stored (a restart)
    # handed back by a restart's replay with what a stored revision of it held (the spool
    # re-spooled that when late spans re-opened it): a whole run, not a straggler (``resume``)
    carried: bool = False
    previous: Finished | None = None  # what became of the revision it re-opened
    scheduled: float = float("inf")  # deadline of this trace's live heap entry
    waiters: list[Callable[[], None]] = field(default_factory=list)
    # the ``raw`` bytes of ``logs``: a record held already is a ``duplicate_log_record``
    log_keys: set[bytes] = field(default_factory=set)
    # opened by another sender's span for a released run only to pass it on (pass-through),
    # and not joined by the run's own sender since: another sender's spans are passed on, its
    # records refused; the run is not re-opened but parked here (``parked``)
    passing: bool = False
    # the released run a ``passing`` trace stands in front of: back to the re-openable ones
    # at its release (the run neither released again nor sent again), or carried in when the
    # run's own sender joins (a re-open as any other: ``_join``)
    parked: _Released | None = None
    # spans of it were refused for their service's share (``cut``): released ``truncated``
    # (reason ``service_share``), never judged as a whole run
    cut: bool = False
    # spans of it past max_spans_per_trace were refused or only passed on, or log records
    # past max_log_records_per_trace refused (``full``): not the whole run, so released
    # ``truncated`` (reason ``trace_too_large``) when complete
    full: bool = False


@dataclass(slots=True)
class _Released:
    at: float
    spans: dict[str, Span]  # the open trace's own dict, handed over (span id -> span)
    revision: int  # the last released of the trace id (a passing trace's, after the run's)
    sender: str = ""
    logs: list[HeldRecord] = field(default_factory=list)
    finished: Finished | None = None  # the released trace's, set by finishing
    log_keys: set[bytes] = field(default_factory=set)  # the open trace's, handed over
    cut: bool = False  # the open trace's: a re-open still misses what was refused
    root_ended: bool = False  # the open trace's: an entry span of it had ended
    full: bool = False  # the open trace's: spans past max_spans_per_trace were not evaluated
    # released ``complete``: an item it has no room for cuts it (re-opened, released again
    # ``truncated``); any other is refused without re-opening it (nothing would change)
    complete: bool = False
    # its spans' and records' bytes as received, ``SPAN_HELD_BYTES`` per span and
    # ``RECORD_HELD_BYTES`` per record (``max_released_bytes``)
    nbytes: int = 0


@dataclass
class AddResult:
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    reopened: int = 0  # traces re-opened by late spans (or log records)
    late_spans: int = 0  # spans those traces took
    carried_spans: int = 0  # spans of their released revisions those traces took back
    traces: set[str] = field(default_factory=set)  # trace ids that took spans
    # trace ids that refused items as already theirs (``duplicate_span``) or as arriving after
    # they were released (``late``): a redelivered Kafka record's items are held by such a
    # trace, and the engine tells the record's waiter when that release is stored
    known: set[str] = field(default_factory=set)
    # trace ids whose spans were taken only to pass on as another sender's (a ``passing``
    # trace's ``foreign_sender``): the spool marks their pairs so, for a replay that knows
    # no sender (``Spool.settle``)
    foreign: set[str] = field(default_factory=set)


class TraceAssembler:
    def __init__(self, config: AssemblyConfig, *, pass_through: bool = False) -> None:
        """``pass_through``: otel-eval is in the trace path and must not swallow the user's
        spans for want of evaluating them (module docstring). A span for a trace released
        past ``reopen_window_s`` (still remembered) opens a trace of its own instead of being
        refused as ``late``; released, finishing skips it as ``late``
        (``Trace.late_if_stored``: the stored run stands) and passes it on, as after a
        restart. A span past ``max_spans_per_trace`` is held in ``Trace.passed`` instead of
        being refused as ``trace_too_large``, and so is a ``foreign_sender``'s span (held by
        a trace in front of the run only to be passed on: module docstring)."""
        self.config = config
        self.pass_through = pass_through
        self._open: dict[str, _Open] = {}
        self._heap: list[tuple[float, str]] = []
        # Released traces that late spans may still re-open (spans kept), oldest first.
        self._reopenable: OrderedDict[str, _Released] = OrderedDict()
        self.released_bytes = 0  # what ``_reopenable`` holds (``max_released_bytes``)
        # Ids of traces released earlier still (no spans kept): late spans for them are refused.
        self._tombstones: OrderedDict[str, None] = OrderedDict()
        # Ids of traces not open whose spans were refused for a service's share (``cut``),
        # newest last, at most ``max_tombstones``: the run opened for one later misses them.
        self._cut: OrderedDict[str, None] = OrderedDict()
        # Open traces holding exactly one span, or only log records, oldest first (they give
        # way under pressure).
        self._singles: OrderedDict[str, None] = OrderedDict()
        self._per_service: Counter[str] = Counter()
        # the open spans (and passed ones) per their own service.name: its share of them
        self.load = ServiceLoad()
        self.log_load = ServiceLoad()  # the log records held, per their resource's service
        self.open_spans = 0
        self.open_bytes = 0
        self.open_logs = 0
        self.open_log_bytes = 0  # received size of the log records held (HeldRecord.nbytes)
        # (trace id, records) of traces dropped with only log records, not yet counted: the
        # engine drains it and counts them by LOG_DROP_REASONS
        self.dropped_logs_only: list[tuple[str, int]] = []
        # (trace id, revision) of traces dropped with only log records: the engine drains it
        # (their spooled records are done with, as if evaluated)
        self.dropped_traces: list[tuple[str, int]] = []
        # trace id -> the revision of the last one dropped with only log records, until the
        # engine has deleted its spool rows (``dropped_deleted``): a trace opened meanwhile
        # takes the next revision, so that deletion (every row of the trace up to the
        # revision) leaves the rows of its own requests
        self._dropped_revisions: dict[str, int] = {}
        # Waiters of those traces (the records are done: dropped and counted); the engine
        # calls them outside its lock.
        self.dropped_waiters: list[Callable[[], None]] = []

    # --- admission ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._open)

    def new_trace_count(self, items: Iterable[Span | HeldRecord]) -> int:
        """How many open-trace slots these spans or records would take (admission control)."""
        return len({s.trace_id for s in items if s.trace_id not in self._open})

    def open_trace(self, trace_id: str) -> tuple[int, Collection[Span]] | None:
        """(revision, a live view of its spans) of an open trace; None when it is not open."""
        tr = self._open.get(trace_id)
        return None if tr is None else (tr.revision, tr.spans.values())

    def is_cut(self, trace_id: str) -> bool:
        """Whether an open trace misses spans refused for their service's share (``cut``):
        the spool keeps the mark with its rows, so a replay cuts it again."""
        tr = self._open.get(trace_id)
        return tr is not None and tr.cut

    def holds_stored(self, trace_id: str) -> bool:
        """Whether an open trace holds what a stored revision of it held (re-opened from a
        revision not skipped as late, or resumed with such content): its replay after a
        crash is then a whole run (``resume``), not a straggler."""
        tr = self._open.get(trace_id)
        if tr is None:
            return False
        if tr.fresh:
            return tr.carried
        return not (tr.previous is not None and tr.previous.late)

    def reopens(self, items: Iterable[Span | HeldRecord], sender: str
                ) -> dict[str, tuple[list[Span], list[HeldRecord], bool]]:
        """The released runs ``add`` / ``add_logs`` of ``items`` by ``sender`` would re-open
        (an item the run does not hold, from its sender or an unknown one): per trace id
        its spans, its log records and whether they are a stored revision's (not skipped
        as late), copies, so the spool can hold them before the request is acknowledged.
        A guess from before: ``add`` may still refuse the items (the run's bound)."""
        out: dict[str, tuple[list[Span], list[HeldRecord], bool]] = {}
        for item in items:
            tid = item.trace_id
            old = None if tid in out or tid in self._open else self._reopenable.get(tid)
            if old is None or (old.sender and old.sender != sender):
                continue
            if (item.span_id not in old.spans if isinstance(item, Span)
                    else item.raw not in old.log_keys):
                stored = not (old.finished is not None and old.finished.late)
                out[tid] = list(old.spans.values()), list(old.logs), stored
        return out

    def marks(self, items: Iterable[Span | HeldRecord], sender: str
              ) -> tuple[set[str], set[str]]:
        """The traces of ``items`` (by ``sender``) that ``add`` / ``add_logs`` would hold
        ``cut`` (open so, or opened for a trace whose spans were refused for a share), and
        those whose spans it would take only to pass on as another sender's (``foreign``),
        so the spool marks their pairs with the request, before it is acknowledged."""
        cut: set[str] = set()
        foreign: set[str] = set()
        for item in items:
            tid = item.trace_id
            tr = self._open.get(tid)
            if tr.cut if tr is not None else tid in self._cut:
                cut.add(tid)
            if not isinstance(item, Span):
                continue
            if tr is not None:
                sends = tr.sender if tr.passing else sender
            else:
                old = self._reopenable.get(tid)
                sends = old.sender if (old is not None and old.sender and self.pass_through
                                       ) else sender
            if sends != sender:
                foreign.add(tid)
        return cut, foreign

    def open_logs_of(self, trace_id: str) -> list[HeldRecord]:
        """The log records an open trace holds (a live list; empty when it is not open)."""
        tr = self._open.get(trace_id)
        return tr.logs if tr is not None else []

    def new_traces(self, spans: Iterable[Span | HeldRecord]) -> dict[str, str]:
        """The traces these spans would open (trace id -> the service.name owning its slot,
        as ``add`` opens it: its root's, a span with no parent naming a service, when the
        request holds it, else its first span's; a run is its root's service's, whatever
        service's span comes first in a gateway's batch, such as the one it called)."""
        owners: dict[str, str] = {}
        rooted: set[str] = set()
        for s in spans:
            tid = s.trace_id
            if tid in self._open or tid in rooted:
                continue
            if isinstance(s, Span) and s.parent_span_id is None and (svc := service_of(s)):
                owners[tid] = svc
                rooted.add(tid)
            elif tid not in owners:
                owners[tid] = service_of(s)
        return owners

    def new_traces_by_service(self, spans: Iterable[Span]) -> Counter[str]:
        """Open-trace slots these spans would take, per service.name."""
        return Counter(self.new_traces(spans).values())

    def claims(self, spans: Sequence[Span | HeldRecord]) -> dict[str, str]:
        """The slots these spans (or records) would put in a service's share (trace id ->
        service.name): the traces they would open (``new_traces``), and the open ones held
        under no service (opened by records whose resource named none) that they name
        (``add`` and ``add_logs`` move the slot there)."""
        owners = self.new_traces(spans)
        for s in spans:
            tr = self._open.get(s.trace_id)
            if tr is not None and not tr.service and s.trace_id not in owners and (
                    svc := service_of(s)):
                owners[s.trace_id] = svc
        return owners

    def cut(self, trace_ids: Iterable[str]) -> None:
        """Spans of these traces were refused for their service's share (``admission``'s
        ``over_share``, rejected for good): the run of each, open now or opened later (its
        root's service within its share: a distributed run whose callee's span came
        first), misses them, so it is released ``truncated`` (reason ``service_share``),
        never ``complete`` as if whole. Remembered for ``max_tombstones`` trace ids."""
        for tid in trace_ids:
            tr = self._open.get(tid)
            if tr is not None:
                tr.cut = True
                continue
            self._cut[tid] = None
            self._cut.move_to_end(tid)
            while len(self._cut) > self.config.max_tombstones:
                self._cut.popitem(last=False)

    def service_open(self, service: str) -> int:
        return self._per_service[service]

    def add(self, spans: Iterable[Span], now: float,
            on_trace: Callable[[str], Callable[[], None] | None] | None = None,
            source: str = "otlp", sender: str = "") -> AddResult:
        """Take spans. ``on_trace(trace_id)`` may return a waiter to call once that trace's
        evaluation is stored (the engine passes it back through ``Trace``). A new trace is
        labelled with ``source`` and ``sender``; a released trace is re-opened only by spans
        of the sender that opened it (else ``foreign_sender``): holding a trace id (it travels
        in ``traceparent``) must not be enough to replace a stored result."""
        res = AddResult()
        self._forget(now)  # the reopen window ages with the clock, not only on a release
        limit = self.config.max_spans_per_trace
        took: dict[str, _Open] = {}  # the traces that took spans, in the order they did
        reopened: set[str] = set()  # the released traces these spans re-opened
        spans = list(spans)
        owners = self.new_traces(spans)  # a run opened here is its root's service's
        for span in spans:
            if span.unevaluable and not self.pass_through:
                res.rejected[span.unevaluable] += 1  # its times: otel-eval cannot evaluate it
                continue
            tr = self._open.get(span.trace_id)
            if tr is None:
                before = res.reopened
                tr = self._open_for(span, now, res, source, sender)
                if tr is None:
                    continue
                if (svc := owners.get(tr.trace_id, "")) and svc != tr.service:
                    self._move_slot(tr, svc)
                if res.reopened > before:
                    reopened.add(tr.trace_id)
            if span.span_id in tr.spans or span.span_id in tr.passed or (
                    tr.parked is not None and span.span_id in tr.parked.spans):
                res.rejected["duplicate_span"] += 1
                res.known.add(tr.trace_id)
                continue
            if not tr.service and (svc := service_of(span)):
                self._move_slot(tr, svc)  # opened by its log records: now its service's
            if tr.passing and sender != tr.sender:
                span.unevaluable = "foreign_sender"  # pass-through: passed on, below
                res.foreign.add(tr.trace_id)
            elif tr.passing:
                self._join(tr, res)  # its own sender re-opens the run (passed stays passed)
                reopened.add(tr.trace_id)
            full = len(tr.spans) >= limit and not _ends_run(span, tr.root_ended)
            tr.full = tr.full or (full and span.unevaluable is None)  # the run misses it
            if full and not self.pass_through:
                res.rejected["trace_too_large"] += 1
                if tr.trace_id in reopened:  # re-opened to be cut: spooled, waited for
                    self._took(tr, took, on_trace)
                continue
            # past the limit, unevaluable or another sender's, pass-through holds it to pass
            # on: it moves the trace's deadline but is no part of what is evaluated
            full = full or span.unevaluable is not None
            (tr.passed if full else tr.spans)[span.span_id] = span
            self.load.add((span,))
            tr.nbytes += span.nbytes
            self.open_bytes += span.nbytes
            res.accepted += 1
            if tr.trace_id in reopened:
                res.late_spans += 1
            if span.end_ns and span.is_entry and not full:
                tr.root_ended = True
            self._took(tr, took, on_trace)
        self.open_spans += res.accepted
        for tr in took.values():  # once per trace, not per span: the state it ends up in
            if len(tr.spans) == 1:
                self._singles[tr.trace_id] = None
                self._singles.move_to_end(tr.trace_id)  # in order of last_seen
            else:
                self._singles.pop(tr.trace_id, None)
            tr.last_seen = max(tr.last_seen, now)  # a replay hands older times first
            self._reschedule(tr)
        res.traces = set(took)
        return res

    @staticmethod
    def _took(tr: _Open, took: dict[str, _Open],
              on_trace: Callable[[str], Callable[[], None] | None] | None) -> None:
        """``tr`` took items of this call (once per trace: its waiter, its rescheduling)."""
        if tr.trace_id not in took:
            took[tr.trace_id] = tr
            if on_trace is not None and (w := on_trace(tr.trace_id)) is not None:
                tr.waiters.append(w)

    def _open_for(self, item: Span | HeldRecord, now: float, res: AddResult, source: str,
                  sender: str) -> _Open | None:
        """The open trace ``item`` joins (started or re-opened if need be); None when it is
        refused, the reason counted in ``res.rejected``."""
        tr = self._open.get(item.trace_id)
        if tr is not None:
            return tr
        old = self._reopenable.get(item.trace_id)
        if old is not None and isinstance(item, Span) and item.span_id in old.spans:
            # a span the released trace already holds (a client's retry, a redelivered
            # record): refused as the open trace would, without opening an empty revision
            res.rejected["duplicate_span"] += 1
            res.known.add(item.trace_id)
            return None
        if old is not None and not isinstance(item, Span) and item.raw in old.log_keys:
            res.rejected["duplicate_log_record"] += 1  # as a span it holds, above
            res.known.add(item.trace_id)
            return None
        if old is not None and not old.complete and (
                len(old.spans) >= self.config.max_spans_per_trace and not self.pass_through
                and not _ends_run(item, old.root_ended)
                if isinstance(item, Span) else
                len(old.logs) >= self.config.max_log_records_per_trace):
            # one the released trace has no room for: refused as the open trace would,
            # without re-opening it to be released again unchanged (pass-through re-opens
            # it to pass the span on: the run is forwarded again, as any re-open). A run
            # released ``complete`` is re-opened: refused there, the item cuts it (``full``),
            # so it is released again ``truncated``, not left judged whole
            res.rejected["trace_too_large"] += 1
            return None
        started = self._start(item, now, res, source, sender)
        if isinstance(started, str):
            res.rejected[started] += 1
            if started == "late":
                res.known.add(item.trace_id)
            return None
        return started

    def _start(self, span: Span | HeldRecord, now: float, res: AddResult,
               source: str, sender: str) -> _Open | str:
        """A new or re-opened trace, or the reason its spans are refused."""
        trace_id = span.trace_id
        old = self._reopenable.get(trace_id)
        if old is None and trace_id in self._tombstones and not (
                self.pass_through and isinstance(span, Span)):
            # released longer than reopen_window_s ago: its evaluation stands; re-opening would
            # replace it with a fragment, so the span is refused and counted as `late` (with
            # ``pass_through``, a span opens a fragment that is passed on, never evaluated).
            return "late"
        passing = old is not None and bool(old.sender) and old.sender != sender
        if passing and not (self.pass_through and isinstance(span, Span)):
            # "" is an unknown first sender (auth off, a Kafka record, a spool replay after
            # a restart): nothing to compare, so any sender may re-open it. With
            # pass-through, another sender's span opens a passing trace in front of it
            return "foreign_sender"
        self._unkeep(trace_id)
        tr = _Open(trace_id, {}, [], now, now, source=source, sender=sender,
                   service=service_of(span), cut=trace_id in self._cut)
        self._cut.pop(trace_id, None)
        if old is None and trace_id in self._dropped_revisions:
            tr.revision = self._dropped_revisions[trace_id] + 1
        self._per_service[tr.service] += 1
        if old is not None:
            self._tombstones.pop(trace_id, None)
            tr.fresh = False
            tr.previous = old.finished
            # a revision of its own for a passing trace too: the spool tells its rows from
            # the run's (a delivery in flight) and from a later re-open's by revision
            tr.revision = old.revision + 1
            # due as the run would be (grace once its root ended), holding none of it
            tr.root_ended = any(s.end_ns and s.is_entry for s in old.spans.values())
            if passing:  # another sender's span: the run is parked, not re-opened
                tr.sender, tr.passing, tr.parked = old.sender, True, old
            else:
                self._carry(tr, old, res)
        self._open[trace_id] = tr
        self._reschedule(tr)
        return tr

    def _carry(self, tr: _Open, old: _Released, res: AddResult) -> None:
        """Re-open: ``tr`` takes back what the released revision ``old`` held, as the next
        revision (released again with it: evaluated and forwarded again, whole)."""
        tr.spans = old.spans  # (a passing trace holds none: it passes every span on)
        tr.logs = old.logs
        tr.log_keys = old.log_keys
        tr.log_bytes = sum(r.nbytes for r in old.logs)
        tr.cut = tr.cut or old.cut
        tr.full = tr.full or old.full
        carried = sum(s.nbytes for s in old.spans.values())
        tr.nbytes += carried
        self.open_spans += len(old.spans)
        self.load.add(old.spans.values())
        res.carried_spans += len(old.spans)
        self.open_bytes += carried
        self.open_logs += len(tr.logs)
        self.open_log_bytes += tr.log_bytes
        self.log_load.add(tr.logs)
        res.reopened += 1

    def _join(self, tr: _Open, res: AddResult) -> None:
        """The run's own sender joins a ``passing`` trace: the run parked there re-opens in
        it (what it passes on stays passed on, and goes with the re-opened run)."""
        old, tr.parked, tr.passing = tr.parked, None, False
        assert old is not None
        tr.revision += 1  # apart from what it passed on: the spool re-spools the run with it
        self._carry(tr, old, res)

    def add_logs(self, logs: Iterable[HeldRecord], now: float,
                 source: str = "otlp", sender: str = "",
                 on_trace: Callable[[str], Callable[[], None] | None] | None = None
                 ) -> AddResult:
        """Take GenAI event records (``accepted`` / ``rejected`` count records). A record for
        an unknown trace opens it; it does not move the trace's deadline (spans decide when
        a run is over), except that a trace opened by a record waits ``idle_timeout_s``. A
        record the trace holds already (the same bytes) is a ``duplicate_log_record``, as a
        span it holds is a ``duplicate_span``: a client's retry re-opens and adds nothing.
        ``on_trace`` as for ``add``; the waiter is also called when the trace is dropped
        for want of spans (``dropped_waiters``)."""
        res = AddResult()
        self._forget(now)
        limit = self.config.max_log_records_per_trace
        reopened: set[str] = set()  # the released traces these records re-opened
        for record in logs:
            before = res.reopened
            tr = self._open_for(record, now, res, source, sender)
            if tr is None:
                continue
            if res.reopened > before:
                reopened.add(tr.trace_id)
            if tr.passing and sender != tr.sender:  # opened to pass a span on only
                res.rejected["foreign_sender"] += 1
                continue
            if tr.passing:  # its own sender's record: the run re-opened as it would be
                self._join(tr, res)
            if record.raw in tr.log_keys:
                res.rejected["duplicate_log_record"] += 1
                res.known.add(record.trace_id)
                continue
            if len(tr.logs) >= limit:
                res.rejected["trace_too_large"] += 1
                tr.full = True  # the run misses its events: not the whole run
                if tr.trace_id in reopened and tr.trace_id not in res.traces:
                    res.traces.add(tr.trace_id)  # re-opened to be cut: spooled, waited for
                    if on_trace is not None and (w := on_trace(tr.trace_id)) is not None:
                        tr.waiters.append(w)
                continue
            if not tr.service and record.service:
                self._move_slot(tr, record.service)
            tr.logs.append(record)
            tr.log_keys.add(record.raw)
            if not tr.spans and not tr.passed:  # records only: it gives way as a single
                self._singles.setdefault(tr.trace_id)  # (records do not move last_seen)
            tr.log_bytes += record.nbytes
            self.open_logs += 1
            self.open_log_bytes += record.nbytes
            self.log_load.add((record,))
            res.accepted += 1
            if record.trace_id not in res.traces:
                res.traces.add(record.trace_id)
                if on_trace is not None and (w := on_trace(record.trace_id)) is not None:
                    tr.waiters.append(w)
        return res

    # --- release -----------------------------------------------------------------------------

    def _deadline(self, tr: _Open) -> float:
        cfg = self.config
        wait = cfg.grace_s if tr.root_ended else cfg.idle_timeout_s
        return min(tr.last_seen + wait, self._cut_at(tr))

    def _cut_at(self, tr: _Open) -> float:
        """When the trace is cut (``truncated``, ``max_duration``): ``max_trace_duration_s``
        after its first span came; for a run resumed after a restart, not before
        ``idle_timeout_s`` after the resumption (``resume``)."""
        cfg = self.config
        cut = tr.first_seen + cfg.max_trace_duration_s
        if tr.resumed_at is not None:
            cut = max(cut, tr.resumed_at + cfg.idle_timeout_s)
        return cut

    def _reschedule(self, tr: _Open) -> None:
        tr.deadline = self._deadline(tr)
        if tr.deadline < tr.scheduled:  # a later deadline is handled when the entry surfaces
            tr.scheduled = tr.deadline
            heapq.heappush(self._heap, (tr.deadline, tr.trace_id))
            if len(self._heap) > 2 * len(self._open) + 1024:
                self._compact_heap()

    def _compact_heap(self) -> None:
        """Only the open traces' live entries kept: a released run's earlier ones (its idle
        timeout, pushed before its root ended) stayed until their time passed, a heap growing
        with the traces released in the last ``idle_timeout_s``, bounded by no setting.
        O(open traces), once per as many pushes: O(1) per push."""
        self._heap = [(tr.scheduled, tid) for tid, tr in self._open.items()
                      if tr.scheduled != float("inf")]
        heapq.heapify(self._heap)

    def tick(self, now: float) -> list[Trace]:
        """Release every trace whose deadline has passed."""
        out: list[Trace] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            due, trace_id = heapq.heappop(heap)
            tr = self._open.get(trace_id)
            if tr is None or due != tr.scheduled:
                continue  # stale entry: trace released, or re-scheduled earlier
            if tr.deadline > due:  # spans arrived since: wait for the moved deadline
                tr.scheduled = tr.deadline
                heapq.heappush(heap, (tr.deadline, trace_id))
                continue
            cut = now >= self._cut_at(tr)
            upstream = tr.root_ended and _upstream_root_pending(tr)
            if upstream and not cut and now < tr.last_seen + self.config.idle_timeout_s:
                # a remote agent's entry ended, the run that called it goes on: due as a
                # run whose root has not ended
                tr.scheduled = tr.last_seen + self.config.idle_timeout_s
                heapq.heappush(heap, (tr.scheduled, trace_id))
                continue
            if not tr.spans and not tr.passed:  # (spans only passed on are released)
                self._drop_logs_only(tr, now)
            elif tr.root_ended and not upstream:
                out.append(self._release(tr, "complete", "root_ended", now))
            elif cut:
                out.append(self._release(tr, "truncated", "max_duration", now))
            elif not upstream and _local_root_ended(tr):
                out.append(self._release(tr, "complete", "root_ended", now))
            else:
                out.append(self._release(tr, "incomplete", "idle_timeout", now))
        return out

    def release_oldest(self, n: int, now: float) -> list[Trace]:
        """Overflow policy ``release_oldest``: push out the n traces open the longest, cut
        (``truncated``), or ``complete`` when the run had ended (``_ended``). O(n): the open
        traces are kept in the order they opened (each opens at ``now``, so at its
        ``first_seen``); sorting every open trace for each overflowing request cost ~20 ms
        at 50,000 open traces, a request that opened one trace each (CPU on the event loop)."""
        out = []
        for t in list(itertools.islice(self._open.values(), max(n, 0))):
            if t.spans or t.passed:
                out.append(self._release(t, "complete" if _ended(t) else "truncated",
                                         "overflow", now))
            else:
                self._drop_logs_only(t, now)
        return out

    def give_way(self, n: int, idle_since: float, now: float) -> list[Trace]:
        """Slot pressure: release up to n one-span traces idle since ``idle_since`` (oldest
        first, reason ``pressure``), and drop those holding only log records (``no_spans``,
        as at their idle timeout: records whose spans never came must not refuse spans).
        A run that ended (as ``tick`` would tell at its deadline) is released ``complete``;
        one cut while it went on ``truncated``, never ``incomplete``: the silence was
        ``pressure_idle_s``, not ``idle_timeout_s``, and otel-eval's pressure is no
        verdict on the run. O(released): singles are kept in order."""
        out: list[Trace] = []
        while self._singles and n > 0:
            tr = self._open[next(iter(self._singles))]
            if tr.last_seen > idle_since:
                break  # the rest arrived later still
            if tr.spans or tr.passed:
                out.append(self._release(tr, "complete" if _ended(tr) else "truncated",
                                         "pressure", now))
            else:
                self._drop_logs_only(tr, now)
            n -= 1
        return out

    def resume(self, now: float, carried: Collection[str] = ()) -> None:
        """After a restart's replay, for every run it handed back: its idle clock counts from
        ``now`` when its root has not ended, and it is not cut for its maximum duration before
        ``idle_timeout_s`` after ``now``. While otel-eval was down nothing could arrive (the
        sender's collector queued the rest of the run), so that silence is no evidence the run
        stopped, nor is the downtime time the run was seen open: counted, a stop longer than
        ``idle_timeout_s`` judged every run in flight as non-terminated at the first tick, and
        a stop of D seconds judged every run older than ``max_trace_duration_s`` - D as
        truncated, although its root may be waiting in the sender's queue. Grace (root ended)
        still counts from when the spans came.

        A resumed run holds every span the spool kept for it (replays are whole traces). It
        is ``Trace.late_if_stored`` as a run opened live is, unless it is in ``carried`` (the
        spool kept what a stored revision of it held: late spans had re-opened it): spans a
        previous process took as a straggler of a run stored before it are still stragglers
        when a second restart hands them back, never a run that replaces the stored one."""
        for tr in self._open.values():
            tr.resumed_at = now
            tr.carried = tr.trace_id in carried
            if (not tr.root_ended or _upstream_root_pending(tr)) and tr.last_seen < now:
                tr.last_seen = now
            self._reschedule(tr)

    def release_ended(self, now: float, reason: str = "shutdown",
                      among: Iterable[str] | None = None) -> list[Trace]:
        """Release the traces whose run has surely ended (a clean stop: grace only waits for
        stragglers); the others stay open and unjudged (a stop is no verdict: the spool, or
        Kafka's uncommitted offsets, resume them at the next start, where their timers go
        on). Surely: ``_surely_ended``; a root recognised only by going idle is not.
        ``among``: only those trace ids (the ones that took items since the last call)."""
        candidates = list(self._open.values()) if among is None else [
            t for t in map(self._open.get, among) if t is not None]
        return [self._release(t, "complete", reason, now) for t in candidates
                if t.passing or (t.spans and t.root_ended and _surely_ended(t))]

    def release_all(self, now: float, reason: str = "shutdown") -> list[Trace]:
        """Release everything open (end of file): ended roots are complete."""
        out = []
        for t in list(self._open.values()):
            if not t.spans:
                self._drop_logs_only(t, now)
                continue
            ended = (t.root_ended or _local_root_ended(t)) and not _upstream_root_pending(t)
            out.append(self._release(t, "complete" if ended else "incomplete", reason, now))
        return out

    def hand_over(self, trace_ids: Iterable[str], source: str) -> list[str]:
        """Forget the open traces of ``trace_ids`` that came from ``source``, unjudged (a
        revoked Kafka partition: its next owner replays their records whole, so a rebalance
        is no verdict); returns those forgotten. Their waiters are never called."""
        out = []
        for tid in trace_ids:
            tr = self._open.get(tid)
            if tr is None or tr.source != source:
                continue
            self._close(tr)  # its heap entry goes stale (``tick`` skips it)
            if tr.parked is not None:  # the run it stood in front of stays as released
                tr.parked.revision = tr.revision  # (revisions only go up: ``_start``)
                self._keep(tid, tr.parked)
                self._tombstones[tid] = None
            self.open_spans -= len(tr.spans) + len(tr.passed)
            self.open_bytes -= tr.nbytes
            self.load.remove(tr.spans.values())
            self.load.remove(tr.passed.values())
            self.open_logs -= len(tr.logs)
            self.open_log_bytes -= tr.log_bytes
            self.log_load.remove(tr.logs)
            out.append(tid)
        return out

    def _move_slot(self, tr: _Open, service: str) -> None:
        self._per_service[tr.service] -= 1
        if not self._per_service[tr.service]:
            del self._per_service[tr.service]
        tr.service = service
        self._per_service[service] += 1

    def _close(self, tr: _Open) -> None:
        """Forget an open trace's slot (released or dropped)."""
        del self._open[tr.trace_id]
        self._singles.pop(tr.trace_id, None)
        self._per_service[tr.service] -= 1
        if not self._per_service[tr.service]:
            del self._per_service[tr.service]

    def _drop_logs_only(self, tr: _Open, now: float) -> None:
        """A trace opened by log records that no span joined: nothing to evaluate."""
        self._close(tr)
        self.open_logs -= len(tr.logs)
        self.open_log_bytes -= tr.log_bytes
        self.log_load.remove(tr.logs)
        self.dropped_logs_only.append((tr.trace_id, len(tr.logs)))
        self.dropped_traces.append((tr.trace_id, tr.revision))
        self._dropped_revisions[tr.trace_id] = tr.revision
        self.dropped_waiters.extend(tr.waiters)
        self._forget(now)

    def _release(self, tr: _Open, status: TraceStatus, reason: str, now: float) -> Trace:
        self._close(tr)
        if tr.cut:  # spans of it were refused for a share: not a whole run
            status, reason = "truncated", "service_share"
        elif tr.full and status == "complete":  # ended, but spans past the limit unread
            status, reason = "truncated", "trace_too_large"
        spans = list(tr.spans.values())
        self.open_spans -= len(spans) + len(tr.passed)
        self.open_bytes -= tr.nbytes
        self.load.remove(spans)
        self.load.remove(tr.passed.values())
        self.open_logs -= len(tr.logs)
        self.open_log_bytes -= tr.log_bytes
        self.log_load.remove(tr.logs)
        # late if stored: opened anew (a run of that id stored before a restart is not in
        # these spans; a replay counts as opened anew unless it carries a stored revision's
        # spans), or re-opened from such a revision that finishing skipped as late
        late = (not tr.carried) if tr.fresh else (
            tr.previous is not None and tr.previous.late)
        trace = Trace(tr.trace_id, spans, status, source=tr.source, revision=tr.revision,
                      release_reason=reason, waiters=tr.waiters,
                      logs=[r.decode() for r in tr.logs],  # decoded now, not while held
                      late_if_stored=late, passed=list(tr.passed.values()))
        if tr.parked is not None:  # only another sender's spans, to pass on: the run
            tr.parked.at = now  # parked stays as released (neither evaluated nor sent again)
            tr.parked.revision = tr.revision  # the next re-open's revision follows this one
            self._keep(tr.trace_id, tr.parked)
        else:
            # a re-open carries the spans evaluated, not those passed on: forwarded once,
            # they are not held past the release (memory: max_released_traces x
            # max_spans_per_trace)
            self._keep(tr.trace_id, _Released(
                now, tr.spans, tr.revision, tr.sender, tr.logs, trace.finished, tr.log_keys,
                tr.cut, tr.root_ended, tr.full, status == "complete",
                sum(s.nbytes for s in tr.spans.values()) + tr.log_bytes
                + SPAN_HELD_BYTES * len(tr.spans) + RECORD_HELD_BYTES * len(tr.logs)))
        self._tombstones[tr.trace_id] = None
        self._tombstones.move_to_end(tr.trace_id)
        self._forget(now)
        return trace

    def dropped_deleted(self, traces: Iterable[tuple[str, int]]) -> None:
        """The spool rows of these ``dropped_traces`` are deleted: a trace opened from now on
        starts at revision 0 again."""
        for trace_id, revision in traces:
            if self._dropped_revisions.get(trace_id) == revision:
                del self._dropped_revisions[trace_id]

    def _keep(self, trace_id: str, released: _Released) -> None:
        """``released`` kept for re-opening (newest last), its bytes counted."""
        self._unkeep(trace_id)
        self._reopenable[trace_id] = released
        self.released_bytes += released.nbytes

    def _unkeep(self, trace_id: str) -> None:
        if (old := self._reopenable.pop(trace_id, None)) is not None:
            self.released_bytes -= old.nbytes

    def _forget(self, now: float) -> None:
        """Released traces past ``reopen_window_s``, ``max_released_traces`` or
        ``max_released_bytes`` (the oldest first) are no longer re-opened; tombstones past
        ``max_tombstones`` go."""
        cfg = self.config
        rel = self._reopenable
        while rel and (len(rel) > cfg.max_released_traces
                       or self.released_bytes > cfg.max_released_bytes
                       or now - next(iter(rel.values())).at > cfg.reopen_window_s):
            self.released_bytes -= rel.popitem(last=False)[1].nbytes
        while len(self._tombstones) > cfg.max_tombstones:
            self._tombstones.popitem(last=False)


def _ends_run(span: Span, root_ended: bool) -> bool:
    """Whether ``span`` is the ended entry span of a run none of whose entry spans has ended:
    taken past ``max_spans_per_trace`` (one span a run at most). An SDK exports a span when
    it ends and the root ends last, so a run longer than the limit sends its root past it;
    refused, the run that ended would be released ``incomplete`` (a non-termination)."""
    return not root_ended and bool(span.end_ns) and span.is_entry \
        and span.unevaluable is None


def _ended(tr: _Open) -> bool:
    """Whether a trace pushed out before its deadline holds a run that ended, as ``tick``
    would tell at that deadline (its root ended, or one without a flag recognised now, and
    no remote agent's entry standing in for an orchestrator still running). O(spans)."""
    return (tr.root_ended or _local_root_ended(tr)) and not _upstream_root_pending(tr)


def _surely_ended(tr: _Open) -> bool:
    """Whether the run has ended beyond doubt: its root (the earliest entry span) has ended and
    no span waits for a parent that is absent and not flagged remote. Such a parent is a
    local span still running (the agent's own root, while a downstream service's entry span
    has ended), or one an exporter that sets no flags cannot tell apart from an upstream's."""
    spans = tr.spans
    root = local_root(list(spans.values()))
    return (root is not None and root.end_ns > 0 and root.is_entry
            and all(s.parent_span_id is None or s.parent_span_id in spans
                    or s.parent_remote is True for s in spans.values()))


def _upstream_root_pending(tr: _Open) -> bool:
    """Whether, an entry span having ended, the trace still has no root: a called service's
    entry (parent flagged remote) while a span of another service waits for an absent parent
    flagged local (that service's own root, still running: an orchestrator whose remote
    agent answered; ``model.local_root``). A span of the entry's own service waiting so is
    one of its spans lost, not a run still going. O(spans), asked only when due."""
    return bool(tr.spans) and local_root(list(tr.spans.values())) is None


def _local_root_ended(tr: _Open) -> bool:
    """Whether a root without a flag (see the module docstring) has ended: O(spans), asked
    only when the trace is due without an ended entry span."""
    root = local_root(list(tr.spans.values()))
    return root is not None and root.end_ns > 0
