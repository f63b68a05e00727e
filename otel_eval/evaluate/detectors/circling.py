"""Loop rule (g), circling (stage: evaluate): steps of one agent that bring back what it has
already seen while its actions change only in form (a CodeAgent printing the same directory
tree with slightly different code, a shell agent grepping for a name that is not there in
three spellings).

Two action steps (code or shell: ``loop.action_tools``; a tool's reworded arguments are rule
(f)) of the same agent run (``Call.agent``: a sub-agent's steps within one invocation of it)
are *linked* when

- their actions differ only in form: not identical (identical actions are rules (a)-(c)),
  but their normalised texts (code or command, lowercased, whitespace collapsed) have a
  character-3-gram Jaccard of at least ``circling_action_similarity``, or they invoke the
  same program (shell: the same first word of every command; Python: the same called
  names, read from the block's call nodes by ``trajectory.code_parse.called_names``:
  unknown when the block does not parse); and
- the later observation adds (almost) nothing new: it is the same error / "not found" class
  as the earlier one, or, past the framing both share (common prefix and suffix), at least
  ``circling_observation_overlap`` of its 3-grams were in the earlier observation. An
  observation not recorded is unknown, never "nothing new";
- neither is, and no call between them was, a state change (as for (b) and (f): a shell
  command that is not read-only, a tool not read-only by name; calls cut from an output
  between them, ``Call.cut_after``, are unknown, so may have been one); Python code actions
  do not count as one (whether a block writes is unknown, and a code agent's circle is made
  of them).

Each step is compared with the previous ``circling_window`` steps of its agent, over at most
``MAX_TEXT_CHARS`` characters of each text: work is linear in the number of steps. Linked
steps form groups; a group of ``circling_min_steps`` or more is a ``loop/circling`` finding
whose ``span_ids`` are its first and last step (where the circle starts and where it was
still going), unless rules (a)-(c), (f) already flagged every step of it (the same loop).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from otel_eval.base.results import Finding
from otel_eval.evaluate.detectors.calls import Call, action_text
from otel_eval.evaluate.detectors.config import LoopConfig
from otel_eval.evaluate.detectors.reworded import middles, trigrams
from otel_eval.evaluate.trajectory.code_parse import called_names

__all__ = ["MAX_TEXT_CHARS", "circling", "error_class", "program"]

MAX_TEXT_CHARS = 2_000  # what an observation brings shows in its first page
# "nothing there" answers: the same one in other words is no progress
_NOT_FOUND = re.compile(
    r"no such file or directory|not found|no matches|does not exist|cannot find|"
    r"could not find|no results?\b|nameerror|modulenotfounderror|filenotfounderror|"
    r"keyerror|attributeerror|indexerror|permission denied|command not found|"
    r"is not defined", re.IGNORECASE)
_TAG = re.compile(r"<[^<>]{1,40}>")  # mini-swe-agent's <returncode> / <output> framing
_MIN_CONTENT = 20  # 3-grams past the framing for an answer to be more than "nothing"
_SEPARATORS = re.compile(r"&&|\|\||[;|\n]")


def _norm(text: str) -> str:
    return " ".join(text[:MAX_TEXT_CHARS].lower().split())


def error_class(observation: str) -> str | None:
    """The error / "not found" class of an observation (the first such phrase, lowercased),
    None for any other observation (a failed test run or a grep without matches is no
    class: an agent iterating on failing tests makes them fail again)."""
    found = _NOT_FOUND.search(observation[:MAX_TEXT_CHARS])
    return found.group(0).lower() if found is not None else None


def program(call: Call) -> str | None:
    """What an action invokes: for a shell command the first words of its commands, for
    Python code its called names (sorted, distinct), None when neither shows."""
    text = action_text(call.step) if call.action else None
    if text is None:
        return None
    name = (call.step.tool_name or call.step.name).lower()
    if "python" in name or "code" in name:
        called = called_names(text)  # call nodes: a "search(" in a string is no call
        return "py:" + ",".join(sorted(called)) if called else None
    heads = [part.split(None, 1)[0] for part in _SEPARATORS.split(text[:MAX_TEXT_CHARS])
             if part.strip()]
    return "sh:" + " ".join(heads) if heads else None


class _Step:
    """One action step's normalised texts, computed once."""

    __slots__ = ("action", "error", "grams", "observation", "program")

    def __init__(self, call: Call) -> None:
        text = action_text(call.step) if call.action else None
        self.action = _norm(text or "")
        self.grams = trigrams(self.action)
        result = call.step.result
        self.observation = _norm(result) if result is not None else None
        self.program = program(call)
        self.error = error_class(result) if result is not None else None


