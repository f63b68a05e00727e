"""Loop rule (f), reworded repeats (stage: evaluate): the same request, reworded, that brings
nothing new (four searches for the same video id in different words, each with the same
empty answer).

Two calls of the same tool are *reworded repeats* when their normalized argument texts are
alike (character-3-gram Jaccard >= ``reworded_similarity``) but not identical (identical calls
are rules (a) and (b)), only read-only calls came between them (as in (b): after a state
change the same request may rightly be asked again; calls cut from an output between them,
``Call.cut_after``, are unknown, not read-only), and the later call brought nothing new:
it failed, or, once the
framing both results share (common prefix and suffix: an exit status, an address line) is
set aside, at least ``reworded_result_overlap`` of its result's 3-grams were in the earlier
result. Actions (a shell command, a code block) are left to rules (a)-(c): the likeness of
two command lines is mostly their shared paths and flags (``grep "class A" f.py`` and
``grep "class B" f.py`` ask different things), while a tool's text arguments are the request
itself in words (a query, a task, a question).
Calls linked by such pairs form groups; a group of ``reworded_min_calls`` or more is a
finding on those calls. Work is linear in the number of calls: each is compared with the
previous ``reworded_window`` calls of its tool, over at most ``MAX_ARGUMENT_CHARS`` /
``MAX_RESULT_CHARS`` characters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from otel_eval.base.results import Finding
from otel_eval.base.words import word_count
from otel_eval.evaluate.conventions.values import cut_json
from otel_eval.evaluate.detectors.calls import Call, call_label
from otel_eval.evaluate.detectors.config import LoopConfig

__all__ = ["MAX_ARGUMENT_CHARS", "MAX_RESULT_CHARS", "jaccard", "request", "reworded_repeats",
           "trigrams"]

MAX_ARGUMENT_CHARS = 500  # a rewording shows in the first sentences of a request
MAX_RESULT_CHARS = 2_000  # what a result brings shows in its first page
MAX_VALUES = 64  # argument values read per call
# the key of a JSON / Python dict entry: left out of results, as keys are of arguments
_KEY = re.compile(r"[\"'][^\"'\\\n]{1,64}[\"']\s*:")


def request(arguments: Any) -> tuple[tuple[str, ...], str]:
    """(identifiers, text) of a call's arguments, keys left out (every call of a tool has
    the same ones): scalar values of one or two words (ids, codes, dates, numbers, file
    names, enum values; ``word_count``: in Chinese or Japanese, up to four characters) are
    identifiers, compared exactly (a changed one is a different
    request); longer values (a query, a question, a task) are joined, lowercased and
    whitespace-collapsed, as the text that may be reworded. At most ``MAX_VALUES`` values
    and ``MAX_ARGUMENT_CHARS`` characters of text (identifiers are read past a long text:
    ``_read``)."""
    ids, text, _ = _read(arguments)
    return ids, text


def _read(arguments: Any) -> tuple[tuple[str, ...], str, bool]:
    """``request``'s (identifiers, text), and whether every value was read: the walk ends
    at ``MAX_VALUES`` values, and the text at ``MAX_ARGUMENT_CHARS`` characters, but the
    identifiers after a long text are still read (a long query and the page it asks for:
    the next page is another request). Values left unread are unknown: such a call's
    identifiers are known only in part."""
    ids: list[str] = []
    words: list[str] = []
    size, values, stack = 0, 0, [arguments]
    while stack and values < MAX_VALUES:
        item = stack.pop()
        if isinstance(item, Mapping):
            stack.extend(item[k] for k in sorted(item, key=str, reverse=True))
        elif isinstance(item, list | tuple):
            stack.extend(reversed(item))
        elif item is not None:
            values += 1
            value = " ".join(str(item)[:MAX_ARGUMENT_CHARS * 2].lower().split())
            if word_count(value) < 3:
                ids.append(value)
            elif size < MAX_ARGUMENT_CHARS:  # past it: a rewording shows in what came first
                words.append(value)
                size += len(value) + 1
    return tuple(ids), " ".join(words)[:MAX_ARGUMENT_CHARS], not stack


def trigrams(text: str) -> frozenset[str]:
    """The text's 3-character substrings, made in C calls (``zip`` of three shifted copies;
    a generator's step a trigram was a Python call each: tests/cost)."""
    return frozenset(map("".join, zip(text, text[1:], text[2:], strict=False)))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    common = len(a & b)
    return common / (len(a) + len(b) - common)


