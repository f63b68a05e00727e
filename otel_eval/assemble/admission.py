"""Stage: assemble (admission). Whether a request is taken, and if not, why.

    Engine.submit(signal, items) -> AdmissionControl.refusal -> None (take it) | reason

Every bound on what the process holds is checked here, the same for traces and logs where
they share one (shutting down, the spool full, open traces, one service's share of them:
``max_service_share``), by signal where they differ: spans accepted but not yet stored
(``max_pending_spans``), the received bytes of those spans (``max_pending_bytes``), and one
service's share of each (``max_service_share`` again, ``service_load.ServiceLoad``); log
records accepted and not yet evaluated (``max_pending_log_records``: open and released
but queued, as spans) and the received bytes of those held for their spans
(``max_pending_log_bytes``: a record waits as its bytes). Log records never refuse spans:
records whose spans never come (orphans, held until ``idle_timeout_s``) once filled the
shared byte budget and refused 25 of 60 span exports. While the store refuses writes
(``store_health``),
everything (``store_unavailable``). Under slot pressure one-span traces idle for
``pressure_idle_s`` give way first, and ``overflow_policy: release_oldest`` releases the
oldest instead of refusing: those traces are handed to finishing. A refusal takes nothing
(the receiver answers with a retryable error), so it is all or nothing per request, but for
one service's share in a request of several (``over_share``): the traces it would open are
rejected (partial success), the others' spans taken. A share is decided per trace, by the
service opening it: the spans of a trace open already are never refused for one (refused,
they would cut a run that is then evaluated as if whole).

Not thread-safe: the engine calls it under its lock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from otel_eval.assemble.assembler import TraceAssembler
from otel_eval.assemble.config import AssemblyConfig
from otel_eval.assemble.service_load import ServiceLoad, load_of
from otel_eval.assemble.store_health import REFUSAL as STORE_REFUSAL
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.model import Span
from otel_eval.decode.otlp_logs import HeldRecord

if TYPE_CHECKING:
    from otel_eval.assemble.durability import Durability
    from otel_eval.assemble.finishing import Finishing

Signal = str  # "traces" | "logs" (spool.SIGNALS)
_NONE: Mapping[str, int] = {}  # no re-opened runs' bytes


@dataclass
class Admission:
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    throttled: str | None = None  # reason when refused: nothing was taken, retry later
    ignored: Counter[str] = field(default_factory=Counter)  # log records taken, not kept


class AdmissionControl:
    """The bounds and the refusals (see the module docstring); one owner: the engine."""

    def __init__(self, config: AssemblyConfig, assembler: TraceAssembler, finishing: Finishing,
                 durability: Durability, clock: Callable[[], float],
                 store_health: StoreHealth) -> None:
        self.config = config
        self._store_health = store_health
        self._assembler = assembler
        self._finishing = finishing
        self._durability = durability
        self._clock = clock
        self.closing = False  # shutdown began: everything is refused from now on

    def refusal(self, signal: Signal, items: Sequence[Span] | Sequence[HeldRecord],
                spool_bytes: int, reopened: Mapping[str, int] = _NONE) -> str | None:
        """Why the request cannot be taken now, or None; ``spool_bytes``: what it would add
        to the spool (0: not spooled); ``reopened``: of it, per service, the bytes of the
        released runs it re-opens (``Durability.reopened_bytes``), in their shares."""
        if self.closing:
            return "shutting_down"
        if self._store_health.failing:  # taken now, it could only wait: let the sender hold it
            return STORE_REFUSAL
        if spool_bytes and (full := self._durability.refusal(spool_bytes)):
            return full
        if signal == "logs":
            return self._logs(items, reopened)  # type: ignore[arg-type]
        return self._spans(items, reopened)  # type: ignore[arg-type]

    def over_share(self, spans: Sequence[Span] | Sequence[HeldRecord],
                   reopened: Mapping[str, int] = _NONE) -> frozenset[str]:
        """The new traces (ids) to reject (``service_share``, partial success) so that the
        rest of a request holding several services is taken: those a service past its share
        of the open traces, or of the pending spans or bytes (``_past_load``), would open
        (spans or log records alike: a record's resource names its service too). The share
        is decided per trace, by the service that opens it, never per span: a span of a
        trace open already, or of one opened here by a service within its shares, is
        taken, whatever service its own resource names (a distributed run's downstream
        spans; the later spans of an over-share service's own runs), as rejected it would
        cut a run that is then evaluated as if whole. Empty when every service is within
        its shares, when nothing else would be taken (a request of one run whose spans name
        two services: a Kafka record of one trace; the request is refused whole, retryable,
        as a single service's is: ``refusal``; rejected, it was lost for good), and with
        pass-through on (a span refused for good would never reach the backend; a
        throttled request is sent again)."""
        cfg, asm = self.config, self._assembler
        if cfg.max_service_share >= 1.0 or asm.pass_through:
            return frozenset()
        owners = asm.claims(spans)
        per_service = Counter(owners.values())
        share = cfg.max_service_share * cfg.max_open_traces
        over = {svc for svc, k in per_service.items() if asm.service_open(svc) + k > share}
        over |= self._past_load(spans, reopened)
        shed = frozenset(tid for tid, svc in owners.items() if svc in over)
        if all(s.trace_id in shed for s in spans):
            return frozenset()  # nothing else to take: refused whole, retried
        return shed

    def _past_load(self, items: Sequence[Span] | Sequence[HeldRecord],
                   reopened: Mapping[str, int] = _NONE) -> set[str]:
        """The services opening traces here (``claims``) whose items here would put them
        past their share of the pending spans or of their bytes (open and queued, by each
        span's own service.name), or for log records of the records pending (held and
        queued) or of the bytes of those held (their own budgets, as they count them); one
        that holds none is never past it, as the whole budget takes a first request of any
        size. So for the spool's bytes (``store.spool_max_bytes``) it holds: its open runs',
        its runs released and not evaluated, and its evaluated runs' waiting on a slow
        delivering sink (``RowLoad``; before, one service could fill the spool and every
        other service's exports were refused ``spool_full``). A service opening nothing
        here is never past it: its items join traces open already, and refused they would
        cut them (``over_share``). The spool's bytes a service would add count the stored
        runs the items re-open (``reopened``), spooled again with the request and charged to
        their services: counted, a few late spans re-opened a service's runs past its share."""
        cfg = self.config
        if cfg.max_service_share >= 1.0 or not items:
            return set()
        asm, share = self._assembler, cfg.max_service_share
        loads: tuple[ServiceLoad, ...]
        if isinstance(items[0], Span):
            loads = (asm.load, self._finishing.queued_load)
            max_items, max_bytes = cfg.max_pending_spans, cfg.max_pending_bytes
        else:  # records: as their budgets count them, held and queued (their bytes: held)
            loads = (asm.log_load, self._finishing.queued_log_load)
            max_items, max_bytes = cfg.max_pending_log_records, cfg.max_pending_log_bytes
        adds = load_of(items)
        over = set()
        for svc in set(asm.claims(items).values()):
            n = adds.spans[svc]
            held = sum(load.spans[svc] for load in loads)
            nbytes = sum(load.bytes[svc] for load in loads)
            if held and (held + n > share * max_items
                         or nbytes + adds.bytes[svc] > share * max_bytes):
                over.add(svc)
            elif self._durability.past_share(svc, adds.bytes[svc] + reopened.get(svc, 0),
                                             share):
                over.add(svc)  # the spool's bytes it holds (``RowLoad``)
        return over

    def _logs(self, records: Sequence[HeldRecord], reopened: Mapping[str, int]
              ) -> str | None:
        cfg, asm = self.config, self._assembler
        pending = asm.open_logs + self._finishing.queued_logs  # as spans: open + queued
        if pending and pending + len(records) > cfg.max_pending_log_records:
            return "pending_log_records"
        held = asm.open_log_bytes
        if held and held + sum(r.nbytes for r in records) > cfg.max_pending_log_bytes:
            return "pending_log_bytes"
        if self._past_share(records) or self._past_load(records, reopened):
            return "service_share"
        if len(asm) + asm.new_trace_count(records) > cfg.max_open_traces:
            return "open_traces"
        return None

    def _past_share(self, items: Sequence[Span] | Sequence[HeldRecord]) -> bool:
        """Whether the slots these items would take put a service past its share."""
        cfg, asm = self.config, self._assembler
        if cfg.max_service_share >= 1.0:
            return False
        share = cfg.max_service_share * cfg.max_open_traces
        claims = Counter(asm.claims(items).values())  # log-opened traces' slots too
        return any(asm.service_open(svc) + k > share for svc, k in claims.items())

    def _spans(self, spans: Sequence[Span], reopened: Mapping[str, int]) -> str | None:
        cfg, asm, fin = self.config, self._assembler, self._finishing
        pending = asm.open_spans + fin.queued_spans
        if pending and pending + len(spans) > cfg.max_pending_spans:
            return "pending_spans"
        held = asm.open_bytes + fin.queued_bytes
        if held and held + sum(s.nbytes for s in spans) > cfg.max_pending_bytes:
            return "pending_bytes"
        new = asm.new_traces_by_service(spans)
        if self._past_share(spans) or self._past_load(spans, reopened):
            return "service_share"
        over = len(asm) + sum(new.values()) - cfg.max_open_traces
        if over > 0:  # one-span traces idle for pressure_idle_s give way first
            now = self._clock()
            fin.enqueue(asm.give_way(over, now - cfg.pressure_idle_s, now))
            over = len(asm) + sum(new.values()) - cfg.max_open_traces
        if over > 0:
            if cfg.overflow_policy == "throttle":
                return "open_traces"
            fin.enqueue(asm.release_oldest(over, self._clock()))
        return None
