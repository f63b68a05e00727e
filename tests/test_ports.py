"""``free_port`` picks outside the kernel's ephemeral range (where the suite's own client
sockets take their local ports) and never hands one port out twice."""

from __future__ import annotations

import socket

from support.ports import _ephemeral_low, free_port


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(p < _ephemeral_low() for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))

