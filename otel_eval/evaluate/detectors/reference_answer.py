"""A reference's expected final answer against the run's (stage: evaluate; the reference
detector's second half, ``reference.detect`` calls it).

A reference may carry ``expected_output`` (the name Langfuse's dataset items and most
golden-set tools give it), a text or a number, compared with the run's answer
(``Trajectory.answer``: the last reply's text) by ``output_match``:

    exact     equal after folding both: Unicode NFC (canonical caseless: NFC of the case fold
              of the NFD), case, whitespace collapsed and trimmed
    contains  the folded expected text is in the folded answer
    numeric   the answer's last number (``1,234`` and ``-2.5e3`` read as numbers; digits of
              any script, with the Arabic thousands and decimal separators U+066C and U+066B,
              or full-width ones, and the minus sign U+2212; a sign right after a letter or
              digit is none: ``GPT-4`` is 4) is within
              ``output_tolerance`` (absolute, default 0) of the expected number

Every step is linear in the answer (folding, one regular expression without nested
repetition, ``str.__contains__``), so a long answer costs its length, never more.

An answer whose number is not read is no mismatch either (``numeric``): one holding no
number read but numerals of another kind (CJK: a count written in Chinese characters; Roman
numerals) is ``answer_unknown``, as one with no number at all is a mismatch; so is one whose
numbers read do not match when it holds such numerals as well (答案是四十二 共3步: its last
number read is the count of steps, the answer is the forty-two).

An answer that is not known whole is no mismatch: none recorded, the text of a JSON object
or array that never closes (``values.cut_json``, cut at an attribute length limit) or as long
as the configured ``answer_length_limit`` (the SDK's ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``:
the rest may be past the cut); nor is the last reply of a run that did not end (a
``non_termination`` finding of ``NOT_ENDED_KINDS``, or the note ``evaluation/run_cut`` of a
run otel-eval cut while it went on: a stop is not a verdict). Findings:
``reference/answer_match`` (info), ``reference/answer_mismatch`` (the reference severity)
and ``reference/answer_unknown`` (info).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

from otel_eval.base.results import NOT_ENDED_KINDS, Finding
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.conventions.values import cut_json
from otel_eval.evaluate.detectors.calls import Reference
from otel_eval.evaluate.detectors.config import ReferenceConfig

# a number: digits (of any script: \d is Unicode's, as float() reads them) with optional
# thousands commas, a fraction, an exponent; the Arabic thousands and decimal separators
# (U+066C, U+066B), the full-width comma, full stop and hyphen-minus and the minus sign
# (U+2212) as "," "." "-"; no nested repetition (each position starts at most one short
# attempt). A leading sign only where no letter or digit comes right before it: the hyphen
# of "GPT-4", "COVID-19" or "3-2" joins, it signs nothing
_MINUS = "[-+\u2212\uff0d]?"
_SIGN = "(?:(?<![^\\W_])[-+\u2212\uff0d])?"
_NUMBER = re.compile(
    rf"{_SIGN}(?:\d{{1,3}}(?:[,\u066c\uff0c]\d{{3}})+|\d+)(?:[.\u066b\uff0e]\d+)?"
    rf"(?:[eE]{_MINUS}\d+)?|{_SIGN}[.\u066b\uff0e]\d+(?:[eE]{_MINUS}\d+)?")
# a number's text as float() reads it
_AS_FLOAT = str.maketrans({",": None, "\u066c": None, "\uff0c": None, "\u066b": ".",
                           "\uff0e": ".", "\u2212": "-", "\uff0d": "-"})
_SHOWN = 80  # characters of the expected answer a message shows


def fold(text: str) -> str:
    """Text as answers are compared: canonical caseless (NFC of the case fold of the NFD),
    whitespace collapsed and trimmed."""
    return " ".join(unicodedata.normalize(
        "NFC", unicodedata.normalize("NFD", text).casefold()).split())


def number(text: str, *, whole: bool = False) -> float | None:
    """The last number in ``text`` (``whole``: the text is one number), None without one."""
    if whole:
        m = _NUMBER.fullmatch(text.strip())
        found = m.group() if m else None
    else:
        found = None
        for m in _NUMBER.finditer(text):
            found = m.group()
    if found is None:
        return None
    try:
        value = float(found.translate(_AS_FLOAT))
    except ValueError:  # pragma: no cover - the pattern reads only what float() reads
        return None
    return value if math.isfinite(value) else None


def expected_number(value: Any) -> float | None:
    """A reference's expected answer as a number (a JSON number, or a text that is one)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    return number(value, whole=True) if isinstance(value, str) else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def matches(expected: Any, answer: str, mode: str, tolerance: float) -> bool:
    if mode == "numeric":
        want, got = expected_number(expected), number(answer)
        return want is not None and got is not None and abs(got - want) <= tolerance
    if mode == "contains":
        return fold(_text(expected)) in fold(answer)
    return fold(_text(expected)) == fold(answer)


