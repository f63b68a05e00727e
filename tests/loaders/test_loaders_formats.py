"""Offline loaders: format sniffing, gzip, directories, and clear errors for bad files."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from otel_eval.base.model import Trace
from otel_eval.decode.otlp_json import request_from_json
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.trajectory import build_trajectory
from otel_eval.receive.loaders import LoaderError, iter_files, load_file, load_path
from otel_eval.receive.loaders.span_tree import duration_to_ns, iso_to_ns

DATA = Path(__file__).resolve().parents[1] / "data" / "loaders"
CFG = TrajectoryConfig()
WEATHER = "5b8efff798038103d269b633813fc60c"


def by_id(traces: list[Trace]) -> dict[str, Trace]:
    return {t.trace_id: t for t in traces}


def test_otlp_json_request() -> None:
    traces = by_id(load_file(DATA / "otlp_request.json"))
    assert set(traces) == {WEATHER, "0123456789abcdef0123456789abcdef"}
    weather = traces[WEATHER]
    assert (weather.status, weather.release_reason) == ("complete", "eof")
    assert weather.source == str(DATA / "otlp_request.json")
    assert traces["0123456789abcdef0123456789abcdef"].status == "incomplete"  # root never ended
    t = build_trajectory(weather, CFG)
    assert [s.kind for s in t.steps] == ["agent", "llm", "tool"]
    assert (t.service, t.agent, t.task_id) == ("weather-agent", "weather", "7")
    tool = t.tool_steps[0]
    assert (tool.arguments, tool.status, tool.error) == ({"city": "Atlantis"}, "error",
                                                         "city not found")
    assert t.llm_steps[0].finish_reasons == ["tool_call"]
    assert t.steps[1].start_ns == 1_700_000_001_000_000_000


def _steps_json(traces: list[Trace]) -> list[object]:
    return [[s.to_json() for s in build_trajectory(t, CFG).steps]
            for t in sorted(traces, key=lambda t: t.trace_id)]


def test_collector_json_lines_join_a_trace_split_over_lines() -> None:
    (trace,) = load_file(DATA / "collector_export.jsonl")
    assert trace.trace_id == WEATHER and len(trace.spans) == 3
    full = by_id(load_file(DATA / "otlp_request.json"))[WEATHER]
    assert _steps_json([trace]) == _steps_json([full])


def test_protobuf_and_gzip_are_sniffed_from_content_not_names(tmp_path: Path) -> None:
    req = request_from_json((DATA / "otlp_request.json").read_bytes())
    (tmp_path / "export.json").write_bytes(req.SerializeToString())  # protobuf, misnamed
    (tmp_path / "trace.bin").write_bytes(gzip.compress((DATA / "span_tree.json").read_bytes()))
    expected = _steps_json(load_file(DATA / "otlp_request.json"))
    assert _steps_json(load_file(tmp_path / "export.json")) == expected
    (tree,) = load_file(tmp_path / "trace.bin")
    assert tree.trace_id == "a5b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5"


def test_utf8_byte_order_mark_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + (DATA / "tau_runs.json").read_bytes())
    assert len(load_file(path)) == 2


def test_span_tree_keeps_ids_and_reads_times_status_events() -> None:
    (trace,) = load_file(DATA / "span_tree.json")
    spans = {s.span_id: s for s in trace.spans}
    assert list(spans) == [f"100000000000000{i}" for i in range(1, 5)]
    root, llm = spans["1000000000000001"], spans["1000000000000003"]
    assert root.parent_span_id is None and llm.parent_span_id == "1000000000000002"
    assert root.start_ns == 1742401928062589000
    assert root.end_ns - root.start_ns == 61_950_000_000
    assert llm.end_ns - llm.start_ns == 47_000
    assert (llm.status, llm.status_message, llm.kind) == ("error", "rate limited", "internal")
    assert llm.events[0].name == "exception" and llm.events[0].attributes["exception.type"] == (
        "RateLimitError")
    assert root.resource == {"service.name": "svc"} and llm.resource is root.resource
    t = build_trajectory(trace, CFG)
    assert [s.kind for s in t.steps] == ["other", "agent", "llm", "tool"]
    assert t.tool_steps[0].arguments == {"answer": "3"}
    # smolagents' own type "any" is no JSON schema type: the parameter is unchecked
    assert (t.input, t.output, t.tools) == ('{"task": "add"}', "3",
                                           {"final_answer": {"type": "object", "properties": {
                                               "answer": {}}}})


@pytest.mark.parametrize(("text", "ns"), [
    ("PT1M1.95S", 61_950_000_000), ("PT0.000047S", 47_000), ("PT2H", 7_200_000_000_000),
    ("P1DT1S", 86_401_000_000_000), ("PT0S", 0), ("PT1.123456789123S", 1_123_456_789),
])
def test_iso_durations(text: str, ns: int) -> None:
    assert duration_to_ns(text) == ns


@pytest.mark.parametrize("text", ["", "P", "PT", "1M", "PT-1S", "PTxS",
                                  # past OTLP's fixed64 ns (a 400-digit count of days made
                                  # an end time no float holds: eval's traceback)
                                  pytest.param("P" + "9" * 400 + "D", id="400-digit days"),
                                  "PT18446744073.709551616S"])
def test_bad_iso_durations(text: str) -> None:
    with pytest.raises(ValueError):
        duration_to_ns(text)


def test_the_longest_duration_a_span_can_say() -> None:
    assert duration_to_ns("PT18446744073.709551615S") == 2**64 - 1


def test_iso_timestamps_naive_is_utc() -> None:
    assert iso_to_ns("1970-01-01T00:00:01.5") == 1_500_000_000
    assert iso_to_ns("1970-01-01T01:00:00+01:00") == 0


def test_directories_recursively_sorted_hidden_skipped(tmp_path: Path) -> None:
    (tmp_path / "b" / "c").mkdir(parents=True)
    shutil.copy(DATA / "span_tree.json", tmp_path / "b" / "c" / "tree.json")
    shutil.copy(DATA / "tau_runs.json", tmp_path / "a.json")
    (tmp_path / ".hidden.json").write_text("garbage")
    assert [p.relative_to(tmp_path).as_posix() for p in iter_files(tmp_path)] == [
        "a.json", "b/c/tree.json"]
    assert len(list(load_path(tmp_path))) == 3


BAD_FILES = {
    "truncated.json": b'{"resourceSpans": [',
    "garbage.bin": b"\x00\x01\x02 definitely not protobuf \xff\xff",
    "cut_short.binpb": b"\x00\x00\x00\x10\x0a\x02",  # a file exporter's request, cut
    "unknown.json": b'{"hello": "world"}',
    "not_utf8.json": b'{"resourceSpans": "\xff\xfe"}',
    "bad_line.jsonl": b'{"resourceSpans": []}\n{"resourceSpans": [}\n',
    "bad_gzip.json.gz": b"\x1f\x8b\x08\x00 truncated",
    "bad_tree.json": b'{"spans": [{"span_id": "1", "span_name": "x", "timestamp": "yesterday"}]}',
    "bad_tau.json": b'[{"traj": [{"role": "assistant", "tool_calls": 5}], "task_id": 1}]',
    "wrong_otlp.json": b'{"resourceSpans": [{"scopeSpans": 3}]}',
    "scalar.json": b"[1, 2]",
    "surrogate_key.json": b'{"resourceSpans": [{"\\ud800": 1}]}',  # SystemError in upb
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_files_raise_a_loader_error_naming_the_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(BAD_FILES[name])
    with pytest.raises(LoaderError) as info:
        load_file(path)
    assert str(path) in str(info.value) and info.value.path == str(path)


def test_missing_file_is_a_loader_error(tmp_path: Path) -> None:
    with pytest.raises(LoaderError, match="cannot read"):
        load_file(tmp_path / "nope.json")


def test_on_error_reports_bad_files_and_loading_goes_on(tmp_path: Path) -> None:
    for name, content in BAD_FILES.items():
        (tmp_path / name).write_bytes(content)
    shutil.copy(DATA / "span_tree.json", tmp_path / "zz_good.json")
    errors: list[LoaderError] = []
    traces = list(load_path(tmp_path, on_error=errors.append))
    assert [t.trace_id for t in traces] == ["a5b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5"]
    assert sorted(Path(e.path).name for e in errors) == sorted(BAD_FILES)


def test_invalid_spans_are_reported_and_good_spans_kept(tmp_path: Path) -> None:
    doc = json.loads((DATA / "otlp_request.json").read_text())
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans.append({**spans[1], "spanId": "abc"})  # wrong-length id
    spans.append({**spans[1], "traceId": ""})  # empty trace id
    path = tmp_path / "partly_bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(LoaderError, match="rejected 2 span"):
        load_file(path)
    errors: list[LoaderError] = []
    traces = by_id(load_file(path, on_error=errors.append))
    assert len(traces[WEATHER].spans) == 3 and len(errors) == 1


@pytest.mark.parametrize("lines", [False, True], ids=["request", "json-lines"])
def test_a_span_with_a_lone_surrogate_is_reported_and_the_others_kept(tmp_path: Path,
                                                                       lines: bool) -> None:
    """As serve drops it (``otlp_json.without_lone_surrogates``): a JavaScript SDK's value cut
    between the halves of an emoji (``"\\ud83d"``) loses its span, not the file's run."""
    doc = json.loads((DATA / "otlp_request.json").read_text())
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    added = [{**spans[1], "spanId": "ab" * 8, "name": "chat \ud83d"},
             {**spans[1], "spanId": "cd" * 8, "name": "聊天 😀"}]
    path = tmp_path / ("bad.jsonl" if lines else "bad.json")
    if lines:  # the collector's file exporter: a request a line
        second = json.loads(json.dumps(doc))
        second["resourceSpans"][0]["scopeSpans"][0]["spans"] = added
        path.write_text(json.dumps(doc) + "\n" + json.dumps(second) + "\n")
    else:
        spans += added
        path.write_text(json.dumps(doc))  # ASCII: the lone half escaped, \ud83d
    errors: list[LoaderError] = []
    traces = by_id(load_file(path, on_error=errors.append))
    assert [str(e).split(": ", 1)[1] for e in errors] == [
        ("line 2: " if lines else "") + "rejected 1 span(s): 1 invalid_utf8"]
    assert "聊天 😀" in [s.name for s in traces[WEATHER].spans]
    assert len(traces[WEATHER].spans) == 4


