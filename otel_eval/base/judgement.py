"""The stored judge object (``Evaluation.judge``, written by ``evaluate.judge.scoring``) as
its readers take it: one rule for whose grades stand.

A judge whose status is anything but ``ok`` or ``skipped`` failed (a call timed out, a reply
did not parse, the budget was spent): it reports no grade. Its entry may still hold
critiques (those of a step chunk graded before another chunk of the run failed); they stand
for no score, so no reader takes them as grades: not the judge's own overall
(``scoring``), not the evaluation events (``outputs.events``: the failure instead), not the
issues job (``outputs.issues.critiques``), not the web view nor ``show``
(``outputs.ui.run.critiques``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

OK_STATUSES = ("ok", "skipped")
# When the judgement was made (Unix ns; ``serve`` stores it, ``judge.stage``): the time of
# its ``gen_ai.evaluation.result`` events, sent then or, after a restart, from the store
JUDGED_AT = "judged_at_unix_nano"


def judged_at(judge: Mapping[str, Any] | None) -> int | None:
    """The judgement's time as stored, or None (none stored: an older row, ``eval``)."""
    at = (judge or {}).get(JUDGED_AT)
    return at if type(at) is int and 0 < at < 2**63 else None


def graded(entry: Mapping[str, Any]) -> bool:
    """Whether a judge's entry (``judge.judges[name]``) stands: its scores and critiques
    are read; else only its failure (its ``status`` and ``error``)."""
    return entry.get("status", "ok") in OK_STATUSES
