"""What a decoded span costs and what it keeps alive (issue 11), against the old behaviour
measured in the same run.

    python bench/decode_memory.py [--requests 25] [--spans 2000]

Baseline: each span's lazy attributes held a protobuf sub-message of its request (the whole
request's arena stayed alive while any of its spans was open). Now: each span keeps its own
re-serialized bytes. Prints resident growth for ``--requests`` requests that each carry one
kept small span and one rejected 4 MiB span, and decode time per ``--spans`` spans.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from functools import partial
from typing import Any

from otel_eval.base.model import Span
from otel_eval.decode import encode, otlp


def _resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _request(i: int) -> bytes:
    trace = f"{i + 1:032x}"
    return encode.encode_spans([
        Span(trace, f"{1:016x}", None, "small", 1, 0, attributes={"k": "v"}),
        Span(trace, f"{2:016x}", None, "big", 1, 2, attributes={"p": "x" * (4 << 20)}),
    ]).SerializeToString()


def _old_lazy(pb: Any) -> tuple[Any, bytes]:
    """The previous decoder's lazy: a partial over the span's sub-message, and no bytes of
    its own (it kept none: ``Span.wire`` came later)."""
    return partial(otlp._materialize, pb), b""


def _decode(body: bytes) -> list[Span]:
    req, _ = otlp.parse_request(body)
    return otlp.decode_request(req).spans


def _with(lazy: Any) -> None:
    otlp._lazy_attrs = lazy  # type: ignore[assignment]


def kept_memory(requests: int) -> float:
    bodies = [_request(i) for i in range(requests)]
    gc.collect()
    before = _resident()
    kept = [_decode(b)[0] for b in bodies]  # the bodies stay alive on both sides
    gc.collect()
    grown = _resident() - before
    assert all(s.attributes == {"k": "v"} for s in kept)
    return grown / 2**20


def decode_ms(n: int, rounds: int = 15) -> float:
    spans = [Span(f"{i // 10 + 1:032x}", f"{i + 1:016x}", None, "chat", 1, 2, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 12,
        "gen_ai.input.messages": json.dumps([{"role": "user", "content": "hello " * 50}])})
        for i in range(n)]
    body = encode.encode_spans(spans).SerializeToString()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        _decode(body)
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=25)
    ap.add_argument("--spans", type=int, default=2000)
    ap.add_argument("--only", choices=["old", "new"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.only:  # one measurement in a fresh process: freed memory must not blur the other
        if args.only == "old":
            _with(_old_lazy)
        print(json.dumps([kept_memory(args.requests), decode_ms(args.spans)]))
        return
    runs = {}
    for which in ("old", "new", "old", "new"):  # interleaved: machine load hits both
        out = subprocess.run([sys.executable, __file__, "--only", which, "--requests",
                              str(args.requests), "--spans", str(args.spans)],
                             capture_output=True, text=True, check=True).stdout
        mb, ms = json.loads(out)
        prev = runs.get(which, (mb, ms))
        runs[which] = (min(prev[0], mb), min(prev[1], ms))
    (old_mb, old_ms), (new_mb, new_ms) = runs["old"], runs["new"]
    print(json.dumps({"requests": args.requests, "kept_mib_old": round(old_mb, 1),
                      "kept_mib_new": round(new_mb, 1), "spans": args.spans,
                      "decode_ms_old": round(old_ms, 2), "decode_ms_new": round(new_ms, 2),
                      "decode_ratio_new_over_old": round(new_ms / old_ms, 2)}))


if __name__ == "__main__":
    main()
