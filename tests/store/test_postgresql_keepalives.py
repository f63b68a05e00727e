"""PostgreSQL only: our end of each session finds a server whose host vanished (no FIN, no
RST: a node lost, a partition). The server enforces ``statement_timeout``, so a server that
is gone bounds nothing: a call waited for the OS (a statement running: keepalives after
7200 s; data sent: ~15 min of retransmissions) while it held the store's lock and the
engine's thread. libpq's ``keepalives_*`` and ``tcp_user_timeout`` now default to the
server side's figures (``postgresql.KEEPALIVES``), unless the URL sets them."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.postgresql_server import PostgresServer

from otel_eval.store.postgresql import KEEPALIVES, connect

ROOT = Path(__file__).resolve().parents[2]
SERVER = dict(KEEPALIVES)
# libpq's name, the server's figure it takes, the socket option it sets
CLIENT = (("keepalives_idle", SERVER["tcp_keepalives_idle"], socket.TCP_KEEPIDLE),
          ("keepalives_interval", SERVER["tcp_keepalives_interval"], socket.TCP_KEEPINTVL),
          ("keepalives_count", SERVER["tcp_keepalives_count"], socket.TCP_KEEPCNT),
          ("tcp_user_timeout", SERVER["tcp_user_timeout"], socket.TCP_USER_TIMEOUT))


def _ours(conn: Any) -> tuple[dict[str, str], dict[str, int]]:
    """What libpq was given, and what its socket got from it (the kernel's options)."""
    given = conn.info.get_parameters()
    with socket.fromfd(conn.pgconn.socket, socket.AF_INET, socket.SOCK_STREAM) as s:
        options = {name: s.getsockopt(socket.IPPROTO_TCP, option)
                   for name, _, option in CLIENT}
        options["keepalives"] = s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
    return {name: given.get(name, "") for name in options}, options


def test_our_end_probes_the_server_as_it_probes_us_unless_the_url_says(
        postgresql_url: str) -> None:
    with connect(postgresql_url) as conn:
        given, options = _ours(conn)
    assert given == {"keepalives": "1", **{name: str(value) for name, value, _ in CLIENT}}
    assert options == {"keepalives": 1, **{name: value for name, value, _ in CLIENT}}
    assert options["keepalives_idle"] == 60 and options["tcp_user_timeout"] == 120_000
    url = f"{postgresql_url}?keepalives_idle=300&tcp_user_timeout=0&keepalives_count=3"
    with connect(url) as conn:
        given, options = _ours(conn)  # the operator's values win, one by one
    assert given["keepalives_idle"] == "300" and given["keepalives_count"] == "3"
    assert (options["keepalives_idle"], options["keepalives_count"],
            options["tcp_user_timeout"], options["keepalives_interval"]) == (300, 3, 0, 10)
    with connect(f"{postgresql_url}?keepalives=0") as conn:
        assert _ours(conn)[1]["keepalives"] == 0  # turned off


def _namespace() -> list[str]:
    """The command prefix that runs a program as root of a network namespace of its own."""
    unshare = shutil.which("unshare")
    prefix = [unshare or "unshare", *([] if os.geteuid() == 0 else ["--user",
                                                                    "--map-root-user"]), "--net"]
    probe = subprocess.run([*prefix, "ip", "link", "set", "lo", "up"], capture_output=True,
                           timeout=60, check=False) if unshare and shutil.which("ip") else None
    if probe is None or probe.returncode != 0:
        pytest.skip("no network namespace (unshare, ip) here")
    return prefix


def test_a_call_to_a_vanished_server_fails_within_the_probes(
        postgresql_server: PostgresServer, postgresql_url: str) -> None:
    """The host vanishes while a statement runs and before a store call is sent
    (``vanishing_host.py``, the client defaults made a second): both calls fail as a lost
    connection, ``unavailable`` (the store tried once more on a new connection, refused
    too), within seconds. Before, both were still waiting after 30 s (the OS: ~15 min)."""
    prefix = _namespace()
    database = postgresql_url.rsplit("/", 1)[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    done = subprocess.run(
        [*prefix, sys.executable, str(Path(__file__).with_name("vanishing_host.py")),
         str(postgresql_server.dir), str(postgresql_server.port), database],
        capture_output=True, text=True, timeout=180, check=False, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    calls = json.loads(done.stdout)
    assert {name: reason for name, (reason, _) in calls.items()} == {
        "running": "unavailable", "store": "unavailable"}, calls
    assert max(seconds for _, seconds in calls.values()) < 15, calls  # ~3 s each
