"""Issue 11 (memory): a request's memory is released once its spans are copied out.

An accepted 100-byte span must not pin the request it came in: before, each decoded span held
a protobuf sub-message sharing the whole request's arena, so one rejected 4 MB neighbour per
request stayed in memory for as long as the small span was open (100 requests: +408 MB).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from pathlib import Path

from support.harness import running_service
from test_receivers import _raw_export

from otel_eval.base.model import Span
from otel_eval.decode import encode

BIG = 4 * 1024 * 1024
REQUESTS = 25


def _resident_bytes() -> int:
    """Resident memory once the garbage is collected and glibc has handed its free heap back
    (``malloc_trim``): what is held, not the allocator's slack, which earlier tests of the
    same process (large bodies freed) leave behind in amounts of their own."""
    gc.collect()
    libc = ctypes.util.find_library("c")
    if libc:
        trim = getattr(ctypes.CDLL(libc), "malloc_trim", None)
        if trim is not None:
            trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _request(i: int) -> bytes:
    trace = f"{i + 1:032x}"
    small = Span(trace, f"{1:016x}", None, "invoke_agent", 1, 0, attributes={"k": "v"})
    # same span id: refused as duplicate_span, so only the small span is kept (and held open:
    # its root has not ended)
    big = Span(trace, f"{1:016x}", None, "dup", 1, 2, attributes={"payload": "x" * BIG})
    return encode.encode_spans([small, big]).SerializeToString()


def test_open_small_spans_do_not_pin_their_requests(tmp_path: Path) -> None:
    with running_service(tmp_path) as h:
        _raw_export(h, _request(10_000))  # warm up the server's buffers
        before = _resident_bytes()
        for i in range(REQUESTS):
            resp, err = _raw_export(h, _request(i))
            assert err is None and resp is not None
            assert resp.partial_success.rejected_spans == 1
        grown = _resident_bytes() - before
        assert h.svc.engine.open_traces() == REQUESTS + 1
        # pinned requests would be REQUESTS * 4 MiB = 100 MiB; allow half of that for
        # allocator slack (glibc raises its mmap threshold after freeing a 4 MiB buffer, so
        # later ones come from the heap and may stay resident: 30 MiB measured once after the
        # whole suite had run in this process; it passes with the quarter when run alone)
        assert grown < REQUESTS * BIG / 2, f"{grown / 2**20:.0f} MiB kept for {REQUESTS} spans"
        assert h.release(after_s=h.svc.config.assembly.idle_timeout_s + 1) == REQUESTS + 1
        stored = h.svc.store.get(f"{1:032x}")
        assert stored is not None and stored["counts"]["spans"] == 1
