"""OffsetTracker: the commit position is the lowest unfinished offset, per partition."""

from __future__ import annotations

import base64
import zlib

import pytest

from otel_eval.receive.kafka.offsets import (
    MAX_DONE_RANGE,
    MAX_METADATA_CHARS,
    OffsetTracker,
    Ticket,
    TraceGate,
    decode_done,
    encode_done,
)


@pytest.mark.parametrize(
    ("taken", "done", "position"),
    [
        ([], [], None),
        ([5], [], 5),
        ([5], [5], 6),
        ([5, 6, 7], [6, 7], 5),  # the oldest unfinished record holds the watermark
        ([5, 6, 7], [5, 7], 6),
        ([5, 6, 7], [7, 6, 5], 8),
        ([3, 9, 10], [3], 9),  # gaps (compacted or poison-filtered offsets) are fine
    ],
)
def test_position_is_lowest_unfinished_offset(taken: list[int], done: list[int],
                                              position: int | None) -> None:
    t: OffsetTracker[int] = OffsetTracker()
    tickets = {o: t.take(0, o) for o in taken}
    for o in done:
        assert t.done(tickets[o])
    assert t.position(0) == position
    assert t.inflight() == len(taken) - len(done)


def test_partitions_are_independent_and_committable_reports_changes_once() -> None:
    t: OffsetTracker[int] = OffsetTracker()
    a, b = t.take(0, 10), t.take(1, 20)
    assert t.committable() == {0: (10, ""), 1: (20, "")}
    assert t.committable() == {}
    t.done(b)
    assert t.committable() == {1: (21, "")}
    t.uncommit([1])
    assert t.committable() == {1: (21, "")}
    assert t.inflight(0) == 1 and t.inflight(1) == 0
    t.done(a)
    assert t.committable() == {0: (11, "")}


def test_done_twice_or_for_a_revoked_partition_is_ignored() -> None:
    t: OffsetTracker[int] = OffsetTracker()
    old = t.take(0, 1)
    assert t.revoke(0) == (1, "")
    assert t.inflight() == 0
    assert not t.done(old)
    t.assign(0)  # re-assigned later: the stale ticket must not finish the new offset 1
    new = t.take(0, 1)
    assert not t.done(old)
    assert t.position(0) == 1
    assert t.done(new)
    assert not t.done(new)
    assert t.position(0) == 2


def test_out_of_order_take_is_a_bug() -> None:
    t: OffsetTracker[int] = OffsetTracker()
    t.take(0, 5)
    with pytest.raises(ValueError, match="out of order"):
        t.take(0, 4)


def test_large_backlog_advances_in_linear_time() -> None:
    t: OffsetTracker[int] = OffsetTracker()
    tickets = [t.take(0, o) for o in range(100_000)]
    for tk in reversed(tickets[1:]):
        t.done(tk)
    assert t.position(0) == 0
    t.done(tickets[0])
    assert t.position(0) == 100_000
    assert t.inflight() == 0


def test_metadata_names_done_records_past_the_position() -> None:
    t: OffsetTracker[int] = OffsetTracker()
    tickets = {o: t.take(0, o) for o in range(10, 20)}
    for o in (12, 13, 17):
        t.done(tickets[o])
    ((pos, meta),) = t.committable().values()
    assert pos == 10 and decode_done(pos, meta) == {12, 13, 17}
    t.done(tickets[10])
    t.done(tickets[11])
    ((pos, meta),) = t.committable().values()  # done-ness changed: committed again
    assert pos == 14 and decode_done(pos, meta) == {17}


def test_restart_skips_exactly_the_records_done_before_the_crash() -> None:
    before: OffsetTracker[int] = OffsetTracker()
    tickets = [before.take(0, o) for o in range(100)]
    done = {o for o in range(100) if o % 3 == 0 and o > 0}
    for o in done:
        before.done(tickets[o])
    ((pos, meta),) = before.committable().values()
    assert pos == 0
    after: OffsetTracker[int] = OffsetTracker()  # the restarted worker
    assert after.restore(0, pos, meta) == len(done)
    skipped = {o for o in range(pos, 50) if after.replayed(after.take(0, o))}
    assert skipped == {o for o in done if o < 50}
    # A second crash in the middle of the replay still remembers the untouched tail.
    ((pos2, meta2),) = after.committable().values()
    assert pos2 == 0 and decode_done(pos2, meta2) == {o for o in done if o >= 50}


