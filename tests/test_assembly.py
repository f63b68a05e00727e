"""Trace assembly: release rules, bounds, late spans; time driven by hand."""

from __future__ import annotations

import dataclasses
import gc
import tracemalloc
from collections.abc import Iterator
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_eval.assemble.assembler import ID_HELD_BYTES, TraceAssembler
from otel_eval.assemble.config import AssemblyConfig
from otel_eval.base.model import Span
from otel_eval.decode import otlp
from otel_eval.decode.encode import encode_spans

CFG = AssemblyConfig(grace_s=10, idle_timeout_s=180, max_trace_duration_s=3600,
                     reopen_window_s=300, max_spans_per_trace=5)
T1, T2 = "a" * 32, "b" * 32


def span(trace: str, sid: int, parent: int | None = None, ended: bool = True) -> Span:
    return Span(trace, f"{sid:016x}", f"{parent:016x}" if parent is not None else None,
                f"s{sid}", 1, 2 if ended else 0)


def local(trace: str, sid: int) -> Span:
    """A child of root span 1, which has not arrived; its exporter flags the parent local."""
    return Span(trace, f"{sid:016x}", f"{1:016x}", f"s{sid}", 1, 2, parent_remote=False)


def test_complete_after_grace_once_root_ended() -> None:
    a = TraceAssembler(CFG)
    a.add([span(T1, 2, parent=1)], now=0)
    assert a.tick(100) == []  # root not seen yet: waits for idle timeout
    a.add([span(T1, 1)], now=100)
    assert a.tick(109.9) == []
    a.add([span(T1, 3, parent=1)], now=105)  # a straggler moves the deadline
    assert a.tick(114.9) == []
    [t] = a.tick(115)
    assert (t.status, t.release_reason, len(t.spans)) == ("complete", "root_ended", 3)
    assert len(a) == 0 and a.open_spans == 0


def test_incomplete_after_idle_timeout_when_root_never_ends() -> None:
    a = TraceAssembler(CFG)
    a.add([span(T1, 1, ended=False), span(T1, 2, parent=1)], now=0)
    a.add([span(T2, 1)], now=0)
    released = a.tick(179.9)
    assert [t.trace_id for t in released] == [T2]
    [t] = a.tick(180)
    assert (t.trace_id, t.status, t.release_reason) == (T1, "incomplete", "idle_timeout")


def test_truncated_at_max_duration() -> None:
    a = TraceAssembler(dataclasses.replace(CFG, max_trace_duration_s=50, idle_timeout_s=30))
    for now in range(0, 60, 20):
        a.add([span(T1, 10 + now, parent=1)], now=now)
    [t] = a.tick(50)
    assert (t.status, t.release_reason, len(t.spans)) == ("truncated", "max_duration", 3)


def test_span_limits_and_duplicates_are_counted() -> None:
    a = TraceAssembler(CFG)
    res = a.add([span(T1, i, parent=99) for i in range(1, 8)] + [span(T1, 1, parent=99)], now=0)
    assert res.accepted == 5
    assert res.rejected == {"trace_too_large": 2, "duplicate_span": 1}


def test_late_span_within_window_reopens_with_all_spans() -> None:
    a = TraceAssembler(CFG)
    a.add([span(T1, 1), span(T1, 2, parent=1)], now=0)
    [first] = a.tick(10)
    res = a.add([span(T1, 3, parent=1)], now=200)
    assert res.reopened == 1 and res.accepted == 1
    [again] = a.tick(210)
    assert again.revision == first.revision + 1 == 1
    assert sorted(s.span_id for s in again.spans) == [f"{i:016x}" for i in (1, 2, 3)]


def test_a_retry_of_spans_already_held_reopens_nothing() -> None:
    """A client retrying an acknowledged request (its ack lost) within the reopen window:
    before, the duplicates re-opened the released trace as an empty revision (counted as
    re-opened, evaluated again and skipped); now they are refused as the open trace would."""
    a = TraceAssembler(CFG)
    a.add([span(T1, 1), span(T1, 2, parent=1)], now=0)
    [first] = a.tick(10)
    res = a.add([span(T1, 1), span(T1, 2, parent=1)], now=200)
    assert (res.accepted, res.reopened, res.rejected) == (0, 0, {"duplicate_span": 2})
    assert res.known == {T1} and len(a) == 0 and a.tick(400) == []
    # a new span with the retried ones re-opens it once, whole
    res = a.add([span(T1, 2, parent=1), span(T1, 3, parent=1), span(T1, 1)], now=250)
    assert (res.accepted, res.reopened, res.rejected) == (1, 1, {"duplicate_span": 2})
    [again] = a.tick(260)
    assert again.revision == first.revision + 1
    assert sorted(s.span_id for s in again.spans) == [f"{i:016x}" for i in (1, 2, 3)]


