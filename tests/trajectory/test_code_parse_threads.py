"""Code actions read in two threads at once: no "AST constructor recursion depth mismatch".

CPython 3.11 before 3.11.8 keeps the AST constructor's recursion counter per interpreter; a
garbage collection inside the constructor can hand the GIL to another thread, whose parse
resets the counter (python/cpython#106905). CI at 8f72ecb failed on it: a test parsing the
package's sources raced a running service's evaluation; the evaluation side of such a race
raises out of the code-action reader. A collection that yields the GIL at every start makes the race near-certain here
(without ``code_parse.parse``'s lock it failed 11 runs of 11); no timing is asserted.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from otel_eval.evaluate.trajectory.code_parse import called_names, python_calls

CODE = "\n".join(
    f"def step_{i}(x):\n    return [search(q, k={{'a': (1, [2, {{3: 4}}])}}) for q in x if q]"
    for i in range(150))


def _yield_gil(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        time.sleep(0)  # releases the GIL: another thread runs mid-construction


@pytest.fixture
def collections_that_switch_threads() -> Iterator[None]:
    threshold, interval = gc.get_threshold(), sys.getswitchinterval()
    gc.callbacks.append(_yield_gil)
    gc.set_threshold(50)
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        gc.callbacks.remove(_yield_gil)
        gc.set_threshold(*threshold)
        sys.setswitchinterval(interval)


def test_two_threads_reading_code_get_every_call(collections_that_switch_threads: None) -> None:
    results: list[object] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for _ in range(8):
                calls, problem = python_calls(CODE, frozenset({"search"}))
                results.append((len(calls), problem, called_names(CODE)))
        except BaseException as exc:  # noqa: BLE001 - the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert results == [(64, "too_many_calls", frozenset({"search"}))] * 16