def _alike(a: _Step, b: _Step, cfg: LoopConfig) -> bool:
    if a.program is not None and a.program == b.program:
        return True
    if not a.grams or not b.grams:
        return False
    common = len(a.grams & b.grams)
    return common / (len(a.grams) + len(b.grams) - common) >= cfg.circling_action_similarity


def _nothing_new(earlier: _Step, later: _Step, cfg: LoopConfig) -> bool:
    if later.error is not None:
        return later.error == earlier.error
    if later.observation is None or earlier.observation is None:
        return False  # unknown, not "nothing"
    old, new = middles(earlier.observation, later.observation)
    grams = trigrams(new)
    if not grams:
        # nothing but the framing: the same text again when there is text past the framing
        # of an empty answer; an empty answer to a changed question is a search that found
        # nothing, which exploring does (the "not found" classes above are the circle)
        return len(trigrams(_TAG.sub(" ", later.observation))) > _MIN_CONTENT and new in old
    return len(grams & trigrams(old)) >= cfg.circling_observation_overlap * len(grams)


def _python(call: Call) -> bool:
    """A code action in Python (whether it writes is unknown: it may only print)."""
    name = (call.step.tool_name or call.step.name).lower()
    return call.action and ("python" in name or "code" in name)


def _find(parent: list[int], i: int) -> int:
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def circling(cs: Sequence[Call], cfg: LoopConfig, covered: set[int]) -> list[Finding]:
    """(g) Groups of ``circling_min_steps``+ linked steps (see the module docstring);
    ``covered``: step indexes other loop rules flagged."""
    info: dict[int, _Step] = {}
    # agent run (``Call.agent``: a sub-agent's invocation) -> its last ``circling_window`` steps
    recent: dict[tuple[str | None, str | None, str | None], list[int]] = {}
    parent = list(range(len(cs)))
    linked: set[int] = set()
    writes, cuts = [0], [0]  # among the first k calls: state-changing ones, cut outputs' ends
    for call in cs:
        writes.append(writes[-1] + (not call.read_only and not _python(call)))
        cuts.append(cuts[-1] + call.cut_after)
    for i, call in enumerate(cs):
        if call.step.arguments is None or not call.action:
            continue  # not recorded: unknown; a tool's reworded arguments are rule (f)
        if not call.read_only and not _python(call):
            continue  # a command that writes or runs something changes state: progress
        info[i] = here = _Step(call)
        earlier = recent.setdefault(call.agent, [])
        for j in reversed(earlier):
            if writes[i] != writes[j + 1] or cuts[i] != cuts[j]:
                continue  # a tool changed state between: the question may rightly be asked
                # again; calls cut from an output between (``Call.cut_after``): unknown, maybe one
            if cs[j].key != call.key and _alike(info[j], here, cfg) and _nothing_new(
                    info[j], here, cfg):
                parent[_find(parent, i)] = _find(parent, j)
                linked.update((i, j))
        earlier.append(i)
        if len(earlier) > cfg.circling_window:
            del earlier[0]
    groups: dict[int, list[int]] = {}
    for i in sorted(linked):
        groups.setdefault(_find(parent, i), []).append(i)
    out = []
    for members in groups.values():
        if len(members) < cfg.circling_min_steps:
            continue
        group = [cs[i] for i in members]
        if covered.issuperset(c.step.index for c in group):
            continue  # the same loop, already reported by (a)-(c) or (f)
        out.append(_finding(group, [info[i] for i in members], cfg))
    return out


def _finding(group: list[Call], steps: list[_Step], cfg: LoopConfig) -> Finding:
    first, last = group[0], group[-1]
    tools = sorted({c.step.tool_name or c.step.name for c in group})
    errors = {s.error for s in steps}
    why = (f"the same {next(iter(errors))!r} each time" if len(errors) == 1 and None not in errors
           else "observations that add nothing new")
    return Finding(
        "loop", "circling", cfg.circling_severity,
        f"{len(group)} steps ({', '.join(tools)}) with actions differing only in form and "
        f"{why}", span_ids=list(dict.fromkeys([first.step.span_id, last.step.span_id])),
        step_indexes=[c.step.index for c in group],
        attributes={"count": len(group), "tools": tools,
                    "first_step": first.step.index, "last_step": last.step.index,
                    "observation_overlap": cfg.circling_observation_overlap,
                    "action_similarity": cfg.circling_action_similarity,
                    "actions": [s.action[:200] for s in steps[:5]]})
