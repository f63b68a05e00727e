"""Stage wiring for files: the offline engine shared by ``eval``, ``issues``, ``show`` and the
benches (the CLI only parses arguments and prints).

    paths -> loaders (spans regrouped by the assembler, released at the end of the input)
      -> Evaluator (trajectory, detectors, verdict: what ``serve`` runs per trace)
      -> judge (when configured; in input order, ``judge.offline``)
      -> prediction again with the judge's scores (when a model is set) -> evaluations

A file that cannot be read is reported on stderr and counted (``failed_files``); the run goes
on with the next one. A trace that is no agent run (only setup operations, such as a
``create_agent`` span in a trace of its own: ``trajectory.is_run``) has no evaluation, as in
``serve``; counted in ``not_runs``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from otel_eval.app.config import Config
from otel_eval.evaluate.bounds import bound
from otel_eval.evaluate.evaluator import Evaluator

if TYPE_CHECKING:
    from otel_eval.base.model import Trace
    from otel_eval.base.results import Evaluation
    from otel_eval.evaluate.agent_inference import AgentHistory
    from otel_eval.evaluate.judge.offline import Spend
    from otel_eval.evaluate.predict import Reading


def _progress(items: Iterable[Any], stream: TextIO) -> Iterator[Any]:
    if not stream.isatty():
        yield from items
        return
    from tqdm import tqdm
    yield from tqdm(items, unit=" traces", file=stream)


class EvalRun:
    """Load, build the trajectory, run the detectors, then the judge when one is configured."""

    def __init__(self, cfg: Config, paths: Sequence[str] = (), *,
                 references_path: str | None = None,
                 max_cost_usd: float | None = None, turns: bool = False,
                 bounded: bool = True) -> None:
        self.cfg = cfg
        self.paths = list(paths)
        self.turns = turns  # chat logs (tau-bench) as conversations: a trace per user message
        self.max_cost_usd = max_cost_usd  # stop judging once the judge has spent this much
        # results cut to the stored bounds (``Evaluator.evaluate``); False for training, whose
        # features must be the ones the predictor reads (before the cut)
        self.bounded = bounded
        self.evaluator = Evaluator(cfg, references_path=references_path)
        self.failed_files = 0
        self.not_runs = 0  # traces that were no agent run (no evaluation)
        self.spend: Spend | None = None
        # eval --judge with a model: what the predictor read of each run in the judge's window,
        # before its result was cut, to predict it again with the judge's scores
        self._readings: dict[str, Reading] = {}

    def traces(self, paths: Sequence[str | Path] | None = None,
               strict: bool = False) -> Iterator[Trace]:
        """The traces of ``paths`` (default: the run's). A file with a problem is reported
        and counted, and loading goes on; ``strict``: it raises ``LoaderError`` instead
        (spans refused by assembly are then logged)."""
        from otel_eval.receive.loaders import LoaderError, load_paths

        failed: set[str] = set()  # files (or directories) with a problem, each counted once

        def report(e: LoaderError) -> None:  # and go on: the next file, the file's good spans
            failed.add(e.path)
            self.failed_files = len(failed)
            print(f"otel-eval: {e}", file=sys.stderr)

        # the files one stream, as serve's requests: a trace split over files is one trace
        yield from load_paths(self.paths if paths is None else paths,
                              config=self.cfg.trajectory, turns=self.turns,
                              on_error=None if strict else report)

    def evaluations(self, paths: Sequence[str | Path] | None = None,
                    strict: bool = False) -> Iterator[Evaluation]:
        """Every trace of ``paths`` (``traces``) evaluated as ``eval`` evaluates it."""
        return self.judged(self._evaluated(_progress(self.traces(paths, strict), sys.stderr)))

    def _evaluated(self, traces: Iterable[Trace]) -> Iterator[Evaluation]:
        """Each trace evaluated in input order, the runs no span named given the agent that
        the same service's earlier runs show (an in-memory agent history, as serve's store
        keeps: ``otel_eval.evaluate.agent_inference``)."""
        from otel_eval.evaluate.agent_inference import RememberInBatches, learned
        from otel_eval.store import SqliteStore

        store = SqliteStore(":memory:").open()
        history = RememberInBatches(store)  # what is not recalled before the end is not written
        try:
            for trace in traces:
                ev = self._evaluate(trace, history)
                if ev is None:
                    self.not_runs += 1
                    continue
                history.remember_agents(learned([ev]))
                yield ev
        finally:
            store.close()

    def _evaluate(self, trace: Trace, history: AgentHistory) -> Evaluation | None:
        """One trace evaluated; with a judge and a model, what the predictor read of it is
        kept before its result is cut (``bound`` cuts steps and adds a finding), for
        ``_repredicted``."""
        predictor = self.evaluator.predictor
        if not (self.bounded and predictor is not None and self.cfg.judge.active):
            return self.evaluator.evaluate(trace, history=history, bounded=self.bounded)
        ev = self.evaluator.evaluate(trace, history=history, bounded=False)
        if ev is None:
            return None
        if ev.prediction is not None:
            self._readings[ev.trace_id] = predictor.read(ev)
        bound(ev, self.cfg.trajectory)
        return ev

    def judged(self, out: Iterator[Evaluation]) -> Iterator[Evaluation]:
        """``out`` through the judge when one is configured (else unchanged). A judge that
        cannot run (a missing key) raises ``ConfigError`` here, before any output."""
        jc = self.cfg.judge
        if not jc.active:
            return out
        from otel_eval.evaluate.judge.client import check_credentials, check_prices
        from otel_eval.evaluate.judge.judge import Judge
        from otel_eval.evaluate.judge.offline import Spend, judged

        check_credentials(jc)
        if self.max_cost_usd is None:
            check_prices(jc)
        else:
            check_prices(jc, self.max_cost_usd, "--max-cost-usd", "no --max-cost-usd")
        if self.max_cost_usd is not None:  # the explicit cap replaces the hourly budget
            jc = replace(jc, max_cost_usd_per_hour=0.0)
        self.spend = Spend()
        done = judged(out, Judge(jc), self.spend, self.max_cost_usd, self.cfg.trajectory)
        return done if self.evaluator.predictor is None else self._repredicted(done)

    def _repredicted(self, out: Iterator[Evaluation]) -> Iterator[Evaluation]:
        """Predictions again once the judge's scores are in (features read them)."""
        assert self.evaluator.predictor is not None
        predictor = self.evaluator.predictor
        for ev in out:
            reading = self._readings.pop(ev.trace_id, None)
            if ev.prediction is not None:  # the run as read before its result was cut
                ev.prediction = (predictor.predict(ev) if reading is None
                                 else predictor.predict_reading(reading, ev.judge))
            yield ev

    def cost_line(self) -> str | None:
        return None if self.spend is None else self.spend.line(self.cfg.judge.model)
