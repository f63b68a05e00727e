"""Issue stage, step 4c (optional): LLM synthesis of the issues, as Agentic CLEAR does.

When a judge model is configured, the issues of one (level, node) group, largest first and
at most ``IssuesConfig.synthesis_max_issues`` of them, are shown to it as numbered drafts
(a title and the most typical critiques), with as many of the group's critiques that are in
no issue (its stragglers); it answers which drafts describe the same kind of problem, with a
title and a description for each merged group, and which issue each straggler belongs to:

    {"groups": [{"issues": [1, 4], "title": "...", "description": "..."}],
     "assign": [{"critique": 2, "issue": 3}]}

Drafts and stragglers not listed stay as they are. The reply is checked here
(``check_reply``): numbers in range, no draft in two groups, at least two drafts per group,
no straggler assigned twice; the judge client asks once for a repair and otherwise gives
up. Whatever fails (no reply, malformed reply, an exception in
the synthesizer) leaves the clustering's issues unchanged, logged: synthesis only merges,
never drops a critique. The tracker asks only for a group that has a cluster matching no
stored issue (merges made earlier are kept by the catalogue), at most
``IssuesConfig.synthesis_max_calls`` times per run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Draft:
    """One issue as the synthesizer sees it."""

    title: str
    examples: tuple[str, ...]  # most typical critiques first
    critiques: int


@dataclass(frozen=True, slots=True)
class Merge:
    """Drafts (0-based indexes, ascending) that are one issue, and its synthesized name."""

    drafts: tuple[int, ...]
    title: str
    description: str


@dataclass(frozen=True, slots=True)
class Plan:
    """What a valid reply asks for (0-based indexes)."""

    merges: tuple[Merge, ...] = ()
    assign: tuple[tuple[int, int], ...] = ()  # (straggler, draft)

    def __bool__(self) -> bool:
        return bool(self.merges or self.assign)


# (drafts, stragglers' texts) -> the reply object or None when there is none
Synthesizer = Callable[[Sequence[Draft], Sequence[str]], "Mapping[str, Any] | None"]

REPLY_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["groups"],
    "properties": {"groups": {"type": "array", "maxItems": 100, "items": {
        "type": "object", "additionalProperties": False,
        "required": ["issues", "title", "description"],
        "properties": {
            "issues": {"type": "array", "minItems": 2, "maxItems": 100,
                       "items": {"type": "integer", "minimum": 1}},
            "title": {"type": "string", "minLength": 3, "maxLength": 80},
            "description": {"type": "string", "minLength": 3, "maxLength": 400}}}},
        "assign": {"type": "array", "maxItems": 100, "items": {
            "type": "object", "additionalProperties": False, "required": ["critique", "issue"],
            "properties": {"critique": {"type": "integer", "minimum": 1},
                           "issue": {"type": "integer", "minimum": 1}}}}},
}


class SynthesisError(ValueError):
    """The reply does not describe merges of the drafts shown."""


def merges_of(reply: Mapping[str, Any], n_drafts: int) -> list[Merge]:
    """The merges a reply asks for (1-based numbers in the reply); SynthesisError if any
    group is malformed (the whole reply is then refused: a model that misnumbers one group
    may have misread the others)."""
    groups = reply.get("groups")
    if not isinstance(groups, list):
        raise SynthesisError("'groups' must be a list")
    used: set[int] = set()
    out: list[Merge] = []
    for k, group in enumerate(groups):
        if not isinstance(group, Mapping):
            raise SynthesisError(f"group {k + 1} is not an object")
        numbers, title = group.get("issues"), group.get("title")
        if not isinstance(numbers, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in numbers):
            raise SynthesisError(f"group {k + 1}: 'issues' must be a list of numbers")
        drafts = sorted({i - 1 for i in numbers})
        if len(drafts) < 2:
            raise SynthesisError(f"group {k + 1} names fewer than two issues")
        if drafts[0] < 0 or drafts[-1] >= n_drafts:
            raise SynthesisError(f"group {k + 1}: issues are numbered 1 to {n_drafts}")
        if used.intersection(drafts):
            raise SynthesisError(f"group {k + 1} repeats an issue of another group")
        if not isinstance(title, str) or not title.strip():
            raise SynthesisError(f"group {k + 1} has no title")
        description = group.get("description")
        used.update(drafts)
        out.append(Merge(tuple(drafts), " ".join(title.split()).rstrip("."),
                         " ".join(str(description or title).split())))
    return out


def _number(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def assignments_of(reply: Mapping[str, Any], n_drafts: int,
                   n_stragglers: int) -> list[tuple[int, int]]:
    """(straggler, draft) pairs of the reply's ``assign`` (absent: none); SynthesisError
    when one is malformed, out of range or a straggler is assigned twice."""
    items = reply.get("assign", [])
    if not isinstance(items, list):
        raise SynthesisError("'assign' must be a list")
    out: dict[int, int] = {}
    for k, item in enumerate(items):
        pair: list[Any] = ([item.get("critique"), item.get("issue")]
                           if isinstance(item, Mapping) else [])
        numbers = [v for v in pair if _number(v)]
        if len(numbers) != 2:
            raise SynthesisError(f"assignment {k + 1} needs numbers 'critique' and 'issue'")
        critique, issue = numbers
        if not 1 <= critique <= n_stragglers:
            raise SynthesisError(f"assignment {k + 1}: critiques are numbered 1 to "
                                 f"{n_stragglers}")
        if not 1 <= issue <= n_drafts:
            raise SynthesisError(f"assignment {k + 1}: issues are numbered 1 to {n_drafts}")
        if critique - 1 in out:
            raise SynthesisError(f"assignment {k + 1} assigns critique {critique} again")
        out[critique - 1] = issue - 1
    return sorted(out.items())


def plan_of(reply: Mapping[str, Any], n_drafts: int, n_stragglers: int) -> Plan:
    """The whole reply checked (SynthesisError on any fault)."""
    return Plan(tuple(merges_of(reply, n_drafts)),
                tuple(assignments_of(reply, n_drafts, n_stragglers)))


def check_reply(n_drafts: int, n_stragglers: int) -> Callable[[dict[str, Any]], str | None]:
    """The judge client's semantic check (error text for the repair prompt, or None)."""
    def check(reply: dict[str, Any]) -> str | None:
        try:
            plan_of(reply, n_drafts, n_stragglers)
        except SynthesisError as e:
            return str(e)
        return None
    return check


def synthesize(drafts: Sequence[Draft], stragglers: Sequence[str],
               synthesizer: Synthesizer | None) -> Plan:
    """What to apply to ``drafts`` and ``stragglers`` (nothing without a synthesizer, with
    nothing to merge or assign, or on any failure, which is logged)."""
    if synthesizer is None or not drafts or (len(drafts) < 2 and not stragglers):
        return Plan()
    try:
        reply = synthesizer(drafts, stragglers)
        return Plan() if reply is None else plan_of(reply, len(drafts), len(stragglers))
    except SynthesisError as e:
        log.warning("issue synthesis reply refused: %s", e)
    except Exception:  # a stage boundary: the synthesizer is someone else's model call
        log.warning("issue synthesis failed; clusters kept as they are", exc_info=True)
    return Plan()
