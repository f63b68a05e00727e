"""The recording machine's paths out of recordings: what ``record.py`` writes and what
``test_harness.py`` checks every committed recording against.

Stack traces in exception events (Python tracebacks, Node ``at ... (file:///...)`` frames)
carry the absolute paths of the machine that recorded them: its home dir, its venvs, its
checkout. ``scrub(text)`` rewrites them in the JSON text of a recording, in this order:

- ``<prefix>/tests/conformance/...``                -> ``<repo>/tests/conformance/...``
- ``<prefix>/node_modules/...`` (the first one)      -> ``<venv>/node_modules/...``
- ``<prefix>/lib/pythonX.Y/{site,dist}-packages/...`` -> ``<venv>/lib/pythonX.Y/...``
- ``<prefix>/lib/pythonX.Y/...`` (the standard library) -> ``<python>/lib/pythonX.Y/...``
- ``<prefix>/otel-eval-conformance/<stack>/...`` (a stack's env dir) -> ``<venv>/...``
- any other absolute path under a machine root (``/root``, ``/home``, ``/tmp``, ...)
  -> ``<path>/<its last component>``

A path starts at a ``/`` that begins a token (after a quote, a space, ``(``, ``\\n`` or
``file://``), so URL paths (``http://127.0.0.1:8000/v1/messages``) and the placeholders
themselves are left alone: ``scrub`` is idempotent, which is what the test asserts.
"""

from __future__ import annotations

import re

# One path component as it appears inside JSON text (no quote, backslash, separator).
_SEG = r"[^\s\"'\\/<>:()|*?]+"
# Where an absolute path may begin: after file://, after a JSON-escaped newline or tab, or
# after any character that cannot continue a word, a URL or a placeholder.
_START = r"(?:(?<=file://)|(?<=\\n)|(?<=\\t)|(?<![\w.<>/:~@+-]))"
_PREFIX = rf"{_START}(?:/{_SEG})+?"
MACHINE_ROOTS = ("root", "home", "Users", "tmp", "var", "private", "work", "opt", "srv",
                 "mnt", "usr", "nix", "run", "data", "builds", "github", "__w")
_RULES = (
    (re.compile(rf"{_PREFIX}/tests/conformance/"), "<repo>/tests/conformance/"),
    (re.compile(rf"{_PREFIX}/node_modules/"), "<venv>/node_modules/"),
    (re.compile(rf"{_PREFIX}/lib/(python\d+\.\d+)/((?:site|dist)-packages)/"),
     r"<venv>/lib/\1/\2/"),
    (re.compile(rf"{_PREFIX}/lib/(python\d+\.\d+)/"), r"<python>/lib/\1/"),
    (re.compile(rf"{_PREFIX}/otel-eval-conformance/{_SEG}/"), "<venv>/"),
    (re.compile(rf"{_START}/(?:{'|'.join(MACHINE_ROOTS)})(?:/{_SEG})*/({_SEG})"),
     r"<path>/\1"),
)
# What no committed recording may contain: an absolute path under a machine root.
LEAK = re.compile(rf"{_START}/(?:{'|'.join(MACHINE_ROOTS)})/")


def scrub(text: str) -> str:
    """``text`` with every absolute path of the recording machine replaced (see above)."""
    for pattern, placeholder in _RULES:
        text = pattern.sub(placeholder, text)
    return text
