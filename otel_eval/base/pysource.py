"""Python source parsed with ``ast``, safely from any thread (the bottom layer).

CPython 3.11 before 3.11.8 keeps the AST constructor's recursion counter in the interpreter's
``ast`` state, and a garbage collection inside the constructor can hand the GIL to another
thread: two threads building trees at once then fail with ``SystemError: AST constructor
recursion depth mismatch`` (python/cpython#106905, fixed by #113035). The engine's evaluation
(code actions, envelopes), the judge's prompt compaction and the tests that read the
package's sources parse in different threads, so every parse of a string in the package goes
through here, one at a time (a parse holds the GIL anyway: nothing runs in parallel that
could have).

- ``parse``: ``ast.parse``;
- ``literal``: ``ast.literal_eval`` of a string (literals only, never ``eval``).

Both raise what the ``ast`` functions raise (``SyntaxError``, ``ValueError``,
``RecursionError``, ``MemoryError``, ...); callers bound the text's length first.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

__all__ = ["literal", "parse"]

_LOCK = threading.Lock()


def parse(code: str) -> ast.Module:
    """``ast.parse(code)``, one thread at a time in the process."""
    with _LOCK:
        return ast.parse(code)


def literal(text: str) -> Any:
    """``ast.literal_eval(text)``, its parse one thread at a time (the evaluation of the
    tree's literal nodes needs no lock)."""
    with _LOCK:
        tree = ast.parse(text.lstrip(" \t"), mode="eval")
    return ast.literal_eval(tree)
