"""Benchmark of the ingest path: ``otel-eval serve`` against a decode-and-materialize baseline.

    python bench/ingest.py                      3 interleaved rounds + memory, ~2 min
    python bench/ingest.py --reps 1 --traces 2000 --mem-traces 1000     quick look
    python bench/ingest.py --spool-cost --reps 5      serve with the spool on vs off

Throughput: ``../shared/tools/otlp_load.py raw --no-repeat`` sends ``--traces`` agent traces
(each span once, so nothing is a duplicate) at ``--concurrency`` in-flight calls to
- ``otel-eval serve`` (short ``grace_s``): end-to-end spans/s = spans accepted / (first
  request -> admin ``/metrics`` shows ``otel_eval_assembly_pending_spans`` 0, i.e. every
  accepted span evaluated and stored in SQLite). The grace period is part of that time.
- ``otlp_sink.py --server sync --mode walk``: decodes and materializes every attribute;
  spans/s = spans acknowledged / load time (it keeps nothing, so ack = done).
Each server is pinned to core 0 and the load generator to core 1 (``taskset``, when present);
rounds alternate serve/baseline and the median is reported (the machine is noisy).
Memory: a serve with grace/idle timeouts of an hour takes ``--mem-traces`` traces and keeps
them open; (VmHWM after - VmHWM before) / traces from ``/proc/<pid>/status``.
The spool's cost (``--spool-cost``): the same serve end-to-end run with ``store.spool`` true
and false, rounds alternating, medians and the ratio on/off (target: cost <= 10 %), in
spans/s and in spans per CPU-second of the serve process (steadier on a shared machine).
Where serve's time goes (``--profile-traces N``): the same traces decoded, assembled,
evaluated and stored in this process (``Engine`` with a manual clock) under cProfile, as
shares of the total; cProfile inflates call-heavy Python code, so read them as proportions.
Prints a summary and one ``BENCH {json}`` line. Loopback only; every step is time-bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# the shared tools beside the checkout, else the workplace's (a helper's worktree)
TOOLS = next((d for d in (ROOT.parent / "shared" / "tools", Path("/work/shared/tools"))
              if d.is_dir()), ROOT.parent / "shared" / "tools")
PENDING = "otel_eval_assembly_pending_spans"
OPEN = "otel_eval_assembly_open_traces"
ACCEPTED = "otel_eval_receiver_spans_accepted_total"
THROTTLED = "otel_eval_receiver_requests_throttled_total"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pinned(core: int, argv: list[str]) -> list[str]:
    return ["taskset", "-c", str(core), *argv] if shutil.which("taskset") else argv


class Proc:
    """A subprocess whose output lines are collected (with arrival times) by a thread."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env=env)
        self.lines: list[tuple[float, str]] = []
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.lines.append((time.perf_counter(), line.rstrip("\n")))

    def tagged(self, tag: str) -> tuple[float, dict[str, Any]] | None:
        for t, line in self.lines:
            if line.startswith(tag + " "):
                return t, json.loads(line[len(tag) + 1:])
        return None

    def finish(self, timeout_s: float) -> int:
        rc = self.p.wait(timeout_s)
        self._t.join(5)
        return rc

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)
        self._t.join(5)

    def tail(self, n: int = 20) -> str:
        return "\n".join(line for _, line in self.lines[-n:])


def wait_for(pred: Any, deadline_s: float, what: str, interval_s: float = 0.02) -> float:
    end = time.perf_counter() + deadline_s
    while time.perf_counter() < end:
        if pred():
            return time.perf_counter()
        time.sleep(interval_s)
    raise TimeoutError(f"timed out after {deadline_s:.0f}s waiting for {what}")


