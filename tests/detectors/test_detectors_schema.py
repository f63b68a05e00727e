"""Hostile tool schemas (issue 11): no retrieval, linear regexes, bounded and total."""

from __future__ import annotations

import http.server
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema._utils
import pytest
from detector_factory import tool, traj

from otel_eval.evaluate.detectors import schema, tool_call
from otel_eval.evaluate.detectors.calls import Context
from otel_eval.evaluate.detectors.config import DetectorsConfig
from otel_eval.evaluate.detectors.schema import MAX_PATTERN_CHARS, Budget, check_arguments


def obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


def detect(schema_: dict[str, Any], args: Any) -> list[tuple[str, str]]:
    found = tool_call.detect(traj(tool("t", args), tools={"t": schema_}), DetectorsConfig(),
                             Context())
    return [(f.kind, f.attributes.get("reason") or f.attributes.get("constraint"))
            for f in found]


@pytest.fixture
def web() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server that serves a schema and records every request."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            body = b'{"enum": ["secret-from-http"]}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_refs_are_never_retrieved(web: tuple[str, list[str]], tmp_path: Path) -> None:
    base, seen = web
    secret = tmp_path / "secret.json"
    secret.write_text('{"enum": ["secret-from-file"]}')
    for ref in (f"{base}/s.json", secret.as_uri(), "urn:x:y", "other.json"):
        found = tool_call.detect(traj(tool("t", {"a": "guess"}), tools={
            "t": {"$id": f"{base}/root.json", **obj(a={"$ref": ref})}}), DetectorsConfig(),
            Context())
        assert [(f.kind, f.attributes["reason"]) for f in found] == [
            ("schema", "unresolvable_ref")], ref
        assert "secret-from" not in repr([f.to_json() for f in found])
    assert seen == []


