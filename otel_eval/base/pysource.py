"""Python source parsed with ``ast``, safely from any thread (the bottom layer).

CPython 3.11 before 3.11.8 keeps the AST constructor's recursion counter in the interpreter's
``ast`` state (python/cpython#106905, fixed by #113035). The constructor is C that runs no
Python code, but a garbage collection inside it can (finalizers, ``gc.callbacks``), and so
hand the GIL to another thread; when that thread parses too, it resets the counter, and one of
the two fails with ``SystemError: AST constructor recursion depth mismatch``. Threads here
that parse: the engine's evaluation (code actions, envelopes), the judge's prompt compaction,
and Python's own ``traceback``, which parses each source line it formats (any thread logging
an exception). So a parse here runs with the collector paused: nothing can interrupt it, and
whatever parse it interrupted, not this one, finds its counter changed. One at a time as well
(a lock), so the collector's state is restored by the thread that paused it. The pause is
bounded as the text is (callers bound its length first).

- ``parse``: ``ast.parse``;
- ``literal``: ``ast.literal_eval`` of a string (literals only, never ``eval``).

Both raise what the ``ast`` functions raise (``SyntaxError``, ``ValueError``,
``RecursionError``, ``MemoryError``, ...); callers bound the text's length first.
"""

from __future__ import annotations

import ast
import gc
import threading
from typing import Any

__all__ = ["literal", "parse"]

_LOCK = threading.Lock()


def parse(code: str) -> ast.Module:
    """``ast.parse(code)`` with the collector paused (see above)."""
    return _parse(code, "exec")  # type: ignore[return-value]


def literal(text: str) -> Any:
    """``ast.literal_eval(text)``: its parse with the collector paused (the evaluation of the
    tree's literal nodes makes no tree)."""
    return ast.literal_eval(_parse(text.lstrip(" \t"), "eval"))


def _parse(text: str, mode: str) -> ast.AST:
    with _LOCK:
        collecting = gc.isenabled()
        gc.disable()
        try:
            return ast.parse(text, mode=mode)
        finally:
            if collecting:
                gc.enable()
