"""Offline input: file bytes (gzip transparent), the loader error, and releasing spans as traces.

The spans of a run's files are grouped by the assembler (``serve``'s own: ``FileAssembly``)
and released at the end of the input (``release_reason="eof"``; over a large input, at the
end of the file where their run surely ended once many wait: ``HELD_TRACES``): ``complete``
when a root span has ended, else ``incomplete`` (the root never ended, or never arrived). An
input holding log records releases every trace at its end (``hold``): a run's records may
be in any of its files, before or after its spans.
"""

from __future__ import annotations

import logging
import zlib
from collections import Counter
from collections.abc import Callable, Container, Iterable, Mapping
from pathlib import Path

from otel_eval.assemble.assembler import TraceAssembler
from otel_eval.assemble.config import AssemblyConfig
from otel_eval.base.model import Span, Trace
from otel_eval.base.printable import printable
from otel_eval.decode.compressed import TooLarge, ZstdError, read_data
from otel_eval.decode.otlp_logs import HeldRecord

log = logging.getLogger(__name__)

_UTF8_BOM = b"\xef\xbb\xbf"


class LoaderError(ValueError):
    """A file (or part of one) that cannot be loaded; the message names the file. The
    message is printed to a terminal: its control characters are escaped (``printable``),
    since a problem may quote the file's content (json_format's ``Couldn't parse float:
    ...`` quotes the value whole) and a name found in a directory is anyone's."""

    def __init__(self, path: str | Path, problem: str) -> None:
        super().__init__(printable(f"{path}: {problem}"))
        self.path = str(path)
        self.problem = problem


def read_bytes(path: Path) -> bytes:
    """The file's content, gunzipped when it starts with the gzip magic (whatever its name;
    at most ``MAX_GUNZIPPED_BYTES``, 1 GiB: a gzip bomb is refused, not inflated), without
    a UTF-8 byte order mark (editors on Windows add one to JSON files). A zstd file (the
    collector file exporter's ``compression: zstd``, its native stream) likewise, bounded
    the same (its per-request frames: ``otlp_files.unframe_zstd``)."""
    try:
        data = read_data(path.read_bytes())
    except (OSError, EOFError, zlib.error, TooLarge, ZstdError) as e:
        raise LoaderError(path, f"cannot read: {e}") from e
    return data[3:] if data[:3] == _UTF8_BOM else data


# The files of one run are one stream, as ``serve`` sees its requests: a trace split over
# files (a rotated file exporter's, a day's export) is one trace. A released trace is not
# re-opened (its result is out), and its id is remembered: a span of it in a later file (a
# copy of the same trace) is refused as ``late``, reported, never a second evaluation.
_FILE_ASSEMBLY = AssemblyConfig(max_released_traces=0)
# What may wait for the end of the input: below all three, no run is released before it,
# so the files' order is not the runs' (a file per service: the file exporter's
# ``group_by``, a collector per service; paths given in any order) and a run's spans in a
# file read after the one where its root ended still join it. Past any, the runs that
# surely ended are released at the end of each file (memory bounded over a large input;
# well under the assembler's own bounds, past which it would refuse spans). The copy of a
# trace in a later file is then refused as ``duplicate_span`` (its run still open) or, once
# it was released, ``late``.
HELD_TRACES = 10_000
HELD_SPANS = 100_000
HELD_BYTES = 64 << 20


