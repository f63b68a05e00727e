"""The bytes of one connection of the shared HTTP server (``httpconn``), read and written under
the deadline of the phase it is in.

    socket -> DeadlineReader (phase: header | body | idle | write | linger) -> http.server's parser
    answer -> Writer -> socket (sendall, under the write deadline)

A ``DeadlineReader`` bounds each read by its phase's deadline, absolute (from accept, or from a
request's first byte), so a client trickling a byte at a time is cut whatever its pace; it
counts the head's bytes and raises ``HeaderTooLarge`` well before a head past the limit is all
in (the exact bound is ``httpconn``'s). Its ``phase`` and ``since`` are what the connection's
slot reads (``httpslots``: which connection gives way to a newcomer).
"""

from __future__ import annotations

import io
import socket
from collections.abc import Callable
from typing import Any

from otel_eval.receive.config import HttpLimits


class HeaderTooLarge(Exception):
    """A request head past ``max_header_bytes`` (answered 431, counted ``header_too_large``)."""


class DeadlineReader(io.RawIOBase):
    """The socket as read by one connection, each read bounded by the current phase's
    deadline (absolute, so a trickle cannot stretch it); ``phase`` names it for the count."""

    def __init__(self, sock: socket.socket, clock: Callable[[], float], limits: HttpLimits,
                 accepted_at: float) -> None:
        self.sock, self.clock, self.limits = sock, clock, limits
        self.phase = "header"
        self.started = accepted_at
        # when its wait for a request head began (accept, or the end of its last answer):
        # the connection waiting longest gives way first (``httpslots``)
        self.since = accepted_at
        self.deadline = accepted_at + limits.read_header_timeout_s
        self.header_bytes = 0
        self.received = 0  # bytes read from the socket so far (``tell``)
        self.eof = False

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.received

    def idle(self) -> None:
        """Between requests: wait up to the idle timeout for the next one's first byte."""
        self.phase, self.since = "idle", self.clock()
        self.deadline = self.since + self.limits.idle_timeout_s

    def begin(self, now: float) -> None:
        """The next request's first byte is in (read now, or read ahead with the previous
        request): its header deadline, and later its body's, count from ``now``."""
        if self.phase == "idle":
            self.phase, self.started = "header", now
            self.deadline, self.header_bytes = now + self.limits.read_header_timeout_s, 0

    def body(self) -> None:
        self.phase, self.deadline = "body", self.started + self.limits.read_timeout_s

    def readinto(self, b: Any) -> int:
        remaining = self.deadline - self.clock()
        if remaining <= 0:
            raise TimeoutError(self.phase)
        self.sock.settimeout(remaining)
        n = self.sock.recv_into(b)
        now = self.clock()
        if now > self.deadline:  # it came, but too late
            raise TimeoutError(self.phase)
        self.received += n
        if n == 0:
            self.eof = True
        else:  # in idle, a new request begins: its header deadline starts now
            self.begin(now)
        if self.phase == "header":  # bounds what is read; the exact bound: handle_one_request
            self.header_bytes += n
            if self.header_bytes > self.limits.max_header_bytes + io.DEFAULT_BUFFER_SIZE:
                raise HeaderTooLarge()
        return n


TIMEOUT_REASON = {"header": "header_timeout", "body": "read_timeout", "write": "write_timeout"}


class Writer:
    """The answer's bytes, sent whole (``sendall``) under the write deadline."""

    closed = False

    def __init__(self, sock: socket.socket) -> None:
        self.write = sock.sendall

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True