def test_refs_inside_the_document_and_to_the_metaschemas_resolve() -> None:
    tree = {"$defs": {"node": {"type": "object", "properties": {
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}, **obj(
        root={"$ref": "#/$defs/node"},
        meta={"$ref": "https://json-schema.org/draft/2020-12/schema"})}
    assert detect(tree, {"root": {"kids": [{"kids": []}]}, "meta": {"type": "string"}}) == []
    assert detect(tree, {"root": {"kids": [{"kids": 3}]}}) == [("arguments", "type")]


@pytest.mark.parametrize("defs", [
    {"x": {"$ref": "#/$defs/y"}, "y": {"$ref": "#/$defs/x"}},
    {"x": {"allOf": [{"$ref": "#/$defs/x"}]}},
])
def test_recursive_ref_is_a_finding(defs: dict[str, Any]) -> None:
    assert detect({"$defs": defs, **obj(a={"$ref": "#/$defs/x"})}, {"a": 1}) == [
        ("schema", "recursive_ref")]


def test_unresolvable_ref_is_a_finding() -> None:
    assert detect(obj(a={"$ref": "#/nope"}), {"a": 1}) == [("schema", "unresolvable_ref")]


PATTERN = "^(a+)+$"


@pytest.mark.parametrize("schema_", [
    obj(a={"type": "string", "pattern": PATTERN}),
    {"type": "object", "patternProperties": {PATTERN: {"type": "string"}}},
    {"type": "object", "patternProperties": {PATTERN: {}}, "additionalProperties": False},
    obj(a={"propertyNames": {"pattern": PATTERN}}),
])
def test_schema_patterns_never_run_on_python_re(monkeypatch: pytest.MonkeyPatch,
                                                schema_: dict[str, Any]) -> None:
    """Python's backtracking ``re`` is exponential on ``^(a+)+$`` (issue 11: 32 s for 31
    characters); every use of it during validation is recorded and must not see the
    schema's pattern."""
    used: list[str] = []
    for name in ("search", "match", "fullmatch", "compile", "_compile"):
        real = getattr(re, name)
        monkeypatch.setattr(re, name, lambda p, *a, _real=real, **k: (
            used.append(str(getattr(p, "pattern", p))), _real(p, *a, **k))[1])
    found = detect(schema_, {"a": "aaaa!", "aaa!": {"aaa!": 1}})
    assert not any(PATTERN in u for u in used)
    assert ("arguments", None) not in found


def test_linear_on_the_catastrophic_input() -> None:
    """3,000 characters: 2^3000 steps for a backtracking engine, one pass for RE2."""
    assert detect(obj(a={"type": "string", "pattern": PATTERN}), {"a": "a" * 3000 + "!"}) == [
        ("arguments", "pattern")]
    assert detect(obj(a={"type": "string", "pattern": PATTERN}), {"a": "a" * 3000}) == []


def test_a_pattern_re2_cannot_run_is_skipped_and_said() -> None:
    s = {**obj(a={"type": "string", "pattern": "^(?=x)"}, b={"type": "integer"}),
         "required": ["b"]}
    assert detect(s, {"a": "y"}) == [("arguments", "required"),
                                     ("schema", "unsupported_pattern")]


def test_a_pattern_too_long_is_skipped_said_and_never_held() -> None:
    """Patterns are span content: a distinct 2 MB pattern per trace grew the pattern cache by
    2 MB each, up to 1,024 of them. Now one over MAX_PATTERN_CHARS is not compiled, is said,
    and is not kept; the cache holds short patterns only, at most _MAX_PATTERNS."""
    long = "a" * (MAX_PATTERN_CHARS + 1)
    s = obj(a={"type": "string", "pattern": long})
    assert detect(s, {"a": "a"}) == [("schema", "unsupported_pattern")]
    assert long not in schema._patterns
    for i in range(schema._MAX_PATTERNS + 10):
        detect(obj(a={"type": "string", "pattern": f"^x{i}$"}), {"a": "y"})
    assert len(schema._patterns) <= schema._MAX_PATTERNS
    assert max(map(len, schema._patterns)) <= MAX_PATTERN_CHARS


def test_exponential_schema_stops_at_the_step_limit() -> None:
    depth = 16  # 2^16 branches: a second of work today, 2^40 would be days
    defs: dict[str, Any] = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2}
                            for i in range(depth)}
    defs[f"d{depth}"] = {"type": "string"}
    budget = Budget()
    check = check_arguments({"a": 5}, {"$defs": defs, **obj(a={"$ref": "#/$defs/d0"})}, budget)
    assert check.trouble == "step_limit"
    used_steps, used_errors = schema.TRACE_STEPS - budget.steps, schema.TRACE_ERRORS - budget.errors
    assert used_steps == schema.MAX_STEPS or used_errors == schema.MAX_BUILT_ERRORS


