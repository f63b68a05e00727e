"""litellm: a custom agent loop that calls the model through LiteLLM's SDK
(``litellm.completion``, the OpenAI provider pointed at the scripted LLM), traced by LiteLLM's
own OpenTelemetry callback (``litellm.callbacks = ["otel"]``, on the global tracer provider),
inside hand-made GenAI agent and tool spans (``common.genai_agent``).
``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import os
import sys
from typing import Any

import common


class _Completions:
    """``client.chat.completions.create`` as ``common.chat_loop`` calls it, over LiteLLM."""

    def create(self, **kwargs: Any) -> Any:
        import litellm
        return litellm.completion(model=f"openai/{kwargs.pop('model')}",
                                  api_base=os.environ["OPENAI_BASE_URL"],
                                  api_key=os.environ["OPENAI_API_KEY"], **kwargs)


class _Client:
    def __init__(self) -> None:
        self.chat = type("Chat", (), {"completions": _Completions()})()


def main(scenario: str) -> None:
    common.setup()
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # no price-list download
    import litellm

    litellm.callbacks = ["otel"]
    if scenario == "conversation":  # one run per user turn; the id on the agent span
        for question in common.turns():
            common.genai_agent(scenario, "gen_ai.provider.name", question,
                               conversation_id=common.CONVERSATION_ID, client=_Client())
    else:
        common.genai_agent(scenario, "gen_ai.provider.name", client=_Client())
    # LiteLLM logs each call from a thread pool after it returns: let the last ones finish
    # before the providers flush (the process exits next)
    from litellm.litellm_core_utils.thread_pool_executor import executor
    executor.shutdown(wait=True)
    common.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
