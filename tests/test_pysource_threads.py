"""Python source read in several threads at once: no "AST constructor recursion depth
mismatch" (``base.pysource``).

CPython 3.11 before 3.11.8 keeps the AST constructor's recursion counter per interpreter; a
garbage collection inside the constructor can hand the GIL to another thread, whose parse
resets the counter (python/cpython#106905). CI at 8f72ecb failed on it: a test parsing the
package's sources raced a running service's evaluation. The evaluation's side of such a race
raises out of the code-action or envelope reader; the judge's prompt compaction parses on its
own thread, and Python's ``traceback`` parses each line it formats (any thread logging an
exception). Here a collection yields the GIL at every start, which makes the race
near-certain: with the code reader unlocked the first test failed 11 runs of 11; locked but
with the collector running during the parse, the traceback test failed 6 runs of 6 (28 of 30
reads in a longer run). No timing is asserted.
"""

from __future__ import annotations

import ast
import gc
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from otel_eval.base.pysource import parse
from otel_eval.evaluate.judge.compact import _call_texts
from otel_eval.evaluate.trajectory.code_parse import called_names, python_calls
from otel_eval.evaluate.trajectory.envelopes import python_literal

CODE = "\n".join(
    f"def step_{i}(x):\n    return [search(q, k={{'a': (1, [2, {{3: 4}}])}}) for q in x if q]"
    for i in range(150))
LITERAL = "{" + ", ".join(f"'k{i}': [{i}, ({i}, '{i}'), {{'n': None}}]" for i in range(400)) + "}"
CALLS = "[" + ", ".join(
    f"{{'id': 'c{i}', 'type': 'function', 'function': {{'name': 'search', "
    f"'arguments': {{'query': 'q{i}'}}}}}}" for i in range(150)) + "]"


def _yield_gil(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        time.sleep(0)  # releases the GIL: another thread runs mid-construction


@pytest.fixture
def collections_that_switch_threads() -> Iterator[None]:
    threshold = gc.get_threshold()
    gc.callbacks.append(_yield_gil)
    gc.set_threshold(50)
    try:
        yield
    finally:
        gc.callbacks.remove(_yield_gil)
        gc.set_threshold(*threshold)


@pytest.fixture
def switching_often(collections_that_switch_threads: None) -> Iterator[None]:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def _in_threads(*reads: Callable[[], object]) -> list[list[object]]:
    """Each read 8 times in its own thread, all at once: what each returned."""
    results: list[list[object]] = [[] for _ in reads]
    errors: list[BaseException] = []

    def loop(read: Callable[[], object], out: list[object]) -> None:
        try:
            for _ in range(8):
                out.append(read())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(read, out))
               for read, out in zip(reads, results, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return results


def _code() -> object:
    calls, problem = python_calls(CODE, frozenset({"search"}))
    return len(calls), problem, called_names(CODE)


def test_two_threads_reading_code_get_every_call(switching_often: None) -> None:
    expected = (64, "too_many_calls", frozenset({"search"}))
    assert _in_threads(_code, _code) == [[expected] * 8] * 2


def test_code_literals_and_the_judges_call_lists_read_at_once(switching_often: None) -> None:
    code, literal, calls, tree = _in_threads(
        _code, lambda: python_literal(LITERAL), lambda: _call_texts(CALLS),
        lambda: len(parse(CODE).body))
    assert code == [(64, "too_many_calls", frozenset({"search"}))] * 8
    assert literal == [python_literal(LITERAL)] * 8 and len(literal[0]) == 400  # type: ignore[arg-type]
    assert calls == [[f"q{i}" for i in range(150)]] * 8
    assert tree == [150] * 8


def test_code_is_read_while_another_thread_formats_tracebacks(
        collections_that_switch_threads: None) -> None:
    done = threading.Event()

    def log_errors() -> None:  # what logging.exception does in a service thread
        while not done.is_set():
            try:
                {}["missing"]  # the KeyError is the point
            except KeyError as exc:
                traceback.format_exception(exc)

    other = threading.Thread(target=log_errors)
    other.start()
    try:
        reads = [_code() for _ in range(4)]
    finally:
        done.set()
        other.join()
    assert reads == [(64, "too_many_calls", frozenset({"search"}))] * 4


def test_the_collector_is_left_as_it_was() -> None:
    assert gc.isenabled()
    parse("x = 1")
    assert gc.isenabled()
    gc.disable()
    try:
        parse("x = 1")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_package_parses_strings_only_through_pysource() -> None:
    package = Path(__file__).resolve().parents[1] / "otel_eval"
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "pysource.py":
            continue
        for node in ast.walk(parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "ast"):
                continue
            given = node.args[0] if node.args else None
            of_a_node = isinstance(given, ast.Name) and given.id == "node"
            if node.func.attr == "parse" or (node.func.attr == "literal_eval" and not of_a_node):
                found.append(f"{path.relative_to(package)}:{node.lineno}")
    assert found == []  # ast.literal_eval(node) of a tree already parsed needs no lock
