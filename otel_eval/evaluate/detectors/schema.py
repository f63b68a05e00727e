"""Tool-argument validation against the offered JSON schema (stage: evaluate, for tool_call).

Schemas come from span content (``gen_ai.tool.definitions``): whoever can send a span writes
them. Promises, whatever the schema and the arguments:

- **no retrieval**: ``$ref`` resolves only inside the schema document (and the JSON Schema
  meta-schemas shipped with jsonschema); http, file, urn or any other URI is unresolvable;
- **linear regexes**: ``pattern``, ``patternProperties`` (and the ``additionalProperties``
  that depends on it) run on RE2 (``google-re2``), never on Python's backtracking ``re``;
  a pattern RE2 cannot run (lookaround, backreferences, a program over 1 MiB) or longer
  than ``MAX_PATTERN_CHARS`` is skipped and reported; at most ``_MAX_PATTERNS`` compiled
  patterns are kept;
- ``format`` is an annotation only: no format checker runs (no DNS, no URI fetch, no regex
  compiled from a value); ``uniqueItems`` is one hashing pass, not pairwise comparisons;
- **bounded work**: each validation applies at most ``MAX_STEPS`` keywords (each pattern
  search one: ``patternProperties`` tries every pattern on every key), builds at most
  ``MAX_BUILT_ERRORS`` errors (each quotes the value) and reports ``MAX_ERRORS``; a
  trajectory at most ``TRACE_STEPS`` / ``TRACE_ERRORS`` (``Budget``); arguments over
  ``MAX_ARGUMENT_BYTES`` of JSON are not checked (said so);
- **total**: an unresolvable or endlessly recursive ``$ref``, an invalid schema, the step
  limit, an unsupported ``unevaluatedProperties`` + ``patternProperties`` mix: a ``Check``
  whose ``trouble`` says why the arguments were not (fully) checked, never an exception;
- compiled validators are cached, bounded by the bytes of their schemas' JSON
  (``CACHE_BYTES``), not by a count of entries.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import jsonschema
import re2
import referencing
import referencing.exceptions
from jsonschema.exceptions import ValidationError, best_match

from otel_eval.evaluate.detectors.canonical import nfc

__all__ = ["CACHE_BYTES", "MAX_PATTERN_CHARS", "MAX_STEPS", "TRACE_STEPS", "Budget", "Check",
           "check_arguments"]

MAX_STEPS = 2_000  # keyword applications per validation (a real tool schema needs < 100)
TRACE_STEPS = 50_000  # keyword applications per trajectory, all calls together
MAX_ERRORS = 100  # errors collected per validation (the best one is reported first)
# Errors jsonschema may build per validation and per trajectory, nested ones (anyOf branches)
# included: each message quotes the value (repr), so their number times the arguments' size
# is the work, bounded by these and ``MAX_ARGUMENT_BYTES``.
MAX_BUILT_ERRORS = 200
TRACE_ERRORS = 2_000
MAX_ARGUMENT_BYTES = 256 << 10  # larger arguments (as JSON) are not checked against schemas
CACHE_BYTES = 8 << 20  # bytes of schema JSON held by the validator cache
# Patterns come from span content. A tool's needs a few dozen characters; a longer one is
# not compiled (skipped and reported), so the cache's keys hold at most
# _MAX_PATTERNS x MAX_PATTERN_CHARS (before: any size, 1,024 of 2 MB patterns held 2 GB).
MAX_PATTERN_CHARS = 4_096
_MAX_PATTERNS = 256  # compiled RE2 patterns kept (least recently used out)
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # an unsupported pattern is reported here, not on stderr
# One pattern's program and DFA cache (RE2's default is 8 MiB): a pattern needing more does
# not compile (skipped), and a search past the DFA's share goes on without it (still linear).
_RE2_OPTIONS.max_mem = 1 << 20


@dataclass
class Budget:
    """Keyword applications left for one trajectory's validations."""

    steps: int = TRACE_STEPS
    errors: int = TRACE_ERRORS
    # id(schema) -> (schema, its validator): a tool's schema is keyed (dumped) once per
    # trajectory, not once per call (10k calls of a 300 kB schema: 50 s of json.dumps)
    validators: dict[int, tuple[Any, _Compiled]] = field(default_factory=dict)


@dataclass
class Check:
    """The result of validating one call's arguments."""

    problems: list[dict[str, str]] = field(default_factory=list)  # violations, best first
    # why the arguments were not (fully) checked: unresolvable_ref | recursive_ref |
    # invalid_schema | step_limit | unsupported_pattern | unsupported_keyword |
    # arguments_too_large
    trouble: str | None = None
    detail: str = ""  # what exactly (the $ref, the pattern, the exception type)


class _StepLimit(Exception):
    pass


@dataclass
class _Run:
    steps_left: int
    errors_left: int = MAX_BUILT_ERRORS
    skipped: list[str] = field(default_factory=list)  # patterns RE2 could not run


_RUN: ContextVar[_Run | None] = ContextVar("otel_eval_schema_run", default=None)
_patterns: OrderedDict[str, Any] = OrderedDict()
_patterns_lock = threading.Lock()


