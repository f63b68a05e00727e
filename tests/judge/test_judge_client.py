"""JudgeClient over the real litellm HTTP path against the scripted loopback server."""

from __future__ import annotations

import asyncio
import calendar
import json
import os
import time
from types import SimpleNamespace
from typing import Any

import pytest
from judge_fake_llm import FakeLLM, Reply, completion, error, good
from judge_fixtures import config
from support.clock import ManualClock

from otel_eval.evaluate.judge import client as judge_client
from otel_eval.evaluate.judge.client import JudgeClient, parse_reply, retry_after_s
from otel_eval.evaluate.judge.schemas import PROCESS_DIMENSIONS, combined_schema, trace_schema
from otel_eval.evaluate.judge.templates import schema_text

MESSAGES = [{"role": "user", "content": "grade this"}]
GOOD = {"critique": "fine", "score": 0.5}


def client(llm: FakeLLM, clock: ManualClock | None = None, **changes: Any) -> JudgeClient:
    clock = clock or ManualClock()
    # the jitter's draw fixed at 0: the whole scheduled delay (tests of jitter draw their own)
    return JudgeClient(config(llm.api_base, **changes), clock=clock, sleep=clock.sleep,
                       rng=lambda: 0.0)


def call(c: JudgeClient, messages: list[dict[str, str]] = MESSAGES) -> Any:
    return asyncio.run(c.call(messages, trace_schema(), "trace"))


def test_good_reply_validated_costed_and_sent_with_schema(llm: FakeLLM) -> None:
    llm.script(good(GOOD))
    r = call(client(llm))
    assert (r.status, r.data, r.attempts) == ("ok", GOOD, 1), r.error
    assert (r.input_tokens, r.output_tokens) == (1000, 100)
    assert r.cost_usd > 0  # litellm's price map knows gpt-4o-mini
    sent = llm.requests[0]
    assert sent["model"] == "gpt-4o-mini" and sent["messages"] == MESSAGES
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["schema"] == trace_schema()


def test_a_process_dimension_is_sent_once_and_still_checked_in_every_place() -> None:
    schema = combined_schema(("step", "process", "trace"))
    assert json.dumps(schema).count('"reasoning": {') == 1  # in $defs, referenced 4 times
    turn = {"turn": 1, "stage": "synthesis",
            **{d: {"reasoning": "ok", "score": 0.6} for d in PROCESS_DIMENSIONS}}
    reply = {"steps": [], "turns": [turn], "trace": GOOD}
    assert parse_reply(json.dumps(reply), schema) == (reply, "")
    turn["result_verification"] = {"reasoning": "ok", "score": 0.5}  # not on the scale
    data, problem = parse_reply(json.dumps(reply), schema)
    assert data is None and "turns/0/result_verification/score" in problem
    # a model not sent the schema reads every dimension's shape in the prompt
    assert schema_text(schema).count('{"reasoning":str,"score":0|0.2|0.4|0.6|0.8|1}') == 4


def test_code_fenced_json_is_accepted(llm: FakeLLM) -> None:
    llm.script(completion("```json\n" + json.dumps(GOOD) + "\n```"))
    assert call(client(llm)).status == "ok"


def test_malformed_then_repaired(llm: FakeLLM) -> None:
    llm.script(completion("score: 0.5, looks fine"), good(GOOD))
    r = call(client(llm))
    assert (r.status, r.data, r.attempts) == ("ok", GOOD, 2)
    repair = llm.requests[1]["messages"]
    assert repair[1] == {"role": "assistant", "content": "score: 0.5, looks fine"}
    assert "not valid JSON" in repair[2]["content"]
    assert (r.input_tokens, r.output_tokens) == (2000, 200)  # both calls are paid for


def test_invalid_twice_is_parse_error_never_a_default(llm: FakeLLM) -> None:
    llm.script(completion("{not json"), good({"critique": "x", "score": 7}))
    r = call(client(llm))
    assert (r.status, r.data, r.attempts) == ("parse_error", None, 2)
    assert "score" in r.error and "maximum" in r.error


def test_429_honours_retry_after(llm: FakeLLM) -> None:
    clock = ManualClock()
    llm.script(error(429, {"Retry-After": "7"}), good(GOOD))
    r = call(client(llm, clock))
    assert (r.status, r.attempts) == ("ok", 2)
    assert clock.sleeps == [7.0]


def test_429_exhausted_is_rate_limited(llm: FakeLLM) -> None:
    llm.script(*[error(429, {"retry-after-ms": "1500"})] * 3)
    clock = ManualClock()
    r = call(client(llm, clock, max_retries=2))
    assert (r.status, r.attempts, clock.sleeps) == ("rate_limited", 3, [1.5, 1.5])


