"""Benchmark of the ingest path: ``otel-eval serve`` against a decode-and-materialize baseline.

    python bench/ingest.py                      3 interleaved rounds, paced, idle, memory
    python bench/ingest.py --reps 1 --traces 2000 --mem-traces 1000     quick look
    python bench/ingest.py --workers 1,2 --store sqlite,postgresql   a row per combination
    python bench/ingest.py --spool-cost --reps 5      serve with the spool on vs off
    python bench/ingest.py --against HEAD~1           this tree and another commit, alternating

One run reports, per serve variant (each combination of ``--workers`` and ``--store``, passed
through to ``serve``; one table row each):
- throughput: ``../shared/tools/otlp_load.py raw --no-repeat`` sends ``--traces`` agent traces
  (each span once, so nothing is a duplicate) at ``--concurrency`` in-flight calls to
  ``otel-eval serve`` (short ``grace_s``): end-to-end spans/s = spans accepted / (first
  request -> every trace stored and ``otel_eval_assembly_pending_spans`` 0; the grace period
  is part of that time), and to the baseline ``otlp_sink.py --server sync --mode walk``
  (decodes and materializes every attribute; spans/s = spans acknowledged / load time).
  Each serve first evaluates ``--warmup-traces`` (one-time costs are not the steady state).
  Ratio serve / baseline of the medians, in wall-clock spans/s and in spans per CPU-second
  of each server (steadier on a shared machine); the cores serve obtained (CPU-s / wall s);
- Export p50 / p99 of those runs, and of one more run paced at ``--paced-share`` (70 %) of
  the variant's measured end-to-end rate (``otlp_load.py --rate``);
- idle RSS: a fresh serve with every default (ports and store given), once ready and its
  issues job has run: VmRSS and VmHWM, summed over the process tree (workers included);
- memory per open trace: a serve with grace/idle timeouts of an hour takes ``--mem-traces``
  traces and keeps them open; (VmHWM after - VmHWM before) / traces, summed over the tree.
The baseline and each serve are pinned to core 0 and the load generator to core 1 (``taskset``);
a serve with 2+ workers gets every core. Rounds alternate and medians are reported.
``--against REF`` (repeatable): every variant also run from a snapshot of commit ``REF``
(``git archive``), in the same alternating rounds against the same baseline; the table gets
its rows and each of this tree's variants its ratio to that commit's (spans per CPU-second,
end-to-end spans/s): the figure against the previous commit and against the sink in one run.
``--spool-cost``: the same serve run with ``store.spool`` true and false, alternating.
Where serve's time goes, by part, is ``bench/serve_stages.py`` (timed, serve's own wiring).
Prints a table and one ``BENCH {json}`` line. Loopback only; every step is time-bounded.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from ingest_procs import (
    ACCEPTED,
    ISSUES_RUNS,
    OPEN,
    PENDING,
    RELEASED,
    REOPENED,
    ROOT,
    THROTTLED,
    Served,
    Variant,
    commit,
    cpu_s,
    free_port,
    listening,
    load,
    metrics,
    serve,
    short,
    sink,
    snapshot,
    status_kb,
    store_cpu_s,
    stored_rows,
    wait_for,
)

LOAD_KEYS = ("traces", "steps", "spans_per_request", "payload_bytes", "concurrency", "grace_s")


def _opts(args: argparse.Namespace) -> dict[str, Any]:
    return {k: getattr(args, k) for k in LOAD_KEYS}


def run_serve(args: argparse.Namespace, tmp: Path, variant: Variant, spool: bool = True,
              rate: float = 0.0) -> dict[str, Any]:
    """One measured load on a fresh serve, after ``--warmup-traces`` evaluated and stored
    (one-time costs at the first evaluation are not the steady state); CPU and spans are
    counted from the end of the warm-up. Trace ids are random: every run adds rows."""
    config = {"assembly": {"grace_s": args.grace_s, "idle_timeout_s": 60.0},
              "receiver": {"http_endpoint": ""}, "store": {"spool": spool}}
    with serve(tmp, variant, config) as s:
        pid, rows = s.proc.p.pid, stored_rows(s.store)
        if args.warmup_traces:
            _, warm = load(s.grpc_port, args.warmup_traces, _opts(args), args.seed,
                           args.max_load_s)
            rows += args.warmup_traces
            all_evaluated(s, rows, warm["errors"] == 0)
        accepted0, cpu0, db0 = metrics(s.admin)[ACCEPTED], cpu_s(pid), store_cpu_s(variant)
        t_first, res = load(s.grpc_port, args.traces, _opts(args), args.seed,
                            args.max_load_s, rate)
        t_done = all_evaluated(s, rows + args.traces, res["errors"] == 0)
        m = metrics(s.admin)
        cpu = cpu_s(pid) - cpu0
        db1 = store_cpu_s(variant)
        hwm = status_kb(pid, "VmHWM")
    seconds, spans = t_done - t_first, m[ACCEPTED] - accepted0
    db = None if db0 is None or db1 is None else db1 - db0
    return {"spans_per_s": round(spans / seconds), "ack_spans_per_s": res["spans_per_s"],
            "spans_per_cpu_s": round(spans / cpu), "cores": round(cpu / seconds, 2),
            "store_cpu_s": None if db is None else round(db, 2),
            "spans_per_cpu_s_with_store": None if db is None else round(spans / (cpu + db)),
            "spans": int(spans), "seconds": round(seconds, 2),
            "p50_ms": res["p50_ms"], "p99_ms": res["p99_ms"], "errors": res["errors"],
            "throttled": int(m.get(THROTTLED, 0)), "vmhwm_mb": round(hwm / 1024),
            "loadavg": round(os.getloadavg()[0], 2)}


def all_evaluated(s: Served, rows: int, whole: bool = False) -> float:
    """When every accepted span is evaluated and stored: /metrics says ``pending_spans`` 0,
    then the store holds a row per trace serve released (a re-opened trace adds no row).
    The rows are counted by serve, not by the sender: a request serve throttled
    (RESOURCE_EXHAUSTED) is not resent by the load generator and adds none. ``rows``: the
    traces sent in all (the most rows there can be). ``whole``: every request was taken, so
    every trace sent makes a row: the store alone is polled until it holds them, and
    /metrics read once (a scrape costs serve ~3-5 ms of CPU: 10 a second while it works
    through its backlog were ~2 % of what was measured)."""
    if whole:
        done = wait_for(lambda: stored_rows(s.store) >= rows, 300, f"{rows} stored "
                        "evaluations", 0.02)
        if metrics(s.admin)[PENDING] == 0:
            return done  # else a trace re-opened by late spans is still pending: poll
    wait_for(lambda: metrics(s.admin)[PENDING] == 0, 300, "pending spans = 0", 0.1)
    m = metrics(s.admin)
    want = min(rows, int(m[RELEASED] - m.get(REOPENED, 0)))
    return wait_for(lambda: stored_rows(s.store) >= want, 300, f"{want} stored evaluations",
                    0.02)


def run_baseline(args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    proc = sink(port, args.max_load_s + 120)
    try:
        wait_for(lambda: listening(port) or proc.p.poll() is not None, 30, "sink", 0.05)
        _, res = load(port, args.traces, _opts(args), args.seed, args.max_load_s)
        proc.p.terminate()
        proc.finish(30)
        got = proc.tagged("SINK")
    finally:
        proc.kill()
    if got is None:
        raise RuntimeError(f"sink printed no SINK line:\n{proc.tail()}")
    cpu = got[1]["cpu_s"]
    return {"spans_per_s": res["spans_per_s"], "spans": res["spans"],
            "spans_per_cpu_s": round(got[1]["spans"] / cpu) if cpu else None,
            "p50_ms": res["p50_ms"], "p99_ms": res["p99_ms"], "errors": res["errors"],
            "loadavg": round(os.getloadavg()[0], 2)}


def run_idle(tmp: Path, variant: Variant) -> dict[str, Any]:
    """A fresh serve with every default: RSS once ready and its issues job's first run done."""
    with serve(tmp, variant, None, ["--http-endpoint", f"127.0.0.1:{free_port()}"]) as s:
        with contextlib.suppress(TimeoutError):  # no issues job: measure what there is
            wait_for(lambda: metrics(s.admin).get(ISSUES_RUNS, 0) >= 1, 30, "issues run", 0.2)
        pid = s.proc.p.pid
        return {"vmrss_mb": round(status_kb(pid, "VmRSS") / 1024, 1),
                "vmhwm_mb": round(status_kb(pid, "VmHWM") / 1024, 1)}