def _regex(pattern: str) -> Any:
    """The compiled RE2 pattern, or None when RE2 cannot run it or it is over
    ``MAX_PATTERN_CHARS`` (recorded as skipped; a long one never cached)."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return _skipped(pattern)
    with _patterns_lock:
        compiled = _patterns.get(pattern)
        if compiled is not None or pattern in _patterns:
            _patterns.move_to_end(pattern)
    if compiled is None and pattern not in _patterns:
        try:
            compiled = re2.compile(pattern, options=_RE2_OPTIONS)
        except re2.error:
            compiled = None
        with _patterns_lock:
            _patterns[pattern] = compiled
            if len(_patterns) > _MAX_PATTERNS:
                _patterns.popitem(last=False)
    return _skipped(pattern) if compiled is None else compiled


def _skipped(pattern: str) -> None:
    run = _RUN.get()
    if run is not None and pattern not in run.skipped:
        run.skipped.append(pattern)


def _search(pattern: str, text: str) -> bool | None:
    """RE2 search; None when the pattern cannot run on RE2. Each search is a step of the
    run (``_StepLimit``): ``patternProperties`` and the ``additionalProperties`` beside it
    search every pattern against every key, patterns x keys in one keyword application."""
    run = _RUN.get()
    if run is not None:
        run.steps_left -= 1
        if run.steps_left < 0:
            raise _StepLimit
    compiled = _regex(pattern)
    return None if compiled is None else compiled.search(text) is not None


def _pattern(validator: Any, patrn: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if (validator.is_type(instance, "string") and isinstance(patrn, str)
            and _search(patrn, instance) is False):
        yield ValidationError(f"{instance[:100]!r} does not match {patrn[:100]!r}")


def _pattern_properties(validator: Any, pp: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object") or not isinstance(pp, Mapping):
        return
    for pattern, subschema in pp.items():
        for k, v in instance.items():
            if _search(pattern, k):
                yield from validator.descend(v, subschema, path=k, schema_path=pattern)


def _extras(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """Properties neither in ``properties`` nor matched by a ``patternProperties`` pattern
    (a pattern RE2 cannot run counts as matching: skipped, not an error)."""
    props = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    return [k for k in instance if k not in props
            and not any(_search(p, k) is not False for p in patterns)]


def _additional(validator: Any, ap: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    extras = _extras(instance, schema)
    if validator.is_type(ap, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], ap, path=extra)
    elif not ap and extras:
        names = ", ".join(repr(e) for e in sorted(extras)[:20])
        yield ValidationError(f"Additional properties are not allowed ({names} unexpected)")


def _canon(value: Any) -> Any:
    """A hashable form with JSON Schema equality (1 == 1.0, true != 1, key order ignored)."""
    if isinstance(value, bool) or value is None:
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, Mapping):
        return ("o", frozenset((k, _canon(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return ("a", tuple(_canon(v) for v in value))
    return ("r", repr(value))


def _unique(validator: Any, ui: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if ui and validator.is_type(instance, "array"):
        seen = {_canon(v) for v in instance}
        if len(seen) < len(instance):
            yield ValidationError("array has non-unique elements")


_REPLACED: dict[str, Callable[..., Iterator[Any]]] = {
    "pattern": _pattern, "patternProperties": _pattern_properties,
    "additionalProperties": _additional, "uniqueItems": _unique,
}


def _counted(keyword: Callable[..., Any]) -> Callable[..., Iterator[Any]]:
    def apply(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        run = _RUN.get()
        if run is not None:
            run.steps_left -= 1
            if run.steps_left < 0:
                raise _StepLimit
        for error in keyword(validator, value, instance, schema) or ():
            if run is not None:
                run.errors_left -= 1
                if run.errors_left < 0:
                    raise _StepLimit
            yield error
    return apply


_classes: dict[type, Any] = {}


def _bounded_class(base: Any) -> Any:
    """``base`` with every keyword counted and the regex/uniqueness keywords replaced."""
    got = _classes.get(base)
    if got is None:
        keywords = {name: _counted(_REPLACED.get(name, fn))
                    for name, fn in base.VALIDATORS.items()}
        got = _classes[base] = jsonschema.validators.extend(base, keywords)
    return got


def _refuse(uri: str) -> referencing.Resource[Any]:
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]


_NO_RETRIEVAL: referencing.Registry[Any] = referencing.Registry(retrieve=_refuse)  # type: ignore[call-arg]
_NO_FORMATS = jsonschema.FormatChecker(formats=())


def _walk_keys(schema: Any) -> set[str]:
    """Every key used anywhere in the document (an explicit stack: no recursion limit)."""
    keys: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            keys.update(k for k in node if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return keys


@dataclass(frozen=True)
class _Compiled:
    validator: Any = None  # None: the schema cannot be used (see trouble)
    trouble: str | None = None
    detail: str = ""


def _compile(schema: Mapping[str, Any]) -> _Compiled:
    draft = schema.get("$schema")
    base = jsonschema.validators.validator_for(
        schema if isinstance(draft, str) else {}, default=jsonschema.Draft202012Validator)
    keys = _walk_keys(schema)
    if "unevaluatedProperties" in keys and "patternProperties" in keys:
        return _Compiled(None, "unsupported_keyword",
                         "unevaluatedProperties with patternProperties")
    try:
        base.check_schema(schema, format_checker=_NO_FORMATS)
    except jsonschema.SchemaError as e:
        return _Compiled(None, "invalid_schema", e.message[:200])
    except RecursionError:
        return _Compiled(None, "invalid_schema", "nested too deep")
    return _Compiled(_bounded_class(base)(schema, registry=_NO_RETRIEVAL))


class _Cache:
    """Compiled validators by canonical schema JSON, least recently used first out, bounded
    by the total length of those JSON texts."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[str, _Compiled] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, build: Callable[[], _Compiled]) -> _Compiled:
        with self._lock:
            got = self._items.get(key)
            if got is not None:
                self._items.move_to_end(key)
                return got
        got = build()
        if len(key) <= self.max_bytes // 4:  # one huge schema must not empty the cache
            with self._lock:
                if key not in self._items:
                    self._items[key] = got
                    self.bytes += len(key)
                while self.bytes > self.max_bytes:
                    old, _ = self._items.popitem(last=False)
                    self.bytes -= len(old)
        return got

    def __len__(self) -> int:
        return len(self._items)


