"""What log records for traces that never arrive keep resident (issue 21), against spans of
the same received size measured in the same run.

    python bench/log_memory.py [--mib 64]

Each side runs in a fresh process: an engine (no spool, idle timeout of an hour: nothing is
released) fed through the receivers' ``Ingest`` with ``--mib`` MiB of OTLP/protobuf requests,
each of 200 GenAI ``gen_ai.choice`` records (an assistant message with a tool call, ~300 B;
one trace per request, its spans never sent), or the same bytes as spans (the baseline:
spans are held as their received bytes). Prints resident growth per MiB acknowledged for
both, their ratio, and whether admission refused (``pending_bytes``) once
``max_pending_bytes`` was reached.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from prometheus_client import CollectorRegistry

from otel_eval.app.config import Config
from otel_eval.assemble.engine import Engine
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.model import LogEvent, Span
from otel_eval.decode import encode, otlp_logs
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import InProcess
from otel_eval.receive.ingest import Ingest
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics

PER_REQUEST = 200
TEXT = "The weather in Paris is sunny, 21 degrees."


def _resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _logs(i: int) -> bytes:
    trace = f"{i + 1:032x}"
    return otlp_logs.encode_logs([LogEvent(
        trace, f"{j + 1:016x}", "gen_ai.choice", 1_700_000_000_000_000_000 + j,
        {"gen_ai.system": "openai", "gen_ai.response.id": f"r{i}-{j}"},
        {"index": 0, "finish_reason": "tool_calls",
         "message": {"role": "assistant", "content": f"{j} {TEXT}", "tool_calls": [
             {"id": f"call_{j}", "type": "function", "function": {
                 "name": "get_weather", "arguments": '{"city": "Paris"}'}}]}})
        for j in range(PER_REQUEST)]).SerializeToString()


def _spans(i: int) -> bytes:
    trace = f"{i + 1:032x}"
    return encode.encode_spans([Span(
        trace, f"{j + 1:016x}", None, "chat gpt-4o", 1, 0, attributes={
            "gen_ai.system": "openai", "gen_ai.response.id": f"r{i}-{j}",
            "gen_ai.completion.0.content": f"{j} {TEXT}"})
        for j in range(PER_REQUEST)]).SerializeToString()


def measure(signal: str, mib: int, limit_mib: int) -> dict[str, float | int | str]:
    cfg = Config()
    cfg = replace(cfg, assembly=replace(
        cfg.assembly, idle_timeout_s=3600.0, grace_s=3600.0, max_trace_duration_s=7200.0,
        max_pending_bytes=limit_mib << 20))
    metrics = Metrics(CollectorRegistry())
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(str(Path(tmp) / "store.db"))
        engine = Engine(InProcess(Evaluator(cfg), store),
                        StoreHealth(store.location, clock=lambda: 0.0), metrics,
                        assembly=cfg.assembly, clock=lambda: 0.0)
        ingest = Ingest(engine, metrics)
        make = _logs if signal == "logs" else _spans
        size = len(make(0))
        gc.collect()
        before = _resident()
        sent = 0
        refused = ""
        for i in range(max(1, (mib << 20) // size)):
            body = make(i)
            res = (ingest.handle_logs_bytes(body, "grpc") if signal == "logs"
                   else ingest.handle_bytes(body, "grpc"))
            if res.outcome == "throttled":
                refused = res.message
                break
            assert res.outcome == "ok" and not res.rejected, res
            sent += len(body)
            del body
        gc.collect()
        grown = _resident() - before
        store.close()
    return {"acknowledged_mib": round(sent / 2**20, 1),
            "resident_mib": round(grown / 2**20, 1),
            "resident_per_mib": round(grown / max(sent, 1), 2), "refused": refused}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=64, help="MiB to send per side")
    ap.add_argument("--limit-mib", type=int, default=512, help="assembly.max_pending_bytes")
    ap.add_argument("--only", choices=["logs", "traces"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.only:
        print(json.dumps(measure(args.only, args.mib, args.limit_mib)))
        return
    out = {}
    for signal in ("traces", "logs"):
        res = subprocess.run([sys.executable, __file__, "--only", signal, "--mib",
                              str(args.mib), "--limit-mib", str(args.limit_mib)],
                             capture_output=True, text=True, check=True).stdout
        out[signal] = json.loads(res)
    ratio = out["logs"]["resident_per_mib"] / max(out["traces"]["resident_per_mib"], 0.01)
    print(json.dumps({"spans": out["traces"], "log_records": out["logs"],
                      "logs_over_spans": round(ratio, 2)}))


if __name__ == "__main__":
    main()