class FileAssembly:
    """The assembler (``serve``'s own) over the files of one run: ``add`` a file's spans and
    GenAI event records (grouped by trace id, the same duplicate and size rules, the records
    joined to their spans as ``serve`` joins them: ``Trace.logs``); at the end of each file
    ``ended()`` releases the traces whose run has surely ended (their root ended, no span
    waiting for an absent parent), and ``rest()`` the others at the end of the input
    (``complete`` when a root ended, else ``incomplete``): a run whose spans go on in the
    next file waits for them. Released with ``release_reason="eof"``, in the order the file
    that ends them shows them (``rest``: in the order the runs started, then first seen).

    ``ended`` releases nothing while fewer than ``HELD_TRACES`` traces, ``HELD_SPANS``
    spans and ``HELD_BYTES`` wait: a run's spans in a file read after the one where its
    root ended (another service's file) join it.

    ``hold``: the input holds log records, so ``ended`` releases nothing and every trace
    waits for the end of the input: a run's records in a file read after the one where it
    ended join it (``serve`` re-opens the run for them and evaluates it again; offline the
    whole input is there, and the order of the files does not change the evaluation)."""

    def __init__(self, hold: bool = False) -> None:
        self._assembler = TraceAssembler(_FILE_ASSEMBLY)
        self._touched: dict[str, None] = {}  # traces that took items since ``ended``
        self._hold = hold
        # trace id -> the log records it took, by file: those of a trace that gets no span
        # in the whole input are dropped (``no_spans``, as serve drops them) and reported
        self._records: dict[str, Counter[str]] = {}
        # trace id -> the first by name of the files holding its spans: its ``source``,
        # whatever the order the files were read in
        self._sources: dict[str, str] = {}

    def add(self, spans: Iterable[Span], source: str,
            on_reject: Callable[[LoaderError], None] | None = None,
            logs: Iterable[HeldRecord] = ()) -> list[Trace]:
        """Take a file's spans and records; what the assembler refuses is reported to
        ``on_reject`` (else logged), with the reasons. Returns [] (traces come out of
        ``ended`` and ``rest``), for the loaders' ``return``."""
        assembler = self._assembler
        spans, logs = list(spans), list(logs)
        for items, added, noun in (
                (spans, assembler.add(spans, 0.0, source=source), "span"),
                (logs, assembler.add_logs(logs, 0.0, source=source), "log record")):
            _rejected(added.rejected, noun, source, on_reject)
            took = added.traces  # in the order the file shows them (a set has none)
            self._touched.update(dict.fromkeys(i.trace_id for i in items if i.trace_id in took))
            if noun == "span":
                self._source(spans, took, source)
        for trace_id, n in Counter(r.trace_id for r in logs).items():
            if trace_id in took:  # the traces that took the file's records
                self._records.setdefault(trace_id, Counter())[source] += n
        return []

    def _source(self, spans: list[Span], took: Container[str], source: str) -> None:
        """``source`` for the traces it holds spans of, when first by name: those that took
        its spans, and those still open whose spans it held again (a copy of the same
        export, refused as ``duplicate_span``: the file read first took them, the order of
        the files must not change the source)."""
        sources = self._sources
        for trace_id in dict.fromkeys(s.trace_id for s in spans):
            first = sources.get(trace_id)
            if (first is None and trace_id in took) or (first is not None and source < first):
                sources[trace_id] = source

    def ended(self) -> list[Trace]:
        """Once ``HELD_TRACES``, ``HELD_SPANS`` or ``HELD_BYTES`` wait, the traces touched
        since the last release whose run surely ended (only those: a trace no file touched
        since has not changed, and asking again would make many files of unfinished runs
        quadratic)."""
        assembler = self._assembler
        if self._hold:
            self._touched = {}
            return []
        if (len(assembler) < HELD_TRACES and assembler.open_spans < HELD_SPANS
                and assembler.open_bytes < HELD_BYTES):
            return []  # the traces touched wait with the rest (asked once, when released)
        touched, self._touched = self._touched, {}
        released = assembler.release_ended(0.0, reason="eof", among=touched)
        for trace in released:
            self._records.pop(trace.trace_id, None)
        return self._sourced(released)

    def _sourced(self, released: list[Trace]) -> list[Trace]:
        for trace in released:
            trace.source = self._sources.pop(trace.trace_id, trace.source)
        return released

    def rest(self, on_reject: Callable[[LoaderError], None] | None = None) -> list[Trace]:
        """Every trace still open; the log records of those without a span are dropped
        (``no_spans``) and reported to ``on_reject`` (else logged), naming their files."""
        dropped: Counter[str] = Counter()
        for trace_id, by_file in self._records.items():
            opened = self._assembler.open_trace(trace_id)
            if opened is not None and not opened[1]:
                dropped.update(by_file)
        self._records.clear()
        for source, n in dropped.items():
            _rejected({"no_spans": n}, "log record", source, on_reject, "dropped")
        # in the order the runs started (runs started at once: first seen), not the order
        # their files were given in: a run's agent may be inferred from the runs before it
        # (the agent history), and the order of the files does not change the evaluation
        released = self._sourced(self._assembler.release_all(0.0, reason="eof"))
        self._sources.clear()  # the traces of records alone, dropped
        return sorted(released, key=_started)


def _started(trace: Trace) -> int:
    return min((s.start_ns for s in trace.spans), default=0)


def release(spans: Iterable[Span], source: str,
            on_reject: Callable[[LoaderError], None] | None = None,
            logs: Iterable[HeldRecord] = ()) -> list[Trace]:
    """Spans (and records) that are all there is of their traces, grouped into traces and
    released (``FileAssembly``: one file's worth, on its own)."""
    assembly = FileAssembly()
    assembly.add(spans, source, on_reject, logs)
    return assembly.rest(on_reject)


def _rejected(rejected: Mapping[str, int], noun: str, source: str,
              on_reject: Callable[[LoaderError], None] | None, verb: str = "rejected") -> None:
    if not rejected:
        return
    reasons = ", ".join(f"{n} {r}" for r, n in sorted(rejected.items()))
    error = LoaderError(source, f"{sum(rejected.values())} {noun}(s) {verb}: {reasons}")
    if on_reject is not None:
        on_reject(error)
    else:
        log.warning("%s", error)
