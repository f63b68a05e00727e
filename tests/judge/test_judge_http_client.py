"""The HTTP client the judge hands litellm (``judge.transport``): it bounds the reply read and
tells when a request was sent whole, and is otherwise the client litellm would have used:
through the proxy the environment names, for every provider it is handed to."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import math
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from judge_fake_llm import FakeLLM, Reply, good
from judge_fixtures import config, evaluation
from support.tls_certs import TestCA

from otel_eval.evaluate.judge import Judge, JudgeQueue
from otel_eval.evaluate.judge.client import JudgeClient, close_clients
from otel_eval.evaluate.judge.observer import NoopObserver
from otel_eval.evaluate.judge.transport import HANDLER_PROVIDERS, SDK_PROVIDERS

# a model of each provider handed the bounded handler, as litellm names it
_MODELS = {
    "anthropic": "anthropic/claude-3-5-haiku-20241022", "azure_ai": "azure_ai/m",
    "bedrock": "bedrock/anthropic.claude-3-5-haiku-20241022-v1:0",
    "deepseek": "deepseek/deepseek-chat",
    "fireworks_ai": "fireworks_ai/accounts/x/models/y", "gemini": "gemini/gemini-2.0-flash",
    "groq": "groq/llama3-8b-8192", "hosted_vllm": "hosted_vllm/m",
    "huggingface": "huggingface/x/y", "mistral": "mistral/mistral-small",
    "ollama": "ollama/llama3", "ollama_chat": "ollama_chat/llama3",
    "openrouter": "openrouter/x/y", "together_ai": "together_ai/x/y", "xai": "xai/grok-2",
    # on the openai SDK, with the environment variable of their key
    "cerebras": "cerebras/llama3.1-8b", "lm_studio": "lm_studio/m",
    "nvidia_nim": "nvidia_nim/meta/llama3-8b-instruct", "perplexity": "perplexity/sonar",
    "sambanova": "sambanova/Meta-Llama-3.1-8B-Instruct", "dashscope": "dashscope/qwen-plus",
    "deepinfra": "deepinfra/x/y", "litellm_proxy": "litellm_proxy/m",
    "moonshot": "moonshot/moonshot-v1-8k", "nebius": "nebius/x/y", "novita": "novita/x/y",
    "friendliai": "friendliai/m", "github": "github/m", "lambda_ai": "lambda_ai/m",
    "nscale": "nscale/m"}
_KEYS = {"cerebras": "CEREBRAS_API_KEY", "lm_studio": "LM_STUDIO_API_KEY",
         "nvidia_nim": "NVIDIA_NIM_API_KEY", "perplexity": "PERPLEXITYAI_API_KEY",
         "sambanova": "SAMBANOVA_API_KEY", "dashscope": "DASHSCOPE_API_KEY",
         "deepinfra": "DEEPINFRA_API_KEY", "litellm_proxy": "LITELLM_PROXY_API_KEY",
         "moonshot": "MOONSHOT_API_KEY", "nebius": "NEBIUS_API_KEY",
         "novita": "NOVITA_API_KEY", "friendliai": "FRIENDLIAI_API_KEY",
         "github": "GITHUB_API_KEY", "lambda_ai": "LAMBDA_API_KEY", "nscale": "NSCALE_API_KEY"}


class Calls(NoopObserver):
    def __init__(self) -> None:
        self.paid: list[tuple[str, str]] = []

    def call(self, judge: str, status: str, *figures: Any) -> None:
        self.paid.append((judge, status))


def _hang(llm: FakeLLM) -> threading.Event:
    asked = threading.Event()

    def route(body: dict[str, Any]) -> Reply:
        asked.set()
        return Reply(hang=True)  # a slow model, still thinking at the stop
    llm.route = route
    return asked


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


@pytest.mark.parametrize("variable", ["OPENAI_API_BASE", "OPENAI_BASE_URL"])
def test_the_judge_reaches_the_openai_server_the_environment_names(
        variable: str, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without judge.api_base litellm sends an ``openai/`` model to the server
    OPENAI_API_BASE (or OPENAI_BASE_URL) names, a team's gateway; the bounded client it was
    handed was made on the SDK's default (which reads OPENAI_BASE_URL only), so the prompt
    went to api.openai.com instead. A proxy that refuses stands for that host here: the
    request never leaves loopback."""
    monkeypatch.setenv(variable, llm.api_base)
    for proxy in ("HTTPS_PROXY", "https_proxy"):  # not for http://, the loopback server's
        monkeypatch.setenv(proxy, "http://127.0.0.1:1")
    for proxy in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    llm.script(good({"critique": "ok", "score": 0.9}))
    client = JudgeClient(config("", max_retries=0))

    async def main() -> Any:
        try:
            return await client.call([{"role": "user", "content": "grade this"}],
                                     {"type": "object"}, "trace")
        finally:
            await close_clients()

    result = asyncio.run(asyncio.wait_for(main(), 30))
    assert result.status == "ok" and llm.requests, result


