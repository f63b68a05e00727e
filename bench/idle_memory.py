"""Idle memory of the whole ``otel-eval serve`` process tree (issue 21): what a container's
memory limit sees, serve plus its evaluation workers plus any helper multiprocessing starts.

    python bench/idle_memory.py [--workers 0] [--rounds 3] [--before CHECKOUT]

Starts ``serve`` on the embedded defaults (``--workers 0``: one per core) on free loopback
ports and a temporary store, waits for ``/readyz``, then for the tree to hold its expected
processes, and sums PSS and RSS from ``/proc/PID/smaps_rollup`` over the tree (PSS shares
pages mapped by several processes fairly: the sum is what the tree costs). The baseline, in
the same run: a bare interpreter (``python -c`` waiting on stdin). Prints per process and the
totals, the best (lowest) of ``--rounds``, with the ratio to the bare interpreter.
``--before``: a checkout of an earlier commit (``git worktree add``), measured in the same
run, rounds interleaved with this one's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rollup(pid: int) -> tuple[int, int]:
    """(PSS, RSS) in kB; (0, 0) for a process gone."""
    pss = rss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss = int(line.split()[1])
            elif line.startswith("Rss:"):
                rss = int(line.split()[1])
    except OSError:
        pass
    return pss, rss


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def tree(pid: int) -> list[int]:
    found, frontier = [pid], [pid]
    while frontier:
        kids = _children(frontier.pop())
        found += kids
        frontier += kids
    return found


def _name(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(a.decode(errors="replace") for a in argv if a)
    if "resource_tracker" in text:
        return "resource_tracker"
    if "forkserver" in text:
        return "forkserver"
    if "spawn_main" in text or "otel_eval.app.worker" in text:
        return "worker"
    if " serve" in text:
        return "serve"
    if "otel_eval.app.worker" in text or "from otel_eval" in text:
        return "worker"
    return text[:60]


def measure(pids: list[int]) -> dict[str, object]:
    rows = [(p, _name(p), *_rollup(p)) for p in pids]
    return {"pss_mb": round(sum(r[2] for r in rows) / 1024, 1),
            "rss_mb": round(sum(r[3] for r in rows) / 1024, 1),
            "processes": [{"name": n, "pss_mb": round(pss / 1024, 1),
                           "rss_mb": round(rss / 1024, 1)} for _, n, pss, rss in rows]}


def ready(admin: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _wait(cond: object, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while not cond():  # type: ignore[operator]
        if time.monotonic() > end:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


def serve_round(root: Path, workers: int, expect: int,
                settle_s: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        admin = free_port()
        log = (tmp / "serve.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "otel_eval", "serve", "--workers", str(workers),
             "--grpc-endpoint", f"127.0.0.1:{free_port()}",
             "--http-endpoint", f"127.0.0.1:{free_port()}",
             "--admin-endpoint", f"127.0.0.1:{admin}", "--store", str(tmp / "store.db")],
            cwd=tmp, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(root)})
        try:
            _wait(lambda: proc.poll() is not None or ready(admin), 120, "/readyz")
            if proc.poll() is not None:
                raise RuntimeError((tmp / "serve.log").read_text())
            _wait(lambda: len(tree(proc.pid)) >= expect, 60, f"{expect} processes")
            time.sleep(settle_s)  # a measurement, not a synchronisation: let start-up settle
            return measure(tree(proc.pid))
        finally:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


def bare_round() -> dict[str, object]:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)
    try:
        time.sleep(0.5)
        return measure([proc.pid])
    finally:
        proc.communicate(b"")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=0, help="serve --workers (0: one per core)")
    ap.add_argument("--expect", type=int, default=0,
                    help="processes the tree holds once started (default: serve + workers)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--settle-s", type=float, default=2.0)
    ap.add_argument("--before", type=Path, help="a checkout to measure beside this one")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    n_workers = cores if args.workers == 0 else (0 if args.workers == 1 else args.workers)
    expect = args.expect or 1 + n_workers
    roots = {"after": ROOT, **({"before": args.before.resolve()} if args.before else {})}
    runs: dict[str, list[dict[str, object]]] = {k: [] for k in roots}
    for _ in range(args.rounds):
        for name, root in roots.items():
            runs[name].append(serve_round(root, args.workers, expect, args.settle_s))
    best = {name: min(rs, key=lambda r: r["pss_mb"])  # type: ignore[arg-type, return-value]
            for name, rs in runs.items()}
    bare = min((bare_round() for _ in range(args.rounds)),
               key=lambda r: r["pss_mb"])  # type: ignore[arg-type, return-value]
    print(json.dumps({"cores": cores, "workers": args.workers, "tree": best,
                      "bare_interpreter_pss_mb": bare["pss_mb"],
                      "bare_interpreter_rss_mb": bare["rss_mb"],
                      "tree_pss_over_bare": {
                          name: round(b["pss_mb"] / bare["pss_mb"], 1)  # type: ignore[operator]
                          for name, b in best.items()}}))


if __name__ == "__main__":
    main()
