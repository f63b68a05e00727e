"""Sync ``grpc.server`` vs ``grpc.aio`` as an OTLP receiver, decoding every span (issue 2).

    python bench/grpc_server.py [--rounds 3] [--seconds 6]

Runs ``../shared/tools/otlp_sink.py --mode walk`` (decode every request and turn every span
and attribute into Python objects) with ``--server sync`` and ``--server aio`` in alternating
rounds, each pinned to core 0, loaded by ``otlp_load.py raw`` (agent-shaped traces, 100 spans
per request, 8 in flight) pinned to core 1; prints spans/s per round, the medians and the ratio.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "shared" / "tools"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _round(server: str, seconds: float) -> float:
    port = _free_port()
    sink = subprocess.Popen(["taskset", "-c", "0", sys.executable, str(TOOLS / "otlp_sink.py"),
                             "--server", server, "--mode", "walk", "--port", str(port),
                             "--max-seconds", str(seconds + 30)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        out = subprocess.run(["taskset", "-c", "1", sys.executable, str(TOOLS / "otlp_load.py"),
                              "raw", "--target", f"127.0.0.1:{port}", "--duration", str(seconds),
                              "--warmup", "1", "--concurrency", "8", "--timeout", "30"],
                             capture_output=True, text=True, check=True).stdout
    finally:
        sink.kill()
        sink.wait()
    result = json.loads(out.split("RESULT", 1)[1])
    if result["errors"]:
        raise SystemExit(f"{server}: {result['errors']} errors {result['error_codes']}")
    return float(result["spans_per_s"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    rates: dict[str, list[float]] = {"sync": [], "aio": []}
    for n in range(args.rounds):
        for server in ("sync", "aio") if n % 2 == 0 else ("aio", "sync"):
            rates[server].append(_round(server, args.seconds))
            print(f"round {n + 1} {server}: {rates[server][-1]:,.0f} spans/s", flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(json.dumps({"median_spans_per_s": med, "sync_over_aio": round(med["sync"] / med["aio"],
                                                                        3)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
