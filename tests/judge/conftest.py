"""Judge tests: litellm against a scripted OpenAI-compatible server on loopback."""

from __future__ import annotations

import os

# litellm fetches its price map from GitHub at import unless told otherwise; tests stay on
# loopback. Must be set before litellm is first imported.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from collections.abc import Iterator

import pytest
from judge_fake_llm import FakeLLM


def pytest_configure(config: pytest.Config) -> None:
    # litellm lazily imports typed dicts on its first request; pydantic then warns about
    # their `ReadOnly` items (not ours to fix). Narrow: this message only.
    config.addinivalue_line(
        "filterwarnings",
        "ignore:Items? .* on TypedDict class .* using the `ReadOnly` qualifier:UserWarning")


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLM]:
    # the key comes from the environment, as in production (litellm reads it)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-loopback")
    server = FakeLLM()
    server.start()
    yield server
    server.stop()
