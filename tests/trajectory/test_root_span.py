"""The one root-span definition (``model.local_root`` / ``model.run_span``) and everyone who
reads it: the trajectory (``root_span_id``, ``root_step``, ``run_span_id``), the results'
records and forwarded summaries (``run_span_id`` of the trace's spans), the judge's records
(``Trajectory.run_span_id``), a failed evaluation's stand-in."""

from __future__ import annotations

import pytest
from trajectory_factory import TRACE_ID, sid

from otel_eval.base.model import Span, Trace, local_root, run_span, run_span_id
from otel_eval.base.results import Evaluation
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.trajectory import build_trajectory
from otel_eval.outputs.forward import stamps

CFG = TrajectoryConfig()


def _s(name: str, parent: str | None, start: int, end: int, remote: bool | None = None,
       ) -> Span:
    return Span(TRACE_ID, sid(name), sid(parent) if parent else None, name, start, end,
                parent_remote=remote)


# (spans, local_root, run_span): run_span is local_root when there is one
CASES = {
    "one root": ([_s("a", None, 0, 10), _s("b", "a", 1, 2, False)], "a", "a"),
    "remote parent (span flags)": ([_s("a", "up", 0, 10, True), _s("b", "a", 1, 2, False)],
                                   "a", "a"),
    "remote parent, no flags: it encloses": ([_s("a", "up", 0, 10), _s("b", "a", 1, 2)],
                                             "a", "a"),
    "several roots: the earliest": ([_s("late", None, 5, 30), _s("early", None, 1, 3)],
                                    "early", "early"),
    "several roots at one start: the longest": (
        [_s("short", None, 1, 3), _s("long", None, 1, 9), _s("kid", "short", 2, 3)],
        "long", "long"),
    "an entry beats an enclosing orphan": ([_s("orphan", "up", 0, 50), _s("entry", None, 5, 6)],
                                           "entry", "entry"),
    "run never ended, its root lost: the earliest span": (
        [_s("c", "a", 3, 4), _s("b", "a", 1, 2)], None, "b"),
    "root lost, two children at one start: the longest": (
        [_s("b", "a", 1, 2), _s("c", "a", 1, 8), _s("d", "a", 5, 20)], None, "c"),
    "parent flagged local but missing: no root": ([_s("b", "a", 1, 9, False)], None, "b"),
    "an orphan that does not enclose the rest": (
        [_s("b", "a", 1, 5), _s("c", "a", 4, 9)], None, "b"),
    "no spans": ([], None, None),
    # a downstream service's entry (its parent flagged remote) on a clock behind the root's
    # starts "before" the root it descends from: the trace's own root is still the root
    "a remote entry skewed before the root": (
        [_s("root", None, 10, 100), _s("client", "root", 11, 30, False),
         _s("server", "client", 8, 25, True)], "root", "root"),
    "a remote entry skewed before the root, its client span lost": (
        [_s("root", None, 10, 100), _s("server", "client", 8, 25, True)], "root", "root"),
}


@pytest.mark.parametrize(("spans", "root", "run"), CASES.values(), ids=CASES.keys())
def test_root_and_run_span(spans: list[Span], root: str | None, run: str | None) -> None:
    found, attached = local_root(spans), run_span(spans)
    assert (found.name if found else None, attached.name if attached else None) == (root, run)
    assert run_span_id(spans) == (sid(run) if run else "")
    assert run_span_id(list(reversed(spans))) == run_span_id(spans)  # not the arrival order


@pytest.mark.parametrize(("spans", "root", "run"), [c for c in CASES.values() if c[0]],
                         ids=[k for k, c in CASES.items() if c[0]])
def test_the_trajectory_and_the_sinks_read_the_same_spans(spans: list[Span], root: str | None,
                                                          run: str) -> None:
    trace = Trace(TRACE_ID, spans, "complete" if root else "incomplete")
    traj = build_trajectory(trace, CFG)
    assert traj.root_span_id == (sid(root) if root else None)
    assert (traj.root_step.span_id if traj.root_step else None) == traj.root_span_id
    assert traj.run_span_id == sid(run)  # what the judge's records are attached to
    summary = [s for s, attrs in stamps(trace, Evaluation(traj)).items()
               if "otel_eval.finding_count" in attrs]
    assert summary == [sid(run)]  # forwarded spans: the run's summary on the same span
