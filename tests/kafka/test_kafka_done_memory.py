"""Records finished behind a record still in flight (a run held open, up to
``assembly.max_trace_duration_s``, the partition read on meanwhile) are not held one by one:
the tracker's memory follows the records in flight, not how far the partition was read."""

from __future__ import annotations

import tracemalloc

from otel_eval.receive.kafka.offsets import MAX_DONE_RANGE, OffsetTracker, decode_done

READ_ON = 300_000  # an hour of a looping agent's run at ~80 records/s on its partition


def test_records_done_behind_an_open_run_take_no_memory_each() -> None:
    t: OffsetTracker[int] = OffsetTracker()
    held = t.take(0, 0)  # the open run's first record holds the position
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for offset in range(1, READ_ON + 1):
            t.done(t.take(0, offset))
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 1 << 20, f"{grown} bytes held for {READ_ON} finished records"
    assert t.inflight(0) == 1 and t.ahead(0) == READ_ON + 1
    pos, meta = t.committable()[0]
    assert pos == 0  # never past the open run's record
    assert decode_done(0, meta) == set(range(1, MAX_DONE_RANGE))  # as far as metadata goes
    t.done(held)
    assert t.position(0) == READ_ON + 1 and t.inflight() == 0


def test_a_record_done_twice_after_the_others_were_let_go_counts_once() -> None:
    t: OffsetTracker[int] = OffsetTracker()
    held = t.take(0, 0)
    tickets = [t.take(0, o) for o in range(1, 5000)]
    for tk in tickets:
        assert t.done(tk)
    assert not t.done(tickets[10])  # already done: ignored, in flight stays 1
    assert t.inflight() == 1 and t.inflight(0) == 1
    assert t.done(held) and t.inflight() == 0
