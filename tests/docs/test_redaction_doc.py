"""docs/evaluation-limits.md's list of what is redacted and what keeps span content as sent,
against the code: a run whose error text names an e-mail address is put through each output
the list names, and each shows the address as the doc says (redacted, or as sent)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otel_eval.app.cli import main
from otel_eval.app.config import Config
from otel_eval.app.offline import EvalRun
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.results import Evaluation
from otel_eval.outputs.events import finding_records
from otel_eval.outputs.kafka import ResultsPublisher
from otel_eval.store import open_store

ROOT = Path(__file__).resolve().parents[2]
LIMITS = ROOT / "docs" / "evaluation-limits.md"
API = ROOT / "docs" / "api.md"
TRACE = ROOT / "tests" / "data" / "detectors" / "guide_lucky_recovery.otlp.json"
ADDRESS = "ann@example.com"


def _section() -> str:
    text = LIMITS.read_text(encoding="utf-8")
    start = text.index("**Redacted, and kept as sent.**")
    return text[start:text.index("\n\n", start)]


def _trace(tmp_path: Path) -> Path:
    doc = json.loads(TRACE.read_text())
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                if (span.get("status") or {}).get("message"):
                    span["status"]["message"] = f"no account for {ADDRESS}"
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    return path


def _evaluation(path: Path) -> Evaluation:
    (evaluation,) = EvalRun(Config(), [str(path)]).evaluations()
    assert any(ADDRESS in f.message for f in evaluation.findings)
    return evaluation


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


class _Loop:
    """The publisher's loop as export() uses it: the enqueue runs at once."""

    def call_soon_threadsafe(self, callback: Any, *args: Any) -> None:
        callback(*args)


def _kafka_payload(evaluation: Evaluation) -> bytes:
    publisher = ResultsPublisher(KafkaConfig())
    publisher._loop = _Loop()  # type: ignore[assignment]  # started, without a broker
    publisher.export(None, evaluation)  # type: ignore[arg-type]
    return publisher._queue[0][1]


def test_the_outputs_kept_as_sent_are_the_docs_list(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    section = _section()
    path = _trace(tmp_path)
    evaluation = _evaluation(path)
    store = open_store(str(tmp_path / "store.db"))
    store.put_many([evaluation])
    stored = store.get(evaluation.trace_id)
    store.close()
    kept = {
        "the results API (`/v1/evaluations`": json.dumps(stored),
        "the Kafka results topic": _kafka_payload(evaluation).decode(),
        "`otel-eval eval --format jsonl`": _cli(capsys, "eval", str(path), "--format",
                                                "jsonl"),
        "`otel-eval show --format json`": _cli(capsys, "show", str(path), "--format", "json"),
        "the `gen_ai.evaluation.explanation` of `gen_ai.evaluation.result` events": str(
            [a.value.string_value for r in finding_records(evaluation, "0" * 16, "1", 0)
             for a in r.attributes]),
    }
    for name, output in kept.items():
        assert name in section, name
        assert ADDRESS in output, name
    redacted = {"`otel-eval show` text": _cli(capsys, "show", str(path))}
    for name, output in redacted.items():
        assert name in section.split("Kept as the spans sent them")[0], name
        assert ADDRESS not in output and "[EMAIL]" in output, name


def test_show_says_its_json_is_not_redacted() -> None:
    row = next(line for line in API.read_text(encoding="utf-8").splitlines()
               if line.startswith("| `otel-eval show TRACE_ID"))
    assert "`--format text\\|json`" in row
    assert "not redacted" in row.split("`--format text\\|json`")[1]


def test_configured_patterns_are_described_as_they_run() -> None:
    """A configured pattern with a lazy optional body searches to the end of the text from
    each match (quadratic): the doc, the Redactor's docstring and the setting's comment (in
    docs/configuration.md) say so, not "linear", and the bounded forms the doc advises are
    configured patterns that redact."""
    from otel_eval.evaluate.judge import redact
    from otel_eval.evaluate.judge.config import RedactionConfig
    from otel_eval.evaluate.judge.redact import Redactor

    limits = LIMITS.read_text(encoding="utf-8")
    section = limits[limits.index("## Redaction before the judge"):]
    reference = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    comment = reference.split("extra_patterns: ")[0].rsplit("builtin: ", 1)[1]
    for text in (section, redact.__doc__ or "", comment):
        assert "BEGIN(?:.*?END)?" in text and "quadratic" in text
    assert "linear time" not in comment
    for bounded, value in [(r"BEGIN.*?END", "a BEGIN x y END b"),
                           (r"key=[^;\n]{0,200}", "a key=abc def; b")]:
        assert f"`{bounded}`" in section
        shown = Redactor(RedactionConfig(builtin=(), extra_patterns=(bounded,))).redact(value)
        assert shown.startswith("a [REDACTED]") and shown.endswith(" b"), shown
