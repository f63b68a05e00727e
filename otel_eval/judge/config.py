"""Configuration of the LLM judge stage."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JudgeConfig:
    # litellm model string; empty means no judge.
    model: str = ""
