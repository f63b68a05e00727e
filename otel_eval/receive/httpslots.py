"""The connection slots of the shared HTTP server (``httpserver``): which connections it serves.

    accept -> Slots.take(Hold) -> admitted | "reused" (a waiting one closed for it) | refused
           ... connection served ... -> Slots.give_back(Hold)

One set of slots per listener (every address of its endpoint), thread-safe: the accepting
thread takes a slot, the connection's thread gives it back. Slots promise:
- **bounded connections**: at most ``max_connections`` at once and ``max_connections_per_peer``
  from one address; past them a connection is refused with the reason (``peer_limit``,
  ``connection_limit``), which the listener answers 503 and closes at once. With
  ``reserved_connections`` (the admin listener), a few slots beyond the total serve only
  ``reserved_paths`` (``/healthz``, ``/readyz``, ``/metrics``), one request each. A reserved
  connection is *reusable* (nginx's word) while it waits for its request head or while its
  answer waits to be taken, i.e. whenever its handler is not running: when the reserve is
  full, a new connection closes the oldest reusable one and takes its slot (nginx's
  "worker_connections are not enough, reusing connections"). A flood from any number of
  peers can fill the reserve but not hold it: each new connection, a probe's among them, gets
  in, and is the last in line to be reused; it has its head in long before that;
- **partial requests give way** (``reuse_partial``, the OTLP/HTTP receiver and the admin
  listener): when every general slot is taken, a new connection closes the *partial* one
  that has waited longest for a request head and takes its slot: a connection waiting for a
  request head (or idle between requests) that has made no authenticated request
  (``Request.authenticated()``, called by the handler once a token is known), or one
  answered and lingering before its close (a request refused with its body unread: 401
  without a token, 415...). A flood of partial requests from any number of peers then delays
  exports (and API reads) by no more than the time a client takes to send its head, instead
  of denying them for as long as it lasts (1,127 partial requests from 49 addresses: 0 of 40
  exports); an authenticated sender's keep-alive connection is never closed for another
  address's newcomer. A peer at its ``max_connections_per_peer`` gives way the same way, to
  itself: its own partial connection waiting longest is closed for its newcomer (behind a
  proxy or a NAT every sender is one address), else its own connection idle between requests
  the longest, authenticated or not (a proxy that adds the token keeps a pool of idle
  upstream connections per worker: nginx's ``keepalive``, Envoy's), else ``peer_limit``.
  Longest waiting, not oldest accepted: a proxy's pool hands out its most recently used
  connection first (nginx's, Go's), so the one idle longest is the one it would pick last,
  and one with bytes of a next request in is not idle; still, a proxy may send a request on
  it in the instant it is closed (HTTP/1.1 has no way to close an idle connection safely),
  which the proxy answers 502 (docs/transport-security.md says how to keep a pool under the
  cap).
A slot knows its connection by its socket (shut down to close it for a newcomer) and by the
phase its reader is in (``httpconn``), nothing more.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Protocol

from otel_eval.receive.config import HttpLimits


class _Reader(Protocol):
    """A connection's reader as its slot sees it: the phase it waits in (``header``,
    ``body``, ``idle``, ``write`` or ``linger``; ``httpconn``) and since when it has waited
    for a request head (accept, or the end of its last answer: idle since)."""

    phase: str
    since: float


class Hold:
    """One connection's slot: what ``Slots`` needs to reuse it (close it for a newcomer)."""

    def __init__(self, sock: socket.socket, peer: str, accepted_at: float = 0.0) -> None:
        self.sock, self.peer, self.accepted_at = sock, peer, accepted_at
        self.reserved = False
        self.reader: _Reader | None = None  # set when its thread starts reading
        self.reused = False  # closed for a newcomer, which took over the slot
        self.trusted = False  # made an authenticated request

    @property
    def reusable(self) -> bool:
        """Not inside its handler: waiting for its head (a partial request is cheap to drop),
        for the client to take its answer, or lingering after it (``linger``)."""
        return self.reader is None or self.reader.phase in ("header", "write", "linger")

    @property
    def partial(self) -> bool:
        """Waiting for a request head, or idle between requests, and never authenticated; or
        answered and lingering before its close (``httpconn``: its request was refused
        with bytes unread, which it drops for up to ``LINGER_S``): a request nobody waits
        for, whoever sent it."""
        if self.reader is not None and self.reader.phase == "linger":
            return True
        return not self.trusted and (self.reader is None
                                     or self.reader.phase in ("header", "idle"))


def _waiting_since(hold: Hold) -> float:
    return hold.reader.since if hold.reader is not None else hold.accepted_at


