"""Offline input: file bytes (gzip transparent), the loader error, and releasing spans as traces.

A file holds whole traces, so its spans are grouped by trace id and released at end of
file (``release_reason="eof"``): ``complete`` when a root span has ended, else
``incomplete`` (the root never ended, or never arrived).
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterable
from pathlib import Path

from otel_eval.model import Span, Trace

_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"


class LoaderError(ValueError):
    """A file (or part of one) that cannot be loaded; the message names the file."""

    def __init__(self, path: str | Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


def read_bytes(path: Path) -> bytes:
    """The file's content, gunzipped when it starts with the gzip magic (whatever its name),
    without a UTF-8 byte order mark (editors on Windows add one to JSON files)."""
    try:
        data = path.read_bytes()
        if data[:2] == _GZIP_MAGIC:
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        raise LoaderError(path, f"cannot read: {e}") from e
    return data[3:] if data[:3] == _UTF8_BOM else data


def release(spans: Iterable[Span], source: str) -> list[Trace]:
    """Group spans by trace id (first-seen order) into released traces."""
    by_trace: dict[str, list[Span]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    traces = []
    for trace_id, group in by_trace.items():
        ended_root = any(not s.parent_span_id and s.end_ns for s in group)
        traces.append(Trace(trace_id, group, "complete" if ended_root else "incomplete",
                            source=source, release_reason="eof"))
    return traces