def run_memory(args: argparse.Namespace, tmp: Path, variant: Variant) -> dict[str, Any]:
    hour = 3600.0
    config = {"assembly": {"grace_s": hour, "idle_timeout_s": hour,
                           "max_trace_duration_s": 2 * hour}, "receiver": {"http_endpoint": ""}}
    with serve(tmp, variant, config) as s:
        pid, n = s.proc.p.pid, args.mem_traces
        before = status_kb(pid, "VmHWM")
        _, res = load(s.grpc_port, n, _opts(args), args.seed, args.max_load_s)
        wait_for(lambda: metrics(s.admin)[OPEN] >= n, 60, f"{n} open traces")
        after = status_kb(pid, "VmHWM")
    return {"traces": n, "vmhwm_before_kb": before, "vmhwm_after_kb": after,
            "kb_per_trace": round((after - before) / n, 1),
            "wire_kb_per_trace": round(res["bytes"] / n / 1024, 1) if res["bytes"] else None}


def median_of(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if r.get(key) is not None]
    return round(float(statistics.median(values)), 2) if values else float("nan")


def throughput(args: argparse.Namespace, tmp: Path, variants: list[Variant]
               ) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """``args.reps`` rounds of the baseline and every variant, the order reversed each round."""
    base: list[dict[str, Any]] = []
    rows: dict[str, list[dict[str, Any]]] = {v.label: [] for v in variants}
    sides: list[Variant | None] = [None, *variants]
    for i in range(args.reps):
        for side in (sides if i % 2 == 0 else sides[::-1]):
            row = run_baseline(args) if side is None else run_serve(args, tmp, side)
            (base if side is None else rows[side.label]).append(row)
            name = "baseline" if side is None else side.label
            print(f"round {i + 1} {name}: {row}", file=sys.stderr, flush=True)
    return base, rows


