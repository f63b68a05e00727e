"""The judge as a user meets it: ``eval --format jsonl --judge`` keeps stdout to JSON lines,
litellm makes no outbound call at start, a local OpenAI-compatible server needs no key, a
missing key is refused once at start, and failed calls are counted as failed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from judge_fake_llm import FakeLLM, error
from test_judge_eval_cli import _trace_file
from test_judge_serve import _scripted

from otel_eval.app.cli import main

ROOT = Path(__file__).resolve().parents[2]

# Imports a module with a socket guard: every name lookup or connect is recorded, then printed.
_GUARD = """
import importlib, json, sys
seen = []
sys.addaudithook(lambda event, args: seen.append([event, repr(args)[:120]])
                 if event in ("socket.getaddrinfo", "socket.connect") else None)
for name in sys.argv[1:]:
    importlib.import_module(name)
from otel_eval.evaluate.detectors.budget import model_prices
model_prices("gpt-4o-mini")  # the budget detector's path into litellm's price map
print(json.dumps(seen))
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LITELLM") and k != "OPENAI_API_KEY"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return {**env, **extra}


def test_importing_the_judge_makes_no_outbound_call() -> None:
    # litellm, left alone, resolves raw.githubusercontent.com at import to fetch its prices
    done = subprocess.run([sys.executable, "-c", _GUARD, "otel_eval.evaluate.judge.client"],
                          capture_output=True, text=True, env=_env(), timeout=120, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == []
    assert "cost map" not in done.stderr


def test_eval_jsonl_with_a_keyless_local_judge_prints_only_json_lines(
        llm: FakeLLM, tmp_path: Path) -> None:
    llm.route = _scripted
    path = _trace_file(tmp_path, 2)
    done = subprocess.run(
        [sys.executable, "-m", "otel_eval.app.cli", "eval", str(path), "--format", "jsonl",
         "--judge", "openai/gpt-4o-mini", "--judge-api-base", llm.api_base],
        capture_output=True, text=True, env=_env(), timeout=120)  # no OPENAI_API_KEY
    assert done.returncode == 0, done.stderr
    bodies = [json.loads(line) for line in done.stdout.splitlines()]  # litellm's INFO: not JSON
    assert [b["judge"]["overall"]["status"] for b in bodies] == ["ok", "ok"]
    assert "2 traces judged in 2 calls" in done.stderr and "failed" not in done.stderr


def test_a_missing_key_without_api_base_is_refused_at_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code = main(["eval", str(_trace_file(tmp_path, 1)), "--format", "jsonl",
                 "--judge", "openai/gpt-4o-mini"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert "judge.model: openai/gpt-4o-mini needs OPENAI_API_KEY" in err


def test_failed_calls_are_counted_as_failed(llm: FakeLLM, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    llm.route = lambda body: error(400)  # not retried: one failed call per trace
    (tmp_path / "c.yaml").write_text("judge:\n  max_concurrency: 1\n")
    code = main(["eval", str(_trace_file(tmp_path, 2)), "--format", "jsonl", "--config",
                 str(tmp_path / "c.yaml"), "--judge", "openai/gpt-4o-mini",
                 "--judge-api-base", llm.api_base])
    out, err = capsys.readouterr()
    assert code == 0
    assert [json.loads(x)["judge"]["overall"]["status"] for x in out.splitlines()] == \
        ["error", "error"]
    assert "0 traces judged in 2 calls" in err
    assert "failed calls: 2; failed traces: 2 error" in err


def test_a_spending_cap_on_a_model_without_a_price_is_refused_at_start(
        llm: FakeLLM, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A model litellm's packaged map has no price for (one released after the pinned
    litellm) and no judge prices: every call was costed $0, so judge.max_cost_usd_per_hour
    (default 1.0) and --max-cost-usd never stopped the spending. Now refused at start,
    naming both fixes; without a cap, or with prices, or a model the map prices (Ollama's:
    free), it runs."""
    llm.route = _scripted
    path = str(_trace_file(tmp_path, 1))
    judge = ["--judge", "openai/gpt-9-unreleased", "--judge-api-base", llm.api_base]
    for cap, no_cap in (([], "judge.max_cost_usd_per_hour: 0"),
                        (["--max-cost-usd", "5"], "no --max-cost-usd")):
        code = main(["eval", path, "--format", "jsonl", *judge, *cap])
        out, err = capsys.readouterr()
        assert code == 2 and out == "", err
        assert "litellm has no price for openai/gpt-9-unreleased" in err
        assert "judge.input_cost_per_token_usd" in err and no_cap in err
    for fix in ("judge:\n  max_cost_usd_per_hour: 0\n",
                "judge:\n  input_cost_per_token_usd: 1.0e-6\n"
                "  output_cost_per_token_usd: 4.0e-6\n"):
        (tmp_path / "c.yaml").write_text(fix)
        code = main(["eval", path, "--format", "jsonl", "--config", str(tmp_path / "c.yaml"),
                     *judge])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert json.loads(out)["judge"]["overall"]["status"] == "ok"
    code = main(["eval", path, "--format", "jsonl", "--judge", "ollama/llama3.1",
                 "--judge-api-base", llm.api_base])
    assert code == 0, capsys.readouterr().err


def test_the_cost_of_a_model_without_a_price_is_unknown_not_zero(
        llm: FakeLLM, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No cap and no prices for a model litellm cannot price: its calls were reported as
    costing $0.0000 (the judge object's cost_usd, eval's cost line). Now unknown: null and
    "cost unknown"."""
    llm.route = _scripted
    (tmp_path / "c.yaml").write_text("judge:\n  max_cost_usd_per_hour: 0\n")
    code = main(["eval", str(_trace_file(tmp_path, 1)), "--format", "jsonl", "--config",
                 str(tmp_path / "c.yaml"), "--judge", "openai/gpt-9-unreleased",
                 "--judge-api-base", llm.api_base])
    out, err = capsys.readouterr()
    assert code == 0, err
    judged = json.loads(out)["judge"]
    assert judged["overall"]["status"] == "ok"
    assert judged["totals"]["cost_usd"] is None
    assert all(j["cost_usd"] is None for j in judged["judges"].values() if j["calls"])
    assert "cost unknown" in err and "$0.0000" not in err


def test_serve_refuses_an_unpriced_cap_before_it_migrates_the_store_or_the_spool(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """An upgrade in place: the store (schema 17) and spool (schema 4) of the release before
    this one, and its configuration, a judge model litellm has no price for, which that
    release took. This one refuses it at start (the cap would never apply), but did so
    when the judge started, after the store and spool were migrated: the release the
    operator went back to then refused both as written by a newer one. A configuration
    refused is now refused before anything is opened: the files are left as they were."""
    import sqlite3

    from prometheus_client import CollectorRegistry

    from otel_eval.assemble.spool import Spool
    from otel_eval.store import open_store
    from otel_eval.telemetry.metrics import Metrics

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    db = str(tmp_path / "otel-eval.db")
    open_store(db).close()
    spool = Spool(f"{db}-spool", 1 << 20, Metrics(CollectorRegistry()).spool).open()
    spool.close()
    with sqlite3.connect(db) as conn:  # as the release before migration 18 left it
        conn.execute("ALTER TABLE sessions DROP COLUMN first_completed_at_ns")
        conn.execute("DELETE FROM schema_version WHERE version >= 18")
    conn.close()
    with sqlite3.connect(f"{db}-spool") as conn:  # as spool schema 4 was
        conn.execute("ALTER TABLE spool_traces DROP COLUMN cut")
        conn.execute("DROP TABLE spool_refused")
        conn.execute("PRAGMA user_version = 4")
    conn.close()

    code = main(["serve", "--store", db, "--workers", "1", "--judge", "openai/gpt-9-unreleased",
                 "--judge-api-base", "http://127.0.0.1:9/v1",
                 "--grpc-endpoint", "127.0.0.1:0", "--http-endpoint", "127.0.0.1:0",
                 "--admin-endpoint", "127.0.0.1:0"])
    err = capsys.readouterr().err
    assert code == 2 and "litellm has no price for openai/gpt-9-unreleased" in err, err
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone() == (17,)
    conn.close()
    with sqlite3.connect(f"{db}-spool") as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (4,)
    conn.close()
