"""The reference docs are generated from the code and must stay current; the README stays short.

The configuration and metrics references live in ``docs/`` between ``<!-- NAME:start -->`` /
``<!-- NAME:end -->`` markers. Regenerate with ``UPDATE_README=1 python -m pytest tests/docs``.
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from otel_eval.app.admin import AdminApi, routes
from otel_eval.app.config import Config, build
from otel_eval.app.configdoc import reference
from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.job import IssuesJob
from otel_eval.store.base import Window
from otel_eval.telemetry.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# generated section -> the document holding it
DOCS = {"config-reference": ROOT / "docs" / "configuration.md",
        "metrics-reference": ROOT / "docs" / "metrics.md",
        "conversation-readers": ROOT / "docs" / "sessions.md",
        "eval-exit-codes": ROOT / "docs" / "guide.md"}


def _metrics_table() -> str:
    """Every metric the admin /metrics can expose: Metrics, and the issues job's collector."""
    registry = CollectorRegistry()
    Metrics(registry)
    IssuesJob(IssuesConfig(), sqlite3.connect(":memory:"), lambda since_ns: Window([], False),
              registry)
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


def _readers_table() -> str:
    """The conversation and user id reader order (conventions.conversations)."""
    from otel_eval.evaluate.conventions.conversations import CONVERSATION_KEYS, USER_KEYS

    out = []
    for what, keys in (("conversation id", CONVERSATION_KEYS), ("user id", USER_KEYS)):
        out.append("\n".join([f"| order | {what} key | convention |", "|---|---|---|",
                              *(f"| {n} | `{key}` | {convention} |"
                                for n, (key, convention) in enumerate(keys, 1))]))
    return "\n\n".join(out)


def _exit_codes_table() -> str:
    """``otel-eval eval``'s exit codes (``app.gate``), as its ``--help`` gives them."""
    from otel_eval.app.gate import EVAL_EXIT_CODES

    return "\n".join(["| exit code | meaning |", "|---|---|",
                      *(f"| {code} | {meaning} |" for code, meaning in EVAL_EXIT_CODES.items())])


def _sections() -> dict[str, str]:
    return {"config-reference": "```yaml\n" + reference() + "```",
            "metrics-reference": _metrics_table(),
            "conversation-readers": _readers_table(),
            "eval-exit-codes": _exit_codes_table()}


def _block(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- {name}:start -->\n)(.*?)(<!-- {name}:end -->)", re.S)


def test_reference_sections_match_the_code() -> None:
    for name, body in _sections().items():
        doc = DOCS[name]
        text = doc.read_text(encoding="utf-8")
        if os.environ.get("UPDATE_README"):
            text = _block(name).sub(lambda m, b=body: m.group(1) + b + "\n" + m.group(3), text)
            doc.write_text(text, encoding="utf-8")
        m = _block(name).search(text)
        assert m is not None, f"{doc.name} lacks the {name} markers"
        assert m.group(2).strip() == body.strip(), (
            f"{doc.name} {name} is stale: run UPDATE_README=1 python -m pytest tests/docs")


def test_readme_is_a_short_entry_point_whose_links_resolve() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 120, "README.md is the entry point: move references to docs/"
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        assert (ROOT / target).exists(), f"README links to missing {target}"
    for doc in ROOT.joinpath("docs").glob("*.md"):
        for target in re.findall(r"\]\(([^)#:]+)\)", doc.read_text(encoding="utf-8")):
            assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"


def _picture(doc: Path) -> str:
    """The picture of ``doc``: its first code block (README's under "The picture")."""
    text = doc.read_text(encoding="utf-8")
    start = text.index("```\n", max(text.find("## The picture"), 0)) + 4
    return text[start:text.index("```", start)]


def _served_paths() -> set[str]:
    """The first path of every route of the admin endpoint (the literal head of its pattern:
    /v1/issues of /v1/issues/{id}/runs), the web view's as /ui/."""
    api = AdminApi(CollectorRegistry(), lambda _q: None, lambda _t: None,  # type: ignore[arg-type, return-value]
                   lambda _t, _o: None, lambda: True, lambda: True)
    heads = {re.match(r"[/a-z0-9_]*", r.pattern.pattern).group().rstrip("/")  # type: ignore[union-attr]
             for r in routes(api).routes}
    return {"/ui/" if h == "/ui" or h.startswith("/ui/") else h for h in heads}


def test_the_pictures_are_one_and_name_every_admin_route() -> None:
    # architecture.md's admin line lacked /v1/sessions and /v1/calibration, README's had them.
    readme, architecture = _picture(README), _picture(ROOT / "docs" / "architecture.md")
    assert architecture == readme, "docs/architecture.md's picture is not README's"
    admin = next(line for line in readme.splitlines() if line.startswith(" admin :8888"))
    assert set(admin.split("◄──", 1)[1].split()) == _served_paths()


def test_config_reference_is_a_loadable_config_equal_to_the_defaults() -> None:
    assert build(Config, yaml.safe_load(reference())) == Config()
