"""Floods of partial HTTP requests against a real ``otel-eval serve`` (issue 21): does
``/healthz`` still answer, and how many tracebacks does the flood leave in the log?

    python bench/http_flood.py [--root CHECKOUT] [--connections N] [--peers P]

Starts serve (the code of ``--root``, default this checkout) on free loopback ports, opens N
connections to its admin port from P loopback addresses (127.0.0.2...), each sending a
request line and no more, then asks ``GET /healthz`` from 127.0.0.1 (5 s to answer); then
the flood hangs up and the log is searched for tracebacks. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

from ingest_procs import ROOT, Proc, free_port, ready, wait_for


def healthz(port: int) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return s.recv(64).split(b"\r\n", 1)[0].decode() or "closed"
    except OSError as e:
        return type(e).__name__


def flood(port: int, n: int, peers: int) -> list[socket.socket]:
    held = []
    for i in range(n):
        s = socket.socket()
        s.bind((f"127.0.0.{2 + i % peers}", 0))
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /v1/evaluations HTTP/1.1\r\n")
        held.append(s)
    return held


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--root", default=str(ROOT))
    p.add_argument("--connections", type=int, default=1030)
    p.add_argument("--peers", type=int, default=1)
    args = p.parse_args()
    admin = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "otel_eval", "serve", "--store", f"{tmp}/s.db",
                "--grpc-endpoint", "127.0.0.1:0", "--http-endpoint", "127.0.0.1:0",
                "--admin-endpoint", f"127.0.0.1:{admin}"]
        proc = Proc(argv, env={**os.environ, "PYTHONPATH": args.root})
        try:
            wait_for(lambda: ready(admin), 90, "serve ready", 0.1)
            held = flood(admin, args.connections, args.peers)
            time.sleep(1.0)  # load, not sync: let serve take what it takes of the flood
            answer = healthz(admin)
            for s in held:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                s.close()  # reset: every held connection's thread sees a hang-up
            time.sleep(2.0)
            answer_after = healthz(admin)
        finally:
            proc.kill()
        log = "\n".join(line for _, line in proc.lines)
    print(json.dumps({"root": Path(args.root).name, "connections": args.connections,
                      "peers": args.peers, "healthz_during_flood": answer,
                      "healthz_after": answer_after,
                      "tracebacks": log.count("Traceback")}))


if __name__ == "__main__":
    main()
