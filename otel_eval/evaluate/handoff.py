"""Stage: evaluate (the hand-off). What the engine and the evaluation stage pass each other.

    Engine (assemble/) -> EvaluationStage.run(jobs: Job, done) -> done(jobs, outcomes: Outcome)

The engine knows the evaluation stage only by this interface, so ``assemble/`` imports
neither the evaluator nor the store (tests/test_import_graph.py): ``evaluate.stage``
(``InProcess``, in the calling thread) and ``app.workers`` (worker processes) implement it,
and the service hands the engine the one it built. Nothing here imports more than the model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from otel_eval.base.model import Trace
from otel_eval.base.results import Evaluation

__all__ = ["ALREADY_EVALUATED", "FOREIGN_SENDER", "LATE", "NOT_A_RUN", "UNSTORABLE", "Done",
           "EvaluationStage", "Job", "Outcome"]

# Outcome.skipped: the store holds an evaluation of this content (same trace id and digest)
ALREADY_EVALUATED = "already_evaluated"
NOT_A_RUN = "not_a_run"  # Outcome.skipped: every span a setup operation, no agent run
# Outcome.skipped (pass-through): a passing trace, only another sender's spans for a released
# run, passed on (the run is not released again)
FOREIGN_SENDER = "foreign_sender"
# Outcome.skipped: spans that came after their run was stored (``Trace.late_if_stored``)
LATE = "late"
# Outcome.skipped: the store took neither the trace's evaluation nor an error record of it
UNSTORABLE = "unstorable"


@dataclass(slots=True)
class Outcome:
    evaluation: Evaluation | None  # None when skipped
    superseded: bool  # an evaluation of this trace was already stored (re-opened, replayed)
    failure: str | None = None  # exception type when evaluating raised (stored as an error)
    # why nothing was evaluated or stored (ALREADY_EVALUATED, LATE, NOT_A_RUN, UNSTORABLE)
    skipped: str | None = None
    # why the store refused the batch (store.failures.WRITE_FAILURE_REASONS): nothing of it
    # was stored; the engine keeps the trace and hands it again later. ``error``: the
    # driver's message
    unstored: str | None = None
    error: str = ""
    # the agent history rows the store deleted to keep its bounds as the batch taught it,
    # (reason, rows) (store.base.HISTORY_EVICTION_REASONS): on one outcome of the batch
    history_evicted: tuple[tuple[str, int], ...] = ()


@dataclass(slots=True)
class Job:
    """A released trace on its way to the store."""

    trace: Trace
    released_at: float  # engine clock, for the completion-to-verdict latency
    attempts: int = 0  # times handed to a worker process (workers.pool)
    # times its worker process died while this was the only trace it held (so the cause can
    # only be this trace or the machine, never another trace); the pool gives up at
    # ``evaluation.max_attempts``
    lone_deaths: int = 0
    first_sent_ns: int = 0  # wall clock when first handed to one, ns (0: not yet)
    # its place in the release order (the engine's queue is kept in it, refused jobs too)
    seq: int = 0
    refused: bool = False  # the store refused a batch it was in (kept, handed again)


Done = Callable[[list[Job], list[Outcome]], None]


class EvaluationStage(Protocol):
    """Where the engine sends released traces; ``done`` is called once per job, after the
    store committed its evaluation, possibly from another thread."""

    def run(self, jobs: list[Job], done: Done) -> None: ...

    def drain(self, deadline_s: float) -> bool:
        """Wait until every job handed to ``run`` is done; False when the deadline passed."""
        ...

    @property
    def healthy(self) -> bool: ...
