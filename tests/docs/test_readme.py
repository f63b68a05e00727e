"""The README's reference sections are generated from the code; they must stay current.

Regenerate with ``UPDATE_README=1 python -m pytest tests/docs``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from otel_eval.config import Config, build
from otel_eval.configdoc import reference
from otel_eval.metrics import Metrics

README = Path(__file__).resolve().parents[2] / "README.md"


def _metrics_table() -> str:
    registry = CollectorRegistry()
    Metrics(registry)
    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for m in sorted(registry.collect(), key=lambda m: m.name):
        name = m.name + ("_total" if m.type == "counter" else "")
        labels: set[str] = set()
        for s in m.samples:
            labels |= set(s.labels) - {"le"}
        rows.append(f"| `{name}` | {m.type} | {', '.join(sorted(labels)) or '-'} "
                    f"| {m.documentation} |")
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
