"""The README's reference sections are generated from the code; they must stay current.

Regenerate with ``UPDATE_README=1 python -m pytest tests/docs``.
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from otel_eval.config import Config, build
from otel_eval.configdoc import reference
from otel_eval.issues.config import IssuesConfig
from otel_eval.issues.job import IssuesJob
from otel_eval.metrics import Metrics

README = Path(__file__).resolve().parents[2] / "README.md"


def _metrics_table() -> str:
    """Every metric the admin /metrics can expose: Metrics, and the issues job's collector."""
    registry = CollectorRegistry()
    Metrics(registry)
    IssuesJob(IssuesConfig(), sqlite3.connect(":memory:"), lambda since_ns: [], registry)
    entries = []
    for collector in list(registry._collector_to_names):  # declared label names, not samples
        if hasattr(collector, "_labelnames") and hasattr(collector, "_type"):
            entries.append((collector._name, collector._type, collector._labelnames,
                            collector._documentation))
        else:
            entries += [(f.name, f.type, getattr(f, "_labelnames", ()), f.documentation)
                        for f in collector.describe()]
    suffix = {"counter": "_total", "info": "_info"}
    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for name, kind, labels, doc in sorted(entries):
        rows.append(f"| `{name}{suffix.get(kind, '')}` | {kind} | {', '.join(labels) or '-'} "
                    f"| {doc} |")
    return "\n".join(rows)


def _sections() -> dict[str, str]:
    return {"config-reference": "```yaml\n" + reference() + "```",
            "metrics-reference": _metrics_table()}


def _block(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- {name}:start -->\n)(.*?)(<!-- {name}:end -->)", re.S)


def test_readme_reference_sections_match_the_code() -> None:
    text = README.read_text(encoding="utf-8")
    if os.environ.get("UPDATE_README"):
        for name, body in _sections().items():
            text = _block(name).sub(lambda m, b=body: m.group(1) + b + "\n" + m.group(3), text)
        README.write_text(text, encoding="utf-8")
    for name, body in _sections().items():
        m = _block(name).search(text)
        assert m is not None, f"README lacks the {name} markers"
        assert m.group(2).strip() == body.strip(), (
            f"README {name} is stale: run UPDATE_README=1 python -m pytest tests/docs")


def test_config_reference_is_a_loadable_config_equal_to_the_defaults() -> None:
    assert build(Config, yaml.safe_load(reference())) == Config()
