"""``JudgeSynthesizer``: the issue stage's ``Synthesizer`` backed by the judge model (Agentic
CLEAR synthesises its issues with an LLM). Called from the issues job's thread, at most once
per (level, node) group and run; each call runs the judge client on a private event loop
(retries, Retry-After, one repair round trip checked by ``issues.synthesis.check_reply``,
hourly budget of its own). Critiques are redacted before they leave the process. Any failure
returns None and the clustering's issues stand.

The issue stage owns the reply's contract (``outputs.issues.synthesis``: ``REPLY_SCHEMA``,
``check_reply``); the wiring (``app``) hands it in, so the judge imports nothing of the
issue stage.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.judge.redact import Redactor
from otel_eval.evaluate.judge.schemas import Schema
from otel_eval.evaluate.judge.templates import Prompts, schema_text

log = logging.getLogger(__name__)

_EXAMPLE_CHARS = 300  # per critique shown: enough for one failure, bounded prompt


class Draft(Protocol):
    """One issue as shown to the model (``outputs.issues.synthesis.Draft``)."""

    @property
    def title(self) -> str: ...

    @property
    def examples(self) -> tuple[str, ...]: ...

    @property
    def critiques(self) -> int: ...


# (drafts shown, stragglers shown) -> the reply's semantic check (error text, or None)
CheckReply = Callable[[int, int], Callable[[dict[str, Any]], str | None]]


class JudgeSynthesizer:
    def __init__(self, config: JudgeConfig, reply_schema: Schema,
                 check_reply: CheckReply) -> None:
        """``reply_schema`` and ``check_reply``: the issue stage's contract for the reply."""
        self.config = config
        self.reply_schema = reply_schema
        self.check_reply = check_reply
        self.prompts = Prompts(config.prompt_dir)
        self.redactor = Redactor(config.redaction)

    def _line(self, text: str) -> str:
        # redacted whole, then cut: a cut first could leave a secret's head too short for
        # its pattern (``sk-`` + 10 characters), sent as is
        return self.redactor.redact(" ".join(text.split()))[:_EXAMPLE_CHARS]

    def messages(self, drafts: Sequence[Draft],
                 stragglers: Sequence[str]) -> list[dict[str, str]]:
        listed = "\n".join(
            f"{k}. {self._line(d.title)} ({d.critiques} critiques)\n"
            + "\n".join(f"   - {self._line(e)}" for e in d.examples)
            for k, d in enumerate(drafts, start=1))
        strays = "\n".join(f"{k}. {self._line(t)}" for k, t in enumerate(stragglers, start=1))
        return [{"role": "user", "content": self.prompts.render(
            "issue_merge", request=listed, stragglers=strays or "(none)",
            schema=schema_text(self.reply_schema))}]

    def __call__(self, drafts: Sequence[Draft],
                 stragglers: Sequence[str] = ()) -> dict[str, Any] | None:
        try:
            return asyncio.run(self._call(drafts, stragglers))
        except Exception:  # synthesis is best effort: the clustering's issues stand
            log.exception("judge synthesizer failed")
            return None

    async def _call(self, drafts: Sequence[Draft],
                    stragglers: Sequence[str]) -> dict[str, Any] | None:
        from otel_eval.evaluate.judge.client import JudgeClient, close_clients  # imports litellm

        client = JudgeClient(self.config, repair_text=lambda problem: self.prompts.render(
            "repair", error=problem))
        try:
            result = await client.call(self.messages(drafts, stragglers), self.reply_schema,
                                       "issue_merge",
                                       self.check_reply(len(drafts), len(stragglers)))
        finally:
            await close_clients()
        if result.status != "ok" or result.data is None:
            log.warning("judge synthesizer: %s %s", result.status, result.error)
            return None
        return result.data


def judge_synthesizer(config: JudgeConfig, reply_schema: Schema,
                      check_reply: CheckReply) -> JudgeSynthesizer | None:
    """The synthesizer when a judge model is configured; None keeps the clustering as is."""
    return JudgeSynthesizer(config, reply_schema, check_reply) if config.active else None