def test_an_anthropic_request_sent_then_cut_by_the_stop_is_spent(llm: FakeLLM) -> None:
    """A request the provider had when the stop cancelled it is billed all the same; for
    providers other than ``openai`` whether it was sent was not known (litellm sent it on its
    own client), so it was spent nowhere: no total, metric or hourly budget. The providers
    that send through the litellm handler they are handed are now handed the bounded one,
    which tells: the prompt's estimate is spent, as for ``openai``."""
    calls, asked = Calls(), _hang(llm)
    skipped: list[Any] = []
    judge = Judge(config(llm.api_base.removesuffix("/v1"), model=_MODELS["anthropic"],
                         enabled=("trace",), input_cost_per_token_usd=1e-6),
                  observer=calls)

    async def main() -> None:
        q = JudgeQueue(judge, 10, lambda ev: None,
                       lambda ev, reason: skipped.append((ev, reason)))
        await q.start()
        q.submit(evaluation())
        assert await asyncio.to_thread(asked.wait, 30)
        await q.shutdown(0.0)

    asyncio.run(asyncio.wait_for(main(), 30))
    assert calls.paid == [("trace", "cancelled")]
    (ev, reason), = skipped
    totals = ev.judge.get("totals", {})
    assert reason == "shutdown" and totals.get("calls") == 1, ev.judge
    assert totals["tokens"]["input"] >= math.ceil(
        len(json.dumps(llm.requests[0]["messages"])) / 3.5)
    spent = judge.client.budget.spent(judge.client.clock())
    assert totals["cost_usd"] > 0 and spent == pytest.approx(totals["cost_usd"])


