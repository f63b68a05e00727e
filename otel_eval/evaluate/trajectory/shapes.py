"""Stage: trajectory (part). Tool results and LLM outputs in a shape no reader understands.

A tool's result and an LLM's output are text or JSON, whatever the convention. Some spans
carry instead what a framework printed of an object it did not serialise: a Python object's
repr (``<generator object get_weather at 0x7f...>``, ``CallToolResult(content=[...],
isError=False)``), the fields of a printed model (``content='...' tool_call_id='call_1'``),
a LangChain serialized object (``{"lc": 1, "type": "constructor", ...}``). No reader unwraps
these, and comparing two of them compares the printing (an address CPython reuses, the
boilerplate around a short content), not what the tool returned or the model said.

``unrecognised`` says why a value is such a shape (None when it is not). ``settle_values``
makes every such result or output *unknown*, as ``trajectory.arguments`` does for arguments:
``Step.result`` / ``Step.output_text`` None, ``Step.unknown`` says why, counted in
``Trajectory.unrecorded["unparsed"]``. The rules that compare results or outputs (no progress,
reworded repeats, circling, stagnation) and the error test on results then draw no conclusion
from them. The raw value stays in ``Step.unknown``'s reason only as its shape, never compared.

An LLM step's token counts recorded as 0 input tokens are unknown too (``_NO_COUNT``).

Every test is linear in the value and reads at most ``MAX_SCAN_CHARS`` of it (never ``eval``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from otel_eval.base.steps import Step

__all__ = ["MAX_SCAN_CHARS", "settle_values", "unrecognised"]

MAX_SCAN_CHARS = 200  # the head that says what a value is
# ``Name(field=`` or ``Name()``, ``module.Name(...``: a dataclass / pydantic / namedtuple repr
# (a class's name is capitalised; ``final_answer(answer=...)`` is a call, code, not a repr)
_CONSTRUCTOR = re.compile(r"((?:[a-z_]\w{0,40}\.){0,5}[A-Z]\w{0,99})\((?:\)|[A-Za-z_]\w{0,99}=)")
# ``field='...' other=...``: pydantic's str() of a model (LangChain messages print this way)
_FIELDS = re.compile(r"[A-Za-z_]\w{0,99}=(?:'|\"|None\b|True\b|False\b|\[|\{)")
_NEXT_FIELD = re.compile(r" [A-Za-z_]\w{0,99}=")
# ``<module.Name object at 0x7f...>`` alone, or a list of them: nothing else around it (a
# command's output that prints one among other lines is text)
_ADDRESS = r"<[^<>\n]{1,300} at 0x[0-9a-fA-F]{1,16}>"
_OBJECT = re.compile(rf"{_ADDRESS}|\[{_ADDRESS}(?:, {_ADDRESS}){{0,50}}\]")
_MAX_OBJECT_CHARS = 4_000  # the pattern backtracks inside an element: bounded input
_LC = re.compile(r'\{\s*"lc"\s*:\s*\d+\s*,\s*"type"\s*:\s*"(?:constructor|not_implemented)"')


# An LLM call reads at least one token: 0 input tokens is what an instrumentation records
# when the provider reported no usage (AutoGen's OpenInference spans of a stream without
# ``include_usage``), so the call's tokens (and its output's, when also 0) are unknown, not
# a count that prices the call at nothing.
_NO_COUNT = "0 recorded: no LLM call reads no token (the provider reported no usage)"


def unrecognised(value: str | None) -> str | None:
    """Why ``value`` (a tool's result, an LLM's output) is a shape no reader understands, or
    None (text, JSON, messages: what the readers read)."""
    if not value:
        return None
    text = value.strip()
    head = text[:MAX_SCAN_CHARS]
    if (len(text) <= _MAX_OBJECT_CHARS and text[:1] in ("<", "[") and " at 0x" in text
            and _OBJECT.fullmatch(text)):
        return "unparsed: a Python object repr"
    if text.endswith(")"):
        m = _CONSTRUCTOR.match(head)
        if m is not None:
            return f"unparsed: a Python repr of a {m.group(1)[:60]} object"
    if _FIELDS.match(head) and _NEXT_FIELD.search(head):
        return "unparsed: the fields of a printed object"
    if _LC.match(head):
        return "unparsed: a LangChain serialized object"
    return None


def settle_values(steps: Iterable[Step], outputs: bool = True) -> None:
    """Tool results (and LLM outputs, with ``outputs``) in an unrecognised shape become
    unknown. Outputs are settled only once the tool calls and code they hold were read."""
    for step in steps:
        if step.kind == "tool":
            why = unrecognised(step.result)
            if why is not None:
                step.result = None
                step.unknown["result"] = why
        elif step.kind == "llm" and outputs:
            why = unrecognised(step.output_text)
            if why is not None:
                step.output_text = None
                step.unknown["output_text"] = why
            if step.input_tokens == 0:  # a placeholder, not a count (``_NO_COUNT``)
                step.input_tokens = None
                step.unknown["input_tokens"] = _NO_COUNT
                if step.output_tokens == 0:
                    step.output_tokens = None
                    step.unknown["output_tokens"] = _NO_COUNT