def metrics(admin: int) -> dict[str, float]:
    """Sum every sample of each metric name over its labels (enough for these counters)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            base = name.split("{", 1)[0]
            out[base] = out.get(base, 0.0) + float(value)
    return out


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used: what it cost, whatever the
    neighbours on a shared machine left it."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def vmhwm_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc status")


@contextmanager
def serve(tmp: Path, assembly: dict[str, float], spool: bool = True
          ) -> Iterator[tuple[Proc, int, int, Path]]:
    """``otel-eval serve`` on free loopback ports, pinned to core 0.

    Yields (process, gRPC port, admin port, SQLite store path)."""
    cfg = tmp / f"serve-{time.monotonic_ns()}.yaml"
    # JSON is YAML; the HTTP receiver is off (the load is gRPC only).
    cfg.write_text(json.dumps({"assembly": assembly, "receiver": {"http_endpoint": ""},
                               "store": {"spool": spool}}))
    grpc_port, admin = free_port(), free_port()
    store = tmp / f"store-{time.monotonic_ns()}.db"
    proc = Proc(pinned(0, [sys.executable, "-m", "otel_eval", "serve", "--config", str(cfg),
                           "--grpc-endpoint", f"127.0.0.1:{grpc_port}",
                           "--admin-endpoint", f"127.0.0.1:{admin}",
                           "--store", str(store)]),
                env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        wait_for(lambda: proc.p.poll() is not None or _ready(admin), 60, "serve ready", 0.1)
        if proc.p.poll() is not None:
            raise RuntimeError(f"serve exited early:\n{proc.tail()}")
        yield proc, grpc_port, admin, store
    finally:
        proc.kill()


def _ready(admin: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def load(args: argparse.Namespace, port: int, traces: int) -> tuple[float, dict[str, Any]]:
    """Run the load generator to completion; returns (time of its first request, RESULT)."""
    argv = [sys.executable, str(TOOLS / "otlp_load.py"), "raw", "--target", f"127.0.0.1:{port}",
            "--traces", str(traces), "--steps", str(args.steps), "--spans-per-request",
            str(args.spans_per_request), "--payload-bytes", str(args.payload_bytes),
            "--concurrency", str(args.concurrency), "--duration", str(args.max_load_s),
            "--warmup", "0", "--no-repeat", "--seed", str(args.seed)]
    gen = Proc(pinned(1, argv))
    try:
        gen.finish(args.max_load_s + 120)
        got = gen.tagged("RESULT")
        if got is None:
            raise RuntimeError(f"load generator printed no RESULT:\n{gen.tail()}")
        t_result, res = got
        return t_result - res["elapsed_s"], res
    finally:
        gen.kill()


def run_serve(args: argparse.Namespace, tmp: Path, spool: bool = True) -> dict[str, Any]:
    assembly = {"grace_s": args.grace_s, "idle_timeout_s": 60.0}
    with serve(tmp, assembly, spool) as (proc, port, admin, store):
        t_first, res = load(args, port, args.traces)
        t_done = all_evaluated(admin, store, args.traces)
        m = metrics(admin)
        hwm = vmhwm_kb(proc.p.pid)
        cpu = cpu_s(proc.p.pid)
    e2e = m[ACCEPTED] / (t_done - t_first)
    return {"spans_per_s": round(e2e), "ack_spans_per_s": res["spans_per_s"],
            "spans_per_cpu_s": round(m[ACCEPTED] / cpu),
            "spans": int(m[ACCEPTED]), "seconds": round(t_done - t_first, 2),
            "p50_ms": res["p50_ms"], "p99_ms": res["p99_ms"], "errors": res["errors"],
            "throttled": int(m.get(THROTTLED, 0)), "vmhwm_mb": round(hwm / 1024)}


def all_evaluated(admin: int, store: Path, traces: int) -> float:
    """When every accepted span is stored. Rendering /metrics costs the server ~20 ms of CPU
    (many histogram series), so the tight loop reads the SQLite row count from this process
    instead, and /metrics confirms ``pending_spans`` 0 (a re-opened trace adds no row)."""
    def stored() -> int:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5) as db:
            return int(db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0])

    wait_for(lambda: stored() >= traces, 300, f"{traces} stored evaluations", 0.02)
    return wait_for(lambda: metrics(admin)[PENDING] == 0, 120, "pending spans = 0", 0.1)


def run_baseline(args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    sink = Proc(pinned(0, [sys.executable, str(TOOLS / "otlp_sink.py"), "--server", "sync",
                           "--mode", "walk", "--port", str(port), "--max-seconds",
                           str(args.max_load_s + 120)]))
    try:
        wait_for(lambda: _listening(port) or sink.p.poll() is not None, 30, "sink", 0.05)
        _, res = load(args, port, args.traces)
        sink.p.terminate()
        sink.finish(30)
        got = sink.tagged("SINK")
    finally:
        sink.kill()
    if got is None:
        raise RuntimeError(f"sink printed no SINK line:\n{sink.tail()}")
    return {"spans_per_s": res["spans_per_s"], "spans": res["spans"], "sink_spans":
            got[1]["spans"], "p50_ms": res["p50_ms"], "p99_ms": res["p99_ms"],
            "errors": res["errors"]}


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def run_memory(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    hour = 3600.0
    assembly = {"grace_s": hour, "idle_timeout_s": hour, "max_trace_duration_s": 2 * hour}
    with serve(tmp, assembly) as (proc, port, admin, _):
        pid = _server_pid(proc)
        before = vmhwm_kb(pid)
        _, res = load(args, port, args.mem_traces)
        n = args.mem_traces
        wait_for(lambda: metrics(admin)[OPEN] >= n, 60, f"{n} open traces")
        after = vmhwm_kb(pid)
        m = metrics(admin)
    return {"traces": n, "spans": int(m[ACCEPTED]), "vmhwm_before_kb": before,
            "vmhwm_after_kb": after, "kb_per_trace": round((after - before) / n, 1),
            "wire_kb_per_trace": round(res["bytes"] / n / 1024, 1) if res["bytes"] else None}


def _server_pid(proc: Proc) -> int:
    """taskset execs the server, so the pid is the server's own either way."""
    return proc.p.pid