def summarize(base: list[dict[str, Any]], rows: list[dict[str, Any]],
              paced: dict[str, Any] | None, idle: dict[str, Any] | None,
              mem: dict[str, Any] | None) -> dict[str, Any]:
    s, b = median_of(rows, "spans_per_s"), median_of(base, "spans_per_s")
    sc, bc = median_of(rows, "spans_per_cpu_s"), median_of(base, "spans_per_cpu_s")
    return {"serve_e2e_spans_per_s": round(s), "ratio": round(s / b, 3),
            "serve_spans_per_cpu_s": round(sc), "cpu_ratio": round(sc / bc, 3),
            "spans_per_cpu_s_with_store": median_of(rows, "spans_per_cpu_s_with_store"),
            "cores": median_of(rows, "cores"),
            "serve_ack_spans_per_s": round(median_of(rows, "ack_spans_per_s")),
            "p50_ms": median_of(rows, "p50_ms"), "p99_ms": median_of(rows, "p99_ms"),
            "paced": paced, "idle": idle, "memory": mem, "rounds": rows}


def paced_run(args: argparse.Namespace, tmp: Path, variant: Variant, e2e: float
              ) -> dict[str, Any]:
    rate = round(args.paced_share * e2e)
    row = run_serve(args, tmp, variant, rate=rate)
    print(f"paced {variant.label} at {rate} spans/s: {row}", file=sys.stderr, flush=True)
    return {"rate": rate, **{k: row[k] for k in ("spans_per_s", "p50_ms", "p99_ms", "errors",
                                                 "throttled", "loadavg")}}


def report(out: dict[str, Any]) -> None:
    b = out["baseline"]
    print(f"baseline sync/walk: {b['spans_per_s']} spans/s, {b['spans_per_cpu_s']} spans per "
          f"CPU-s, Export p50 {b['p50_ms']} / p99 {b['p99_ms']} ms (median of "
          f"{len(b['rounds'])}); commit {out['commit']}; load average {out['loadavg']}")
    print("| serve | e2e spans/s | ratio | spans/CPU-s | CPU ratio | cores | p50 / p99 ms | "
          "p99 ms at rate | idle RSS MB | KB per open trace |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, v in out["variants"].items():
        paced, idle, mem = v["paced"], v["idle"], v["memory"]
        at_rate = f"{paced['p99_ms']} at {paced['rate']}" if paced else "-"
        with_db = v["spans_per_cpu_s_with_store"]
        cpu = v["serve_spans_per_cpu_s"]
        cpu_text = f"{cpu} ({round(with_db)} with the database)" if with_db == with_db else cpu
        print(f"| {label} | {v['serve_e2e_spans_per_s']} | {v['ratio']} | "
              f"{cpu_text} | {v['cpu_ratio']} | {v['cores']} | "
              f"{v['p50_ms']} / {v['p99_ms']} | {at_rate} | "
              f"{idle['vmrss_mb'] if idle else '-'} | {mem['kb_per_trace'] if mem else '-'} |")
    for label, v in out["variants"].items():
        for name, r in v.get("against", {}).items():
            print(f"{label} against {name}: x{r['serve_spans_per_cpu_s']} spans per CPU-s, "
                  f"x{r['serve_e2e_spans_per_s']} end-to-end spans/s")
    print("BENCH " + json.dumps(out), flush=True)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="otel-eval-bench-") as d, \
            contextlib.ExitStack() as trees:
        tmp = Path(d)
        others = {short(ref): trees.enter_context(snapshot(ref)) for ref in args.against}
        trees_at = [(ROOT, ""), *((t, n) for n, t in others.items())]
        variants = [Variant(w, st, tree, name) for tree, name in trees_at
                    for w, st in itertools.product(args.workers, args.store)]
        base, rows = throughput(args, tmp, variants)
        b = median_of(base, "spans_per_s")
        out: dict[str, Any] = {
            "commit": commit(), "load": _opts(args), "pinned": bool(shutil.which("taskset")),
            "cpus": os.cpu_count(), "baseline": {
                "spans_per_s": round(b), "spans_per_cpu_s": round(median_of(base,
                                                                            "spans_per_cpu_s")),
                "p50_ms": median_of(base, "p50_ms"), "p99_ms": median_of(base, "p99_ms"),
                "rounds": base},
            "variants": {}}
        for v in variants:
            e2e = median_of(rows[v.label], "spans_per_s")
            paced = paced_run(args, tmp, v, e2e) if args.paced_share > 0 else None
            idle = run_idle(tmp, v) if args.idle else None
            mem = run_memory(args, tmp, v) if args.mem_traces else None
            out["variants"][v.label] = summarize(base, rows[v.label], paced, idle, mem)
        for v in variants:
            if v.name:
                mine = out["variants"][Variant(v.workers, v.store).label]
                theirs = out["variants"][v.label]
                mine.setdefault("against", {})[v.name] = {
                    k: round(mine[k] / theirs[k], 3)
                    for k in ("serve_spans_per_cpu_s", "serve_e2e_spans_per_s")}
    out["loadavg"] = [round(x, 2) for x in (*load0, *os.getloadavg())]
    return out


