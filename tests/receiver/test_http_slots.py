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


class _Phase:
    def __init__(self, phase: str, since: float = 0.0) -> None:
        self.phase, self.since = phase, since


def test_at_its_cap_a_peers_idle_keep_alive_gives_way_unless_its_next_request_is_in() -> None:
    """A proxy's pooled upstream connections, authenticated and idle, give way to the same
    address's newcomer (another address's newcomer never closes them); one whose next
    request's bytes are in, not yet read by its thread, is no longer idle: closing it would
    lose that request to a reset."""
    slots = Slots(HttpLimits(max_connections=8, max_connections_per_peer=2),
                  reuse_partial=True)
    pairs = [socket.socketpair() for _ in range(4)]
    try:
        holds = [Hold(ours, "10.0.0.1") for ours, _ in pairs]
        busy, idle, newcomer, again = holds
        for hold in (busy, idle):
            hold.trusted, hold.reader = True, _Phase("idle")
            assert slots.take(hold) is None
        pairs[0][1].sendall(b"POST /v1/traces HTTP/1.1\r\n")  # busy's next request is in
        assert slots.take(newcomer) == "reused"
        assert idle.reused and not busy.reused
        slots.give_back(idle)
        newcomer.trusted, newcomer.reader = True, _Phase("body")
        assert slots.take(again) == "peer_limit"  # none idle without bytes waiting
        assert Slots(HttpLimits(max_connections=1), reuse_partial=True).take(
            Hold(pairs[3][0], "10.0.0.2")) is None
    finally:
        for a, b in pairs:
            a.close()
            b.close()


@pytest.mark.parametrize("newcomer_peer", ["10.0.0.1", "10.0.0.2"])
def test_the_partial_connection_waiting_longest_gives_way_not_the_oldest_accepted(
        newcomer_peer: str) -> None:
    """Without tokens a proxy's pooled connections are partial between requests. The oldest
    accepted gave way, at the peer's cap (its own newcomer) or the listener's (another's):
    often the pool's busiest, which it hands out first. Now the one waiting longest for a
    request head does; the same wait, the oldest accepted, as before."""
    slots = Slots(HttpLimits(max_connections=2, max_connections_per_peer=2),
                  reuse_partial=True)
    pairs = [socket.socketpair() for _ in range(4)]
    try:
        busy, spare, newcomer, again = (Hold(ours, "10.0.0.1") for ours, _ in pairs)
        newcomer.peer = again.peer = newcomer_peer
        busy.reader, spare.reader = _Phase("idle", since=50.0), _Phase("idle", since=10.0)
        assert slots.take(busy) is None and slots.take(spare) is None
        assert slots.take(newcomer) == "reused"
        assert spare.reused and not busy.reused
        slots.give_back(spare)
        newcomer.reader = _Phase("header", since=50.0)  # as long as busy: accepted later
        assert slots.take(again) == "reused"
        assert busy.reused and not newcomer.reused
    finally:
        for a, b in pairs:
            a.close()
            b.close()
