"""The forwarder's byte bound (``outputs.batcher``): CPU to split one request too large for
``export.max_batch_bytes`` into pieces under it, against the same request serialized once
(the baseline: what sending it whole cost in the same run), as the request doubles.

    python bench/forward_split.py [--span-kb 100] [--sizes-mb 6,12,24,48] [--rounds 5]

Prints, per size: pieces, split CPU ms (median of the rounds), the baseline's, their ratio,
and the split time's ratio to the size before (x2 per doubling: linear).
"""

from __future__ import annotations

import argparse
import statistics
import time

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from otel_eval.outputs.batcher import TRACES, split
from otel_eval.outputs.config import ExportConfig


def _request(total_bytes: int, span_bytes: int) -> ExportTraceServiceRequest:
    """One trace: spans of ``span_bytes`` of attribute text, under 2 resources x 2 scopes."""
    n = max(1, total_bytes // span_bytes)
    text = "x" * span_bytes
    req = ExportTraceServiceRequest()
    for r in range(2):
        rs = req.resource_spans.add(resource=Resource(attributes=[KeyValue(
            key="service.name", value=AnyValue(string_value=f"svc{r}"))]))
        for s in range(2):
            ss = rs.scope_spans.add(scope=InstrumentationScope(name=f"scope{s}"))
            for i in range(n // 4):
                ss.spans.add(trace_id=bytes(range(1, 17)), span_id=(r * 4 + s * 2 + i + 1)
                             .to_bytes(8, "big"), name="chat", start_time_unix_nano=1,
                             end_time_unix_nano=2, attributes=[KeyValue(
                                 key="gen_ai.input.messages", value=AnyValue(string_value=text))])
    return req


def _cpu(fn: object, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.process_time()
        fn()  # type: ignore[operator]
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--span-kb", type=int, default=100)
    p.add_argument("--sizes-mb", default="6,12,24,48")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    bound = ExportConfig().max_batch_bytes
    before = None
    print(f"{'MB':>4} {'pieces':>6} {'split ms':>9} {'serialize ms':>12} {'ratio':>6} "
          f"{'x size':>6}")
    for mb in (int(m) for m in args.sizes_mb.split(",")):
        req = _request(mb << 20, args.span_kb << 10)
        pieces = split(req, TRACES, bound, ExportTraceServiceRequest)
        assert all(p.ByteSize() <= bound for p, _ in pieces)
        t_split = _cpu(lambda r=req: split(r, TRACES, bound, ExportTraceServiceRequest),
                       args.rounds)
        t_base = _cpu(req.SerializeToString, args.rounds)
        growth = f"{t_split / before:6.2f}" if before else f"{'-':>6}"
        print(f"{mb:>4} {len(pieces):>6} {t_split * 1e3:9.1f} {t_base * 1e3:12.1f} "
              f"{t_split / t_base:6.2f} {growth}")
        before = t_split
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