def test_duplicate_spans_in_a_file_are_loaded_and_deduplicated_by_the_builder(
        tmp_path: Path) -> None:
    doc = json.loads((DATA / "otlp_request.json").read_text())
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans.append({**spans[2], "name": "duplicate"})
    path = tmp_path / "dup.json"
    path.write_text(json.dumps(doc))
    t = build_trajectory(by_id(load_file(path))[WEATHER], CFG)
    assert [s.name for s in t.steps] == ["invoke_agent weather", "chat gpt-4o",
                                         "execute_tool get_weather"]


def test_a_gzip_bomb_is_refused_naming_the_file_not_inflated(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `.gz` input (eval, show, train, replay) was inflated whole (``gzip.decompress``):
    a small file could take any memory. Now it is read up to ``MAX_GUNZIPPED_BYTES`` and
    refused past it, the error naming the file; under the limit it loads as before."""
    import tracemalloc

    monkeypatch.setattr("otel_eval.decode.compressed.MAX_GUNZIPPED_BYTES", 1 << 20)
    tree = (DATA / "span_tree.json").read_bytes()
    small = tmp_path / "small.json.gz"
    small.write_bytes(gzip.compress(tree + b" " * ((1 << 20) - len(tree))))  # at the limit
    assert [t.trace_id for t in load_file(small)] == ["a5b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5"]
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(tree + b" " * (64 << 20), compresslevel=1))
    tracemalloc.start()
    try:
        with pytest.raises(LoaderError, match="limit of 1048576 bytes") as info:
            load_file(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.path == str(bomb) and str(bomb) in str(info.value)
    assert peak < 8 << 20  # not the 64 MiB it inflates to


def _zstd(data: bytes) -> bytes:
    import cramjam  # in the lock (aiokafka's zstd codec): a zstd frame as the exporter's

    return bytes(cramjam.zstd.compress(data))



def _zstd_export(lines: list[bytes], shape: str, fmt: str) -> bytes:
    """The file exporter's ``compression: zstd`` output of these JSON requests: each request
    a zstd frame after its 4-byte size (``framed``, its default), or with its native
    compression gate the file it writes without compression, one zstd stream (``stream``)."""
    if fmt == "proto":
        requests = [request_from_json(line).SerializeToString() for line in lines]
    else:
        requests = lines
    if shape == "framed":
        return b"".join(len(z).to_bytes(4, "big") + z for z in map(_zstd, requests))
    if fmt == "proto":
        return _zstd(b"".join(len(r).to_bytes(4, "big") + r for r in requests))
    return _zstd(b"".join(line + b"\n" for line in requests))


@pytest.mark.parametrize("fmt", ["json", "proto"])
@pytest.mark.parametrize("shape", ["framed", "stream"])
def test_the_file_exporters_zstd_output_is_read_as_its_plain_output(
        tmp_path: Path, shape: str, fmt: str) -> None:
    """The collector file exporter's only compression, ``compression: zstd``, was refused
    as 'not a recognised trace file' (or 'request 1: not an OTLP protobuf request'): a CI
    gate over its files read nothing. Both of its shapes are read as its plain output."""
    plain = DATA / "collector_export.jsonl"
    lines = plain.read_bytes().splitlines()
    path = tmp_path / "traces"
    path.write_bytes(_zstd_export(lines, shape, fmt))
    assert _steps_json(load_file(path)) == _steps_json(load_file(plain))
    (tmp_path / "other.json").write_bytes(gzip.compress(plain.read_bytes()))
    assert len(list(load_path(tmp_path))) == len(load_file(plain))  # a copy: refused


@pytest.mark.parametrize("shape", ["framed", "stream"])
def test_a_zstd_bomb_is_refused_naming_the_file_not_inflated(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str) -> None:
    import tracemalloc

    monkeypatch.setattr("otel_eval.decode.compressed.MAX_GUNZIPPED_BYTES", 1 << 20)
    monkeypatch.setattr("otel_eval.receive.loaders.otlp_files.MAX_GUNZIPPED_BYTES", 1 << 20)
    line = (DATA / "collector_export.jsonl").read_bytes().splitlines()[0]
    bomb = tmp_path / "bomb"
    bomb.write_bytes(_zstd_export([line + b" " * (64 << 20)], shape, "json"))
    tracemalloc.start()
    try:
        with pytest.raises(LoaderError, match="limit of 1048576 bytes") as info:
            load_file(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.path == str(bomb)
    assert peak < 8 << 20  # not the 64 MiB it inflates to (as Python bytes; the decoder's
    # buffer is a mapping of the limit's size, which tracemalloc does not see)


def test_zstd_that_does_not_decompress_is_a_loader_error(tmp_path: Path) -> None:
    path = tmp_path / "cut.zst"
    path.write_bytes(_zstd((DATA / "collector_export.jsonl").read_bytes())[:-8])
    with pytest.raises(LoaderError, match="cannot read: zstd content that does not"):
        load_file(path)