def test_late_spans_a_full_trace_cannot_take_reopen_nothing() -> None:
    """A released trace at ``max_spans_per_trace`` that was not judged whole (here
    ``incomplete``): a late span is refused as the open trace would (``trace_too_large``).
    Before, it re-opened the trace first, which was released and evaluated again unchanged
    (and sent to the sinks again). (A run released ``complete`` is re-opened to be cut:
    ``test_a_late_span_a_whole_released_run_has_no_room_for_cuts_it``.)"""
    a = TraceAssembler(CFG)
    a.add([span(T1, 1, ended=False)] + [span(T1, i, parent=1) for i in range(2, 6)], now=0)
    assert [t.status for t in a.tick(180)] == ["incomplete"]
    res = a.add([span(T1, 6, parent=1)], now=200)
    assert (res.accepted, res.reopened, res.rejected) == (0, 0, {"trace_too_large": 1})
    assert len(a) == 0 and a.tick(400) == []


def test_the_root_that_ends_a_full_run_is_taken_past_the_limit() -> None:
    """A run of more spans than ``max_spans_per_trace`` sends its root last (an SDK exports
    a span when it ends, and the root ends last). Refused as ``trace_too_large``, the run
    was released ``incomplete`` at its idle timeout: a non-termination finding for a run
    that ended. The ended entry span is taken past the limit (one span: once the root has
    ended no other is), live, re-opening a released full run, and with pass-through."""
    children = [local(T1, i) for i in range(2, 8)]  # the limit is 5
    for pass_through in (False, True):
        a = TraceAssembler(CFG, pass_through=pass_through)
        a.add(children, now=0)
        res = a.add([span(T1, 1)], now=1)
        assert res.accepted == 1 and not res.rejected, pass_through
        assert a.add([span(T1, 9)], now=2).accepted == int(pass_through)  # one root only
        [t] = a.tick(12)  # ended, but a child past the limit is unread: not the whole run
        assert (t.status, t.release_reason) == ("truncated", "trace_too_large"), pass_through
        assert f"{1:016x}" in {s.span_id for s in t.spans}
    a = TraceAssembler(CFG)  # released full at its idle timeout (a long tool call)...
    a.add(children, now=0)
    [cut] = a.tick(180)
    assert cut.status == "incomplete"
    res = a.add([span(T1, 1)], now=200)  # ... its root re-opens it
    assert (res.accepted, res.reopened, dict(res.rejected)) == (1, 1, {})
    [t] = a.tick(210)
    assert (t.status, t.revision, len(t.spans)) == ("truncated", 1, 6)
    assert a.add([span(T1, 9)], now=220).rejected == {"trace_too_large": 1}


def test_a_run_cut_at_the_span_limit_is_released_truncated_not_whole() -> None:
    """Spans past ``max_spans_per_trace`` are refused (or, with pass-through, only passed
    on): the run that ended is not whole, so it is released ``truncated`` (reason
    ``trace_too_large``), never ``complete`` with the spans kept as if they were all of it;
    in ``eval`` (``release_all``) and at a clean stop (``release_ended``) too, and after a
    re-open. A run of exactly the limit is whole; one whose root never ended is still
    ``incomplete`` (the root is always taken: it did not end)."""
    children = [span(T1, i, parent=1) for i in range(2, 8)]  # 6 children, the limit is 5
    for pass_through in (False, True):
        for release in ("tick", "release_all", "release_ended"):
            a = TraceAssembler(CFG, pass_through=pass_through)
            a.add([*children, span(T1, 1)], now=0)
            [t] = (a.tick(10) if release == "tick" else a.release_all(1)
                   if release == "release_all" else a.release_ended(1))
            assert (t.status, t.release_reason[:9]) == ("truncated", "trace_too"), (
                pass_through, release)
    a = TraceAssembler(CFG)
    a.add([*children[:4], span(T1, 1)], now=0)  # exactly the limit: whole
    [t] = a.tick(10)
    assert (t.status, t.release_reason) == ("complete", "root_ended")
    assert a.add([span(T1, 9, parent=1)], now=20).rejected == {"trace_too_large": 1}
    a = TraceAssembler(CFG)
    a.add([span(T1, 1, ended=False), *children], now=0)  # the root never ended
    [t] = a.tick(180)
    assert (t.status, t.release_reason) == ("incomplete", "idle_timeout")
    a = TraceAssembler(CFG)
    a.add(children, now=0)
    a.tick(180)  # released full at its idle timeout; its root re-opens it: still cut
    a.add([span(T1, 1)], now=200)
    [t] = a.tick(210)
    assert (t.status, t.release_reason, t.revision) == ("truncated", "trace_too_large", 1)


