"""A stored run's cost read back (the bottom layer): whether its ``usage.cost_usd`` is the
whole cost or the known part of it.

A call whose cost is unknown (a model the price list lacks, one side's token count only, a
cache rate missing: ``Step.unknown``) is never summed into the run's ``usage.cost_usd``, which
is then a lower bound. The budget detector says so in its finding ("at least"); the views of
a stored run (the web view, ``show``) and a conversation's summed cost read it here, from the
v1 object alone: an LLM step stored with no ``cost_usd``, or a budget finding naming models of
unknown cost (a remote agent's step that recorded no cost, when a cost budget was set).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def cost_partly_known(run: Mapping[str, Any]) -> bool:
    """Whether the stored run's (v1 JSON) ``usage.cost_usd`` is a number that leaves out a
    call of unknown cost: a lower bound, "at least" it."""
    usage = run.get("usage")
    if not isinstance(usage, dict) or usage.get("cost_usd") is None:
        return False
    steps = run.get("steps")
    if isinstance(steps, list) and any(
            isinstance(s, dict) and s.get("kind") == "llm" and s.get("cost_usd") is None
            for s in steps):
        return True
    findings = run.get("findings")
    return isinstance(findings, list) and any(
        isinstance(f, dict) and isinstance(f.get("attributes"), dict)
        and f["attributes"].get("cost_unknown_models") for f in findings)