CACHE = _Cache(CACHE_BYTES)


def compiled(schema: Mapping[str, Any]) -> _Compiled:
    """The (cached) validator for a schema, its strings in Unicode NFC (the arguments are
    checked in NFC: composed or decomposed, one text)."""
    key = json.dumps(schema, sort_keys=True, default=str)
    return CACHE.get(key, lambda: _compile(nfc(schema)))  # its text in NFC, as arguments


def _problems(validator: Any, args: Any) -> list[dict[str, str]]:
    """The violations, best first. Ordered by path and keyword, never by the schema's key
    order: equal schemas written in another key order share one compiled validator
    (``compiled``), so the order its keywords run in says which was compiled first in this
    process, and a message must not depend on what ran before."""
    errors = list(islice(validator.iter_errors(args), MAX_ERRORS))
    errors.sort(key=lambda e: ([str(p) for p in e.absolute_path], str(e.validator),
                               e.message))
    first = best_match(errors)
    ordered = [first, *[e for e in errors if e is not first]] if first else []
    return [{"constraint": str(e.validator),
             "path": "/".join(str(p) for p in e.absolute_path),
             "message": e.message[:200]} for e in ordered]


def _compiled_for(schema: Mapping[str, Any], budget: Budget | None) -> _Compiled:
    if budget is None:
        return compiled(schema)
    held = budget.validators.get(id(schema))
    if held is None or held[0] is not schema:
        held = budget.validators[id(schema)] = (schema, compiled(schema))
    return held[1]


def check_arguments(arguments: Any, schema: Mapping[str, Any], budget: Budget | None = None,
                    compiled_schema: _Compiled | None = None) -> Check:
    """Validate parsed ``arguments`` against ``schema`` within the step limits."""
    got = compiled_schema if compiled_schema is not None else _compiled_for(schema, budget)
    if got.validator is None:
        return Check(trouble=got.trouble, detail=got.detail)
    text = json.dumps(arguments, default=str)  # every character past ASCII escaped (\u)
    size = len(text)
    if size > MAX_ARGUMENT_BYTES:
        return Check(trouble="arguments_too_large",
                     detail=f"{size} bytes of arguments (checked up to {MAX_ARGUMENT_BYTES})")
    budget = budget if budget is not None else Budget()
    steps, errors = min(MAX_STEPS, budget.steps), min(MAX_BUILT_ERRORS, budget.errors)
    run = _Run(steps_left=steps, errors_left=errors)
    token = _RUN.set(run)
    try:
        # all-ASCII text is NFC already: only arguments with a \u escape are put in NFC
        return _checked(got.validator, nfc(arguments) if "\\u" in text else arguments, run)
    finally:
        _RUN.reset(token)
        budget.steps -= steps - max(run.steps_left, 0)
        budget.errors -= errors - max(run.errors_left, 0)


def _checked(validator: Any, arguments: Any, run: _Run) -> Check:
    try:
        problems = _problems(validator, arguments)
    except _StepLimit:
        return Check(trouble="step_limit", detail=f"schema work limit reached ({MAX_STEPS} "
                     f"steps / {MAX_BUILT_ERRORS} errors per call, {TRACE_STEPS} / "
                     f"{TRACE_ERRORS} per trace)")
    except referencing.exceptions.Unresolvable as e:
        ref = getattr(e, "ref", None) or str(e)
        return Check(trouble="unresolvable_ref",
                     detail=f"$ref {str(ref)[:200]!r} does not resolve inside the schema")
    except RecursionError:
        return Check(trouble="recursive_ref", detail="$ref recursion that consumes no input")
    if run.skipped:
        return Check(problems, "unsupported_pattern",
                     "pattern(s) RE2 cannot run, not checked: "
                     + ", ".join(repr(p[:100]) for p in run.skipped[:5]))
    return Check(problems)