def test_with_pass_through_spans_past_the_limit_are_held_to_pass_on() -> None:
    """Pass-through: spans past ``max_spans_per_trace`` are taken into ``Trace.passed``
    (pending like any span, never evaluated) instead of refused as ``trace_too_large``; a
    retry of one is a duplicate; a span a released full run has no room for re-opens it
    to be passed on (the spans passed before are not kept past the release)."""
    a = TraceAssembler(CFG, pass_through=True)
    res = a.add([span(T1, 1)] + [span(T1, i, parent=1) for i in range(2, 8)], now=0)
    assert (res.accepted, dict(res.rejected)) == (7, {})
    assert a.open_spans == 7
    assert a.add([span(T1, 7, parent=1)], now=1).rejected == {"duplicate_span": 1}
    [t] = a.tick(11)
    assert [s.span_id for s in t.spans] == [f"{i:016x}" for i in range(1, 6)]
    assert [s.span_id for s in t.passed] == [f"{i:016x}" for i in (6, 7)]
    assert a.open_spans == 0
    res = a.add([span(T1, 8, parent=1)], now=200)
    assert (res.accepted, res.reopened, dict(res.rejected)) == (1, 1, {})
    [again] = a.tick(210)
    assert (again.revision, len(again.spans)) == (1, 5)
    assert [s.span_id for s in again.passed] == [f"{8:016x}"]


def test_with_pass_through_another_senders_span_is_released_alone_to_pass_it_on() -> None:
    """Pass-through: a span of a sender other than the one that opened a released run is
    taken into ``Trace.passed`` (marked ``foreign_sender``, never evaluated) instead of being
    refused; that sender's next span is passed on too, and its record refused. The run is not
    re-opened: released, the trace holds only the spans to pass on (the run is neither
    evaluated nor forwarded again). Once the run's own sender joins, the re-open is its own,
    as without pass-through, with what it passes on."""
    a = TraceAssembler(CFG, pass_through=True)
    a.add([span(T1, 1)], now=0, sender="agents")
    assert len(a.tick(10)) == 1
    res = a.add([span(T1, 2, parent=1)], now=20, sender="tools")
    assert (res.accepted, res.reopened, res.carried_spans, dict(res.rejected)) == (
        1, 0, 0, {})
    assert a.add([span(T1, 3, parent=1)], now=21, sender="tools").accepted == 1
    assert a.add([span(T1, 1)], now=22, sender="tools").rejected == {"duplicate_span": 1}
    assert a.open_spans == 2
    [t] = a.tick(40)
    assert (t.spans, t.logs, t.revision) == ([], [], 1)
    assert [(s.span_id, s.unevaluable) for s in t.passed] == [
        (f"{2:016x}", "foreign_sender"), (f"{3:016x}", "foreign_sender")]
    assert a.open_spans == 0
    res = a.add([span(T1, 4, parent=1)], now=50, sender="tools")
    assert (res.accepted, res.reopened) == (1, 0)
    res = a.add([span(T1, 5, parent=1)], now=51, sender="agents")
    assert (res.accepted, res.reopened, res.carried_spans, res.late_spans) == (1, 1, 1, 1)
    assert a.add([span(T1, 6, parent=1)], now=52, sender="tools").accepted == 1
    [t] = a.tick(70)
    assert [s.span_id for s in t.spans] == [f"{i:016x}" for i in (1, 5, 6)]
    assert [s.span_id for s in t.passed] == [f"{4:016x}"]
    assert t.revision == 3 and a.open_spans == 0  # (2: the second span passed on)


def test_each_trace_re_opened_and_each_late_span_is_counted() -> None:
    """One request whose 4 late spans re-open 2 traces: 2 re-opened, 4 late spans (the
    engine counted one re-open a request and its traces as the late spans)."""
    a = TraceAssembler(CFG)
    a.add([span(T1, 1), span(T2, 1)], now=0)
    assert len(a.tick(10)) == 2
    res = a.add([span(T1, 2, parent=1), span(T1, 3, parent=1), span(T2, 2, parent=1),
                 span(T2, 3, parent=1)], now=200)
    assert (res.accepted, res.reopened, res.late_spans) == (4, 2, 4)
    res = a.add([span(T1, 4, parent=1)], now=201)  # joins the open revision: not a re-open
    assert (res.accepted, res.reopened, res.late_spans) == (1, 0, 0)


def test_late_span_after_window_is_refused_not_a_fragment() -> None:
    a = TraceAssembler(CFG)
    a.add([span(T1, 1)], now=0)
    a.tick(10)
    a.add([span(T2, 1)], now=400)  # a later release ages T1 out of the reopen window
    a.tick(410)
    res = a.add([span(T1, 3, parent=1)], now=411)
    assert res.accepted == 0 and res.rejected == {"late": 1} and len(a) == 0


