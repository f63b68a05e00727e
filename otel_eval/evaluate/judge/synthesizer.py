"""``JudgeSynthesizer``: the issue stage's ``Synthesizer`` backed by the judge model (Agentic
CLEAR synthesises its issues with an LLM). Called from the issues job's thread, at most once
per (level, node) group and run, through ``ask`` like the namer (``namer``): in ``serve`` the
judge stage's one client (its concurrency, rate limits, hourly cost budget and retries),
counted under ``judge="issue_merge"``; else a client of its own. One repair round trip is
checked by ``issues.synthesis.check_reply``. Critiques are redacted before they leave the
process. Any failure (the budget spent included) returns None and the clustering's issues
stand.

The issue stage owns the reply's contract (``outputs.issues.synthesis``: ``REPLY_SCHEMA``,
``check_reply``); the wiring (``app``) hands it in, so the judge imports nothing of the
issue stage.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.judge.namer import Ask, OwnClient
from otel_eval.evaluate.judge.redact import Redactor
from otel_eval.evaluate.judge.schemas import Schema
from otel_eval.evaluate.judge.templates import Prompts, schema_text

log = logging.getLogger(__name__)

NAME = "issue_merge"  # the prompt, and the judge label its calls are counted under
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
                 check_reply: CheckReply, ask: Ask | None = None) -> None:
        """``reply_schema`` and ``check_reply``: the issue stage's contract for the reply;
        ``ask``: the judge stage's (``JudgeStage.ask``), None: a client of its own."""
        self.config = config
        self.reply_schema = reply_schema
        self.check_reply = check_reply
        self.prompts = Prompts(config.prompt_dir)
        self.redactor = Redactor(config.redaction)
        self._ask: Ask = ask if ask is not None else OwnClient(config, self.prompts)

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
            NAME, request=listed, stragglers=strays or "(none)",
            schema=schema_text(self.reply_schema))}]

    def __call__(self, drafts: Sequence[Draft],
                 stragglers: Sequence[str] = ()) -> dict[str, Any] | None:
        from otel_eval.evaluate.judge.prompting import Request  # imports the client: litellm

        try:
            result = self._ask(Request(NAME, (NAME,), self.messages(drafts, stragglers),
                                       self.reply_schema,
                                       check=self.check_reply(len(drafts), len(stragglers))))
        except Exception:  # synthesis is best effort: the clustering's issues stand
            log.exception("judge synthesizer failed")
            return None
        if result is None:  # the judge stage is not running (starting or stopped)
            return None
        if result.status != "ok" or result.data is None:
            log.warning("judge synthesizer: %s %s", result.status, result.error)
            return None
        return result.data


def judge_synthesizer(config: JudgeConfig, reply_schema: Schema, check_reply: CheckReply,
                      ask: Ask | None = None) -> JudgeSynthesizer | None:
    """The synthesizer when a judge model is configured (``ask``: the judge stage's, in
    ``serve``); None keeps the clustering as is."""
    return JudgeSynthesizer(config, reply_schema, check_reply, ask) if config.active else None
