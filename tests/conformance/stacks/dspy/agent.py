"""dspy: a DSPy ``ReAct`` agent (the get_weather tool; the signature ``question -> answer``)
inside a ``dspy.Module`` of the user's own (``WeatherAgent``), the LM a ``dspy.LM`` on the
OpenAI-compatible endpoint through litellm, instrumented as Arize Phoenix's DSPy docs show:
OpenInference's ``DSPyInstrumentor`` (module, predictor, adapter, LM and tool spans) plus its
``LiteLLMInstrumentor`` (the completion calls under them). The LM speaks DSPy's ChatAdapter
text format (``[[ ## next_thought ## ]]`` ...), which the scripted LLM answers; a tool error
is fed back as ReAct's observation. ``streaming`` runs the program through ``dspy.streamify``
(streamed completions). ``python agent.py SCENARIO`` (in the stack's venv)."""

from __future__ import annotations

import asyncio
import os
import sys

import common

MAX_ITERS = common.MAX_TURNS


def main(scenario: str) -> None:
    common.setup()
    from openinference.instrumentation.dspy import DSPyInstrumentor
    from openinference.instrumentation.litellm import LiteLLMInstrumentor

    DSPyInstrumentor().instrument()
    LiteLLMInstrumentor().instrument()
    import dspy

    body = common.Tool(scenario)

    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        return body(city)

    class WeatherAgent(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.react = dspy.ReAct("question -> answer", tools=[get_weather],
                                    max_iters=MAX_ITERS)

        def forward(self, question: str) -> dspy.Prediction:
            return self.react(question=question)

    dspy.configure(lm=dspy.LM(f"openai/{common.MODEL}", api_base=os.environ["OPENAI_BASE_URL"],
                              api_key=os.environ["OPENAI_API_KEY"], cache=False))
    agent = WeatherAgent()
    if scenario == "multi_agent":  # a module of the user's whose ReAct tool runs the other
        weather = agent

        def ask_weather_agent(question: str) -> str:
            """Ask the weather agent a weather question."""
            return str(weather(question=question).answer)

        class TriageAgent(dspy.Module):
            def __init__(self) -> None:
                super().__init__()
                self.react = dspy.ReAct("question -> answer", tools=[ask_weather_agent],
                                        max_iters=MAX_ITERS)

            def forward(self, question: str) -> dspy.Prediction:
                return self.react(question=question)

        agent = TriageAgent()
    if scenario == "conversation":  # one run per user turn, in OpenInference's session
        from openinference.instrumentation import using_session
        for question in common.turns():
            with using_session(common.CONVERSATION_ID):
                if not agent(question=question).answer:
                    raise RuntimeError("a turn without an answer")
        common.shutdown()
        return
    with common.attached(common.remote_parent(scenario)):
        if scenario == "streaming":
            answer = asyncio.run(_streamed(dspy, agent, common.prompt(scenario)))
        else:
            answer = agent(question=common.prompt(scenario)).answer
    if not answer and scenario != "empty_answer":
        raise RuntimeError("no final answer")
    common.shutdown()


async def _streamed(dspy: object, agent: object, question: str) -> str:
    answer = ""
    async for item in dspy.streamify(agent)(question=question):  # type: ignore[attr-defined]
        if isinstance(item, dspy.Prediction):  # type: ignore[attr-defined]
            answer = item.answer
    return answer


if __name__ == "__main__":
    main(sys.argv[1])