def test_late_span_after_window_is_refused_with_no_release_in_between() -> None:
    """A quiet service: no other trace released since. The window aged out only on a
    release, so a span 10 minutes after its run re-opened it (superseding its evaluation)
    where reopen_window_s promises `late`; a re-open after it is no re-open either."""
    a = TraceAssembler(CFG)
    a.add([span(T1, 1), span(T2, 1)], now=0)
    assert len(a.tick(10)) == 2
    res = a.add([span(T1, 3, parent=1)], now=600)
    assert (res.accepted, res.reopened, res.rejected) == (0, 0, {"late": 1}) and len(a) == 0
    res = a.add([span(T2, 1)], now=600)  # a retry past the window: late, not a duplicate
    assert res.rejected == {"late": 1}


def test_release_oldest_and_release_all() -> None:
    a = TraceAssembler(CFG)
    a.add([span(T1, 1, ended=False)], now=0)
    a.add([span(T2, 1)], now=5)
    [t] = a.release_oldest(1, now=6)
    assert (t.trace_id, t.status, t.release_reason) == (T1, "truncated", "overflow")
    [t2] = a.release_all(now=7)
    assert (t2.trace_id, t2.status, t2.release_reason) == (T2, "complete", "shutdown")


def test_release_ended_judges_only_the_runs_that_ended() -> None:
    """A clean stop: ended roots go out ``complete``; a run still going stays open, as do
    log records waiting for their spans, and a run whose end is only a guess."""
    T3, T4, T5, T6 = "c" * 32, "d" * 32, "e" * 32, "f" * 32
    a = TraceAssembler(CFG)
    a.add([span(T1, 2, parent=1), span(T1, 1)], now=0)  # root ended, within grace
    a.add([span(T2, 2, parent=1), span(T2, 1, ended=False)], now=0)  # root not ended
    a.add([local(T3, 2)], now=0)  # root not sent yet
    # an unflagged absent parent: an upstream's (the run ended) or the agent's own root still
    # running (its first child ended): not told apart until the trace goes idle
    a.add([span(T4, 1, parent=9)], now=0)
    # a downstream service's entry span ended (parent flagged remote) while the agent's root,
    # the parent of span 3, still runs
    a.add([Span(T5, f"{2:016x}", f"{7:016x}", "s2", 5, 6, parent_remote=True), local(T5, 3)],
          now=0)
    a.add([Span(T6, f"{2:016x}", f"{7:016x}", "s2", 1, 9, parent_remote=True),
           span(T6, 3, parent=2)], now=0)  # an entry span ended, its children present
    released = a.release_ended(now=1)
    assert sorted((t.trace_id, t.status, t.release_reason) for t in released) == [
        (T1, "complete", "shutdown"), (T6, "complete", "shutdown")]
    assert len(a) == 4 and a.open_spans == 6
    # their timers go on: T4 is recognised when idle, T5's remote entry ended (grace)
    assert sorted((t.trace_id, t.status) for t in a.tick(180)) == [
        (T2, "incomplete"), (T3, "incomplete"), (T4, "complete"), (T5, "complete")]


TOOLS = {"service.name": "tools"}  # a tool server's service; the agent's spans have none


def test_a_downstream_entry_span_ending_does_not_end_a_run_whose_root_still_runs() -> None:
    """An agent calls a tool served by another instrumented service (an MCP server, a
    sub-agent): that service's entry span (parent flagged remote) ends while the agent's
    root, the parent of spans already here (flagged local), still runs. Released after
    grace, the run was judged as it stood (its root a tool server's span) and, when the
    agent's next call took longer than ``reopen_window_s``, the rest of it was refused as
    ``late``. It now waits as a run whose root has not ended (``idle_timeout_s``); once the
    spans wait for no absent parent, grace ends it."""
    a = TraceAssembler(CFG)
    server = Span(T1, f"{5:016x}", f"{3:016x}", "tools/call", 5, 6, parent_remote=True,
               resource=TOOLS)
    a.add([local(T1, 2), server], now=0)  # the agent's LLM call, the tool server's span
    assert a.tick(100) == []  # not after grace: the agent's root (span 1) still runs
    a.add([local(T1, 3)], now=100)  # the agent's tool call (the server's caller) ends
    assert a.tick(279) == []
    a.add([span(T1, 1)], now=279)  # the root
    [t] = a.tick(289)
    assert (t.status, t.release_reason, len(t.spans)) == ("complete", "root_ended", 4)
    a.add([local(T2, 2), Span(T2, f"{5:016x}", f"{3:016x}", "s", 5, 6, parent_remote=True,
               resource=TOOLS)],
          now=0)  # the agent never sends more: released at its idle timeout, as before
    assert a.tick(179) == [] and [t.trace_id for t in a.tick(180)] == [T2]
    t3 = "c" * 32
    a.add([local(t3, 2), Span(t3, f"{5:016x}", f"{3:016x}", "s", 5, 6, parent_remote=True,
               resource=TOOLS)],
          now=1000)
    a.resume(now=2000)  # a restart: the downtime is no silence of the run's
    assert a.tick(2179) == [] and [t.trace_id for t in a.tick(2180)] == [t3]