# Stages of the in-process profile: (label, function qualname suffix in pstats).
STAGES = (("decode request", "otlp.py", "decode_request"),
          ("assembly (submit)", "pipeline.py", "submit"),
          ("evaluate", "evaluator.py", "evaluate"),
          ("  build trajectory", "trajectory.py", "build_trajectory"),
          ("    materialize attributes", "model.py", "_materialize"),
          ("  detectors", "detectors/__init__.py", "evaluate"),
          ("    loop detector", "loop.py", "detect"),
          ("store (SQLite)", "store.py", "put_many"),
          ("metrics", "metrics.py", "evaluation_stored"))


def profile(traces: int, args: argparse.Namespace) -> dict[str, float]:
    """Share (%) of each stage in one in-process run of ``traces`` load-generator traces."""
    import cProfile
    import pstats

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from prometheus_client import CollectorRegistry

    sys.path.insert(0, str(TOOLS))
    import otlp_load  # type: ignore[import-not-found]

    from otel_eval.config import Config
    from otel_eval.evaluator import Evaluator
    from otel_eval.metrics import Metrics
    from otel_eval.otlp import decode_request
    from otel_eval.pipeline import Engine
    from otel_eval.store import Store

    wire = [r.SerializeToString() for r in otlp_load.build_requests(
        traces, args.steps, args.spans_per_request, args.payload_bytes, seed=args.seed)]
    now = [0.0]
    with tempfile.TemporaryDirectory(prefix="otel-eval-profile-") as d:
        engine = Engine(Evaluator(Config()), Store(f"{d}/store.db"),
                        Metrics(CollectorRegistry()), clock=lambda: now[0])
        prof = cProfile.Profile()
        prof.enable()
        for body in wire:
            engine.submit(decode_request(ExportTraceServiceRequest.FromString(body)).spans)
        now[0] = 3600.0  # past every grace period: release all
        engine.tick()
        engine.process()
        prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    total = sum(tt for _, _, tt, _, _ in stats.values())
    cum = {label: sum(ct for (f, _, name), (_, _, _, ct, _) in stats.items()
                      if f.endswith(path) and name == func) for label, path, func in STAGES}
    return {label: round(100 * v / total, 1) for label, v in cum.items()}


def median_of(rows: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in rows))


def summarize(serve_rows: list[dict[str, Any]], base_rows: list[dict[str, Any]],
              mem: dict[str, Any] | None, args: argparse.Namespace) -> dict[str, Any]:
    s, b = median_of(serve_rows, "spans_per_s"), median_of(base_rows, "spans_per_s")
    out = {
        "load": {k: getattr(args, k) for k in ("traces", "steps", "spans_per_request",
                                               "payload_bytes", "concurrency", "grace_s")},
        "pinned": bool(shutil.which("taskset")),
        "serve_e2e_spans_per_s": round(s), "baseline_spans_per_s": round(b),
        "ratio": round(s / b, 3),
        "serve_ack_spans_per_s": round(median_of(serve_rows, "ack_spans_per_s")),
        "serve_p50_ms": median_of(serve_rows, "p50_ms"),
        "serve_p99_ms": median_of(serve_rows, "p99_ms"),
        "baseline_p50_ms": median_of(base_rows, "p50_ms"),
        "baseline_p99_ms": median_of(base_rows, "p99_ms"),
        "rounds": {"serve": serve_rows, "baseline": base_rows},
        "memory": mem,
    }
    return out


def report(out: dict[str, Any]) -> None:
    print(f"serve end-to-end   {out['serve_e2e_spans_per_s']:>8} spans/s  "
          f"(acked {out['serve_ack_spans_per_s']} spans/s; Export p50 {out['serve_p50_ms']} ms, "
          f"p99 {out['serve_p99_ms']} ms)")
    print(f"baseline sync/walk {out['baseline_spans_per_s']:>8} spans/s  "
          f"(Export p50 {out['baseline_p50_ms']} ms, p99 {out['baseline_p99_ms']} ms)")
    print(f"ratio serve/baseline {out['ratio']:.2f} (target >= 0.5), median of "
          f"{len(out['rounds']['serve'])} interleaved rounds; pinned={out['pinned']}")
    mem = out["memory"]
    if mem:
        print(f"memory per open trace {mem['kb_per_trace']} KB (VmHWM {mem['vmhwm_before_kb']} "
              f"-> {mem['vmhwm_after_kb']} KB over {mem['traces']} traces; "
              f"wire {mem['wire_kb_per_trace']} KB/trace)")
    print("BENCH " + json.dumps(out), flush=True)


