"""The HTTP client the judge hands litellm (``judge.transport``): it bounds the reply read and
tells when a request was sent whole, and is otherwise the client litellm would have used:
through the proxy the environment names, for every provider it is handed to."""

from __future__ import annotations

import asyncio

import pytest
from judge_fake_llm import FakeLLM, good
from judge_fixtures import config, evaluation

from otel_eval.evaluate.judge import Judge


def test_the_judge_reaches_its_model_through_the_environments_proxy(
        llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP(S)_PROXY named the only way out (a corporate proxy): litellm and the openai SDK
    go through it, the judge's bounded client went straight to the host (httpx takes no
    proxy from the environment for a client given its own transport), so every call failed
    with a connection error. The scripted server stands for the proxy here: a call to a
    host no resolver knows reaches it only through the proxy."""
    monkeypatch.setenv("HTTP_PROXY", llm.api_base.removesuffix("/v1"))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    llm.by_schema({"trace_grade": good({"critique": "ok", "score": 0.9})})
    judge = Judge(config("http://judge.invalid/v1", enabled=("trace",)))
    result = asyncio.run(judge.judge(evaluation()))
    assert llm.requests, result
    assert all(j["status"] == "ok" for j in result["judges"].values()), result
