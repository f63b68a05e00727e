"""Read evaluation objects from files for the offline ``otel-eval issues PATH...`` command.

Accepts ``eval --format jsonl`` output (one v1 evaluation object per line) and JSON files
holding one object or a list of them. Its session records (``{"record": "session", ...}``,
after the trace records) are left out: session findings make no issue (serve's issues job
reads the stored runs alone), and they are no malformed evaluation to count as skipped.
Raw trace files need the trajectory loaders: the CLI evaluates those first and feeds the
resulting objects to ``issues_offline`` directly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from otel_eval.decode.compressed import TooLarge, ZstdError, open_text
from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.naming import Namer
from otel_eval.outputs.issues.result import IssuesResult
from otel_eval.outputs.issues.synthesis import Synthesizer
from otel_eval.outputs.issues.tracker import issues_offline

SESSION_RECORD = "session"  # eval --format jsonl's conversations: no run, no issue


class EvaluationFileError(ValueError):
    """A line or file that is not an evaluation object (path and line number in the text)."""


def _open(path: Path) -> IO[str]:
    """Gunzipped when the content is gzip, decompressed when it is zstd, whatever the name
    (as ``otel-eval issues`` detects evaluation files and the loaders read trace files),
    bounded as theirs."""
    return open_text(path)


def _whole(path: Path) -> Iterator[dict[str, Any]]:
    with _open(path) as f:
        try:
            data = json.load(f)
        except (ValueError, RecursionError) as e:  # RecursionError: nested too deep
            raise EvaluationFileError(f"{path}: not JSON lines nor a JSON document: {e}") from e
    items = data if isinstance(data, list) else [data]
    yield from (d for d in items if isinstance(d, dict))


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    with _open(path) as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError) as e:  # RecursionError: nested too deep
                raise EvaluationFileError(f"{path}:{n}: not JSON: {e}") from e
            if not isinstance(obj, dict):
                raise EvaluationFileError(f"{path}:{n}: expected an object")
            yield obj


def read_evaluations(paths: Iterable[str | Path]) -> Iterator[dict[str, Any]]:
    """Evaluation objects from JSONL or JSON files (optionally gzip or zstd), in order. A file
    whose first line is not a whole JSON object is read as one JSON document."""
    for raw in paths:
        path = Path(raw)
        try:
            with _open(path) as f:
                first = f.readline()
            try:
                whole = not isinstance(json.loads(first), dict)
            except (ValueError, RecursionError):
                whole = True
            yield from (obj for obj in (_whole(path) if whole else _lines(path))
                        if obj.get("record") != SESSION_RECORD)
        except (TooLarge, ZstdError) as e:
            raise EvaluationFileError(f"{path}: {e}") from e


def issues_from_paths(paths: Iterable[str | Path], config: IssuesConfig | None = None,
                      now: float | None = None, namer: Namer | None = None,
                      synthesizer: Synthesizer | None = None) -> IssuesResult:
    """``otel-eval issues PATH...`` over evaluation files (one run, in-memory catalogue)."""
    return issues_offline(read_evaluations(paths), config, now, namer, synthesizer)
