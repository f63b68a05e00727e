"""Stage: store, retention. Evaluations older than ``store.retention_days`` are deleted at
start, then every ``interval_s`` (an hour), on a thread of its own (``otel-eval-retention``),
with their sessions' rows and their feedback: the one writer of a row's deletion. ``serve``
runs it in its lifecycle; 0 days keeps all. The store deletes in batches
(``store.base.RETENTION_BATCH`` evaluations per transaction): a large backlog does not hold
the write lock the engine's writes need for the whole pass.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from otel_eval.store.base import EvaluationStore

log = logging.getLogger(__name__)

_DAY_NS = 86400e9


class Retention:
    """``start()`` runs it now and then every ``interval_s``; ``shutdown`` stops the thread
    (a pass in progress ends after its batch: the store closes after it)."""

    def __init__(self, store: EvaluationStore, days: float, *, interval_s: float = 3600.0,
                 wall_clock_ns: Callable[[], int] = time.time_ns) -> None:
        self.store = store
        self.days = days
        self.interval_s = interval_s
        self._wall_clock_ns = wall_clock_ns
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def apply(self, now_ns: int | None = None) -> int:
        """Delete evaluations older than ``days`` before ``now_ns`` (default: the wall
        clock); how many."""
        if self.days <= 0:
            return 0
        now_ns = self._wall_clock_ns() if now_ns is None else now_ns
        age_ns = self.days * _DAY_NS
        if age_ns >= now_ns:  # a cutoff before 1970 (a retention of .inf, or of millennia):
            return 0  # nothing is that old (its time was past a 64-bit integer: every pass
            # raised, logged as failed, where the setting keeps everything)
        deleted = self.store.delete_older_than(now_ns - int(age_ns),
                                               stop=self._stopped.is_set)
        if deleted:
            log.info("retention: deleted %d evaluations older than %g days", deleted,
                     self.days)
        return deleted

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="otel-eval-retention",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                self.apply()
            except Exception:  # a locked or full disk must not stop the service
                log.exception("retention failed")
            if self._stopped.wait(self.interval_s):
                return

    def shutdown(self, deadline_s: float) -> None:
        self._stopped.set()
