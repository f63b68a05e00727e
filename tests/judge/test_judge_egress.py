"""What leaves the process (docs/SECURITY.md): with the judge on, only the judge's calls to the
configured model; with it off, nothing. Each run is a fresh interpreter whose audit hook
records every name lookup and connect, without the tests' LITELLM_LOCAL_MODEL_COST_MAP or any
HF_HUB_OFFLINE, so whatever litellm would fetch (its price map from GitHub at import, a
tokenizer from the Hugging Face Hub when counting tokens) shows up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from judge_fake_llm import FakeLLM, Reply
from test_judge_eval_cli import _trace_file
from test_judge_serve import _scripted

from otel_eval.base.configcheck import FieldErrors
from otel_eval.evaluate.judge.config import JudgeConfig

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = {"127.0.0.1", "localhost", "::1"}

_AUDITED = """
import json, sys
seen = []
def hook(event, args):
    if event == "socket.getaddrinfo":
        seen.append(str(args[0]))
    elif event == "socket.connect" and isinstance(args[1], tuple):
        seen.append(str(args[1][0]))
sys.addaudithook(hook)
from otel_eval.app.cli import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    json.dump(seen, f)
sys.exit(code)
"""


def _hosts_contacted(tmp_path: Path, *args: str) -> tuple[list[str], list[dict[str, object]]]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("LITELLM_LOCAL_MODEL_COST_MAP", "HF_HUB_OFFLINE")}
    env |= {"OPENAI_API_KEY": "sk-test-loopback",
            "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])}
    seen = tmp_path / "hosts.json"
    r = subprocess.run([sys.executable, "-c", _AUDITED, str(seen), "eval", *args,
                        "--format", "jsonl"], capture_output=True, text=True, env=env,
                       timeout=240, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(seen.read_text()), [json.loads(ln) for ln in r.stdout.splitlines()]


@pytest.mark.parametrize(("model", "limits"), [
    ("openai/gpt-4o-mini", ""),
    # a Llama served OpenAI-style (vLLM) with a token limit: litellm's token counter would
    # fetch the Llama tokenizer from the Hugging Face Hub; free, and unpriced: no cost cap
    ("openai/llama-3-8b-instruct", "  tokens_per_min: 1000000\n  max_cost_usd_per_hour: 0\n"),
])
def test_judge_on_contacts_only_the_configured_model(llm: FakeLLM, tmp_path: Path, model: str,
                                                     limits: str) -> None:
    llm.route = _scripted
    (tmp_path / "c.yaml").write_text("judge:\n  max_concurrency: 1\n  max_retries: 0\n"
                                     + limits)
    hosts, results = _hosts_contacted(
        tmp_path, str(_trace_file(tmp_path, 2)), "--config", str(tmp_path / "c.yaml"),
        "--judge", model, "--judge-api-base", llm.api_base)
    assert [r["judge"]["overall"]["status"] for r in results] == ["ok", "ok"]  # type: ignore[index]
    assert len(llm.requests) == 2
    assert hosts and set(hosts) <= LOOPBACK, hosts


def test_judge_off_contacts_nothing(tmp_path: Path) -> None:
    hosts, results = _hosts_contacted(tmp_path, str(_trace_file(tmp_path, 2)))
    assert len(results) == 2 and all(r.get("judge") is None for r in results), results
    assert hosts == []


_OLLAMA_AUDITED = """
import asyncio, json, sys
seen = []
def hook(event, args):
    if event == "socket.connect" and isinstance(args[1], tuple):
        seen.append(list(args[1][:2]))
sys.addaudithook(hook)
from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.judge.judge import Judge
from otel_eval.evaluate.judge.schemas import trace_schema
judge = Judge(JudgeConfig(model=sys.argv[1], api_base=sys.argv[2], max_retries=0))
r = asyncio.run(judge.client.call([{"role": "user", "content": "grade"}], trace_schema()))
print(json.dumps({"status": r.status, "error": r.error, "connects": seen}))
"""


@pytest.mark.parametrize("model", ["ollama/judge-not-in-the-price-map",
                                   "ollama_chat/judge-not-in-the-price-map"])
def test_an_ollama_judge_contacts_only_its_api_base(llm: FakeLLM, model: str) -> None:
    # litellm asks an Ollama server about a model missing from its price map (/api/show, for
    # the cost, the response-schema check, the Responses bridge) at OLLAMA_API_BASE or
    # localhost:11434, never at the request's api_base: synchronously, on the event loop
    content = json.dumps({"critique": "c", "score": 0.5})
    reply = {"model": model.split("/")[1], "created_at": "2024-01-01T00:00:00Z", "done": True,
             "done_reason": "stop", "response": content,
             "message": {"role": "assistant", "content": content},
             "prompt_eval_count": 10, "eval_count": 5}
    llm.script(Reply(200, reply))
    port = llm.server.server_address[1]
    env = {k: v for k, v in os.environ.items() if k != "OLLAMA_API_BASE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", _OLLAMA_AUDITED, model, f"http://127.0.0.1:{port}"],
                       capture_output=True, text=True, env=env, timeout=240, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["status"] == "ok", out["error"]
    assert len(llm.requests) == 1
    assert out["connects"] and {tuple(c) for c in out["connects"]} == {("127.0.0.1", port)}, out


@pytest.mark.parametrize("model", ["lemonade/some-model", "LEMONADE/x"])
def test_a_provider_that_calls_an_unconfigured_host_is_refused_at_load(model: str) -> None:
    # litellm's Lemonade provider lists the server's models at LEMONADE_API_BASE or
    # localhost:8000 before each call, whatever api_base says (an audit helper saw it connect
    # to 127.0.0.1:8000); no price map entry stops it
    with pytest.raises(FieldErrors, match=r"lemonade.*openai/<model>"):
        JudgeConfig(model=model, api_base="http://127.0.0.1:9")
    assert JudgeConfig(model="openai/some-model", api_base="http://127.0.0.1:9").model
