"""``JudgeNamer``: the issue stage's ``Namer`` backed by the judge model (CLEAR synthesises its
issues with an LLM). Called from the issues job's thread, once per *new* cluster (a matched
issue keeps its stored name). Critiques are redacted (``judge.redaction``) before they leave
the process. Any failure returns None and the issue keeps its title from the evidence.

    critiques -> redacted prompt (issue_name) -> ask(request) -> {"title", "description"}

``ask`` is where the call goes. In ``serve`` it is the judge stage's (``JudgeStage.ask``): the
one ``JudgeClient`` of the service, so a name shares the trace and session judges' concurrency,
rate limits, hourly cost budget and retries, and is counted by their observer under
``judge="issue_name"`` (calls, tokens, cost, latency). With the budget spent the client sends
nothing and answers ``budget_exceeded`` (counted in ``otel_eval_judge_calls_total{status}``):
the issue keeps its evidence title. Without a stage (``otel-eval issues``), the namer keeps one
client of its own for its life, on a private event loop per call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.judge.redact import Redactor
from otel_eval.evaluate.judge.templates import Prompts, schema_text

if TYPE_CHECKING:  # the client imports litellm (seconds): only when a call is made
    from otel_eval.evaluate.judge.client import CallResult, JudgeClient
    from otel_eval.evaluate.judge.prompting import Request

log = logging.getLogger(__name__)

NAME = "issue_name"  # the prompt, and the judge label its calls are counted under
SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["title", "description"],
    "properties": {"title": {"type": "string", "minLength": 3, "maxLength": 80},
                   "description": {"type": "string", "minLength": 3, "maxLength": 400}},
}

# the answer of a name call not sent (the issue stage's Namer contract, handed to it by the
# wiring: outputs/issues/naming.py, which the judge does not import)
NOT_SENT: Literal["not_sent"] = "not_sent"

# one judge call, waited for from the caller's thread; None: not sent (no judge running)
Ask = Callable[["Request"], "CallResult | None"]


@runtime_checkable
class JudgeCalls(Protocol):
    """What lends its judge to the namer (``stage.JudgeStage`` in ``serve``)."""

    def ask(self, request: Request) -> CallResult | None: ...


class OwnClient:
    """``ask`` without a judge stage: one ``JudgeClient`` (one hourly budget) for the life of
    its namer or synthesizer, each call on a private event loop (the caller is a plain
    thread)."""

    def __init__(self, config: JudgeConfig, prompts: Prompts) -> None:
        self.config = config
        self.prompts = prompts
        self._client: JudgeClient | None = None

    def __call__(self, request: Request) -> CallResult:
        return asyncio.run(self._call(request))

    async def _call(self, request: Request) -> CallResult:
        from otel_eval.evaluate.judge.client import JudgeClient, close_clients  # litellm

        if self._client is None:
            self._client = JudgeClient(self.config, repair_text=lambda problem: (
                self.prompts.render("repair", error=problem)))
        try:
            return await self._client.call(request.messages, request.schema, request.name,
                                           request.check)
        finally:
            await close_clients()  # litellm's HTTP clients belong to this call's loop


class JudgeNamer:
    def __init__(self, config: JudgeConfig, ask: Ask | None = None) -> None:
        """``ask``: the judge stage's (``JudgeStage.ask``); None: a client of its own."""
        self.config = config
        self.prompts = Prompts(config.prompt_dir)
        self.redactor = Redactor(config.redaction)
        self._ask: Ask = ask if ask is not None else OwnClient(config, self.prompts)

    def messages(self, critiques: Sequence[str]) -> list[dict[str, str]]:
        listed = "\n".join(f"- {self.redactor.redact(' '.join(c.split()))}" for c in critiques)
        return [{"role": "user", "content": self.prompts.render(
            NAME, request=listed, schema=schema_text(SCHEMA))}]

    def request(self, critiques: Sequence[str]) -> Request:
        from otel_eval.evaluate.judge.prompting import Request  # imports the client: litellm

        return Request(NAME, (NAME,), self.messages(critiques), SCHEMA)

    def __call__(self, critiques: Sequence[str]) -> tuple[str, str] | Literal["not_sent"] | None:
        """The name; None when the call failed (the evidence title stands); ``NOT_SENT``
        when no call was sent (no judge running, the hourly budget spent): a later run
        names the issue."""
        try:
            result = self._ask(self.request(critiques))
        except Exception:  # naming is best effort: the evidence title stands
            log.exception("judge namer failed")
            return None
        if result is None:  # the judge stage is not running (starting or stopped)
            log.info("judge namer: no judge running; the issue is named by a later run")
            return NOT_SENT
        if result.status == "budget_exceeded":  # nothing sent
            log.info("judge namer: the hourly judge budget is spent; the issue is named by "
                     "a later run")
            return NOT_SENT
        if result.status != "ok" or result.data is None:
            log.warning("judge namer: %s %s", result.status, result.error)
            return None
        data = result.data
        return data["title"].strip().rstrip("."), data["description"].strip()


def judge_namer(config: JudgeConfig, ask: Ask | None = None) -> JudgeNamer | None:
    """The namer when a judge model is configured (``ask``: the judge stage's, in ``serve``);
    None keeps the titles from the evidence."""
    return JudgeNamer(config, ask) if config.active else None
