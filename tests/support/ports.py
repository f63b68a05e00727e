"""``free_port``: for programs that cannot report the port 0 they bound (the collector, the
Kafka broker, PostgreSQL, Prometheus). Our own servers bind port 0 and say which port they got.

A port is free only "a moment ago": the program binds it later. The kernel hands out port 0
binds and every outgoing connection's local port from the ephemeral range
(``ip_local_port_range``), so a port taken from that range can be taken again by a client
socket of the suite before the program binds it. ``free_port`` therefore picks below that
range, where only explicit binds land, and never hands the same port out twice in a process.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_LOWEST = 10_000
_given: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port() -> int:
    """A loopback TCP port outside the ephemeral range that was free a moment ago and that
    this process has not handed out before."""
    high = _ephemeral_low()
    pick = random.Random()
    for _ in range(1_000):
        port = pick.randrange(_LOWEST, high) if high > _LOWEST + 100 else 0
        if port in _given:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = int(s.getsockname()[1])
        if port not in _given:
            _given.add(port)
            return port
    raise RuntimeError("no free loopback port found")
