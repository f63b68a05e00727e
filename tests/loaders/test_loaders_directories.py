"""``eval`` over directories and partly bad files: it goes on with the next file and keeps a
file's good spans (a bad file ended its directory's walk, one rejected span dropped its
file), reads regular files only (a FIFO blocked it for ever) and reports a directory it
cannot list (it was skipped silently)."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from otel_eval.app.config import Config
from otel_eval.app.offline import EvalRun
from otel_eval.receive.loaders import iter_files

DATA = Path(__file__).resolve().parents[1] / "data" / "loaders"
WEATHER = "5b8efff798038103d269b633813fc60c"


def _trace_ids(run: EvalRun) -> list[str]:
    return [t.trace_id for t in run.traces()]


def test_eval_goes_on_with_the_next_file_of_a_directory(tmp_path: Path) -> None:
    (tmp_path / "a_bad.json").write_text('{"x": 1}')
    shutil.copy(DATA / "otlp_request.json", tmp_path / "b_good.json")
    run = EvalRun(Config(), [str(tmp_path)])
    ids = _trace_ids(run)
    assert run.failed_files == 1
    assert WEATHER in ids


def test_eval_keeps_the_good_spans_of_a_partly_bad_file(tmp_path: Path) -> None:
    doc = json.loads((DATA / "otlp_request.json").read_text())
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans.append({**spans[1], "spanId": "abc"})  # one span with a wrong-length id
    path = tmp_path / "partly_bad.json"
    path.write_text(json.dumps(doc))
    run = EvalRun(Config(), [str(path)])
    assert WEATHER in _trace_ids(run)
    assert run.failed_files == 1  # reported, and eval exits 1


def test_directory_walk_yields_regular_files_only(tmp_path: Path) -> None:
    shutil.copy(DATA / "otlp_request.json", tmp_path / "good.json")
    os.mkfifo(tmp_path / "pipe")
    assert [p.name for p in iter_files(tmp_path)] == ["good.json"]


def test_unreadable_subdirectory_is_reported(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """As root the permission cannot be taken away: the listing error is simulated."""
    sub = tmp_path / "sub"
    sub.mkdir()
    shutil.copy(DATA / "otlp_request.json", sub / "good.json")
    real = os.scandir

    def scandir(path: object = ".") -> object:
        if Path(os.fsdecode(path)) == sub:  # type: ignore[arg-type]
            raise PermissionError(13, "Permission denied", str(sub))
        return real(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", scandir)
    run = EvalRun(Config(), [str(tmp_path)])
    _trace_ids(run)
    assert run.failed_files == 1


def test_a_pipe_beside_other_files_is_read_once(tmp_path: Path) -> None:
    """A path that is a pipe (``eval a.json <(zcat b.json.gz)``, ``/dev/stdin``) beside other
    files was read twice, first to see whether it may hold log records: the second read found
    it empty, the file was reported as no trace file and its runs were never evaluated."""
    shutil.copy(DATA / "otlp_request.json", tmp_path / "a.json")
    read, write = os.pipe()
    try:
        os.write(write, (DATA / "tau_runs.json").read_bytes())  # within the pipe's buffer
        os.close(write)
        run = EvalRun(Config(), [str(tmp_path / "a.json"), f"/dev/fd/{read}"])
        ids = _trace_ids(run)
    finally:
        os.close(read)
    assert run.failed_files == 0
    files = [str(tmp_path / "a.json"), str(DATA / "tau_runs.json")]
    assert len(ids) == len(_trace_ids(EvalRun(Config(), files)))  # the pipe's runs, as the file's
    assert WEATHER in ids


def test_a_json_lines_file_cut_short_keeps_its_whole_lines(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str],
                                                           ) -> None:
    """The collector's file exporter writes a line per request: a file it is still writing
    (or was stopped while writing) ends in a partial line. That line raised for the whole
    file: every run in it was reported as a bad file and none was evaluated."""
    whole = (DATA / "collector_export.jsonl").read_bytes()
    path = tmp_path / "live.jsonl"
    path.write_bytes(whole + whole[:100])  # the exporter's next line, cut short
    run = EvalRun(Config(), [str(path)])
    assert WEATHER in _trace_ids(run)
    assert run.failed_files == 1  # and said, naming the line
    assert f"{path}: line 3: not valid JSON" in capsys.readouterr().err


def test_a_proto_file_cut_short_keeps_its_whole_requests(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str],
                                                         ) -> None:
    """The file exporter's ``format: proto`` output (each request after its 4-byte size)
    being written, or stopped mid-request: the last request cut short raised for the whole
    file, and none of its runs was evaluated."""
    from otel_eval.decode.otlp_json import request_from_dict

    body = request_from_dict(json.loads((DATA / "otlp_request.json").read_text()))
    frame = struct.pack(">I", len(body.SerializeToString())) + body.SerializeToString()
    path = tmp_path / "live.binpb"
    path.write_bytes(frame + frame[:40])  # the exporter's next request, cut short
    run = EvalRun(Config(), [str(path)])
    assert WEATHER in _trace_ids(run)
    assert run.failed_files == 1  # and said
    assert f"{path}: OTLP protobuf requests cut short" in capsys.readouterr().err


def test_a_symlinked_subdirectory_is_followed_once(tmp_path: Path) -> None:
    """A subdirectory reached by a symbolic link (a mounted export, a dated run linked as
    ``latest``) was skipped silently beside other files; it is walked, and a link back up
    the tree (a loop) or a second link to a directory already walked is not walked again."""
    shutil.copy(DATA / "otlp_request.json", tmp_path / "a.json")
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    elsewhere.mkdir()
    (elsewhere / "b.json").write_text("{}")
    (tmp_path / "linked").symlink_to(elsewhere, target_is_directory=True)
    (elsewhere / "loop").symlink_to(tmp_path, target_is_directory=True)
    (tmp_path / "again").symlink_to(elsewhere, target_is_directory=True)
    names = [p.relative_to(tmp_path).as_posix() for p in iter_files(tmp_path)]
    assert names == ["a.json", "again/b.json"]
