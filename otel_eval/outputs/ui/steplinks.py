"""Output (part): links to a run's steps, wherever they are listed.

A run page lists the steps in tree order from a position until its budget of characters is
spent (``runview``), so a long run is several pages (``?from=N``) and the anchor of a step
(``#step-N``) is on one of them only. A link to a step is therefore ``#step-N`` when the
step is on the page being built, and otherwise ``/ui/runs/{trace_id}?step=N#step-N``: the
server lays the run's pages out from the first with the same budget and renders the one
that holds step N (``runview.run_page``). Pages elsewhere (a conversation, a step's own
page) link the same way, which costs them nothing: which page holds a step is worked out
only when someone follows the link.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from otel_eval.outputs.ui.html import href, segment


def step_url(trace_id: str, index: int) -> str:
    """The run page that holds step ``index`` (found by the server), at its anchor."""
    return href(f"/ui/runs/{segment(trace_id)}", {"step": str(index)}) + f"#step-{index}"


@dataclass
class StepLinks:
    """Where the page being built is in the run: it lists the steps at positions
    ``start`` to ``end`` (excluded) in tree order (``position``: a step's index -> its
    position). ``end`` None: not known yet (the first pass of a run page, which finds where
    the budget ends the page): every step is taken as on the page, and the steps linked to
    are kept (``linked``) so that ``guessed_right`` can tell whether that held."""

    trace_id: str
    position: Mapping[int, int]
    start: int = 0
    end: int | None = None
    linked: set[int] = field(default_factory=set)

    def _here(self, index: int, end: int | None) -> bool:
        at = self.position.get(index)
        # a step the run does not list (a finding naming a step the store left out) is on
        # no page: its anchor is kept as it was, there is nowhere better to go
        return at is None or end is None or self.start <= at < end

    def lists(self, index: int) -> bool:
        """Whether the run lists step ``index`` (on some page): else it has no anchor."""
        return index in self.position

    def href(self, index: int) -> str:
        """``#step-N`` when step ``index`` is on this page, else its page's URL."""
        self.linked.add(index)
        return f"#step-{index}" if self._here(index, self.end) else step_url(self.trace_id,
                                                                          index)

    def guessed_right(self, end: int) -> bool:
        """Whether every step linked to is on the page ending at ``end`` (the links built
        while ``end`` was unknown are then the right ones)."""
        return all(self._here(i, end) for i in self.linked)