def test_an_agent_that_hangs_after_a_tool_another_service_served_is_non_terminated() -> None:
    """The agent's root never ends (it hangs) after a tool call another instrumented service
    served, whose entry span (parent flagged remote) ended: spans still wait for the agent's
    root at the idle timeout. Released ``complete`` before (no non-termination: the hang was
    missed); ``incomplete`` now, and ``truncated`` when cut at the maximum duration."""
    server = Span(T1, f"{5:016x}", f"{3:016x}", "tools/call", 5, 6, parent_remote=True,
               resource=TOOLS)
    a = TraceAssembler(CFG)
    a.add([local(T1, 2), local(T1, 3), server], now=0)
    [t] = a.tick(180)
    assert (t.status, t.release_reason) == ("incomplete", "idle_timeout")
    a = TraceAssembler(dataclasses.replace(CFG, max_trace_duration_s=100))
    a.add([local(T1, 2), local(T1, 3), server], now=0)
    [t] = a.tick(100)
    assert (t.status, t.release_reason) == ("truncated", "max_duration")
    a = TraceAssembler(CFG)  # the agent's root came: grace ends it
    a.add([local(T1, 2), local(T1, 3), server, span(T1, 1)], now=0)
    [t] = a.tick(10)
    assert (t.status, t.release_reason) == ("complete", "root_ended")


def test_a_replay_at_an_earlier_time_does_not_move_the_deadline_back() -> None:
    a = TraceAssembler(CFG)
    a.add([local(T1, 2)], now=100)
    a.add([local(T1, 3)], now=50)  # spooled earlier, replayed later
    assert a.tick(279.9) == [] and len(a.tick(280)) == 1


def test_waiters_travel_with_the_trace() -> None:
    a = TraceAssembler(CFG)
    calls: list[str] = []
    a.add([span(T1, 1), span(T1, 2, parent=1)], now=0,
          on_trace=lambda tid: (lambda: calls.append(tid)))
    [t] = a.tick(10)
    assert len(t.waiters) == 1
    t.waiters[0]()
    assert calls == [T1]


def test_many_traces_release_in_deadline_order() -> None:
    a = TraceAssembler(CFG)
    ids = [f"{i:032x}" for i in range(1, 1001)]
    for i, tid in enumerate(ids):
        a.add([span(tid, 1)], now=i * 0.01)
    out = a.tick(10 + 5)
    assert [t.trace_id for t in out] == ids[:501]


def _of(service: str, sid: int, parent: int | None, remote: bool | None,
        end: int = 2, trace: str = T1) -> Span:
    return Span(trace, f"{sid:016x}", f"{parent:016x}" if parent is not None else None,
                f"s{sid}", 1, end, parent_remote=remote, resource={"service.name": service})


def test_a_remote_agent_that_answered_does_not_end_the_run_that_called_it() -> None:
    """A distributed run: the orchestrator (service ``orch``) calls an agent in service
    ``agent``. The agent's entry span (its parent, the orchestrator's client span, flagged
    remote) has ended and arrived with the orchestrator's first children, whose parent is
    the orchestrator's root, still running (flagged local). The remote agent's end is not the
    run's: the run was released ``complete`` after grace, judged whole while its root and the
    rest of its work were still to come; an orchestrator that hung after its remote agent
    answered was a completed run, never a non-terminated one."""
    a = TraceAssembler(CFG)
    a.add([_of("orch", 2, 1, False), _of("agent", 5, 3, True)], now=0)
    assert a.tick(10) == [] and a.tick(179.9) == []
    [t] = a.tick(180)  # the orchestrator's root never came: it hung
    assert (t.trace_id, t.status, t.release_reason) == (T1, "incomplete", "idle_timeout")
    # another run whose orchestrator's client span and root come: it ends, grace after them
    a.add([_of("orch", 2, 1, False, trace=T2), _of("agent", 5, 3, True, trace=T2)], now=1000)
    assert a.tick(1010) == []
    a.add([_of("orch", 3, 1, False, end=8, trace=T2), _of("orch", 1, None, None, end=9,
                                                            trace=T2)], now=1060)
    assert a.tick(1069.9) == []
    [t] = a.tick(1070)
    assert (t.status, t.release_reason, len(t.spans)) == ("complete", "root_ended", 4)


def test_a_run_whose_remote_agent_answered_resumes_unjudged_and_ends_incomplete_at_eof(
        ) -> None:
    """A restart longer than idle_timeout_s reports no such run as non-terminated (its idle
    clock restarts, as a run whose root has not ended); at the end of a file it is
    ``incomplete`` (its root never came), as live."""
    a = TraceAssembler(CFG)
    a.add([_of("orch", 2, 1, False), _of("agent", 5, 3, True)], now=0)
    a.resume(now=1000)
    assert a.tick(1010) == [] and a.tick(1179.9) == []
    assert [(t.status, t.release_reason) for t in a.tick(1180)] == [
        ("incomplete", "idle_timeout")]
    a.add([_of("orch", 2, 1, False, trace=T2), _of("agent", 5, 3, True, trace=T2)], now=2000)
    assert [t.status for t in a.release_all(now=2001, reason="eof")] == ["incomplete"]


