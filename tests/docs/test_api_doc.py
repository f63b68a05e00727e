"""docs/api.md against the code: every command and option it names exists, every command and
its own options are in its table, and every field the per-trace result and the session record
carry is in their descriptions (the fields produced by evaluating the test data), so neither
can drift from the other unnoticed."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest

from otel_eval.app.cli import main
from otel_eval.app.cli_args import DESCRIPTION, build_parser
from otel_eval.base.results import Evaluation
from otel_eval.base.steps import Trajectory
from otel_eval.receive.httpserver import CLOSE_REASONS

ROOT = Path(__file__).resolve().parents[2]
API = ROOT / "docs" / "api.md"
DATA = ROOT / "tests" / "data"
# Options every evaluating command shares (cli_args._common): the `eval` row names them.
SHARED = {"--config", "--budget", "--references", "--judge", "--judge-api-base", "-h", "--help"}
# Options of every command, before it or after it (cli_args._global_flags): named below the table.
GLOBAL = {"--log-level"}
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def _commands() -> dict[str, set[str]]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {name: {o for a in p._actions for o in a.option_strings}
            for name, p in sub.choices.items()}


def _section(title: str) -> str:
    text = API.read_text(encoding="utf-8")
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def _rows(section: str) -> dict[str, str]:
    """The result table's rows by the names of their first cell."""
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            first = line.split(" | ")[0]
            for name in re.findall(r"`([a-z_]+)`", first):
                rows[name] = line
    return rows


def _named(text: str) -> set[str]:
    return set(re.findall(r"`([a-z_]+)", text))


def test_every_command_and_its_own_options_are_in_the_command_table() -> None:
    commands = _commands()
    rows: dict[str, str] = {}
    for line in _section("Command line").splitlines():
        m = re.match(r"\| `otel-eval (\w+)", line)
        if m:
            rows[m.group(1)] = line
    assert set(rows) == set(commands), "a command missing from (or unknown to) api.md"
    for name, options in commands.items():
        named = set(OPTION.findall(rows[name]))
        assert named <= options, f"api.md names options `{name}` lacks: {named - options}"
        missing = options - SHARED - GLOBAL - named
        assert not missing, f"api.md's `{name}` row lacks {sorted(missing)}"
        assert f"``{name}``" in DESCRIPTION, f"otel-eval --help does not name `{name}`"
    after = _section("Command line").split("| `otel-eval config` |")[1]
    assert all(f"`{flag}" in after for flag in GLOBAL), "a global flag missing from api.md"


def test_every_option_an_example_passes_exists() -> None:
    commands = _commands()
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            ROOT / "helm" / "otel-eval" / "README.md", ROOT / "bench" / "README.md"]
    wrong = []
    for doc in docs:
        text = doc.read_text(encoding="utf-8")
        for m in re.finditer(rf"otel-eval ({'|'.join(commands)})\b([^`\n|]*)", text):
            for option in OPTION.findall(m.group(2)):
                if option not in commands[m.group(1)]:
                    line = text.count("\n", 0, m.start()) + 1
                    wrong.append(f"{doc.name}:{line}: otel-eval {m.group(1)} {option}")
    assert not wrong, wrong


