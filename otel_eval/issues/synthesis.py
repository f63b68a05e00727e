"""Issue stage, step 4c (optional): LLM synthesis of the issues, as Agentic CLEAR does.

When a judge model is configured, the issues of one (level, node) group, largest first and
at most ``IssuesConfig.synthesis_max_issues`` of them, are shown to it as numbered drafts
(a title and the most typical critiques); it answers which drafts describe the same kind of
problem, with a title and a description for each merged group:

    {"groups": [{"issues": [1, 4], "title": "...", "description": "..."}]}

Drafts not listed stay as they are. The reply is checked here (``check_reply``): numbers in
range, no draft in two groups, at least two drafts per group; the judge client asks once for
a repair and otherwise gives up. Whatever fails (no reply, malformed reply, an exception in
the synthesizer) leaves the clustering's issues unchanged, logged: synthesis only merges,
never drops a critique. The tracker asks only for a group that has a cluster matching no
stored issue (merges made earlier are kept by the catalogue), at most
``IssuesConfig.synthesis_max_calls`` times per run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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


# drafts -> the reply object ({"groups": [...]}) or None when there is none
Synthesizer = Callable[[Sequence[Draft]], "Mapping[str, Any] | None"]

REPLY_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["groups"],
    "properties": {"groups": {"type": "array", "maxItems": 100, "items": {
        "type": "object", "additionalProperties": False,
        "required": ["issues", "title", "description"],
        "properties": {
            "issues": {"type": "array", "minItems": 2, "maxItems": 100,
                       "items": {"type": "integer", "minimum": 1}},
            "title": {"type": "string", "minLength": 3, "maxLength": 80},
            "description": {"type": "string", "minLength": 3, "maxLength": 400}}}}},
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


def check_reply(n_drafts: int) -> Callable[[dict[str, Any]], str | None]:
    """The judge client's semantic check (error text for the repair prompt, or None)."""
    def check(reply: dict[str, Any]) -> str | None:
        try:
            merges_of(reply, n_drafts)
        except SynthesisError as e:
            return str(e)
        return None
    return check


def synthesize(drafts: Sequence[Draft], synthesizer: Synthesizer | None) -> list[Merge]:
    """The merges to apply to ``drafts`` ([] without a synthesizer, fewer than two drafts,
    or on any failure, which is logged)."""
    if synthesizer is None or len(drafts) < 2:
        return []
    try:
        reply = synthesizer(drafts)
        return [] if reply is None else merges_of(reply, len(drafts))
    except SynthesisError as e:
        log.warning("issue synthesis reply refused: %s", e)
    except Exception:  # a stage boundary: the synthesizer is someone else's model call
        log.warning("issue synthesis failed; clusters kept as they are", exc_info=True)
    return []