def test_500_retried_with_exponential_backoff(llm: FakeLLM) -> None:
    clock = ManualClock()
    llm.script(error(500), error(500), good(GOOD))
    r = call(client(llm, clock, backoff_initial_s=2.0, max_retries=3))
    assert (r.status, r.attempts, clock.sleeps) == ("ok", 3, [2.0, 4.0])


def test_backoff_is_jittered_so_concurrent_retries_spread(llm: FakeLLM) -> None:
    """Equal jitter: each delay is drawn from [half, all] of the doubling schedule (with no
    jitter, every worker and replica rate-limited at once retried at the same instants); a
    Retry-After is the provider's and is not jittered."""
    draws = iter([0.5, 1.0 - 1e-9, 0.0])
    clock = ManualClock()
    llm.script(error(500), error(500), error(429, {"Retry-After": "3"}), good(GOOD))
    c = JudgeClient(config(llm.api_base, backoff_initial_s=2.0, max_retries=3), clock=clock,
                    sleep=clock.sleep, rng=lambda: next(draws))
    r = call(c)
    assert (r.status, r.attempts) == ("ok", 4), r.error
    assert clock.sleeps == pytest.approx([1.5, 2.0, 3.0])


def test_500_exhausted_is_error(llm: FakeLLM) -> None:
    llm.script(error(500), error(500))
    r = call(client(llm, max_retries=1))
    assert (r.status, r.attempts, r.data) == ("error", 2, None)
    assert "InternalServerError" in r.error


def test_400_is_not_retried(llm: FakeLLM) -> None:
    llm.script(error(400), good(GOOD))
    r = call(client(llm))
    assert (r.status, r.attempts, len(llm.requests)) == ("error", 1, 1)


def test_calls_waiting_for_a_slot_see_the_budget_spent_meanwhile(llm: FakeLLM) -> None:
    """The hourly budget was checked before the concurrency slot was waited for: five calls
    at once behind one slot were all sent, though the first spent the budget."""
    clock = ManualClock()
    c = client(llm, clock, max_concurrency=1, max_cost_usd_per_hour=0.0001)
    llm.script(*[good(GOOD) for _ in range(5)])  # each ~0.00021 USD

    async def five() -> list[Any]:
        return list(await asyncio.gather(*(c.call(MESSAGES, trace_schema(), "trace")
                                           for _ in range(5))))

    statuses = [r.status for r in asyncio.run(five())]
    assert (statuses.count("ok"), statuses.count("budget_exceeded")) == (1, 4)
    assert len(llm.requests) == 1


def test_timeout(llm: FakeLLM) -> None:
    llm.script(Reply(hang=True))
    r = call(client(llm, timeout_s=0.3, max_retries=0))
    assert (r.status, r.attempts) == ("timeout", 1)


def test_hourly_budget_blocks_calls_until_spend_leaves_window(llm: FakeLLM) -> None:
    clock = ManualClock()
    c = client(llm, clock, max_cost_usd_per_hour=0.0001)
    llm.script(good(GOOD), good(GOOD))
    assert call(c).status == "ok"  # ~0.00021 USD spent
    assert c.over_budget()
    r = call(c)
    assert (r.status, r.attempts, len(llm.requests)) == ("budget_exceeded", 0, 1)
    clock.now += 3601
    assert call(c).status == "ok"


def test_requests_per_minute_waits_on_injected_clock(llm: FakeLLM) -> None:
    clock = ManualClock()
    c = client(llm, clock, requests_per_min=2)
    llm.script(good(GOOD), good(GOOD), good(GOOD))
    for _ in range(3):
        assert call(c).status == "ok"
    assert clock.sleeps == [60.0]


def test_custom_prices_for_unknown_models(llm: FakeLLM) -> None:
    llm.script(good(GOOD, model="my-vllm-model"))
    c = client(llm, model="openai/my-vllm-model", input_cost_per_token_usd=1e-6,
               output_cost_per_token_usd=2e-6)
    assert call(c).cost_usd == 1000 * 1e-6 + 100 * 2e-6


@pytest.mark.parametrize("model", ["openai/my-vllm-model", "openai/gpt-9-unreleased"])
def test_a_model_without_a_price_costs_unknown_not_zero(llm: FakeLLM, model: str) -> None:
    """A call of a model litellm has no price for (and no judge prices) cost $0: now its
    cost is unknown (None), never a figure; litellm gives an unknown gpt- name 0 itself."""
    llm.script(good(GOOD, model="my-vllm-model"), good(GOOD, model="my-vllm-model"))
    c = client(llm, model=model)
    assert [(r.status, r.cost_usd) for r in (call(c), call(c))] == [("ok", None)] * 2
    llm.script(good(GOOD, model="llama3.1"))
    assert call(client(llm, model="ollama/llama3.1")).cost_usd == 0.0  # free: priced 0