@pytest.mark.parametrize("provider", sorted(HANDLER_PROVIDERS))
def test_each_provider_handed_the_bounded_client_tells_a_sent_request(
        provider: str, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through litellm to the scripted server: a provider handed the handler sends on it
    (else a request cancelled once sent would be spent nothing), and takes it (else every
    call would fail: the providers on the openai SDK refuse one)."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):  # bedrock signs the request
        monkeypatch.setenv(key, "test-loopback")
    monkeypatch.setenv("AWS_REGION_NAME", "us-east-1")
    asked = _hang(llm)
    client = JudgeClient(config(llm.api_base, model=_MODELS[provider],
                                input_cost_per_token_usd=1e-6))

    async def main() -> None:
        task = asyncio.ensure_future(client.call(
            [{"role": "user", "content": "grade this"}], {"type": "object"}, "trace"))
        assert await asyncio.to_thread(asked.wait, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await close_clients()

    asyncio.run(asyncio.wait_for(main(), 30))
    assert client.budget.spent(client.clock()) > 0
    # the User-Agent litellm's own handler sends (not httpx's: a gateway may filter on it)
    assert llm.headers[0]["user-agent"] == f"litellm/{importlib.metadata.version('litellm')}"


def test_an_anthropic_reply_is_not_read_past_max_reply_bytes(llm: FakeLLM) -> None:
    """The providers handed the bounded handler stop reading a reply at its bound, as
    ``openai`` does (they read it whole before)."""
    total = 40 * 1024 * 1024
    llm.route = lambda body: Reply(200, "x" * total)
    client = JudgeClient(config(llm.api_base.removesuffix("/v1"), model=_MODELS["anthropic"],
                                max_reply_bytes=1000, input_cost_per_token_usd=1e-6))

    async def main() -> Any:
        try:
            return await client.call([{"role": "user", "content": "grade this"}],
                                     {"type": "object"}, "trace")
        finally:
            await close_clients()

    result = asyncio.run(asyncio.wait_for(main(), 30))
    assert result.status == "parse_error" and "not read further" in result.error, result
    assert llm.answered.wait(60)
    assert llm.sent_bytes < total // 2


def test_the_providers_on_the_openai_sdk_are_those_checked_here() -> None:
    assert set(_KEYS) == SDK_PROVIDERS


@pytest.mark.parametrize("provider", sorted(_KEYS))
def test_each_provider_on_the_openai_sdk_tells_a_sent_request_and_keeps_its_key(
        provider: str, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """The providers litellm sends through the openai SDK (perplexity, cerebras, friendliai,
    github, lambda_ai, nscale: litellm's openai_compatible_providers, ...) sent on
    litellm's own client: a request of theirs cancelled once the server had it was spent
    nothing, and their replies were read whole. They are handed the bounded ``AsyncOpenAI``
    client, made on the provider's own key (not OPENAI_API_KEY, which the SDK would read)."""
    monkeypatch.setenv(_KEYS[provider], f"{provider}-key")
    asked = _hang(llm)
    client = JudgeClient(config(llm.api_base, model=_MODELS[provider],
                                input_cost_per_token_usd=1e-6))

    async def main() -> None:
        task = asyncio.ensure_future(client.call(
            [{"role": "user", "content": "grade this"}], {"type": "object"}, "trace"))
        assert await asyncio.to_thread(asked.wait, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await close_clients()

    asyncio.run(asyncio.wait_for(main(), 30))
    assert client.budget.spent(client.clock()) > 0
    assert llm.headers[0]["authorization"] == f"Bearer {provider}-key"


@pytest.mark.parametrize("provider", sorted(_KEYS))
def test_each_provider_on_the_openai_sdk_gets_its_grade(
        provider: str, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """Handed the bounded client, a provider on the openai SDK still reads its reply."""
    monkeypatch.setenv(_KEYS[provider], f"{provider}-key")
    llm.script(good({"critique": "ok", "score": 0.9}))
    client = JudgeClient(config(llm.api_base, model=_MODELS[provider], max_retries=0))

    async def main() -> Any:
        try:
            return await client.call([{"role": "user", "content": "grade this"}],
                                     {"type": "object"}, "trace")
        finally:
            await close_clients()

    result = asyncio.run(asyncio.wait_for(main(), 30))
    assert result.status == "ok" and result.data == {"critique": "ok", "score": 0.9}, result


def test_a_perplexity_reply_is_not_read_past_max_reply_bytes(
        llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """A provider on the openai SDK stops reading a reply at its bound, as ``openai`` does."""
    monkeypatch.setenv("PERPLEXITYAI_API_KEY", "perplexity-key")
    total = 40 * 1024 * 1024
    llm.route = lambda body: Reply(200, "x" * total)
    client = JudgeClient(config(llm.api_base, model=_MODELS["perplexity"],
                                max_reply_bytes=1000, input_cost_per_token_usd=1e-6))

    async def main() -> Any:
        try:
            return await client.call([{"role": "user", "content": "grade this"}],
                                     {"type": "object"}, "trace")
        finally:
            await close_clients()

    result = asyncio.run(asyncio.wait_for(main(), 30))
    assert result.status == "parse_error" and "not read further" in result.error, result
    assert llm.answered.wait(60)
    assert llm.sent_bytes < total // 2


@pytest.fixture
def mtls_llm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLM]:
    """The scripted server over TLS with a certificate of a CA the test makes, asking the
    client for a certificate of that CA (mutual TLS, a private gateway in front of a model);
    the judge's side set up as litellm reads it: SSL_CERT_FILE (the CA), SSL_CERTIFICATE
    (the client's certificate and key, one file)."""
    ca = TestCA(tmp_path)
    server, client = ca.issue("localhost", server=True), ca.issue("judge", server=False)
    both = tmp_path / "judge-client.pem"
    both.write_bytes(client.cert.read_bytes() + client.key.read_bytes())
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.path))
    monkeypatch.setenv("SSL_CERTIFICATE", str(both))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-loopback")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca.path))
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(server.cert, server.key)
    fake = FakeLLM()  # the handshake in the request's thread, not the accepting one
    fake.server.socket = context.wrap_socket(fake.server.socket, server_side=True,
                                             do_handshake_on_connect=False)
    fake.start()
    yield fake
    fake.stop()


@pytest.mark.parametrize("model", ["openai/gpt-4o-mini", _MODELS["anthropic"]])
def test_the_judge_presents_the_client_certificate_litellm_is_given(
        model: str, mtls_llm: FakeLLM) -> None:
    """SSL_CERTIFICATE names the client certificate litellm presents (its handler's httpx
    client loads it): the bounded client the judge hands litellm presented none, so behind
    a gateway asking for one (mTLS) every judge call failed in the handshake, the server
    never read a request."""
    mtls_llm.script(good({"critique": "ok", "score": 0.9}))
    api_base = mtls_llm.api_base.replace("http://", "https://")  # 127.0.0.1 in its names
    if not model.startswith("openai/"):
        api_base = api_base.removesuffix("/v1")
    client = JudgeClient(config(api_base, model=model, max_retries=0))

    async def main() -> Any:
        try:
            return await client.call([{"role": "user", "content": "grade this"}],
                                     {"type": "object"}, "trace")
        finally:
            await close_clients()

    result = asyncio.run(asyncio.wait_for(main(), 30))
    assert mtls_llm.requests, result
    if model.startswith("openai/"):
        assert result.status == "ok", result


@pytest.mark.parametrize("model", ["openai/gpt-4o-mini", _MODELS["hosted_vllm"]])
def test_the_judge_keeps_no_cookie_a_server_sets(
        model: str, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """litellm's handler's HTTP clients keep no cookie (a jar that stores none: they are
    shared by every caller); the bounded client, shared by every judge on the loop, kept each
    a server set and sent them all back on every later call, the jar growing with each new
    name for as long as the process ran."""
    def route(body: dict[str, Any]) -> Reply:
        reply = good({"critique": "ok", "score": 0.9})
        reply.headers = {"Set-Cookie": f"c{len(llm.requests)}=v; Path=/"}
        return reply
    llm.route = route
    client = JudgeClient(config(llm.api_base, model=model, max_retries=0))

    async def main() -> None:
        try:
            for _ in range(3):
                result = await client.call([{"role": "user", "content": "grade this"}],
                                           {"type": "object"}, "trace")
                assert result.status == "ok", result
        finally:
            await close_clients()

    asyncio.run(asyncio.wait_for(main(), 30))
    assert [h.get("cookie") for h in llm.headers] == [None, None, None]
