"""Offline input: file bytes (gzip transparent), the loader error, and releasing spans as traces.

A file holds whole traces, so its spans are grouped by the assembler (``serve``'s own) and
released at end of file (``release_reason="eof"``): ``complete`` when a root span has ended,
else ``incomplete`` (the root never ended, or never arrived).
"""

from __future__ import annotations

import gzip
import logging
import zlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from otel_eval.assemble.assembler import TraceAssembler
from otel_eval.assemble.config import AssemblyConfig
from otel_eval.base.model import Span, Trace
from otel_eval.decode.otlp_logs import HeldRecord

log = logging.getLogger(__name__)

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


# Files hold whole traces: nothing is re-opened or remembered after the end of the file.
_FILE_ASSEMBLY = AssemblyConfig(max_released_traces=0, max_tombstones=0)


def release(spans: Iterable[Span], source: str,
            on_reject: Callable[[LoaderError], None] | None = None,
            logs: Iterable[HeldRecord] = ()) -> list[Trace]:
    """Group a file's spans into traces through the assembler, as ``serve`` groups them (the
    same duplicate and size rules), with the file's GenAI event records joined to their
    spans as ``serve`` joins them (``Trace.logs``), all released at end of file (``eof``) in
    first-seen order. Spans (records) the assembler refuses are reported to ``on_reject``
    (else logged), with their reasons; the rest of the file is kept."""
    assembler = TraceAssembler(_FILE_ASSEMBLY)
    _rejected(assembler.add(spans, 0.0, source=source).rejected, "span", source, on_reject)
    _rejected(assembler.add_logs(logs, 0.0, source=source).rejected, "log record", source,
              on_reject)
    return assembler.release_all(0.0, reason="eof")


def _rejected(rejected: Mapping[str, int], noun: str, source: str,
              on_reject: Callable[[LoaderError], None] | None) -> None:
    if not rejected:
        return
    reasons = ", ".join(f"{n} {r}" for r, n in sorted(rejected.items()))
    error = LoaderError(source, f"{sum(rejected.values())} {noun}(s) rejected: {reasons}")
    if on_reject is not None:
        on_reject(error)
    else:
        log.warning("%s", error)