class _Texts:
    """Identifiers and 3-gram sets of the argument text, computed once per call."""

    def __init__(self, cs: Sequence[Call]) -> None:
        self.cs = cs
        self.args: dict[int, tuple[tuple[str, ...], frozenset[str]] | None] = {}

    def argument(self, i: int) -> tuple[tuple[str, ...], frozenset[str]] | None:
        """None when the call's values were not all read (``_read``): unknown."""
        if i not in self.args:
            ids, text, whole = _read(self.cs[i].step.arguments)
            self.args[i] = (ids, trigrams(text)) if whole else None
        return self.args[i]

    def reworded(self, j: int, i: int, threshold: float) -> bool:
        earlier, later = self.argument(j), self.argument(i)
        if earlier is None or later is None:
            return False  # identifiers known only in part: unknown, not the same request
        return earlier[0] == later[0] and jaccard(earlier[1], later[1]) >= threshold


def middles(a: str, b: str) -> tuple[str, str]:
    """``a`` and ``b`` without their common prefix and suffix (the framing a tool puts around
    every result: an exit status, an address line, a closing tag)."""
    n = min(len(a), len(b))
    start = 0
    while start < n and a[start] == b[start]:
        start += 1
    end = 0
    while end < n - start and a[-1 - end] == b[-1 - end]:
        end += 1
    return a[start:len(a) - end], b[start:len(b) - end]


def _result_text(result: str) -> str:
    return " ".join(_KEY.sub(" ", result[:MAX_RESULT_CHARS]).lower().split())


def _nothing_new(texts: _Texts, earlier: int, later: int, cfg: LoopConfig) -> bool:
    call = texts.cs[later]
    if call.failed:
        return True
    result = call.step.result
    if result is None:
        return False  # not recorded: unknown, not "nothing"
    old_text = texts.cs[earlier].step.result or ""
    if cut_json(result) or cut_json(old_text):
        return False  # cut at a length limit: what it brought past the cut is unknown
    old, new = middles(_result_text(old_text), _result_text(result))
    grams = trigrams(new)
    if not grams:  # nothing but the framing left, or a few characters
        return new in old
    return len(grams & trigrams(old)) >= cfg.reworded_result_overlap * len(grams)


def _find(parent: list[int], i: int) -> int:
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def reworded_repeats(cs: Sequence[Call], cfg: LoopConfig) -> list[Finding]:
    """(f) Groups of ``reworded_min_calls``+ calls linked by reworded repeats that brought
    nothing new (see module docstring)."""
    texts = _Texts(cs)
    writes, cuts = [0], [0]  # among the first k calls: state-changing ones, cut outputs' ends
    for call in cs:
        writes.append(writes[-1] + (not call.read_only))
        cuts.append(cuts[-1] + call.cut_after)
    recent: dict[str, list[int]] = {}  # tool -> its last ``reworded_window`` call positions
    parent = list(range(len(cs)))
    linked: set[int] = set()
    for i, call in enumerate(cs):
        tool = call.step.tool_name or call.step.name
        earlier = recent.setdefault(tool, [])
        if call.step.arguments is not None and not call.action \
                and not (isinstance(call.step.arguments, str)  # known only in part: not
                         and cut_json(call.step.arguments)):  # compared
            for j in reversed(earlier):
                if cs[j].key == call.key or writes[i] != writes[j + 1] or cuts[i] != cuts[j]:
                    continue  # identical: rules (a)/(b); a state change between: progress;
                    # calls cut from an output between (``Call.cut_after``): unknown, maybe one
                if (texts.reworded(j, i, cfg.reworded_similarity)
                        and _nothing_new(texts, j, i, cfg)):
                    parent[_find(parent, i)] = _find(parent, j)
                    linked.update((i, j))
            earlier.append(i)
            if len(earlier) > cfg.reworded_window:
                del earlier[0]
    groups: dict[int, list[int]] = {}
    for i in sorted(linked):
        groups.setdefault(_find(parent, i), []).append(i)
    return [_finding([cs[i] for i in members], cfg) for members in groups.values()
            if len(members) >= cfg.reworded_min_calls]


def _finding(group: list[Call], cfg: LoopConfig) -> Finding:
    first = group[0]
    return Finding(
        "loop", "reworded_repeat", cfg.severity,
        f"{call_label(first)} called {len(group)} times with reworded arguments and "
        f"nothing new in the results", span_ids=[c.step.span_id for c in group],
        step_indexes=[c.step.index for c in group],
        attributes={"tool": first.step.tool_name or first.step.name, "count": len(group),
                    "similarity": cfg.reworded_similarity,
                    "arguments": [request(c.step.arguments)[1][:200] for c in group[:5]]})