def _eval(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    main(["eval", *argv, "--format", "jsonl"])
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _keys(objects: list[Any]) -> set[str]:
    return {k for o in objects if isinstance(o, dict) for k in o}


def test_every_field_of_the_result_and_the_session_record_is_described(
        capsys: pytest.CaptureFixture[str]) -> None:
    guide = DATA / "detectors" / "guide_lucky_recovery"
    records = [*_eval(capsys, str(DATA / "loaders")),
               *_eval(capsys, f"{guide}.otlp.json", "--references",
                      f"{guide}.references.jsonl"),
               *_eval(capsys, "--turns", str(DATA / "loaders" / "tau_runs.json"))]
    runs = [r for r in records if "record" not in r]
    sessions = [r for r in records if r.get("record") == "session"]
    assert runs and sessions
    # the stand-in stored when evaluating a trace raised
    runs.append(Evaluation(Trajectory("0" * 32, "otlp", "complete", steps=[]),
                           error="ValueError: x").to_json())
    rows = _rows(_section("The per-trace result (v1)"))
    steps = [s for r in runs for s in r["steps"]]
    parts = {
        "the result": (_keys(runs), set(rows)),
        "steps": (_keys(steps), _named(rows["steps"])),
        "tool_calls": (_keys([c for s in steps for c in s.get("tool_calls") or ()]),
                       _named(rows["steps"])),
        "counts": (_keys([r["counts"] for r in runs]), _named(rows["counts"])),
        "usage": (_keys([r["usage"] for r in runs]), _named(rows["usage"])),
        "findings": (_keys([f for r in runs for f in r["findings"]]),
                     _named(rows["findings"])),
        "verdict": (_keys([r["verdict"] for r in runs]), _named(rows["verdict"])),
        "code_actions": ({re.sub("^unparsed_.*", "unparsed_", k)
                          for k in _keys([r.get("code_actions") for r in runs])},
                         _named(rows["code_actions"])),
        "the session record": (_keys(sessions), _named(_section("Sessions (conversations)"))
                               | _named(rows["source"]) | {"record"}),
    }
    for part, (produced, described) in parts.items():
        assert produced - described == set(), f"api.md does not describe {part}'s fields"


def test_the_connection_close_reasons_listed_are_the_codes() -> None:
    text = (ROOT / "docs" / "transport-security.md").read_text(encoding="utf-8")
    m = re.search(r"otel_eval_receiver_connections_closed_total\{listener,reason\}` \(([^)]*)\)",
                  text)
    assert m is not None
    assert set(re.findall(r"`([a-z0-9_]+)`", m.group(1))) == set(CLOSE_REASONS)


def test_every_value_an_enumerated_field_takes_is_listed() -> None:
    """The result's `convention` row listed six values; a Vercel AI SDK, Langfuse or MLflow
    run is stored with `vercel_ai`, `langfuse` or `mlflow` (a reader that takes the row
    for the set of values refuses them)."""
    from typing import get_args

    from otel_eval.base.model import TraceStatus
    from otel_eval.base.steps import AgentSource, StepKind
    from otel_eval.evaluate.conventions import ADAPTERS, UNKNOWN

    rows = _rows(_section("The per-trace result (v1)"))
    values = {
        "convention": {a.name for a in ADAPTERS} | {"mixed", UNKNOWN},
        "status": set(get_args(TraceStatus)),
        "agent_source": set(get_args(AgentSource)),
    }
    for field, produced in values.items():
        listed = set(re.findall(r"`([a-z_]+)`", rows[field].split(" | ")[1]))
        assert produced <= listed, f"api.md's `{field}` lacks {sorted(produced - listed)}"
    listed = set(re.findall(r"`kind` \(([^)]*)\)", rows["steps"])[0].replace("`", "").split())
    assert set(get_args(StepKind)) <= listed


def test_the_json_depth_transport_security_states_is_the_bound() -> None:
    """docs/transport-security.md said JSON deeper than 100 levels is a 400; the bound is
    ``MAX_JSON_DEPTH`` (160: past the 134 levels of the deepest OTLP protobuf decodes), and a
    sender reading the page took 101..160 levels for refused."""
    from otel_eval.decode.body import MAX_JSON_DEPTH
    text = (ROOT / "docs" / "transport-security.md").read_text(encoding="utf-8")
    assert re.findall(r"JSON deeper than (\d+) levels", text) == [str(MAX_JSON_DEPTH)]


def test_the_polling_paragraph_names_the_stores_write_waits() -> None:
    """A run is stored after its evaluation time (worker processes, a fleet, a batch): the API
    says so where a client learns to poll with ``since``, with the waits the stores have
    (the behaviour: tests/store/test_store_contract.py, the late-committed run)."""
    from otel_eval.store.config import StoreConfig
    from otel_eval.store.sqlite import _BUSY_TIMEOUT_S

    text = " ".join(API.read_text(encoding="utf-8").split())
    start = text.index("**Polling for new runs.**")
    paragraph = text[start:text.index("Every `GET` above", start)]
    assert f"up to {_BUSY_TIMEOUT_S:g} s for the file's write lock" in paragraph
    assert (f"`store.statement_timeout_s`, {StoreConfig().statement_timeout_s:g} s"
            in paragraph)
    for says in ("misses it", "not returned again by a later `since`",
                 "(`trace_id`, `revision`)"):
        assert says in paragraph