def spool_cost(args: argparse.Namespace) -> dict[str, Any]:
    """Serve end to end with the spool on and off, alternating rounds (fresh store each)."""
    rows: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    with tempfile.TemporaryDirectory(prefix="otel-eval-bench-") as d:
        for i in range(args.reps):
            for side in (("on", "off") if i % 2 == 0 else ("off", "on")):
                row = run_serve(args, Path(d), spool=side == "on")
                rows[side].append(row)
                print(f"round {i + 1} spool {side}: {row}", file=sys.stderr, flush=True)
    on, off = (median_of(rows[k], "spans_per_s") for k in ("on", "off"))
    ack_on, ack_off = (median_of(rows[k], "ack_spans_per_s") for k in ("on", "off"))
    cpu_on, cpu_off = (median_of(rows[k], "spans_per_cpu_s") for k in ("on", "off"))
    out = {"load": {k: getattr(args, k) for k in ("traces", "steps", "spans_per_request",
                                                  "payload_bytes", "concurrency", "grace_s")},
           "pinned": bool(shutil.which("taskset")),
           "e2e_spans_per_s": {"spool_on": round(on), "spool_off": round(off)},
           "ratio_on_off": round(on / off, 3), "cost_pct": round(100 * (1 - on / off), 1),
           "ack_spans_per_s": {"spool_on": round(ack_on), "spool_off": round(ack_off)},
           "ack_ratio_on_off": round(ack_on / ack_off, 3),
           "spans_per_cpu_s": {"spool_on": round(cpu_on), "spool_off": round(cpu_off)},
           "cpu_ratio_on_off": round(cpu_on / cpu_off, 3),
           "cpu_cost_pct": round(100 * (1 - cpu_on / cpu_off), 1),
           "p99_ms": {k: median_of(rows[k], "p99_ms") for k in ("on", "off")},
           "rounds": rows}
    print(f"spool on  {out['e2e_spans_per_s']['spool_on']:>8} spans/s end to end "
          f"(acked {out['ack_spans_per_s']['spool_on']}/s, Export p99 {out['p99_ms']['on']} ms)")
    print(f"spool off {out['e2e_spans_per_s']['spool_off']:>8} spans/s end to end "
          f"(acked {out['ack_spans_per_s']['spool_off']}/s, Export p99 {out['p99_ms']['off']} ms)")
    print(f"spans per serve CPU-second: on {out['spans_per_cpu_s']['spool_on']}, off "
          f"{out['spans_per_cpu_s']['spool_off']}: ratio {out['cpu_ratio_on_off']:.3f} "
          f"(CPU cost {out['cpu_cost_pct']} %)")
    print(f"ratio on/off {out['ratio_on_off']:.3f} end to end (cost {out['cost_pct']} %, "
          f"target <= 10 %), acked {out['ack_ratio_on_off']:.3f}; median of {args.reps} "
          f"alternating rounds; pinned={out['pinned']}")
    print("BENCH " + json.dumps(out), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--traces", type=int, default=6000, help="traces per throughput round")
    p.add_argument("--steps", type=int, default=5, help="chat+tool steps per trace")
    p.add_argument("--spans-per-request", type=int, default=100)
    p.add_argument("--payload-bytes", type=int, default=2048, help="message text per chat span")
    p.add_argument("--concurrency", type=int, default=8, help="in-flight Export calls")
    p.add_argument("--grace-s", type=float, default=0.5, help="serve assembly.grace_s")
    p.add_argument("--reps", type=int, default=3, help="interleaved rounds per side")
    p.add_argument("--mem-traces", type=int, default=3000, help="open traces for memory (0: skip)")
    p.add_argument("--max-load-s", type=float, default=60.0, help="bound on one load run")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--profile-traces", type=int, default=0,
                   help="only profile serve's stages in-process on this many traces")
    p.add_argument("--spool-cost", action="store_true",
                   help="only compare serve with store.spool on and off")
    args = p.parse_args(argv)
    if args.spool_cost:
        spool_cost(args)
        return 0
    if args.profile_traces:
        for label, share in profile(args.profile_traces, args).items():
            print(f"{label:<28} {share:5.1f} %")
        return 0
    serve_rows: list[dict[str, Any]] = []
    base_rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="otel-eval-bench-") as d:
        tmp = Path(d)
        for i in range(args.reps):
            for side in (("serve", "baseline") if i % 2 == 0 else ("baseline", "serve")):
                row = run_serve(args, tmp) if side == "serve" else run_baseline(args)
                (serve_rows if side == "serve" else base_rows).append(row)
                print(f"round {i + 1} {side}: {row}", file=sys.stderr, flush=True)
        mem = run_memory(args, tmp) if args.mem_traces else None
    report(summarize(serve_rows, base_rows, mem, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
