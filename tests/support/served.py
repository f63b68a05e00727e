"""``otel-eval serve`` as a real subprocess, the official SDK exporter as its client, and what
tests read back (Prometheus counters, the SQLite store).

Ports: the service binds port 0 and the harness reads the ports it got from its log, so no other
process can take a port picked in advance. Synchronisation is by polling a condition with an
overall deadline (``poll``), never by sleeping a guess.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags

from support.poll import poll

ROOT = Path(__file__).resolve().parents[2]
RESOURCE = Resource.create({"service.name": "load-test"})
_PORTS = {"grpc": re.compile(r"OTLP/gRPC receiver listening on \S+ \(port (\d+)\)"),
          "admin": re.compile(r"admin endpoint listening on \S+ \(port (\d+)\)"),
          "http": re.compile(r"OTLP/HTTP receiver listening on \S+ \(port (\d+)\)")}


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    grpc_target: str
    admin_url: str
    store: Path
    log: Path
    http_url: str = ""  # http://127.0.0.1:PORT when served with ``http=True``

    def log_tail(self, n: int = 30) -> str:
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def metrics(self) -> dict[str, float]:
        """Each metric name summed over its label sets."""
        with urllib.request.urlopen(self.admin_url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                base = name.split("{", 1)[0]
                out[base] = out.get(base, 0.0) + float(value)
        return out

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.admin_url + "/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False


def _bound_ports(log: Path, proc: subprocess.Popen[bytes], http: bool
                 ) -> dict[str, int] | None:
    """The ports serve bound, from its log; raises if it exited first."""
    if proc.poll() is not None:
        raise AssertionError("serve exited early:\n" + log.read_text(errors="replace"))
    text = log.read_text(errors="replace")
    found = {k: rx.search(text) for k, rx in _PORTS.items() if http or k != "http"}
    return {k: int(m.group(1)) for k, m in found.items() if m} if all(found.values()) else None


@contextmanager
def serve(tmp: Path, config: dict[str, Any], store: Path | None = None,
          http: bool = False, store_url: str = "", grpc_endpoint: str = "127.0.0.1:0",
          argv: Sequence[str] = ()) -> Iterator[Served]:
    """Start ``python -m otel_eval serve`` with ``config`` (written as YAML) on port 0 and wait
    until ready; on exit SIGTERM it (if still running) and wait, killing it only as a last
    resort. ``store``: the SQLite file (default ``tmp/otel-eval.db``; a restart passes the
    same one); ``http``: OTLP/HTTP too (port 0), else gRPC only; ``store_url``: a PostgreSQL
    store instead (``--store URL``; the SQLite path is then unused); ``grpc_endpoint``: a
    fixed one for a restart behind a static list of replicas (a port the last serve bound);
    ``argv``: more flags."""
    receiver = {**config.get("receiver", {}), "http_endpoint": ""}
    cfg = tmp / "config.yaml"
    cfg.write_text(json.dumps({**config, "receiver": receiver}))  # JSON is valid YAML
    store, log = store or tmp / "otel-eval.db", tmp / "serve.log"
    argv = [sys.executable, "-m", "otel_eval", "serve", "--config", str(cfg),
            "--grpc-endpoint", grpc_endpoint, "--admin-endpoint", "127.0.0.1:0",
            "--store", store_url or str(store),
            *(["--http-endpoint", "127.0.0.1:0"] if http else []), *argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp)
    try:
        ports = poll(lambda: _bound_ports(log, proc, http), "serve to bind its ports",
                     timeout_s=60)
        served = Served(proc, f"127.0.0.1:{ports['grpc']}",
                        f"http://127.0.0.1:{ports['admin']}", store, log,
                        f"http://127.0.0.1:{ports['http']}" if http else "")
        poll(lambda: proc.poll() is not None or served.ready(), "serve to be ready", timeout_s=60)
        assert proc.poll() is None, f"serve exited early:\n{served.log_tail()}"
        yield served
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def stored(store: Path) -> dict[str, dict[str, Any]]:
    """Every stored per-trace JSON object, by trace id (read-only; works while serving)."""
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=10) as db:
        rows = db.execute("SELECT trace_id, body FROM evaluations").fetchall()
    return {tid: json.loads(body) for tid, body in rows}


def stored_span_ids(bodies: dict[str, dict[str, Any]]) -> set[tuple[str, str]]:
    """(trace id, span id) of every received span in the stored evaluations."""
    return {(tid, s["span_id"]) for tid, b in bodies.items() for s in b["steps"]
            if not s.get("rebuilt")}


# --- the official SDK exporter as client ---------------------------------------------------------

def exporter(target: str, timeout_s: float = 10.0) -> OTLPSpanExporter:
    return OTLPSpanExporter(endpoint=f"http://{target}", insecure=True, timeout=timeout_s)


def sdk_span(trace_id: bytes, span_id: bytes, parent: bytes, name: str, ended: bool,
             start_ns: int) -> ReadableSpan:
    """A finished SDK span with chosen ids; ``ended=False`` gives a span without an end time
    (what a collector forwards for a root that never ended), ``parent=b""`` a root."""
    def ctx(sid: bytes) -> SpanContext:
        return SpanContext(int.from_bytes(trace_id), int.from_bytes(sid), is_remote=False,
                           trace_flags=TraceFlags(TraceFlags.SAMPLED))

    op = "chat" if parent else "invoke_agent"
    return ReadableSpan(name, context=ctx(span_id), parent=ctx(parent) if parent else None,
                        resource=RESOURCE, attributes={"gen_ai.operation.name": op},
                        start_time=start_ns, end_time=start_ns + 1_000_000 if ended else None)


def ids(spans: list[ReadableSpan]) -> set[tuple[str, str]]:
    """(trace id, span id) in the hex form the store uses."""
    out = set()
    for s in spans:
        assert s.context is not None
        out.add((f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}"))
    return out
