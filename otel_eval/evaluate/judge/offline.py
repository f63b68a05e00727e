"""The judge for ``otel-eval eval``: evaluations in, judged evaluations out, in input order.

Up to ``max_concurrency`` traces are judged at once on a private event loop; the stream stays
ordered (the oldest in flight is awaited first). Sampling applies as in ``serve``. With a
spending cap (``--max-cost-usd``) judging stops once the judged traces have cost that much
(traces already in flight finish, so the cap can be passed by their cost); later traces get
``judge.overall = {"status": "skipped", "reason": "max_cost"}``. A judgement that raises is
skipped ``worker_error`` as in ``serve``, the calls it made in its ``totals`` and the cost
line; logged as ``serve`` logs it (``bug_line``): stderr is the run's report, and a bug every
trace hits wrote a traceback per trace above the cost line. The first says what to fix, then
a line per ``BUG_LOG_INTERVAL_S`` counts the rest; each trace's record says ``worker_error``
and the cost line counts them all (``skipped: N worker_error``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from otel_eval.base.aio import cancel_leftovers
from otel_eval.base.loglimit import BUG_LOG_INTERVAL_S, LogLimiter, bug_line
from otel_eval.base.results import Evaluation
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.judge.client import close_clients
from otel_eval.evaluate.judge.fit import fit_stored
from otel_eval.evaluate.judge.judge import Judge
from otel_eval.evaluate.judge.sampling import sampled
from otel_eval.evaluate.judge.scoring import Collector
from otel_eval.evaluate.judge.workqueue import skipped_judge

log = logging.getLogger(__name__)


@dataclass
class Spend:
    """What the judge cost over a run: the ``eval`` cost line."""

    judged: int = 0  # traces whose judging succeeded (status ok, or partial)
    failed: dict[str, int] = field(default_factory=dict)  # traces whose every judge failed
    skipped: dict[str, int] = field(default_factory=dict)
    calls: int = 0
    failed_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0  # of the traces whose cost is known
    cost_unknown: int = 0  # traces with calls of unknown cost (no price for the model)

    def add(self, judged: dict[str, Any]) -> None:
        totals = judged.get("totals")
        status = str(judged.get("overall", {}).get("status", "ok"))
        if totals is None or status == "skipped":  # skipped (having made calls or not)
            reason = str(judged.get("overall", {}).get("reason", "skipped"))
            self.skipped[reason] = self.skipped.get(reason, 0) + 1
        elif status in ("ok", "partial"):
            self.judged += 1
        else:
            self.failed[status] = self.failed.get(status, 0) + 1
        if totals is None:
            return
        self.calls += int(totals["calls"])
        self.failed_calls += int(totals.get("failed_calls", 0))
        self.input_tokens += int(totals["tokens"]["input"])
        self.output_tokens += int(totals["tokens"]["output"])
        if totals.get("cost_usd") is None:
            self.cost_unknown += 1
        else:
            self.cost_usd += float(totals["cost_usd"])

    def line(self, model: str) -> str:
        skipped = ", ".join(f"{n} {r}" for r, n in sorted(self.skipped.items()))
        failed = ", ".join(f"{n} {r}" for r, n in sorted(self.failed.items()))
        return (f"judge {model}: {self.judged} traces judged in {self.calls} calls, "
                f"{self.input_tokens} input + {self.output_tokens} output tokens, "
                + ("cost unknown (no price for the model)" if self.cost_unknown
                   else f"${self.cost_usd:.4f}")
                + (f"; failed calls: {self.failed_calls}" if self.failed_calls else "")
                + (f"; failed traces: {failed}" if failed else "")
                + (f"; skipped: {skipped}" if skipped else ""))


def _skipped(reason: str) -> dict[str, Any]:
    return {"judges": {}, "overall": {"status": "skipped", "reason": reason}}


def judged(evaluations: Iterable[Evaluation], judge: Judge, spend: Spend,
           max_cost_usd: float | None = None,
           bounds: TrajectoryConfig | None = None, *,
           clock: Callable[[], float] = time.monotonic) -> Iterator[Evaluation]:
    """Each evaluation with its judge, in input order; the judge cut to what the result
    leaves of ``bounds.max_result_bytes`` (``fit_stored``, as ``serve`` stores it).
    ``clock``: the time of the limit on the lines of a judge bug every trace hits."""
    bounds = bounds or TrajectoryConfig()
    error_log = LogLimiter(BUG_LOG_INTERVAL_S, clock)
    loop = asyncio.new_event_loop()
    window: deque[tuple[Evaluation, asyncio.Task[dict[str, Any]] | None, Collector]] = deque()

    def finish(ev: Evaluation, task: asyncio.Task[dict[str, Any]] | None,
               spent: Collector) -> Evaluation:
        if task is not None:
            try:
                ev.judge = loop.run_until_complete(task)
            except Exception:  # as serve's worker: this trace skipped, the run goes on
                bug_line(error_log, log, "judge failed on trace %s", ev.trace_id,
                         counted="failed judgements")
                ev.judge = skipped_judge("worker_error", spent)
        assert ev.judge is not None
        spend.add(ev.judge)  # what it cost, whatever is cut
        ev.judge = fit_stored(ev, ev.judge, bounds)
        return ev

    try:
        for ev in evaluations:
            spent = judge.spending()
            if max_cost_usd is not None and spend.cost_usd >= max_cost_usd:
                ev.judge = _skipped("max_cost")
                window.append((ev, None, spent))
            elif not sampled(ev, judge.config.sampling):
                ev.judge = _skipped("sampled_out")
                window.append((ev, None, spent))
            else:
                window.append((ev, loop.create_task(judge.judge(ev, spent)), spent))
            while window and (window[0][1] is None
                              or len(window) > judge.config.max_concurrency):
                yield finish(*window.popleft())
        while window:
            yield finish(*window.popleft())
    finally:
        for _, task, _ in window:
            if task is not None:
                task.cancel()
        loop.run_until_complete(close_clients())  # litellm caches HTTP clients per loop
        loop.run_until_complete(cancel_leftovers())
        loop.close()