def test_a_lost_span_of_the_remote_entrys_own_service_still_ends_it_at_grace() -> None:
    """otel-eval beside the called service only: its entry (parent flagged remote) ended; a
    span whose local parent was lost is that service's own: the run ended, after grace."""
    a = TraceAssembler(CFG)
    a.add([_of("agent", 5, 3, True), _of("agent", 7, 6, False)], now=0)
    [t] = a.tick(10)
    assert (t.status, t.release_reason) == ("complete", "root_ended")


def test_a_long_tool_call_is_re_judged_whole_only_within_idle_timeout_plus_reopen_window(
        ) -> None:
    """What docs/configuration.md says of ``idle_timeout_s`` and ``reopen_window_s``: a call
    longer than ``idle_timeout_s`` with no span ending meanwhile gets the run judged
    ``incomplete``; its next spans re-open it (re-judged whole) within ``reopen_window_s``
    of that release, a call up to their sum; past it they are ``late``."""
    for call_s, whole in ((470, True), (490, False)):
        a = TraceAssembler(CFG)
        a.add([local(T1, 2)], now=0)  # the LLM call that asked for the tool ended
        [first] = a.tick(180)
        assert (first.status, first.release_reason) == ("incomplete", "idle_timeout")
        res = a.add([local(T1, 3), span(T1, 1)], now=call_s)  # the tool call, the root
        if whole:
            [t] = a.tick(call_s + 10)
            assert (t.status, t.revision, len(t.spans)) == ("complete", 1, 3)
        else:
            assert res.rejected == {"late": 2} and a.tick(call_s + 10) == []


def test_a_run_pushed_out_under_pressure_is_cut_never_judged_as_one_that_did_not_end(
        ) -> None:
    """Slot pressure releases one-span traces idle for ``pressure_idle_s`` early. A stop is no
    verdict, nor is otel-eval's own pressure: they were released ``incomplete`` (the
    non-termination error of a run silent for ``idle_timeout_s``) whatever they held, so a
    one-span run that had ended (its root recognised when idle, an exporter without span
    flags; or waiting out a grace longer than ``pressure_idle_s``) was judged as never
    ended, and one still running (a tool call of 30 s) as hung. Now a run that ended is
    released ``complete`` and one cut while it went on ``truncated``, reason ``pressure``."""
    t3 = "c" * 32
    a = TraceAssembler(dataclasses.replace(CFG, grace_s=60, pressure_idle_s=30))
    a.add([span(T1, 2, parent=1)], now=0)  # no flags: its own root once idle (tick: complete)
    a.add([span(T2, 1)], now=0)  # a root that ended, waiting out the grace
    a.add([local(t3, 2)], now=0)  # a child of a root still running
    out = {t.trace_id: (t.status, t.release_reason) for t in a.give_way(3, 30, 30)}
    assert out == {T1: ("complete", "pressure"), T2: ("complete", "pressure"),
                   t3: ("truncated", "pressure")}


def test_a_run_whose_log_records_past_the_limit_were_refused_is_not_judged_whole() -> None:
    """GenAI events past ``max_log_records_per_trace`` are refused (``trace_too_large``), as
    spans past ``max_spans_per_trace`` are; a run that lost spans so is released
    ``truncated`` (reason ``trace_too_large``), but one that lost events was released
    ``complete``: judged as the whole run with messages of it unread. Now it is cut too,
    open or re-opened (a run at exactly the limit is whole)."""
    from otel_eval.base.model import LogEvent
    from otel_eval.decode.otlp_logs import hold

    def recs(n: int, first: int = 0) -> list:
        return [hold(LogEvent(T1, f"{2:016x}", "gen_ai.choice", 1_000 + i, {},
                              {"index": 0, "message": {"content": str(i)}}))
                for i in range(first, first + n)]

    cfg = dataclasses.replace(CFG, max_log_records_per_trace=3)
    a = TraceAssembler(cfg)
    a.add([span(T1, 1), span(T1, 2, parent=1)], now=0)
    assert a.add_logs(recs(3), now=0).rejected == {}  # exactly the limit: whole
    [t] = a.tick(10)
    assert (t.status, t.release_reason) == ("complete", "root_ended")
    a = TraceAssembler(cfg)
    a.add([span(T1, 1), span(T1, 2, parent=1)], now=0)
    assert a.add_logs(recs(4), now=0).rejected == {"trace_too_large": 1}
    [t] = a.tick(10)
    assert (t.status, t.release_reason, len(t.logs)) == ("truncated", "trace_too_large", 3)


