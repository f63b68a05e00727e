"""``JudgeNamer``: the issue stage's ``Namer`` backed by the judge model (CLEAR synthesises its
issues with an LLM). Called from the issues job's thread, once per *new* cluster; each call
runs the judge client on a private event loop (retries, Retry-After, repair, hourly budget of
its own). Critiques are redacted before they leave the process. Any failure returns None and
the issue keeps its deterministic name.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.judge.redact import Redactor
from otel_eval.evaluate.judge.templates import Prompts, schema_text

log = logging.getLogger(__name__)

SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["title", "description"],
    "properties": {"title": {"type": "string", "minLength": 3, "maxLength": 80},
                   "description": {"type": "string", "minLength": 3, "maxLength": 400}},
}


class JudgeNamer:
    def __init__(self, config: JudgeConfig) -> None:
        self.config = config
        self.prompts = Prompts(config.prompt_dir)
        self.redactor = Redactor(config.redaction)

    def messages(self, critiques: Sequence[str]) -> list[dict[str, str]]:
        listed = "\n".join(f"- {self.redactor.redact(' '.join(c.split()))}" for c in critiques)
        return [{"role": "user", "content": self.prompts.render(
            "issue_name", request=listed, schema=schema_text(SCHEMA))}]

    def __call__(self, critiques: Sequence[str]) -> tuple[str, str] | None:
        try:
            result = asyncio.run(self._call(critiques))
        except Exception:  # naming is best effort: the deterministic name stands
            log.exception("judge namer failed")
            return None
        if result is None:
            return None
        return result["title"].strip().rstrip("."), result["description"].strip()

    async def _call(self, critiques: Sequence[str]) -> dict[str, Any] | None:
        from otel_eval.evaluate.judge.client import JudgeClient, close_clients  # imports litellm

        client = JudgeClient(self.config, repair_text=lambda problem: self.prompts.render(
            "repair", error=problem))
        try:
            result = await client.call(self.messages(critiques), SCHEMA, "issue_name")
        finally:
            await close_clients()
        if result.status != "ok" or result.data is None:
            log.warning("judge namer: %s %s", result.status, result.error)
            return None
        return result.data


def judge_namer(config: JudgeConfig) -> JudgeNamer | None:
    """The namer when a judge model is configured; None keeps deterministic names."""
    return JudgeNamer(config) if config.active else None
