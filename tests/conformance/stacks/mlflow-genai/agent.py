"""mlflow-genai: the mlflow stack's agent (``stacks/mlflow/agent.py``, run as it is) with
``MLFLOW_ENABLE_OTEL_GENAI_SEMCONV=true`` (set in stack.yaml): MLflow translates its spans to
the GenAI semantic conventions at export. ``python agent.py SCENARIO``."""

from __future__ import annotations

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).resolve().parents[1] / "mlflow" / "agent.py"),
               run_name="__main__")