# --- the spool's cost ------------------------------------------------------------------------

def spool_cost(args: argparse.Namespace) -> dict[str, Any]:
    """Serve end to end with the spool on and off, alternating rounds (fresh store each)."""
    variant = Variant(args.workers[0], args.store[0])
    rows: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    with tempfile.TemporaryDirectory(prefix="otel-eval-bench-") as d:
        for i in range(args.reps):
            for side in (("on", "off") if i % 2 == 0 else ("off", "on")):
                row = run_serve(args, Path(d), variant, spool=side == "on")
                rows[side].append(row)
                print(f"round {i + 1} spool {side}: {row}", file=sys.stderr, flush=True)
    med = {k: {s: median_of(rows[s], k) for s in ("on", "off")}
           for k in ("spans_per_s", "ack_spans_per_s", "spans_per_cpu_s", "p99_ms")}
    out = {"commit": commit(), "load": _opts(args), "medians": med,
           "cost_pct": round(100 * (1 - med["spans_per_s"]["on"] / med["spans_per_s"]["off"]),
                             1),
           "cpu_cost_pct": round(100 * (1 - med["spans_per_cpu_s"]["on"]
                                        / med["spans_per_cpu_s"]["off"]), 1),
           "rounds": rows}
    for side in ("on", "off"):
        print(f"spool {side:<3} {med['spans_per_s'][side]:>8.0f} spans/s end to end, "
              f"{med['spans_per_cpu_s'][side]:.0f} per CPU-s (acked "
              f"{med['ack_spans_per_s'][side]:.0f}/s, Export p99 {med['p99_ms'][side]} ms)")
    print(f"cost: {out['cost_pct']} % end to end, {out['cpu_cost_pct']} % of CPU "
          f"(target <= 10 %); median of {args.reps} alternating rounds")
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
    p.add_argument("--warmup-traces", type=int, default=200,
                   help="traces evaluated and stored before each measured serve load")
    p.add_argument("--paced-share", type=float, default=0.7,
                   help="one more run paced at this share of the measured rate (0: skip)")
    p.add_argument("--no-idle", dest="idle", action="store_false", help="skip the idle RSS")
    p.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[None],
                   help="serve --workers values, comma-separated (default: flag not passed)")
    p.add_argument("--store", type=lambda s: s.split(","), default=["sqlite"],
                   help="serve --store values, comma-separated: 'sqlite' (a fresh file per "
                        "run), 'postgresql' (a fresh database per run on a server started "
                        "here), or a postgresql:// URL")
    p.add_argument("--max-load-s", type=float, default=60.0, help="bound on one load run")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--against", action="append", default=[], metavar="REF",
                   help="also run every variant from this commit (git archive), alternating")
    p.add_argument("--spool-cost", action="store_true",
                   help="only compare serve with store.spool on and off")
    args = p.parse_args(argv)
    if args.spool_cost:
        spool_cost(args)
    else:
        report(measure(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