def _arriving(sock: socket.socket) -> bool:
    """Bytes of a next request (or its client's close) are in, not yet read by its thread:
    not idle any more (its proxy picked it). Polled, never waited for (a recv would wait the
    socket's timeout); a socket gone is not arriving."""
    try:
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return False


class Slots:
    """Connection slots: per peer, in total, and the reserve, whose reusable connections
    are closed oldest first to make room for a new one; with ``reuse_partial``, the general
    slots' partial connections too, the one waiting longest first. Thread-safe."""

    def __init__(self, limits: HttpLimits, reuse_partial: bool = False) -> None:
        self.limits = limits
        self.reuse_partial = reuse_partial
        self._lock = threading.Lock()
        self._general: dict[Hold, None] = {}  # insertion order: oldest first
        self._reserve: dict[Hold, None] = {}
        self._peers: Counter[str] = Counter()

    def _longest_waiting(self, candidates: Iterator[Hold]) -> Hold | None:
        """Of ``candidates``, the general connection that has waited longest for a request
        head, taken out of the slots (or None). Not the oldest accepted: a proxy's pool
        (nginx's ``keepalive``, Envoy's, Go's) hands out its most recently used connection
        first, often its first one, so the one idle longest is the one it picks last, as
        nginx drains its own reusable connections (and its pool evicts): closing the one it
        is about to send a request on loses that request (nginx retries no POST: a 502)."""
        victim = min(candidates, key=_waiting_since, default=None)
        if victim is not None:
            del self._general[victim]
            victim.reused = True  # its thread gives back its peer count only
        return victim

    def _partial(self, peer: str | None = None) -> Hold | None:
        """The partial general connection (of ``peer``, when given) waiting longest, taken
        out of the slots (or None)."""
        if not self.reuse_partial:
            return None
        return self._longest_waiting(h for h in self._general
                                     if h.partial and (peer is None or h.peer == peer))

    def _idle(self, peer: str) -> Hold | None:
        """The general connection of ``peer`` idle between requests (authenticated or not)
        the longest, taken out of the slots (or None): a proxy's pooled upstream connection,
        which gives way to the same address's newcomer, never to another's."""
        if not self.reuse_partial:
            return None
        return self._longest_waiting(h for h in self._general
                                     if h.peer == peer and h.reader is not None
                                     and h.reader.phase == "idle" and not _arriving(h.sock))

    def take(self, hold: Hold) -> str | None:
        """None when admitted (``hold.reserved`` says on which slot), else the reason."""
        lim, victim = self.limits, None
        with self._lock:
            if self._peers[hold.peer] >= lim.max_connections_per_peer:
                # at its cap, a peer's own partial connection gives way to its newcomer:
                # behind a proxy, a NAT or an SNAT'ing Service every sender is one address,
                # and a flood of partial requests among them must not deny the others
                if (victim := self._partial(hold.peer) or self._idle(hold.peer)) is None:
                    return "peer_limit"
                self._general[hold] = None
            elif (len(self._general) < lim.max_connections
                    or (victim := self._partial()) is not None):  # a partial one gives way
                self._general[hold] = None
            elif len(self._reserve) < lim.reserved_connections:
                hold.reserved = True
                self._reserve[hold] = None
            else:
                victim = next((h for h in self._reserve if h.reusable), None)
                if victim is None:  # every reserved connection is inside its handler
                    return "connection_limit"
                del self._reserve[victim]
                victim.reused = True  # its thread gives back its peer count only
                hold.reserved = True
                self._reserve[hold] = None
            self._peers[hold.peer] += 1
            if victim is None:
                return None
            # wakes its thread's recv (EOF) or sendall (EPIPE); the plain socket's shutdown,
            # not SSLSocket's, which would drop the TLS object under the reading thread.
            # Under the lock: its thread gives its slot back (under the lock) before it closes
            # the socket, so the descriptor shut down here cannot have been closed and reused
            # by another connection (the shutdown reads its number without the GIL).
            with contextlib.suppress(OSError):
                socket.socket.shutdown(victim.sock, socket.SHUT_RDWR)
        return "reused"

    def give_back(self, hold: Hold) -> None:
        with self._lock:
            if hold.reused:
                pass  # the newcomer has its slot
            elif hold.reserved:
                del self._reserve[hold]
            else:
                del self._general[hold]
            self._peers[hold.peer] -= 1
            if not self._peers[hold.peer]:
                del self._peers[hold.peer]

    @property
    def in_use(self) -> int:
        with self._lock:
            return len(self._general) + len(self._reserve)
