"""Stage: offline input. Files -> ``model.Trace`` (the same traces the receivers would assemble).

    load_path(path) -> iter_files -> read_bytes (gzip by magic) -> sniff content -> one of
      otlp_files   OTLP/JSON request, collector file-exporter JSON lines (spans, and the
                   GenAI event log records joined to them), OTLP protobuf (a request, or
                   the file exporter's ``format: proto`` output: size-prefixed requests)
      span_tree    OpenInference span trees (TRAIL)
      tau_bench    tau-bench runs files (OpenAI chat logs) -> GenAI spans (loaders.chat);
                   with ``turns``, a trace per user message tied by a conversation id
      mini_swe_agent  mini-swe-agent .traj.json -> GenAI spans
    -> FileAssembly (the assembler groups by trace id over the files of a run; a trace is
       released at the end of the input, complete unless the root never ended; over a large
       input at the end of the file where its run surely ended, unless a file holds log
       records)

The format is decided by content, never by the file name alone. A file that cannot be loaded
raises ``LoaderError`` naming it; with ``on_error`` given, the error is reported there instead
and loading goes on with the next file (what ``otel-eval eval`` does, counting them).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from otel_eval.base.model import Trace
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.receive.loaders import mini_swe_agent, otlp_files, span_tree, tau_bench
from otel_eval.receive.loaders.chat import file_digest
from otel_eval.receive.loaders.files import FileAssembly, LoaderError, read_bytes

__all__ = ["LoaderError", "iter_files", "load_file", "load_path", "load_paths"]

OnError = Callable[[LoaderError], None]


def _raise(error: LoaderError) -> None:
    raise error


def iter_files(path: str | Path, on_error: OnError = _raise) -> Iterator[Path]:
    """``path`` itself, or every regular file under it (recursively, sorted, hidden skipped;
    a FIFO or a socket would block its read); a directory that cannot be listed, or a link
    to nothing, is an error (``on_error``), not a silent gap. A subdirectory reached by a
    symbolic link is walked as any other, once: a directory already walked (a link back up
    the tree, a second link to the same one) is not walked again."""
    root = Path(path)
    if not root.is_dir():
        yield root
        return

    def unlisted(e: OSError) -> None:
        on_error(LoaderError(e.filename or root, f"cannot list it: {e.strerror or e}"))

    walked = {_dir_key(root)}
    for dirpath, dirnames, filenames in os.walk(root, onerror=unlisted, followlinks=True):
        dirnames[:] = [d for d in sorted(dirnames) if not d.startswith(".")
                       and _first_walk(Path(dirpath) / d, walked)]
        for name in sorted(filenames):
            file = Path(dirpath) / name
            if name.startswith("."):
                continue
            if file.is_file():
                yield file
            elif file.is_symlink() and not file.exists():  # a gap in the input, said
                on_error(LoaderError(file, "cannot read: a symbolic link to nothing"))


def _dir_key(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:  # os.walk reports it (``onerror``) when it cannot list it
        return None
    return st.st_dev, st.st_ino


def _first_walk(path: Path, walked: set[tuple[int, int] | None]) -> bool:
    key = _dir_key(path)
    if key is None:
        return True
    if key in walked:
        return False
    walked.add(key)
    return True


def _from_json(doc: Any, path: Path, config: TrajectoryConfig, on_error: OnError,
               on_reject: OnError | None, turns: bool, assembly: FileAssembly,
               data: bytes = b"") -> list[Trace]:
    source = str(path)
    if otlp_files.is_otlp_json(doc):
        return assembly.add(otlp_files.from_json_doc(doc, path, on_error, text=data or None),
                            source, on_reject)
    if otlp_files.is_otlp_logs_json(doc):  # records alone: they join the spans of the run
        return assembly.add((), source, on_reject, otlp_files.logs_from_json_doc(
            doc, path, on_error, text=data or None))
    if span_tree.is_span_tree(doc):
        return assembly.add(span_tree.from_doc(doc, path), source, on_reject)
    if tau_bench.is_runs(doc):  # the ids: the file's name, the run's index, the file's digest
        return tau_bench.from_doc(doc, path, config, turns, file_digest(data))
    if mini_swe_agent.is_traj(doc):
        return [mini_swe_agent.from_doc(doc, path, config, file_digest(data))]
    if otlp_files.is_other_signal(doc):  # a file exporter's one line of metrics: skipped,
        return []  # as its lines are in a longer file
    raise LoaderError(path, "JSON of an unknown shape (expected OTLP/JSON, an OpenInference "
                            "span tree, a tau-bench runs list or a mini-swe-agent trajectory)")


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """The cyclic GC paused while a file is parsed and converted. Parsing allocates a
    container per JSON object and array and the traces made from them are more of the same:
    with the collector on, a 2 MB runs file triggers hundreds of collections that find
    nothing (neither step builds reference cycles) and cost ~10% of an offline run."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load_file(path: str | Path, *, config: TrajectoryConfig | None = None,
              on_error: OnError | None = None, turns: bool = False) -> list[Trace]:
    """The traces of one file. Raises ``LoaderError`` (or reports it to ``on_error`` and
    returns what could be loaded: spans the decoder rejected are reported, the rest kept).
    ``turns``: a chat log (tau-bench) as a conversation, a trace per user message."""
    assembly = FileAssembly()
    with _no_cycle_collection():
        return (_load_file(Path(path), config, on_error, turns, assembly)
                + assembly.rest(on_error))


