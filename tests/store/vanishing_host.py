"""A PostgreSQL host that vanishes under otel-eval's sessions (no FIN, no RST), for
``test_postgresql_keepalives.py``. Run in a network namespace of its own, as its root:

    python vanishing_host.py SOCKET_DIR PORT DATABASE

Our sessions reach the server over TCP on this namespace's loopback, through a proxy to the
server's unix socket (outside the namespace); then the loopback goes down, so every packet on
those connections is lost (a proxy that merely stops forwarding would not do: its kernel
still acknowledges, and answers the probes). Two calls are then timed: a statement the server
was running (nothing of ours unacknowledged: only probes find the server gone) and a store
call sent after it went (its data unacknowledged). The store's client-side defaults are made
small (a second, not a minute). Prints one JSON object, each call's ``[reason, seconds]``
(``store.failures`` reason, ``"answered"``, or ``"waiting"`` after ``WAIT_S``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from otel_eval.store import postgresql
from otel_eval.store.failures import write_failure

SMALL = {"keepalives_idle": 1, "keepalives_interval": 1, "keepalives_count": 2,
         "tcp_user_timeout": 2000, "connect_timeout": 2}
WAIT_S = 30.0  # a call not done by then counts as still waiting (the OS: ~15 min)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass


def _proxy(unix_path: str) -> int:
    """A TCP port on this namespace's loopback forwarding each connection to ``unix_path``."""
    listener = socket.create_server(("127.0.0.1", 0))

    def accept() -> None:
        while True:
            tcp, _ = listener.accept()
            unix = socket.socket(socket.AF_UNIX)
            unix.connect(unix_path)
            for ends in ((tcp, unix), (unix, tcp)):
                threading.Thread(target=_pump, args=ends, daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return int(listener.getsockname()[1])


def _timed(call: Callable[[], Any], out: dict[str, Any], name: str) -> None:
    start = time.monotonic()
    try:
        call()
        reason = "answered"
    except Exception as e:  # what it raised is the result
        reason = write_failure(e) or repr(e)
    out[name] = [reason, round(time.monotonic() - start, 1)]


def _loopback(state: str) -> None:
    subprocess.run(["ip", "link", "set", "lo", state], check=True)


def main(socket_dir: str, port: str, database: str) -> None:
    _loopback("up")
    tcp = _proxy(os.path.join(socket_dir, f".s.PGSQL.{port}"))
    postgresql._DEFAULTS = tuple((name, variable, SMALL.get(name, value))
                                 for name, variable, value in postgresql._DEFAULTS)
    url = f"postgresql://otel@127.0.0.1:{tcp}/{database}"
    store = postgresql.PostgresStore(url).open()
    running = postgresql.connect(url)
    out: dict[str, Any] = {}
    statement = threading.Thread(target=_timed, daemon=True, args=(
        lambda: running.execute("SELECT pg_sleep(60)"), out, "running"))
    statement.start()
    # the statement is running on the server (asked over its unix socket, outside the loss)
    with psycopg.connect(host=socket_dir, port=port, user="otel", dbname=database,
                         autocommit=True) as admin:
        deadline = time.monotonic() + WAIT_S
        while not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s AND state = "
                                "'active'", (running.info.backend_pid,)).fetchone():
            assert time.monotonic() < deadline, "the statement never started"
            time.sleep(0.05)  # polling interval, not synchronisation
    _loopback("down")
    sent = threading.Thread(target=_timed, daemon=True, args=(
        lambda: store.feedback_many([f"{1:032x}"]), out, "store"))
    sent.start()
    for name, thread in (("running", statement), ("store", sent)):
        thread.join(WAIT_S)
        out.setdefault(name, ["waiting", WAIT_S])
    print(json.dumps(out), flush=True)
    os._exit(0)  # the calls still waiting (before the fix) hold their threads


if __name__ == "__main__":
    main(*sys.argv[1:4])
