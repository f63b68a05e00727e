"""Configuration of the recurring-issue clustering stage."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IssuesConfig:
    # Seconds between clustering runs; 0 disables the periodic job.
    interval_s: float = 0.0
