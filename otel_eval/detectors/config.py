"""Configuration of the detectors stage (owned by the detectors; filled in by that issue)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DetectorsConfig:
    # Detectors switched on, by name.
    enabled: tuple[str, ...] = (
        "loop", "non_termination", "budget", "tool_call", "reference", "recovery", "lucky_pass",
    )
