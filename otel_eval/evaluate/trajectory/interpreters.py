"""Stage: trajectory (part). Which tools run the Python code they are given.

A function-calling agent may act through code too: it calls a ``python_interpreter``,
``execute_code`` or ``run_python`` tool with a block, and that block calls the agent's other
tools. ``interpreter_code`` says whether a tool step is such a call, and returns its code, from
signals the trace declares, never from what the code looks like:

- the tool's *name*, split into words (``execute_python_code``, ``PythonREPL``,
  ``CodeInterpreterTool``): a language word (``python``, ``py``, ``code``, ``ipython``,
  ``jupyter``) and an executing word (``interpreter``, ``repl``, ``execute``, ``exec``, ``run``,
  ``eval``, ``executor``, ``runner``, ``sandbox``), or a name that is one such word alone
  (``python``, ``ipython``); ``search_code`` or ``format_code`` is not one;
- or the *offered schema*: an executing word in the name and exactly one declared parameter,
  named as code is (``code``, ``python_code``, ``source_code``);
- the code is the argument the schema declares when it declares one string parameter, else
  the first of ``code``, ``python_code``, ``source_code``, ``source``, ``script``, ``program``,
  ``cell`` that is a string, or the arguments when they are a bare string.

A shell tool's ``command`` is not read here: a shell command runs programs, never the agent's
tools (``trajectory.shell`` reads it as commands, for whether it writes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

__all__ = ["MAX_TOOL_NAME", "interpreter_code", "is_interpreter"]

_LANGUAGE = frozenset({"python", "py", "python3", "code", "ipython", "jupyter"})
_EXECUTING = frozenset({"interpreter", "repl", "execute", "exec", "run", "eval", "executor",
                        "runner", "sandbox"})
_ALONE = frozenset({"python", "python3", "ipython", "py"})
_CODE_PARAMETERS = ("code", "python_code", "source_code")
_CODE_KEYS = (*_CODE_PARAMETERS, "source", "script", "program", "cell")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")  # PythonREPL -> Python, REPL
MAX_TOOL_NAME = 200  # a tool name is short; a longer one is read (and shown) up to here


@lru_cache(maxsize=1024)
def _words(name: str) -> frozenset[str]:
    """The words of a name already cut to ``MAX_TOOL_NAME`` (the cache keeps its key: a
    whole name of span content, 1,024 times over, would outlive its trace)."""
    return frozenset(w.lower() for w in _WORD.findall(name))


def _declared(schema: Any) -> list[str] | None:
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    return [str(k) for k in props] if isinstance(props, Mapping) else None


def is_interpreter(name: str, schema: Any = None) -> bool:
    """Whether a tool of this name (and offered schema) runs the Python code it is given."""
    words = _words(name[:MAX_TOOL_NAME])
    if name.lower() in _ALONE or (words & _LANGUAGE and words & _EXECUTING):
        return True
    if not words & _EXECUTING:
        return False  # the schema is read only for a tool whose name executes
    params = _declared(schema)
    return params is not None and len(params) == 1 and params[0].lower() in _CODE_PARAMETERS


def interpreter_code(name: str, arguments: Any, schema: Any = None) -> str | None:
    """The code an interpreter-like tool was given (see the module docstring), None when the
    tool is not one or its code is not a string."""
    if not is_interpreter(name, schema):
        return None
    if isinstance(arguments, str):
        return arguments
    if not isinstance(arguments, Mapping):
        return None
    params = _declared(schema)
    if params is not None and len(params) == 1 and isinstance(arguments.get(params[0]), str):
        return str(arguments[params[0]])
    for key in _CODE_KEYS:
        if isinstance(arguments.get(key), str):
            return str(arguments[key])
    return None
