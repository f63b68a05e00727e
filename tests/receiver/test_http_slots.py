"""``receive.httpslots``: a connection closed for a newcomer is shut down while its own thread
cannot close it.

The accepting thread shuts down a victim's socket; the victim's thread gives its slot back
(under the slots' lock) and then closes it. CPython's ``shutdown`` reads the descriptor's
number with the GIL released, so a shutdown outside the lock could run after the close, on
the same number reused by another connection (a worker's socket pair, a gRPC stream) and cut
that one instead. The shutdown therefore runs under the lock ``give_back`` takes.
"""

from __future__ import annotations

import socket

import pytest

from otel_eval.receive.config import HttpLimits
from otel_eval.receive.httpslots import Hold, Slots


@pytest.mark.parametrize("reserved", [False, True])
def test_a_victim_is_shut_down_before_its_thread_can_give_back_its_slot(
        reserved: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways a slot is reused: a partial general connection (``reuse_partial``) and a
    waiting reserved one."""
    limits = HttpLimits(max_connections=1, reserved_connections=1 if reserved else 0)
    slots = Slots(limits, reuse_partial=not reserved)
    pairs = [socket.socketpair() for _ in range(3 if reserved else 2)]
    try:
        holds = [Hold(ours, f"10.0.0.{i}") for i, (ours, _) in enumerate(pairs)]
        for hold in holds[:-1]:
            assert slots.take(hold) is None
        victim = holds[1] if reserved else holds[0]
        real_shutdown = socket.socket.shutdown
        seen: list[tuple[bool, bool]] = []

        def shutdown(sock: socket.socket, how: int) -> None:
            # give_back would have to wait; and the slot is the newcomer's already
            seen.append((slots._lock.locked(), victim.reused))
            real_shutdown(sock, how)

        monkeypatch.setattr(socket.socket, "shutdown", shutdown)
        assert slots.take(holds[-1]) == "reused"
        assert seen == [(True, True)]
        victim_peer = pairs[holds.index(victim)][1]
        assert victim_peer.recv(1) == b""  # the victim's client sees its connection end
        slots.give_back(victim)  # its thread, afterwards: the peer count only
        assert slots.in_use == len(holds) - 1
    finally:
        for a, b in pairs:
            a.close()
            b.close()


def test_at_its_cap_a_peers_own_partial_connection_gives_way_to_its_newcomer() -> None:
    """Behind a proxy, a NAT or a Service that SNATs, every sender is one address: a flood of
    partial requests from it held the peer's whole cap, and every export or API read from
    that address was a 503 (``peer_limit``) for as long as the flood lasted. Now the peer's
    oldest partial connection gives way, as the general slots' do; an authenticated one
    never does, and a peer holding only those is still refused."""
    slots = Slots(HttpLimits(max_connections=8, max_connections_per_peer=2),
                  reuse_partial=True)
    pairs = [socket.socketpair() for _ in range(5)]
    try:
        holds = [Hold(ours, "10.0.0.1") for ours, _ in pairs]
        trusted, partial, newcomer, again, other = holds
        trusted.trusted = True
        assert slots.take(trusted) is None and slots.take(partial) is None
        assert slots.take(newcomer) == "reused"
        assert partial.reused and not trusted.reused
        assert pairs[1][1].recv(1) == b""  # the partial one's client sees its connection end
        slots.give_back(partial)
        newcomer.trusted = True  # it made its authenticated request
        assert slots.take(again) == "peer_limit"  # no partial one of its own is left
        assert Slots(HttpLimits(max_connections=8, max_connections_per_peer=1)).take(
            other) is None  # (without reuse_partial the cap alone decides, as before)
        assert slots.in_use == 2
    finally:
        for a, b in pairs:
            a.close()
            b.close()
