"""google-adk-legacy: the google-adk stack's agent (``stacks/google-adk/agent.py``, run as it
is) with ADK's legacy telemetry schema (``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1``, set in
stack.yaml). ``python agent.py SCENARIO``."""

from __future__ import annotations

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).resolve().parents[1] / "google-adk" / "agent.py"),
               run_name="__main__")
