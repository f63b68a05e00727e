"""grpc's C core writes its own lines to stderr, outside our logging: at its default
verbosity one per failed TLS handshake (a plain-text exporter, a port scanner at the TLS
gRPC port), unlimited. The command sets ``GRPC_VERBOSITY=ERROR`` unless the operator set it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.tls_certs import TestCA

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
import otel_eval.app.cli  # the command's entry point, before grpc is imported
from concurrent import futures
import grpc
cert, key = (open(p, "rb").read() for p in sys.argv[1:3])
server = grpc.server(futures.ThreadPoolExecutor(1))
port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key, cert)]))
server.start()
channel = grpc.insecure_channel(f"127.0.0.1:{port}")  # plain text at a TLS port
call = channel.unary_unary("/a.B/C", request_serializer=bytes, response_deserializer=bytes)
for _ in range(3):
    try:
        call(b"", timeout=2)
    except grpc.RpcError:
        pass
channel.close()
server.stop(0)
"""


def test_failed_tls_handshakes_write_nothing_to_stderr(tmp_path: Path) -> None:
    pair = TestCA(tmp_path).issue("localhost", server=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_VERBOSITY")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(pair.cert), str(pair.key)],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Handshake failed" not in out.stderr, out.stderr
