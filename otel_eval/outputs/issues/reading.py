"""Issue stage, step 7: what a person reads of an issue besides its title and numbers.

- ``titled``: the title says which detector found the problem when every member is one
  detector's finding ("… (loop)"); a judge's critique or a mix adds nothing;
- ``severity``: the members' typical severity (the median of info 0, warning 1, error 2;
  a judge critique below the score threshold is a warning) raised one step when the issue
  touches at least ``WIDE_SHARE`` of the window's runs: low | medium | high | critical;
- ``status``: ``new`` (no stored issue), ``regressed`` (the previous run had it at share 0:
  gone, now back), else ``ongoing``; ``resolved`` is what the run reports of a stored issue
  it no longer finds (``IssuesResult.resolved``).
Pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence

from otel_eval.outputs.issues.critiques import Critique

SEVERITIES = ("low", "medium", "high", "critical")
WIDE_SHARE = 0.25  # a quarter of the runs: wide enough to raise the severity one step
_RANK = {"info": 0, "warning": 1, "error": 2}
_FINDING = "finding:"


def detector_of(members: Sequence[Critique]) -> str | None:
    """The detector every member comes from, else None (a judge critique, or several)."""
    sources = {c.source for c in members}
    if len(sources) != 1:
        return None
    (source,) = sources
    return source[len(_FINDING):] or None if source.startswith(_FINDING) else None


def titled(title: str, members: Sequence[Critique]) -> str:
    detector = detector_of(members)
    if detector is None or title.endswith(f"({detector})"):
        return title
    return f"{title} ({detector})"


def severity(members: Sequence[Critique], share: float) -> str:
    ranks = sorted(_RANK.get(c.severity, 1) for c in members)
    typical = ranks[(len(ranks) - 1) // 2] if ranks else 1  # the lower median
    return SEVERITIES[min(len(SEVERITIES) - 1, typical + (share >= WIDE_SHARE))]


def status(previous_share: float | None) -> str:
    if previous_share is None:
        return "new"
    return "regressed" if previous_share == 0.0 else "ongoing"