def test_a_late_span_a_whole_released_run_has_no_room_for_cuts_it() -> None:
    """A run released ``complete`` holding exactly ``max_spans_per_trace`` spans (or
    ``max_log_records_per_trace`` records): a late span (or record) within the reopen window
    is refused (``trace_too_large``). It was refused without re-opening the run, so the
    stored verdict stayed ``complete``, a whole run, with part of it lost. Now the run is
    re-opened once and released again ``truncated`` (reason ``trace_too_large``); a run
    already cut, or not complete, is not re-opened for such a span (nothing would change)."""
    from otel_eval.base.model import LogEvent
    from otel_eval.decode.otlp_logs import hold

    a = TraceAssembler(CFG)
    a.add([span(T1, 1)] + [span(T1, i, parent=1) for i in range(2, 6)], now=0)
    [t] = a.tick(10)
    assert t.status == "complete"
    res = a.add([span(T1, 6, parent=1)], now=200)
    assert (res.accepted, res.reopened, res.rejected) == (0, 1, {"trace_too_large": 1})
    assert T1 in res.traces  # the spool re-spools the re-opened run
    [t] = a.tick(210)
    assert (t.status, t.release_reason, t.revision, len(t.spans)) == (
        "truncated", "trace_too_large", 1, 5)
    res = a.add([span(T1, 7, parent=1)], now=220)  # already cut: refused, nothing re-opened
    assert (res.accepted, res.reopened, res.rejected) == (0, 0, {"trace_too_large": 1})
    assert len(a) == 0

    def rec(i: int) -> list:
        return [hold(LogEvent(T2, f"{2:016x}", "gen_ai.choice", 1_000 + i, {},
                              {"index": 0, "message": {"content": str(i)}}))]

    a = TraceAssembler(dataclasses.replace(CFG, max_log_records_per_trace=1))
    a.add([span(T2, 1)], now=0)
    a.add_logs(rec(0), now=0)
    assert a.tick(10)[0].status == "complete"
    res = a.add_logs(rec(1), now=200)
    assert (res.accepted, res.reopened, res.rejected) == (0, 1, {"trace_too_large": 1})
    assert T2 in res.traces
    [t] = a.tick(210)
    assert (t.status, t.release_reason, t.revision, len(t.logs)) == (
        "truncated", "trace_too_large", 1, 1)


def test_a_run_that_ended_pushed_out_by_release_oldest_is_not_judged_cut() -> None:
    """``overflow_policy: release_oldest`` pushes out the oldest open traces ``truncated``
    (reason ``overflow``): right for a run still going, but a run that had ended and only
    waited out its grace (or, its exporter setting no span flags, whose root is recognised
    when idle) was judged cut too: a ``non_termination/truncated`` finding, counted as a
    run that did not end. As under pressure, a run that ended is released ``complete``."""
    a = TraceAssembler(CFG)
    a.add([span(T1, 2, parent=1)], now=0)  # no flags: its own root once idle (tick: complete)
    a.add([span(T2, 1)], now=1)  # a root that ended, waiting out the grace
    a.add([local("c" * 32, 2)], now=2)  # a child of a root still running
    out = [(t.status, t.release_reason) for t in a.release_oldest(3, now=3)]
    assert out == [("complete", "overflow"), ("complete", "overflow"),
                   ("truncated", "overflow")]


def test_released_traces_kept_for_reopening_are_bounded_in_bytes() -> None:
    """Released traces are kept with their spans for re-opening, bounded only by their
    number (max_released_traces, 20,000): 20,000 runs of a few MB each, every one within
    the pending budgets as it came, held tens of GB for reopen_window_s. They are bounded
    in bytes too (max_released_bytes): the oldest are forgotten past it, and a late span
    of one is refused ``late``, as past the window."""
    cfg = dataclasses.replace(CFG, max_released_bytes=2500)
    a = TraceAssembler(cfg)
    runs = [f"{i + 1:032x}" for i in range(10)]
    for t in runs:
        root = span(t, 1)
        root.nbytes = 1000
        a.add([root], now=0)
    assert len(a.tick(10)) == 10
    assert a.released_bytes <= 2500
    assert a.add([span(runs[0], 2, parent=1)], now=11).rejected == {"late": 1}
    res = a.add([span(runs[-1], 2, parent=1)], now=11)
    assert res.accepted == 1 and res.reopened == 1


class _CountingOpen(dict[str, Any]):
    """The assembler's open traces, counting the traces read through ``values()``."""

    read = 0

    def values(self) -> Iterator[Any]:  # type: ignore[override]
        for v in super().values():
            _CountingOpen.read += 1
            yield v


