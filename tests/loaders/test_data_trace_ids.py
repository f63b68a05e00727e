"""Test-data files do not share a trace id unless they are one run: replayed into one serve
(``otel-eval replay tests/data/...``), two files with one id are assembled as one trace, two
unrelated runs merged into a third that neither recorded (the guide's lucky recovery and the
loaders' weather run were both 5b8efff7...)."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from otel_eval.receive.loaders import LoaderError, load_file

TESTS = Path(__file__).resolve().parents[1]
DATA = TESTS / "data"
RECORDINGS = TESTS / "conformance" / "recordings"
# Files meant to hold the same run, and why.
SAME_RUN = [
    # the weather run, and the part of it the collector's file exporter wrote (its spans
    # compared with the whole run's: test_loaders_formats)
    {"loaders/otlp_request.json", "loaders/collector_export.jsonl"},
]
# The W3C Trace Context example id: the remote caller's trace every stack's remote_parent
# scenario continues (traceparent 00-4bf92f35...), one per stack, never replayed together.
REMOTE_PARENT = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACE_ID = re.compile(r'"(?:traceId|trace_id)":\s*"([0-9a-fA-F]{32})"')


def _data_ids() -> dict[str, set[str]]:
    """trace id -> the files under tests/data whose runs have it, as the loaders read them."""
    files: dict[str, set[str]] = defaultdict(set)
    for path in sorted(DATA.rglob("*")):
        if path.suffix not in (".json", ".jsonl") or path.name.endswith(".expected.json"):
            continue
        try:
            traces = load_file(path)
        except LoaderError:  # not a trace file (references, labels)
            continue
        for trace in traces:
            files[trace.trace_id].add(path.relative_to(DATA).as_posix())
    return files


def test_test_data_files_share_no_trace_id_but_one_runs() -> None:
    shared = {i: files for i, files in _data_ids().items() if len(files) > 1}
    assert all(files in SAME_RUN for files in shared.values()), shared
    assert len(_data_ids()) > 5  # the files were read


def test_recordings_share_no_trace_id_but_the_remote_parents() -> None:
    files: dict[str, set[str]] = defaultdict(set)
    for path in RECORDINGS.rglob("*.json"):
        for trace_id in set(TRACE_ID.findall(path.read_text(encoding="utf-8"))):
            files[trace_id.lower()].add(path.relative_to(RECORDINGS).as_posix())
    shared = {i: sorted(f) for i, f in files.items() if len(f) > 1}
    assert set(shared) <= {REMOTE_PARENT}, shared
    assert all(f.endswith("/remote_parent.json") for f in shared.get(REMOTE_PARENT, ()))
    assert len(files) > 500  # the recordings were read
