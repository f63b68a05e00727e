"""One metric-declaration pattern (``otel_eval/telemetry/metrics.py``'s docstring): series are
built by ``declare.Declarer`` alone, scrape-time collectors live
in ``telemetry/``, and every other package sees at most the registry type."""

from __future__ import annotations

import ast
from pathlib import Path

from otel_eval.base.pysource import parse  # one thread at a time

PACKAGE = Path(__file__).resolve().parents[2] / "otel_eval"
METRIC_CLASSES = {"Counter", "Gauge", "Histogram", "Summary", "Info", "Enum"}


def _prometheus_imports() -> dict[str, set[str]]:
    """Module path (relative to the package) -> names it imports from prometheus_client."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "prometheus_client"):
                found.setdefault(path.relative_to(PACKAGE).as_posix(), set()).update(
                    a.name for a in node.names)
            elif isinstance(node, ast.Import) and any(
                    a.name.startswith("prometheus_client") for a in node.names):
                found.setdefault(path.relative_to(PACKAGE).as_posix(), set()).add("*")
    return found


def test_series_are_built_by_the_metrics_helpers_alone() -> None:
    imports = _prometheus_imports()
    builders = {m for m, names in imports.items() if names & (METRIC_CLASSES | {"*"})}
    assert builders == {"telemetry/declare.py"}


def test_only_telemetry_declares_metrics() -> None:
    outside = {m: names - {"CollectorRegistry"} for m, names in _prometheus_imports().items()
               if not m.startswith("telemetry/")}
    assert {m: n for m, n in outside.items() if n} == {}
