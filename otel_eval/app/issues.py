"""``otel-eval issues PATH...``: recurring issues of files, in one offline run.

    PATH (file or directory) -> per file: evaluation objects (``eval --format jsonl`` output,
      or a JSON list of them) as they are; the trace files, after them, through ``eval``'s
      engine (EvalRun: one stream, agent history, judge) -> to_json -> issues_offline
      (in-memory catalogue) -> table | JSON

``--format json`` prints the ``GET /v1/issues`` object plus ``assignments`` (trace id, span
id, issue id for every critique and finding). A file that cannot be read is an error (exit
2, the message names it): issues over part of the input would silently change the shares.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from otel_eval.base.configcheck import ConfigError
from otel_eval.base.printable import printable
from otel_eval.base.words import columns, padded

if TYPE_CHECKING:
    from otel_eval.app.offline import EvalRun
    from otel_eval.outputs.issues.result import IssuesResult

_TRACE_KEYS = ("spans", "resourceSpans", "resource_spans")  # trace formats, not evaluations
_TITLE_CHARS = 60


def is_evaluation(obj: object) -> bool:
    """A v1 evaluation object (not a trace: TRAIL span trees also carry ``trace_id``)."""
    return (isinstance(obj, Mapping) and isinstance(obj.get("trace_id"), str)
            and any(k in obj for k in ("findings", "judge", "verdict"))
            and not any(k in obj for k in _TRACE_KEYS))


def _first_line(path: Path) -> bytes:
    """The first line, gunzipped or zstd decompressed by magic as the loaders do, as bounded
    (eval output can be huge: a plain or gzip file is read whole only when its first line is
    not a whole JSON object)."""
    from otel_eval.decode.compressed import open_binary

    with open_binary(path) as f:
        line: bytes = f.readline()
    return line.removeprefix(b"\xef\xbb\xbf").strip()


def is_evaluation_file(path: Path) -> bool:
    """Whether ``path`` holds evaluation objects (JSON lines, one object, or a list).
    Unreadable files are not: the trace loaders then report them."""
    from otel_eval.receive.loaders.files import LoaderError, read_bytes

    try:
        first = _first_line(path)
        if first[:1] not in (b"{", b"["):
            return False  # OTLP protobuf, or not JSON
        try:
            obj = json.loads(first)
        except ValueError:  # not one line: a JSON document
            obj = json.loads(read_bytes(path))
    except (OSError, EOFError, zlib.error, LoaderError, ValueError, RecursionError):
        return False
    if isinstance(obj, list):
        obj = next((o for o in obj if isinstance(o, dict)), None)
    return is_evaluation(obj)


def evaluations(paths: list[str], run: EvalRun) -> Iterator[dict[str, Any]]:
    """Evaluation objects of every file under ``paths``: evaluation files as they are, then
    the trace files through ``run`` as ``eval`` evaluates them (one stream: a run split over
    files is one run; the agent history of the runs before; judge included); raises
    LoaderError / EvaluationFileError naming the file that cannot be read."""
    from otel_eval.outputs.issues.files import read_evaluations
    from otel_eval.receive.loaders import iter_files

    traces: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="otel-eval-issues-") as kept:
        for raw in paths:
            if not Path(raw).exists():
                raise FileNotFoundError(f"{raw}: no such file or directory")
            for path in iter_files(raw):
                path = path if path.is_file() else _kept(path, Path(kept))
                if is_evaluation_file(path):
                    yield from read_evaluations([path])
                else:
                    traces.append(path)
        if traces:
            for evaluation in run.evaluations(traces, strict=True):
                yield evaluation.to_json()


def _kept(path: Path, kept: Path) -> Path:
    """A copy of a path that is no regular file (a pipe: ``<(zcat evals.jsonl.gz)``,
    ``/dev/stdin``), which can be read once only: whether it holds evaluations is read from
    its start, then the whole of it. The copy's path ends in the path (errors name it)."""
    copy = kept / str(sum(1 for _ in kept.iterdir())) / path.absolute().relative_to("/")
    copy.parent.mkdir(parents=True)
    with path.open("rb") as source, copy.open("wb") as target:
        shutil.copyfileobj(source, target)
    return copy


def cmd_issues(args: argparse.Namespace, run: EvalRun, out: TextIO) -> int:
    from otel_eval.evaluate.judge.namer import OwnClient, judge_namer
    from otel_eval.evaluate.judge.redact import Redactor
    from otel_eval.evaluate.judge.synthesizer import judge_synthesizer
    from otel_eval.evaluate.judge.templates import Prompts
    from otel_eval.outputs.issues.files import EvaluationFileError
    from otel_eval.outputs.issues.result import to_json
    from otel_eval.outputs.issues.synthesis import REPLY_SCHEMA, check_reply
    from otel_eval.outputs.issues.tracker import issues_offline
    from otel_eval.receive.loaders import LoaderError

    try:
        cfg = run.cfg
        if cfg.judge.active:  # the namer's and merger's calls: its key, its hourly cap
            from otel_eval.evaluate.judge.client import check_credentials, check_prices
            check_credentials(cfg.judge)
            check_prices(cfg.judge)
        # names and merges through one client: one hourly budget for the whole command
        ask = OwnClient(cfg.judge, Prompts(cfg.judge.prompt_dir)) if cfg.judge.active else None
        result = issues_offline(evaluations(list(args.paths), run), cfg.issues,
                                namer=judge_namer(cfg.judge, ask),
                                synthesizer=judge_synthesizer(cfg.judge, REPLY_SCHEMA,
                                                              check_reply, ask),
                                redact=Redactor(cfg.judge.redaction).redact)
    except ConfigError as e:
        print(f"otel-eval: {e}", file=sys.stderr)
        return 2
    except (LoaderError, EvaluationFileError, OSError, UnicodeDecodeError) as e:
        print(f"otel-eval issues: {e}", file=sys.stderr)
        return 2
    if args.format == "json":
        json.dump(to_json(result), out, indent=2)
        out.write("\n")
    else:
        print_table(result, out)
    return 0


def _percent(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "new"
    return f"{value * 100:+.1f}%" if signed else f"{value * 100:.1f}%"


def print_table(result: IssuesResult, out: TextIO) -> None:
    head = ("level", "node", "id", "share", "trend", "status", "severity", "runs", "exemplar",
            "title")
    lines: list[tuple[str, ...]] = [head]
    for i in result.issues:
        title = i.title if len(i.title) <= _TITLE_CHARS else i.title[: _TITLE_CHARS - 1] + "…"
        # every cell escaped as ``show`` does (node, title, exemplar: span content and the
        # judge's words), before the widths are measured
        lines.append(tuple(printable(c) for c in (
            i.level, i.node or "-", i.issue_id, _percent(i.share),
            _percent(i.trend, signed=True), i.status, i.severity, str(i.traces),
            i.exemplars[0] if i.exemplars else "-", title)))
    widths = [max(columns(r[c]) for r in lines) for c in range(len(head) - 1)]
    for r in lines:
        out.write("  ".join(padded(c, w) for c, w in zip(r, widths, strict=False)) + "  "
                  + r[-1] + "\n")
    for gone in result.resolved:
        out.write(f"resolved  {printable(gone.issue_id)}  was {_percent(gone.previous_share)}  "
                  f"{printable(gone.title)}\n")
    unassigned = sum(1 for a in result.assignments if a.issue_id is None)
    out.write(f"\n{len(result.issues)} issues from {result.critiques} critiques in "
              f"{result.traces} traces ({unassigned} critiques in no issue, "
              f"{result.skipped} skipped)\n")
