"""``free_port``: for programs that cannot report the port 0 they bound (the collector, the
Kafka broker, PostgreSQL, Prometheus). Our own servers bind port 0 and say which port they got.
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