def test_release_oldest_reads_only_the_traces_it_releases() -> None:
    """``overflow_policy: release_oldest`` sorted every open trace for each request over
    ``max_open_traces``: at 50,000 open traces ~20 ms of the event loop per request that
    opened one new trace, work growing with the traces held, not the request. It walks the
    oldest n in the order they opened."""
    a = TraceAssembler(CFG)
    ids = [f"{i + 1:032x}" for i in range(1000)]
    for i, tid in enumerate(ids):
        a.add([span(tid, 1, ended=False)], now=i)
    a._open = _CountingOpen(a._open)
    out = [t.trace_id for _ in range(10) for t in a.release_oldest(1, now=2000)]
    assert out == ids[:10]
    assert _CountingOpen.read <= 20


def _decoded(trace: str, n: int) -> list[Span]:
    """``n`` small spans of ``trace`` (a root and its children) as the receivers decode them."""
    req = ExportTraceServiceRequest()
    req.ParseFromString(encode_spans([span(trace, 1)] + [
        span(trace, i, parent=1) for i in range(2, n + 1)]).SerializeToString())
    return otlp.decode_request(req).spans


def test_released_traces_kept_for_reopening_hold_at_most_max_released_bytes() -> None:
    """``max_released_bytes`` bounds reopen memory in bytes: a span held costs far more than
    its bytes as received (~100 for a small one), and traces of many small spans held
    ~16x the bound (256 MiB of them: gigabytes, past the chart's 2Gi limit)."""
    bound = 2 * 1024 * 1024
    a = TraceAssembler(dataclasses.replace(
        CFG, max_spans_per_trace=10_000, max_open_traces=10_000, max_released_traces=10_000,
        max_released_bytes=bound, max_tombstones=0, reopen_window_s=1e9))
    a.add(_decoded(T1, 100), now=0)  # every code path warm (caches, interned names) first
    a.tick(100)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        traces = [_decoded(f"{t + 1:032x}", 100) for t in range(200)]
        for spans in traces:
            a.add(spans, now=0)
        del traces, spans
        a.tick(200)  # every trace released, its spans kept for re-opening as room allows
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert 0 < a.released_bytes <= bound
    assert held <= bound * 1.1, held


def test_a_remembered_trace_id_costs_what_the_docs_say() -> None:
    """``max_tombstones`` ids are remembered, each at ``ID_HELD_BYTES`` (the figure docs and
    the configuration reads), not the 16 bytes once written: ~200 (its 32-character str and
    its place in an ordered dict), so the default million is ~200 MB."""
    n = 20_000
    a = TraceAssembler(dataclasses.replace(CFG, max_open_traces=n + 1, max_released_traces=0,
                                           max_tombstones=n + 1))
    a.add([span(T1, 1)], now=0)  # every code path warm first
    a.tick(100)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        a.add([span(f"{t + 1:032x}", 1) for t in range(n)], now=100)
        a.tick(1000)  # released (their deadlines past), nothing kept but their ids
        gc.collect()
        held = (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()
    assert ID_HELD_BYTES / 2 <= held <= ID_HELD_BYTES, held


def test_the_deadline_heap_is_bounded_by_the_open_traces() -> None:
    """A released run's earlier deadline (its idle timeout, pushed before its root ended)
    stayed in the heap until that time passed: memory grew with the traces released in the
    last ``idle_timeout_s``, bounded by no setting (2,000 traces/s: 360,000 entries)."""
    a = TraceAssembler(dataclasses.replace(CFG, max_open_traces=100_000))
    for second in range(100):
        a.add([span(f"{second * 100 + t + 1:032x}", 1) for t in range(100)], now=second)
        a.tick(second)
    assert len(a) <= 1100  # the last grace_s seconds' runs
    assert len(a._heap) <= 2 * len(a) + 1024, len(a._heap)


def test_released_log_records_are_charged_what_they_hold() -> None:
    """A held log record costs ~350 bytes beyond its bytes as received (``HeldRecord``, its
    ids and name, its key in its trace's set): a released trace's records were charged to
    ``max_released_bytes`` by their bytes alone, so traces of many small records held
    several times the bound."""
    from otel_eval.base.model import LogEvent
    from otel_eval.decode.otlp_logs import hold

    def records(trace: str) -> list:
        return [hold(LogEvent(trace, f"{2:016x}", "gen_ai.choice", 1_000 + i, {},
                              {"index": 0, "message": {"content": str(i)}}))
                for i in range(100)]

    bound = 1024 * 1024
    a = TraceAssembler(dataclasses.replace(
        CFG, max_log_records_per_trace=1000, max_open_traces=10_000,
        max_released_traces=10_000, max_released_bytes=bound, max_tombstones=0,
        reopen_window_s=1e9))
    a.add([span(T1, 1)], now=0)
    a.add_logs(records(T1), now=0)
    a.tick(100)  # every code path warm first
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for t in range(200):
            trace = f"{t + 1:032x}"
            a.add([span(trace, 1)], now=0)
            a.add_logs(records(trace), now=0)
        a.tick(200)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert 0 < a.released_bytes <= bound
    assert held <= bound * 1.1, held
