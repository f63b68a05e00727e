"""The judge stage: ``Judge.judge(evaluation) -> dict`` (the ``judge`` object of the trace).

    evaluation -> render (compacted trajectory + findings, once) -> plan the calls (combined
    or one per judge; steps chunked) + rubric (cached criteria, then check) -> redacted
    messages -> JudgeClient (limits, budget, retries, validation) -> scoring.Collector
    -> overall (dual threshold, lucky pass) -> observer + dict

Async and I/O-bound only through litellm; one Judge is shared by all queue workers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any

from otel_eval.base.judgement import graded
from otel_eval.base.loglimit import LogLimiter
from otel_eval.base.results import Evaluation
from otel_eval.evaluate.judge import prompting
from otel_eval.evaluate.judge.client import FAILURE_LOG_INTERVAL_S, CallResult, JudgeClient
from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.judge.llm import litellm, pin_model_info
from otel_eval.evaluate.judge.observer import JudgeObserver, NoopObserver
from otel_eval.evaluate.judge.prompting import Request
from otel_eval.evaluate.judge.redact import Redactor
from otel_eval.evaluate.judge.render import Rendered, render
from otel_eval.evaluate.judge.rubric_cache import (
    Criteria,
    MemoryRubricCache,
    RubricCache,
    rubric_key,
    rubric_writer,
)
from otel_eval.evaluate.judge.scoring import Collector, overall
from otel_eval.evaluate.judge.session import render_session
from otel_eval.evaluate.judge.templates import Prompts

log = logging.getLogger(__name__)

_LABELS = {"success": 1.0, "failure": 0.0}


def outcome_label(evaluation: Evaluation) -> float | None:
    """1.0 / 0.0 when the trace carries a known outcome (then no outcome grader call)."""
    v = evaluation.verdict
    return _LABELS.get(v.outcome or "") if v is not None else None


def shape_in_prompt(config: JudgeConfig) -> bool:
    """Whether prompts carry the reply's shape: unless the schema goes as ``response_format``
    to a model that litellm knows takes one (OpenAI's, Gemini's ...: the provider puts the
    schema before the model and bills it as input, so a copy in the prompt is paid twice).
    Kept for ``json_object`` / ``none`` and for models litellm does not know to take a
    schema (self-hosted servers may enforce it by grammar only: the model never reads it)."""
    if config.response_format != "json_schema":
        return True
    # litellm would ask an Ollama server about a model it does not know (llm.pin_model_info)
    pin_model_info(config.model, config.input_cost_per_token_usd,
                   config.output_cost_per_token_usd)
    try:
        return not litellm.supports_response_schema(model=config.model)
    except Exception:  # an unknown provider string: keep the shape
        return True


async def _together(work: list[Coroutine[Any, Any, None]]) -> None:
    """Runs ``work`` at once. Whatever ends it (one raising, a cancel), none goes on after:
    a judgement reported ended makes no more calls (they would be paid, and counted nowhere
    but in the metrics)."""
    tasks = [asyncio.ensure_future(w) for w in work]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Judge:
    def __init__(self, config: JudgeConfig, *, clock: Callable[[], float] = time.monotonic,
                 rubric_cache: RubricCache | None = None,
                 observer: JudgeObserver | None = None) -> None:
        self.config = config
        self.prompts = Prompts(config.prompt_dir)  # bad overrides fail here, at startup
        self.redactor = Redactor(config.redaction)
        self.client = JudgeClient(
            config, clock=clock,
            repair_text=lambda problem: self.prompts.render("repair", error=problem))
        self.rubric_cache: RubricCache = rubric_cache or MemoryRubricCache(
            ttl_s=config.rubric_ttl_days * 86400)
        self.observer: JudgeObserver = observer or NoopObserver()
        # each failed call is counted (observer); a judge down logs one per interval
        self._failure_log = LogLimiter(FAILURE_LOG_INTERVAL_S, clock)
        self.shape_in_prompt = shape_in_prompt(config)
        # criteria are reused only by the model and prompts that wrote them (rubric_cache)
        self.rubric_writer = rubric_writer(
            config.model, self.prompts.digest("system", "rubric_generate"))

    @property
    def enabled(self) -> bool:
        return self.config.active

    def over_budget(self) -> bool:
        return self.client.over_budget()

    def spending(self) -> Collector:
        """What one judgement pays for, held by its caller (``judge(..., spent)``): read
        whatever ends the judgement (it raises, the stop cancels it), its calls already made
        are in it, as they are in the metrics."""
        return Collector(self.config.model)

    def requests(self, evaluation: Evaluation,
                 rendered: Rendered | None = None) -> list[Request]:
        """The step / trace / process / outcome calls this trace needs, redacted, as sent."""
        rendered = rendered or render(evaluation, self.config.compaction, self.redactor.redact)
        return list(self._requests(evaluation, rendered))

    def _requests(self, evaluation: Evaluation, rendered: Rendered) -> Iterator[Request]:
        """``requests``, each built and redacted when it is taken."""
        parts = self._parts(evaluation, rendered)
        reqs = prompting.plan(self.prompts, rendered, tuple(p for p, why in parts if not why),
                              self.config.combined, self.config.max_steps_per_call,
                              self.shape_in_prompt, self.config.output_tokens)
        return map(self.redacted, reqs)

    def redacted(self, request: Request) -> Request:
        messages = [{**m, "content": self.redactor.redact(m["content"])}
                    for m in request.messages]
        return Request(request.name, request.parts, messages, request.schema, request.steps,
                       request.check)

    def _parts(self, evaluation: Evaluation, rendered: Rendered) -> list[tuple[str, str]]:
        """(judge, skip reason or "") for the enabled step / trace / process / outcome."""
        out: list[tuple[str, str]] = []
        for part in ("step", "process", "trace", "outcome"):
            if part not in self.config.enabled:
                continue
            why = ""
            if part in ("step", "process") and not rendered.steps:
                why = "no_llm_steps"
            elif part == "outcome" and outcome_label(evaluation) is not None:
                why = "outcome_label_known"
            out.append((part, why))
        return out

    async def judge(self, evaluation: Evaluation,
                    spent: Collector | None = None) -> dict[str, Any]:
        """The ``judge`` object of ``evaluation``; ``spent`` (``spending()``) collects the
        calls as they are made, for a caller whose judgement may end before it returns."""
        c = self.config
        mode = "combined" if c.combined else "separate"
        if not self.enabled:
            return {"mode": mode, "model": c.model, "judges": {},
                    "overall": {"status": "disabled"}}
        rendered = render(evaluation, c.compaction, self.redactor.redact)
        collector = spent if spent is not None else self.spending()
        for part, why in self._parts(evaluation, rendered):
            if why:
                collector.skipped(part, why)
        # Each request carries the whole view (up to max_trajectory_chars): a long run's step
        # chunks are built and redacted by max_concurrency senders as each takes the next,
        # so a trace holds the requests in flight, not all of them, and the loop runs
        # between two builds
        requests = self._requests(evaluation, rendered)
        work = [self._send_each(requests, collector) for _ in range(c.max_concurrency)]
        if "rubric" in c.enabled:
            work.append(self._rubric(evaluation, rendered, collector))
        await _together(work)
        collector.finish_stepwise()
        for name, entry in collector.judges.items():
            for dim, value in entry["scores"].items():
                self.observer.score(name, dim, value)
        label = outcome_label(evaluation)
        return {"mode": mode, "model": c.model, "judges": collector.judges,
                "overall": overall(collector.judges, label, c.tau_task, c.tau_process),
                "totals": collector.totals()}

    async def judge_session(self, record: Mapping[str, Any],
                            turns: Sequence[Mapping[str, Any]],
                            spent: Collector | None = None) -> dict[str, Any]:
        """The ``judge`` object of a completed session: one ``session`` call over its
        transcript (``judge.session``); passed = score >= ``tau_task``. ``spent``: as
        ``judge``'s."""
        c = self.config
        collector = spent if spent is not None else self.spending()
        rendered = render_session(record, turns, self.redactor.redact)
        request = self.redacted(prompting.session(self.prompts, rendered, self.shape_in_prompt))
        await self._send(request, collector)
        entry = collector.judges["session"]
        if not graded(entry):
            entry["scores"] = {}
        score = entry["scores"].get("session")
        if score is not None:
            self.observer.score("session", "session", score)
        return {"mode": "combined", "model": c.model, "judges": collector.judges,
                "overall": {"status": entry["status"], "session_score": score,
                            "passed": None if score is None else score >= c.tau_task,
                            "tau_task": c.tau_task},
                "totals": collector.totals()}

    async def call(self, request: Request,
                   cut: Callable[[CallResult], object] | None = None) -> CallResult:
        """One call through the shared client (limits, budget, retries, validation), counted
        by the observer under ``request.name``; the messages are sent as given (redacted).
        Cancelled (the stop, or its judgement ended) after a reply came (a repair under way)
        or once the server had its request (billed: its prompt estimated, as a timed-out
        one's), it is counted as ``cancelled`` (ours, not the provider's failure) with what it
        had paid for, and ``cut(result)``
        records them where the caller keeps its spending; then the cancel goes on."""
        result = CallResult("ok", model=self.config.model)
        started = self.client.clock()
        try:
            await self.client.call(request.messages, request.schema, request.name,
                                   request.check, result)
        except asyncio.CancelledError:
            if result.input_tokens:  # a request paid for (every one billed has input tokens)
                result.status, result.data = "cancelled", None
                result.latency_s = max(self.client.clock() - started, 0.0)
                result.error = "cut before it ended (the stop, or its judgement ended)"
                self._observe(request, result)
                if cut is not None:
                    cut(result)
            raise
        self._observe(request, result)
        return result

    def _observe(self, request: Request, result: CallResult) -> None:
        self.observer.call(request.name, result.status, result.input_tokens,
                           result.output_tokens, result.cost_usd, result.latency_s)
        if result.usage_implausible:
            self.observer.usage_implausible(request.name, result.usage_implausible)
        if result.status != "ok":
            left_out = self._failure_log.allow()
            if left_out is not None:
                log.warning("judge %s call: %s %s%s", request.name, result.status, result.error,
                            LogLimiter.since(left_out, "failed judge calls"))

    async def _send(self, request: Request, collector: Collector) -> None:
        def cut(result: CallResult) -> None:
            collector.apply(request, result)

        collector.apply(request, await self.call(request, cut))

    async def _send_each(self, requests: Iterator[Request], collector: Collector) -> None:
        """Sends the next of ``requests`` (shared by the trace's senders) until none is left."""
        for request in requests:
            await self._send(request, collector)

    async def _rubric(self, evaluation: Evaluation, rendered: Rendered,
                      collector: Collector) -> None:
        """J_r (criteria from the task input, cached per task of a service) then J_v (check
        them)."""
        t = evaluation.trajectory
        key = rubric_key(t.task_id, t.input, t.service, self.rubric_writer)
        if key is None:
            collector.skipped("rubric", "no_task_input")
            return
        entry = collector.entry("rubric")
        # the cache may be a SQLite file shared with the store (a write lock held there):
        # read and written off the event loop, which the Kafka stages share
        criteria: Criteria | None = await asyncio.to_thread(self.rubric_cache.get, key)
        entry["cache"] = "hit" if criteria else "miss"
        if not criteria:
            gen = await self.call(self.redacted(prompting.rubric_generate(
                self.prompts, rendered.task)), lambda cut: collector.add_call("rubric", cut))
            collector.add_call("rubric", gen)
            if gen.data is None:
                return
            criteria = [{"id": str(c["id"]), "criterion": str(c["criterion"])}
                        for c in gen.data["criteria"]]
            await asyncio.to_thread(self.rubric_cache.put, key, criteria, self.config.model)
        check = await self.call(self.redacted(prompting.rubric_verify(
            self.prompts, rendered, criteria, self.shape_in_prompt)),
            lambda cut: collector.add_call("rubric", cut))
        collector.add_call("rubric", check)
        if check.data is None:
            return
        verdicts = {r["id"]: r for r in check.data["results"]}
        entry["criteria"] = [{**c, "fulfilled": bool(verdicts[c["id"]]["fulfilled"]),
                              "reasoning": verdicts[c["id"]]["reasoning"]} for c in criteria]
        done = sum(1 for c in entry["criteria"] if c["fulfilled"])
        entry["scores"]["rubric"] = round(done / len(criteria), 6)
        entry["critiques"] = [
            {"dimension": "rubric", "score": 1.0 if c["fulfilled"] else 0.0,
             "text": f"{c['criterion']}: {c['reasoning']}", "span_id": None, "node": None,
             "step_index": None, "criterion_id": c["id"]} for c in entry["criteria"]]