def known(answer: str | None, limit: int) -> bool:
    """Whether the run's answer is known whole (see the module docstring)."""
    return answer is not None and not cut_json(answer) and not (limit and len(answer) >= limit)


def _unknown(answer: str | None, cfg: ReferenceConfig, findings: Sequence[Finding],
             mode: str) -> str | None:
    """Why the run's answer is not compared (None: it is)."""
    if answer is None:
        return "no answer recorded"
    if not _ended(findings):
        return "the run did not end"
    if not known(answer, cfg.answer_length_limit):
        return "the answer is cut"
    if mode == "numeric" and unread_numerals(answer):
        return "its number is written in numerals not read"
    return None


# numerals Unicode gives no numeric value: Chinese two (liang), in its two forms
_NUMERALS = frozenset("\u4e24\u5169")


def unread_numerals(answer: str) -> bool:
    """Whether ``answer`` holds no number read (``number``) but numerals of another kind
    (Chinese and Japanese ones, Roman numerals): its number is not known, not absent."""
    return number(answer) is None and numerals_not_read(answer)


def numerals_not_read(answer: str) -> bool:
    """Whether ``answer`` holds numerals ``number`` does not read (Chinese and Japanese ones,
    Roman numerals). Beside a number read that does not match (答案是四十二 共3步: the 3
    is the steps'), the answer's own may be one of them: unknown, never a mismatch."""
    return any(c in _NUMERALS or (unicodedata.category(c) in ("Lo", "Nl")
                                  and unicodedata.numeric(c, None) is not None)
               for c in answer)


def _ended(findings: Sequence[Finding]) -> bool:
    """Whether the run ended, as far as the detectors before know (``non_termination``'s
    ``NOT_ENDED_KINDS``, or cut by otel-eval while it went on: ``evaluation/run_cut``): a run
    that did not end gave no final answer, only a last reply."""
    return not any((f.detector == "non_termination" and f.kind in NOT_ENDED_KINDS)
                   or (f.detector, f.kind) == ("evaluation", "run_cut") for f in findings)


def detect_answer(trajectory: Trajectory, ref: Reference, cfg: ReferenceConfig,
                  findings: Sequence[Finding] = ()) -> list[Finding]:
    if ref.expected_output is None:
        return []
    mode = ref.output_match or cfg.output_match
    tolerance = ref.output_tolerance or 0.0
    expected = _text(ref.expected_output)
    shown = expected[:_SHOWN] + ("..." if len(expected) > _SHOWN else "")
    attrs: dict[str, Any] = {"task_id": ref.task_id, "output_match": mode,
                             "expected_output": expected[:1024]}
    if mode == "numeric":
        attrs["output_tolerance"] = tolerance
    answer = trajectory.answer
    why = _unknown(answer, cfg, findings, mode)
    if why is not None or answer is None:
        return [Finding("reference", "answer_unknown", "info",
                        f"answer not compared with the reference for task {ref.task_id} "
                        f"({why})", attributes=attrs)]
    if matches(ref.expected_output, answer, mode, tolerance):
        return [Finding("reference", "answer_match", "info",
                        f"answer matches the reference for task {ref.task_id} ({mode})",
                        attributes=attrs)]
    if mode == "numeric" and numerals_not_read(answer):  # its number may be one of those
        return [Finding("reference", "answer_unknown", "info",
                        f"answer not compared with the reference for task {ref.task_id} "
                        "(it holds numerals not read besides the numbers read)",
                        attributes=attrs)]
    root = trajectory.root_step
    return [Finding("reference", "answer_mismatch", cfg.severity,
                    f"answer does not match the reference for task {ref.task_id} ({mode}): "
                    f"expected {shown!r}",
                    [root.span_id] if root is not None else [],
                    [root.index] if root is not None else [], attrs)]