def test_metadata_is_bounded_and_foreign_metadata_is_ignored() -> None:
    done = set(range(0, 200_000, 2))  # incompressible enough to overflow the budget
    meta = encode_done(0, 200_000, done, limit=1000)
    assert len(meta) <= 1000
    kept = decode_done(0, meta)
    assert kept and kept <= done  # a shorter range: the rest is replayed, never skipped
    assert decode_done(5, "") == set()
    assert decode_done(5, "some other client's metadata") == set()
    assert decode_done(5, "oe1:8:not base64!") == set()
    # a length int() refuses ("\u00b2" is a digit to str.isdigit; 5,000 digits are past its
    # limit) is foreign metadata too, not an exception at the partition's assignment
    valid = meta.split(":", 2)[2]
    assert decode_done(5, f"oe1:\u00b2:{valid}") == set()
    assert decode_done(5, f"oe1:{'9' * 5000}:{valid}") == set()


def _metadata(bits_used: int, bitmap: bytes) -> str:
    return f"oe1:{bits_used}:{base64.b64encode(zlib.compress(bitmap, 9)).decode()}"


def test_metadata_past_the_bounds_is_refused_before_it_is_inflated() -> None:
    """Anyone who can commit for the group writes the metadata a restart reads: 4000
    characters of zlib inflated to ~3 MB, a set of ~24M offsets built from it. What
    ``encode_done`` never writes is now refused (None: read as absent), uninflated."""
    hostile = _metadata(24_000_000, b"\xff" * 3_000_000)
    assert len(hostile) <= MAX_METADATA_CHARS  # it fits what a broker accepts
    assert decode_done(0, hostile) is None
    # a short stated length does not make the bitmap's inflating bounded
    assert decode_done(0, _metadata(8, b"\xff" * 3_000_000)) is None
    assert decode_done(0, _metadata(MAX_DONE_RANGE + 1, b"\xff" * (MAX_DONE_RANGE // 8 + 1))
                       ) is None
    assert decode_done(0, "oe1:8:" + "A" * MAX_METADATA_CHARS) is None
    t: OffsetTracker[int] = OffsetTracker()
    assert t.restore(0, 0, hostile) is None
    assert not t.replayed(t.take(0, 0))  # nothing skipped: replayed from the position
    # what encode_done writes stays within the bounds, and is read back whole
    all_done = set(range(5, 5 + 10 * MAX_DONE_RANGE))
    meta = encode_done(5, 5 + 10 * MAX_DONE_RANGE, all_done)
    assert decode_done(5, meta) == set(range(5, 5 + MAX_DONE_RANGE))
    assert decode_done(0, _metadata(MAX_DONE_RANGE, b"\xff" * (MAX_DONE_RANGE // 8))
                       ) == set(range(MAX_DONE_RANGE))


def test_trace_gate_finishes_the_records_of_a_trace_together() -> None:
    t: OffsetTracker[int] = OffsetTracker()
    gate: TraceGate[int] = TraceGate()
    r0, r1, r2, other = (t.take(0, o) for o in range(4))
    for tk in (r0, r1, r2):
        gate.submitted(tk, frozenset({"T"}))
    gate.submitted(other, frozenset({"U"}))
    # The engine calls back once per record; a commit may run between any two callbacks.
    assert gate.stored(r0, frozenset({"T"})) == []
    assert gate.stored(other, frozenset({"U"})) == [other]
    assert gate.stored(r1, frozenset({"T"})) == []
    assert set(gate.stored(r2, frozenset({"T"}))) == {r0, r1, r2}
    # A late record re-opens the trace: it waits only for records submitted from then on.
    late = t.take(0, 4)
    gate.submitted(late, frozenset({"T"}))
    assert gate.stored(late, frozenset({"T"})) == [late]


def test_trace_gate_record_with_two_traces_waits_for_both() -> None:
    gate: TraceGate[int] = TraceGate()
    a, b = Ticket(0, 10, 1), Ticket(0, 11, 1)
    gate.submitted(a, frozenset({"A", "B"}))
    gate.submitted(b, frozenset({"B"}))
    assert gate.stored(a, frozenset({"A", "B"})) == []
    assert set(gate.stored(b, frozenset({"B"}))) == {a, b}


def test_trace_gate_forgets_a_revoked_partition() -> None:
    gate: TraceGate[int] = TraceGate()
    old, new = Ticket(0, 1, 1), Ticket(0, 1, 2)  # same offset, re-assigned: new epoch
    gate.submitted(old, frozenset({"T"}))
    gate.submitted(Ticket(0, 2, 1), frozenset({"T"}))
    gate.drop(0)
    gate.submitted(new, frozenset({"T"}))
    assert gate.stored(old, frozenset({"T"})) == [old]  # stale: the tracker ignores it
    assert gate.stored(new, frozenset({"T"})) == [new]  # not held by the old epoch's count
