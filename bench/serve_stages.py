"""Where serve's CPU per span goes, timed without a profiler: serve's own wiring (``Service``:
spool, SQLite store, metrics, sinks; no sockets, ``evaluation.workers`` 1) driven in this
process: ``Ingest.handle_bytes`` per request (as the gRPC receiver calls it, with the
decoding budget's charge as ``Service`` wires it: until 2026-12-07 it was left out), then the
engine's ``tick`` and ``process`` (evaluate, store, spool, metrics). Each part is wrapped
with ``time.process_time``; nested parts are indented under the part that calls them.

    python bench/serve_stages.py [--traces 1000]

The traces are bench/ingest.py's (``otlp_load.build_requests``: 11-span agent traces in
100-span requests, ~2 KB of message text per chat span); 200 are run first as a warm-up. The
cyclic collector is tuned as ``otel-eval serve`` tunes it after start-up (``cli._tune_gc``):
left at Python's default, its full collections (tens of ms each) landed in whichever part
was running, e.g. 4.8 us a span in the spool's settle, which costs 0.3.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from ingest_procs import TOOLS

# (label, owner module or class path, attribute): parts timed, outermost first
PARTS = (
    ("receive: handle_bytes (all below)", "otel_eval.receive.ingest:Ingest", "handle_bytes"),
    ("  decoding budget: charge", "otel_eval.receive.decoding:DecodeBudget", "cost"),
    ("  parse request", "otel_eval.decode.otlp", "parse_request"),
    ("  decode spans", "otel_eval.decode.otlp", "decode_request"),
    ("  spool append", "otel_eval.assemble.spool:Spool", "append"),
    ("  assembler add", "otel_eval.assemble.assembler:TraceAssembler", "add"),
    ("tick: release", "otel_eval.assemble.engine:Engine", "tick"),
    ("process (all below)", "otel_eval.assemble.engine:Engine", "process"),
    ("  evaluate", "otel_eval.evaluate.evaluator:Evaluator", "evaluate"),
    ("    trajectory", "otel_eval.evaluate.evaluator:Evaluator", "trajectory"),
    ("    detectors", "otel_eval.evaluate.detectors:Detectors", "evaluate"),
    ("    predict", "otel_eval.evaluate.evaluator:Evaluator", "_predict"),
    ("    bound (encode)", "otel_eval.evaluate.evaluator", "bound"),
    ("  store put_many", "otel_eval.store.sqlite:SqliteStore", "put_many"),
    ("  agent history", "otel_eval.store.sqlite:SqliteStore", "remember_agents"),
    ("  spool evaluated", "otel_eval.assemble.spool:Spool", "evaluated"),
    ("  metrics", "otel_eval.telemetry.metrics:Metrics", "evaluation_stored"),
)


def _wrap(spent: Counter[str], label: str, target: str, name: str) -> None:
    import importlib

    module, _, cls = target.partition(":")
    owner: Any = importlib.import_module(module)
    if cls:
        owner = getattr(owner, cls)
    inner: Callable[..., Any] = getattr(owner, name)

    def timed(*a: Any, **k: Any) -> Any:
        t = time.process_time()
        try:
            return inner(*a, **k)
        finally:
            spent[label] += time.process_time() - t

    setattr(owner, name, timed)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--traces", type=int, default=1000)
    args = p.parse_args()
    sys.path.insert(0, str(TOOLS))
    import otlp_load  # type: ignore[import-not-found]

    from otel_eval.app.cli import _tune_gc
    from otel_eval.app.config import Config
    from otel_eval.app.service import Service
    from otel_eval.receive.decoding import DecodeBudget
    from otel_eval.receive.ingest import Ingest

    spent: Counter[str] = Counter()
    for label, target, name in PARTS:
        _wrap(spent, label, target, name)
    with tempfile.TemporaryDirectory(prefix="otel-eval-stages-") as d:
        c = Config()
        config = dataclasses.replace(
            c, receiver=dataclasses.replace(c.receiver, grpc_endpoint="", http_endpoint=""),
            store=dataclasses.replace(c.store, path=f"{d}/store.db"),
            evaluation=dataclasses.replace(c.evaluation, workers=1))
        now = [0.0]
        svc = Service(config, clock=lambda: now[0])
        svc._open_store()
        svc._open_spool()
        # as Service wires its receivers: each request charged to the decoding budget first
        ingest = Ingest(svc.engine, svc.metrics,
                        decoding=DecodeBudget(config.receiver.max_decoding_bytes))
        _tune_gc()  # as cmd_serve does once the service is built

        def run(n: int, seed: int) -> float:
            wire = [r.SerializeToString() for r in otlp_load.build_requests(n, 5, 100, 2048,
                                                                           seed=seed)]
            started = time.process_time()
            for body in wire:
                assert ingest.handle_bytes(body, "grpc").outcome == "ok"
            now[0] += 3600.0  # past every grace period
            svc.engine.tick()
            svc.engine.process()
            return time.process_time() - started

        run(200, 1)
        spent.clear()
        total = run(args.traces, 2)
        svc.spool.close()  # type: ignore[union-attr]
        svc.store.close()
    spans = 11 * args.traces
    print(f"{'part':<36} us per span (CPU)")
    print(f"{'all':<36} {1e6 * total / spans:7.1f}")
    for label, _, _ in PARTS:
        print(f"{label:<36} {1e6 * spent[label] / spans:7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