def test_errors_quoting_a_large_value_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each jsonschema error message quotes the value: 1,000 failing ``anyOf`` branches on a
    100 kB string would build 100 MB of text; at most ``MAX_BUILT_ERRORS`` are built."""
    built = 0
    real = schema.ValidationError.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal built
        built += 1
        real(self, *args, **kwargs)

    monkeypatch.setattr(schema.ValidationError, "__init__", counting)
    s = obj(a={"anyOf": [{"type": "integer"}] * 1000})
    check = check_arguments({"a": "x" * 100_000}, s)
    assert check.trouble == "step_limit"
    assert built <= schema.MAX_BUILT_ERRORS + 1


def test_arguments_too_large_are_not_checked_and_said() -> None:
    s = obj(a={"type": "integer"})
    check = check_arguments({"a": "x" * (schema.MAX_ARGUMENT_BYTES + 1)}, s)
    assert (check.trouble, check.problems) == ("arguments_too_large", [])


def test_the_trajectory_budget_is_shared_by_its_calls() -> None:
    budget = Budget(steps=10)
    s = obj(a={"type": "string"}, b={"type": "string"})
    assert check_arguments({"a": "x", "b": "y"}, s, budget).trouble is None
    while budget.steps > 0:
        check_arguments({"a": "x", "b": "y"}, s, budget)
    assert check_arguments({"a": "x"}, s, budget).trouble == "step_limit"


def test_unique_items_is_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    real = jsonschema._utils.equal

    def counting(a: Any, b: Any) -> bool:
        nonlocal calls
        calls += 1
        return real(a, b)

    monkeypatch.setattr(jsonschema._utils, "equal", counting)
    s = obj(a={"type": "array", "uniqueItems": True})
    assert detect(s, {"a": [{"k": i} for i in range(2000)]}) == []
    assert calls < 100  # pairwise: 2 million
    assert detect(s, {"a": [{"k": 1, "j": [2]}, {"j": [2.0], "k": 1}]}) == [
        ("arguments", "uniqueItems")]
    assert detect(s, {"a": [True, 1, "1", None, False, 0]}) == []


def test_formats_are_annotations(monkeypatch: pytest.MonkeyPatch) -> None:
    s = obj(a={"type": "string", "format": "regex"}, b={"type": "string", "format": "uri"})
    assert detect(s, {"a": "(", "b": "not a uri"}) == []


@pytest.mark.parametrize("odd", [{"$schema": {}}, {"$schema": 3, "type": "object"},
                                 {"$schema": "http://json-schema.org/draft-04/schema#",
                                  **obj(a={"pattern": PATTERN})},
                                 {"unevaluatedProperties": False,
                                  "patternProperties": {"x": {}}}])
def test_odd_schemas_never_raise(odd: dict[str, Any]) -> None:
    detect(odd, {"a": "aaa!"})


def test_the_cache_is_bounded_by_bytes() -> None:
    cache = schema._Cache(max_bytes=1 << 20)
    big = {"enum": ["x" * 100_000]}
    for i in range(50):
        cache.get(f"{i}" + "y" * 100_000, lambda: schema._compile(big))
    assert cache.bytes <= 1 << 20 and len(cache) == 10
    cache.get("z" * 300_000, lambda: schema._compile(big))  # > max/4: used, not kept
    assert len(cache) == 10 and cache.bytes <= 1 << 20
    assert schema.CACHE.max_bytes == schema.CACHE_BYTES


def test_the_order_of_problems_is_the_schemas_content_not_its_key_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Equal schemas in another key order share one compiled validator, which runs its
    keywords in the order of the one compiled first: the first problem (the finding's
    message) must not depend on which one that was (a collector's batching reorders the
    traces a process sees)."""
    one = {"type": "object", "properties": {"city": {"type": "string"}},
           "required": ["city"], "additionalProperties": False}
    other = dict(reversed(list(one.items())))
    seen = []
    for first, then in ((one, other), (other, one)):
        monkeypatch.setattr(schema, "CACHE", schema._Cache(schema.CACHE_BYTES))
        schema.check_arguments({"town": "Paris"}, first)
        seen.append(schema.check_arguments({"town": "Paris"}, then).problems)
    assert seen[0] == seen[1]
    assert [p["constraint"] for p in seen[0]] == ["additionalProperties", "required"]


def test_pattern_searches_count_against_the_step_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """``patternProperties`` (and the ``additionalProperties`` beside it) try every pattern on
    every key in one keyword application: 400 patterns and 4,000 keys (15 kB of schema, 55 kB
    of arguments) were 3.2 million RE2 searches, a compile each past the 256 kept (52 s for
    one call). Each search is a step: the call stops at ``MAX_STEPS``, said so."""
    searches = 0
    real = schema._regex

    def counting(pattern: str) -> Any:
        nonlocal searches
        searches += 1
        return real(pattern)

    monkeypatch.setattr(schema, "_regex", counting)
    s = {"type": "object", "additionalProperties": False,
         "patternProperties": {f"^p{i}_[a-z]+$": {"type": "string"} for i in range(100)}}
    check = check_arguments({f"k{i}": "v" for i in range(100)}, s, Budget())
    assert check.trouble == "step_limit"
    assert searches <= schema.MAX_STEPS
    # a tool's usual patternProperties is checked as before
    small = {"type": "object", "additionalProperties": False,
             "patternProperties": {"^x_": {"type": "string"}}}
    assert check_arguments({"x_a": "v", "x_b": 1}, small).problems[0]["constraint"] == "type"
    assert check_arguments({"y": "v"}, small).problems[0]["constraint"] == \
        "additionalProperties"
