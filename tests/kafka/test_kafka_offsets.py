"""OffsetTracker: the commit position is the lowest unfinished offset, per partition."""

from __future__ import annotations

import pytest

from otel_eval.kafka.offsets import OffsetTracker


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
    assert t.committable() == {0: 10, 1: 20}
    assert t.committable() == {}
    t.done(b)
    assert t.committable() == {1: 21}
    t.uncommit([1])
    assert t.committable() == {1: 21}
    assert t.inflight(0) == 1 and t.inflight(1) == 0
    t.done(a)
    assert t.committable() == {0: 11}


def test_done_twice_or_for_a_revoked_partition_is_ignored() -> None:
    t: OffsetTracker[int] = OffsetTracker()
    old = t.take(0, 1)
    assert t.revoke(0) == 1
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