def test_retry_after_http_date_and_garbage() -> None:
    class E(Exception):
        def __init__(self, headers: dict[str, str]) -> None:
            self.litellm_response_headers = headers

    assert retry_after_s(E({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0.0
    assert retry_after_s(E({"retry-after": "soon"})) is None
    assert retry_after_s(E({})) is None


@pytest.fixture
def new_york_time() -> Any:
    """The process's local time zone set to one that is not UTC (restored afterwards)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


@pytest.mark.usefixtures("new_york_time")
def test_a_retry_after_http_date_is_utc_in_every_form(monkeypatch: pytest.MonkeyPatch) -> None:
    """RFC 9110 HTTP-dates are UTC in all three forms: the asctime form and a ``-0000`` zone
    were read as local time, off by the server's UTC offset (five hours here)."""
    class E(Exception):
        def __init__(self, value: str) -> None:
            self.litellm_response_headers = {"retry-after": value}

    now = calendar.timegm((1994, 11, 6, 8, 49, 37))
    monkeypatch.setattr(judge_client, "time", SimpleNamespace(time=lambda: now))
    for value in ("Sun, 06 Nov 1994 08:49:47 GMT", "Sunday, 06-Nov-94 08:49:47 GMT",
                  "Sun Nov  6 08:49:47 1994", "Sun, 06 Nov 1994 08:49:47 -0000"):
        assert retry_after_s(E(value)) == 10.0, value


@pytest.mark.parametrize("status", [520, 522, 529])
def test_every_5xx_is_retried_with_backoff(llm: FakeLLM, status: int) -> None:
    """A 5xx litellm has no class for (Cloudflare's 520-524, Anthropic's 529 overloaded)
    came back as a bare APIError and ended the call at once, though 5xx are retried."""
    clock = ManualClock()
    llm.script(error(status), error(status, {"Retry-After": "3"}), good(GOOD))
    r = call(client(llm, clock, backoff_initial_s=2.0, max_retries=3))
    assert (r.status, r.attempts, clock.sleeps) == ("ok", 3, [2.0, 3.0]), r.error


def test_5xx_exhausted_is_error_and_4xx_without_a_class_is_not_retried(llm: FakeLLM) -> None:
    llm.script(error(529), error(529), error(409), good(GOOD))
    r = call(client(llm, max_retries=1))
    assert (r.status, r.attempts) == ("error", 2)
    r = call(client(llm, max_retries=1))
    assert (r.status, r.attempts) == ("error", 1)


def test_a_retry_after_that_is_no_number_of_seconds_is_unknown() -> None:
    """``nan`` and ``inf`` parsed as floats: ``nan`` (or ``inf``) in retry-after-ms hid a
    valid Retry-After beside it, and either ended the call as a hint over backoff_max_s."""
    class E(Exception):
        def __init__(self, headers: dict[str, str]) -> None:
            self.litellm_response_headers = headers

    for bad in ("nan", "inf", "-inf", "NaN"):
        assert retry_after_s(E({"retry-after": bad})) is None
        assert retry_after_s(E({"retry-after-ms": bad, "retry-after": "2"})) == 2.0
    assert retry_after_s(E({"retry-after-ms": "2500"})) == 2.5


def test_429_with_an_unreadable_retry_after_is_retried_on_the_backoff(llm: FakeLLM) -> None:
    clock = ManualClock()
    llm.script(error(429, {"Retry-After": "nan"}), error(429, {"retry-after-ms": "inf"}),
               good(GOOD))
    r = call(client(llm, clock, backoff_initial_s=1.0))
    assert (r.status, r.attempts, clock.sleeps) == ("ok", 3, [1.0, 2.0]), r.error


def test_a_retry_after_date_past_the_calendar_is_unknown_not_a_crash(llm: FakeLLM) -> None:
    """An HTTP-date whose hour overflows a C int made ``parsedate_to_datetime`` raise
    OverflowError: it went out of the client, the provider's 429 ended the judgement as a
    ``worker_error`` (a bug's status, its call counted nowhere) instead of being retried."""
    hostile = "Mon, 01 Jan 2026 99999999999999999999:00:00 GMT"

    class E(Exception):
        def __init__(self, value: str) -> None:
            self.litellm_response_headers = {"retry-after": value}

    assert retry_after_s(E(hostile)) is None
    assert retry_after_s(E("Mon, 01 Jan 99999999999 00:00:00 GMT")) is None
    clock = ManualClock()
    llm.script(error(429, {"Retry-After": hostile}), good(GOOD))
    r = call(client(llm, clock, backoff_initial_s=1.0))
    assert (r.status, r.attempts, clock.sleeps) == ("ok", 2, [1.0]), r.error