def _load_file(path: Path, config: TrajectoryConfig | None,
               on_error: OnError | None, turns: bool, assembly: FileAssembly) -> list[Trace]:
    cfg = config or TrajectoryConfig()
    report = on_error or _raise
    try:
        data = otlp_files.unframe_zstd(read_bytes(path), path, report)
        if not data.strip():  # the file exporter's output before its first request (it
            return []  # creates the file at start: a ``file/logs`` of a run with no logs)
        head = data.lstrip()[:1]
        if head not in (b"{", b"["):
            spans, logs = otlp_files.from_protobuf(data, path, report)
            return assembly.add(spans, str(path), on_error, logs)
        try:
            doc = json.loads(data)
        except json.JSONDecodeError as e:
            if e.msg != "Extra data":
                raise LoaderError(path, f"not valid JSON: {e}") from e
            spans, logs = otlp_files.from_json_lines(data, path, report)
            return assembly.add(spans, str(path), on_error, logs)
        except (ValueError, RecursionError) as e:  # invalid UTF-8, an integer past
            # Python's digit limit (a plain ValueError), nesting past the recursion limit
            raise LoaderError(path, f"not valid JSON: {e}") from e
        return _from_json(doc, path, cfg, report, on_error, turns, assembly, data)
    except LoaderError as e:
        report(e)
        return []


def load_path(path: str | Path, *, config: TrajectoryConfig | None = None,
              on_error: OnError | None = None, turns: bool = False) -> Iterator[Trace]:
    """Every trace in ``path`` (a file or a directory, recursively), file by file."""
    return load_paths([path], config=config, on_error=on_error, turns=turns)


def load_paths(paths: Iterable[str | Path], *, config: TrajectoryConfig | None = None,
               on_error: OnError | None = None, turns: bool = False) -> Iterator[Trace]:
    """Every trace in ``paths`` (files or directories, recursively), file by file, the files
    one stream (``FileAssembly``): a run's spans and records split over files are one trace,
    released at the end of the input (over a large input, at the end of the file where it
    surely ended, unless any file holds log records: a run's records may come in any file,
    before or after its spans). A path that cannot be opened at all
    is a ``LoaderError`` (``on_error``)."""
    report = on_error or _raise
    files = list(_listed(paths, report))
    # one file: its records join its spans before its end (nothing to sniff, no second read)
    assembly = FileAssembly(hold=len(files) > 1 and any(map(_may_hold_logs, files)))
    for file in files:
        with _no_cycle_collection():
            traces = _load_file(file, config, on_error, turns, assembly)
            traces += assembly.ended()
        yield from traces
    yield from assembly.rest(on_error)


def _listed(paths: Iterable[str | Path], report: OnError) -> Iterator[Path]:
    for path in paths:
        try:
            yield from iter_files(path, report)
        except OSError as e:
            report(LoaderError(path, e.strerror or str(e)))


def _may_hold_logs(file: Path) -> bool:
    """Whether the file may hold OTLP log records (read twice, the first time for this: a
    file that cannot be read is reported when it is loaded). A path that is no regular file
    (a pipe: ``<(zcat run.json.gz)``, ``/dev/stdin``) can be read once only: it may."""
    if not file.is_file():
        return True
    try:
        return otlp_files.may_hold_logs(read_bytes(file))
    except LoaderError:
        return False
