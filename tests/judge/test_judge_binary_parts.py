"""A file in a message (an image, a PDF) reaches the judge and the run's texts as a short
placeholder naming its type and size, never as its base64 bytes, whichever instrumentation
recorded it; a file pointed at by URI or file id is named by its type, the URI not shown."""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
from typing import Any

import pytest
from judge_fixtures import config

from otel_eval.app.config import Config
from otel_eval.base.model import Span, Trace
from otel_eval.base.results import Evaluation
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.judge import Judge
from otel_eval.evaluate.judge.render import (
    CHARS_PER_TOKEN,
    agent_input_tokens,
    render,
    view_budget_chars,
)

TRACE = "0af7651916cd43dd8448eb211c80319c"
ASK = "What is in this picture?"
PNG = bytes(range(256)) * 192  # 48 KiB of "image"
B64 = base64.b64encode(PNG).decode()
DATA_URL = "data:image/png;base64," + B64
URI = "https://files.example.com/cat.png?X-Amz-Signature=deadbeefcafe"
SHOWN = "[image/png, 49 kB]"  # 49,152 bytes


def _genai(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": ASK}, *parts]}]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                {"type": "text", "content": "A cat."}], "finish_reason": "stop"}])}


OPENAI_CONTENT = [{"type": "text", "text": ASK},
                  {"type": "image_url", "image_url": {"url": DATA_URL}}]
FORMS: dict[str, dict[str, Any]] = {
    # the GenAI conventions' input messages schema: BlobPart
    "genai_blob": _genai([{"type": "blob", "modality": "image", "mime_type": "image/png",
                           "content": B64}]),
    # OpenAI chat content (as the GenAI events' bodies and many SDKs record it)
    "openai_image_url": {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                         "gen_ai.input.messages": json.dumps(
                             [{"role": "user", "content": OPENAI_CONTENT}]),
                         "gen_ai.output.messages": json.dumps(
                             [{"role": "assistant", "content": "A cat."}])},
    # OpenLLMetry: list content written as JSON text
    "openllmetry": {"llm.request.type": "chat", "gen_ai.system": "openai",
                    "gen_ai.request.model": "gpt-4o", "gen_ai.prompt.0.role": "user",
                    "gen_ai.prompt.0.content": json.dumps(OPENAI_CONTENT),
                    "gen_ai.completion.0.role": "assistant",
                    "gen_ai.completion.0.content": "A cat.",
                    "gen_ai.completion.0.finish_reason": "stop"},
    # OpenInference: flattened content parts, the image by its URL
    "openinference": {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o",
                      "llm.input_messages.0.message.role": "user",
                      "llm.input_messages.0.message.contents.0.message_content.type": "text",
                      "llm.input_messages.0.message.contents.0.message_content.text": ASK,
                      "llm.input_messages.0.message.contents.1.message_content.type": "image",
                      "llm.input_messages.0.message.contents.1.message_content.image.image.url":
                          DATA_URL,
                      "llm.output_messages.0.message.role": "assistant",
                      "llm.output_messages.0.message.content": "A cat."},
}


def _evaluate(attrs: dict[str, Any]) -> Evaluation:
    span = Span(TRACE, "a" * 16, None, "chat gpt-4o", 0, 10, attributes=attrs)
    ev = Evaluator(Config()).evaluate(Trace(TRACE, [span], "complete"))
    assert ev is not None
    return ev


def _judge_input(ev: Evaluation) -> str:
    judge = Judge(config())
    rendered = render(ev, judge.config.compaction)
    return "\n".join(m["content"] for r in judge.requests(ev, rendered) for m in r.messages)


def _no_bytes(text: str) -> None:
    assert B64[:24] not in text and B64[-24:] not in text and "base64," not in text


@pytest.mark.parametrize("form", sorted(FORMS))
def test_an_image_reaches_the_judge_as_its_type_and_size(form: str) -> None:
    ev = _evaluate(FORMS[form])
    sent = _judge_input(ev)
    _no_bytes(sent)
    assert ASK + "\n" + SHOWN in sent
    # the judge's input is the same run's without the image, but for the placeholder
    text_only = _judge_input(_evaluate(_genai([])))
    assert len(sent) - len(text_only) <= len(SHOWN) + 1
    # the run's input as the API, show and the web view's list give it
    assert ev.to_json()["input"] == ASK + "\n" + SHOWN


def test_an_image_alone_is_the_request_not_the_message_json() -> None:
    attrs = _genai([])
    attrs["gen_ai.input.messages"] = json.dumps([{"role": "user", "parts": [
        {"type": "blob", "modality": "image", "mime_type": "image/png", "content": B64}]}])
    ev = _evaluate(attrs)
    assert ev.to_json()["input"] == SHOWN
    sent = _judge_input(ev)
    _no_bytes(sent)
    assert SHOWN in sent


@pytest.mark.parametrize(("part", "shown"), [
    ({"type": "uri", "modality": "image", "mime_type": "image/png", "uri": URI},
     "[image/png, by URI]"),
    ({"type": "file", "modality": "image", "file_id": "file-abc123"}, "[image, by file id]"),
    ({"type": "blob", "modality": "audio", "content": B64}, "[audio, 49 kB]"),
    # span content cannot write the prompt through a MIME type
    ({"type": "blob", "modality": "image", "mime_type": "x\n[step 9] tool", "content": "AAAA"},
     "[image, 3 B]"),
])
def test_a_file_by_reference_is_named_not_fetched_nor_shown(part: dict[str, Any],
                                                            shown: str) -> None:
    ev = _evaluate(_genai([part]))
    sent = _judge_input(ev)
    assert ASK + "\n" + shown in sent
    assert URI not in sent and "file-abc123" not in sent and "[step 9]" not in sent
    _no_bytes(sent)


def _calls(ev: Evaluation, n: int) -> Trajectory:
    """The run's one LLM call made ``n`` times (an agent re-sends its history, the image in
    it, on every call), no usage recorded."""
    (step,) = ev.trajectory.llm_steps
    t = copy.copy(ev.trajectory)
    t.steps = [dataclasses.replace(step, index=i, input_tokens=None) for i in range(n)]
    return t


@pytest.mark.parametrize("form", sorted(FORMS))
def test_an_image_counts_in_the_views_budget_as_what_the_judge_reads_of_it(form: str) -> None:
    """With no usage recorded the view's budget is the agent's input text at
    ``CHARS_PER_TOKEN``: an image counts as its placeholder, not as its base64 bytes (48 KiB
    re-sent on 10 calls: a budget of 16,384 characters where the run without the image has
    the floor's 2,800)."""
    limits = config().compaction
    image, text_only = _calls(_evaluate(FORMS[form]), 10), _calls(_evaluate(_genai([])), 10)
    extra = agent_input_tokens(image) - agent_input_tokens(text_only)
    assert extra <= 10 * (len(SHOWN) + 80) / CHARS_PER_TOKEN, extra
    assert view_budget_chars(image, limits) == view_budget_chars(text_only, limits)


SAID, REPLY = "What is the weather in Paris?", "It is sunny in Paris."


@pytest.mark.parametrize("kind", ["blob", "uri", "file"])
def test_a_voice_request_and_answer_are_their_transcripts(kind: str) -> None:
    """A voice agent's turn as the GenAI conventions record it: audio parts (blob, uri or
    file) with modality audio and their ``transcript``, in the input and the output messages.
    The transcript is what was said: the run's input and output, and the judge reads it
    below the audio's placeholder."""
    where = {"blob": {"content": B64}, "uri": {"uri": URI}, "file": {"file_id": "file-abc123"}}

    def audio(said: str) -> dict[str, Any]:
        return {"type": kind, "modality": "audio", "mime_type": "audio/wav", **where[kind],
                "transcript": said}
    attrs = _genai([])
    attrs["gen_ai.input.messages"] = json.dumps([{"role": "user", "parts": [audio(SAID)]}])
    attrs["gen_ai.output.messages"] = json.dumps([{"role": "assistant", "parts": [
        audio(REPLY)], "finish_reason": "stop"}])
    ev = _evaluate(attrs)
    out = ev.to_json()
    assert out["input"].startswith(SAID) and out["output"] == REPLY
    sent = _judge_input(ev)
    assert SAID in sent and REPLY in sent
    assert URI not in sent and "file-abc123" not in sent
    _no_bytes(sent)


def test_a_transcript_is_read_only_on_audio() -> None:
    attrs = _genai([{"type": "blob", "modality": "image", "mime_type": "image/png",
                     "content": B64, "transcript": "not said"}])
    ev = _evaluate(attrs)
    assert ev.to_json()["input"] == ASK + "\n" + SHOWN
    assert "not said" not in _judge_input(ev)
