"""The judge's only way out: ``JudgeClient.call`` wraps ``litellm.acompletion``.

Per call: hourly cost budget check -> concurrency semaphore -> rpm/tpm limiter (injected clock)
-> acompletion within a total deadline -> retries with exponential backoff (equal jitter: each
delay drawn from [half, all] of the schedule's, so concurrent workers and replicas rate-limited
together do not retry in lockstep), honouring a Retry-After up to ``backoff_max_s`` -> cost
via litellm's price map (a request timed out or cut at ``max_reply_bytes`` is billed all the
same: its prompt, estimated, is spent) -> JSON parsed and validated against the judge's
schema -> one repair round trip on an invalid reply -> ``CallResult`` with a status from a
closed set. A reply that cannot be validated is ``parse_error``: never a default score.

Model output is hostile input (issue 33): it is read with linear-time string methods only (a
fence regex backtracked on whitespace: a 150 KB reply held the GIL 21 s), a reply over
``max_reply_bytes`` is refused unparsed (and not sent back for repair), NaN / Infinity (and
numbers that overflow to them) are not JSON here, and each attempt has a total deadline
(``timeout_s``; litellm's timeout is per read, so a reply trickled a byte at a time was never
cut).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import email.utils
import json
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

import jsonschema

from otel_eval.base.backoff import Backoff
from otel_eval.base.configcheck import ConfigError
from otel_eval.base.loglimit import LogLimiter
from otel_eval.base.text import checked, valid_text
from otel_eval.base.words import wide_count
from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.judge.limits import CostBudget, RateLimiter
from otel_eval.evaluate.judge.llm import (
    PLACEHOLDER_API_KEY,
    litellm,
    missing_credentials,
    pin_model_info,
    priced,
    redact_secrets,
)
from otel_eval.evaluate.judge.render import CHARS_PER_TOKEN
from otel_eval.evaluate.judge.schemas import Schema
from otel_eval.evaluate.judge.transport import (
    HANDLER_PROVIDERS,
    SDK_PROVIDERS,
    bounded_client,
    bounded_handler,
    close_bounded_clients,
    reading,
)

log = logging.getLogger(__name__)

# cancelled: cut by otel-eval itself (its stop, or the call's judgement ended) once billed;
# not the provider's failure (OtelEvalJudgeFailing does not count it)
CallStatus = Literal["ok", "parse_error", "timeout", "rate_limited", "error", "budget_exceeded",
                     "cancelled"]
CALL_STATUSES: tuple[CallStatus, ...] = get_args(CallStatus)
Messages = list[dict[str, str]]
Check = Callable[[dict[str, Any]], str | None]  # semantic check: error text or None

_RETRYABLE = (litellm.InternalServerError, litellm.ServiceUnavailableError,
              litellm.APIConnectionError, litellm.BadGatewayError)
_HINTED = (litellm.RateLimitError, *_RETRYABLE)  # retried after their Retry-After, if any
_FENCE = "```"
# A failed call or a retry is logged at most once per this many seconds (each is counted).
FAILURE_LOG_INTERVAL_S = 10.0
_ERROR_CHARS = 300  # of a provider error's text, kept in the result and logged
_PROBLEM_CHARS = 300  # of what is wrong with a reply, in the repair request and the error
# Reported tokens are at most twice the UTF-8 bytes sent (a token is at least one byte of
# the text, which the provider reads unescaped: a Chinese character is 3 bytes, not its
# 6-character JSON escape), or received, plus a chat template's framing; past that a usage
# is implausible
_FRAMING = 1024


@dataclass(slots=True)
class CallResult:
    status: CallStatus
    data: dict[str, Any] | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0  # None: unknown (litellm has no price for the model)
    latency_s: float = 0.0
    model: str = ""
    error: str = ""
    attempts: int = 0  # HTTP requests made (retries and the repair included)
    usage_implausible: int = 0  # replies whose reported usage was replaced by an estimate


def hinted(e: BaseException) -> bool:
    """A rate limit or a server's failure (retried, after its Retry-After if it sends one):
    litellm's classes for them, and any other 5xx (520-524 from a CDN, Anthropic's 529
    overloaded: litellm has no class for those and raises a bare ``APIError``)."""
    if isinstance(e, _HINTED):
        return True
    status = getattr(e, "status_code", None)
    return isinstance(e, litellm.APIError) and isinstance(status, int) and 500 <= status < 600


def _seconds(value: Any) -> float | None:
    """A header's number, at least 0; None when it is none (absent, a date, ``nan``,
    ``inf``: not a delay, so unknown, and the schedule's backoff applies)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return max(number, 0.0) if math.isfinite(number) else None


def retry_after_s(exc: BaseException) -> float | None:
    """Seconds from a Retry-After / retry-after-ms header on a provider error, if any."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or getattr(exc, "litellm_response_headers", None)
    if not headers:
        return None
    if (ms := _seconds(headers.get("retry-after-ms"))) is not None:
        return ms / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    if (seconds := _seconds(value)) is not None:
        return seconds
    try:  # HTTP-date form
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):  # an hour past a C int: no date
        return None
    if when.tzinfo is None:  # asctime form or a -0000 zone: still UTC (RFC 9110 5.6.7)
        when = when.replace(tzinfo=datetime.UTC)
    return max(when.timestamp() - time.time(), 0.0)


def error_text(e: BaseException) -> str:
    """``e``'s type and the start of its text, secrets redacted by litellm's patterns. Cut
    before redacting: that regex is quadratic on some texts (``llm.py`` turns litellm's own
    use of it off), so here it sees twice the kept length at most, and a secret that starts
    in the kept part and is no longer than it is seen whole."""
    text = redact_secrets(str(e)[:2 * _ERROR_CHARS])[:_ERROR_CHARS]
    return f"{type(e).__name__}: {text}"


def unfence(text: str) -> str:
    """``text`` stripped, without a Markdown code fence around it (```json ... ```), by string
    methods (linear time whatever the whitespace)."""
    text = text.strip()
    if text.startswith(_FENCE):
        text = text[len(_FENCE):]
        text = text[4:].lstrip() if text.startswith("json") else text.lstrip()
    if text.endswith(_FENCE):
        text = text[:-len(_FENCE)].rstrip()
    return text


def _finite_number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 overflows to inf
        raise ValueError(f"number {text[:40]} is not finite")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object of the reply whose keys are each written once: a grade written twice (or a
    reply that echoes the run's own reply-shaped text after its grade) has no one value;
    which would stand would depend on the parser (Python's: the last)."""
    data = dict(pairs)
    if len(data) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"key {json.dumps(key[:40])} is written more than once")
            seen.add(key)
    return data


def _sent_text(request: dict[str, Any]) -> str:
    """A request's messages and response format, as JSON with its characters as they are
    (what is billed: the provider tokenizes the text, not the escapes of ASCII JSON)."""
    return (json.dumps(request["messages"], ensure_ascii=False)
            + json.dumps(request.get("response_format") or {}, ensure_ascii=False))


def estimated_tokens(text: str) -> int:
    """Tokens of ``text`` at ``CHARS_PER_TOKEN``, a wide character (Chinese, Japanese,
    Korean: ``wide_count``) about a token of its own (``render.text_scale``)."""
    return math.ceil((len(text) + (CHARS_PER_TOKEN - 1) * wide_count(text)) / CHARS_PER_TOKEN)


def plausible_tokens(value: Any, ceiling: int, floor: int = 0) -> int | None:
    """A reported token count if it is a whole number from ``floor`` to ``ceiling``, else
    None. The provider's usage is spent against the budget and counted in metrics: 1e30
    prompt tokens spent the hourly budget in one reply, a negative count made a counter
    raise, and a usage left out (0, as litellm fills it) made every call free."""
    if value is None:
        value = 0  # not reported (litellm fills 0 when a server sends no usage)
    if isinstance(value, float) and value.is_integer():  # NaN and infinities are not
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not (
            floor <= value <= ceiling):
        return None
    return value


def reply_bytes(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def said(problem: str) -> str:
    """What is wrong with a reply, at most ``_PROBLEM_CHARS`` (its start and its end): the
    schema's complaint quotes the offending value whole, and it goes into the repair request
    (paid for as input), the error kept and its log line."""
    if len(problem) <= _PROBLEM_CHARS:
        return problem
    head = _PROBLEM_CHARS * 2 // 3
    return f"{problem[:head]} [...] {problem[len(problem) - (_PROBLEM_CHARS - head):]}"


def parse_reply(text: str, schema: Schema, check: Check | None = None) -> tuple[
        dict[str, Any] | None, str]:
    """(data, "") for a valid reply, else (None, what is wrong) for the repair prompt."""
    text = valid_text(unfence(text))  # a lone surrogate, as text or escaped, is U+FFFD: the
    # critiques go on to the store and the OTLP events, which cannot carry one
    try:
        data = checked(json.loads(text, parse_constant=_no_constant,
                                  parse_float=_finite_number, object_pairs_hook=_once_each),
                       text)
    except ValueError as e:  # JSONDecodeError, a non-finite number, a too-long int literal,
        return None, f"not valid JSON ({e})"  # nested deeper than MAX_CONTENT_DEPTH
    except RecursionError:
        return None, "not valid JSON (nested too deep)"
    if not isinstance(data, dict):
        return None, "the reply must be a JSON object"
    validator = jsonschema.Draft202012Validator(schema)
    err = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if err is not None:
        where = "/".join(map(str, err.absolute_path)) or "(root)"
        return None, said(f"does not match the schema at {where}: {err.message}")
    problem = check(data) if check else None
    return (None, said(problem)) if problem else (data, "")


def check_credentials(config: JudgeConfig) -> None:
    """Refuse, once at startup, a judge whose provider key is missing, rather than fail every
    call with "Missing credentials". With ``api_base`` set a missing key is fine (see
    ``JudgeClient``): a local OpenAI-compatible server needs none."""
    if not config.active or config.api_base:
        return
    missing = missing_credentials(config.model, config.api_base)
    if missing:
        raise ConfigError([f"judge.model: {config.model} needs {' or '.join(missing)} in the "
                           "environment (or judge.api_base: a local OpenAI-compatible server "
                           "needs no key)"])


def check_prices(config: JudgeConfig, cap_usd: float | None = None,
                 cap_name: str = "judge.max_cost_usd_per_hour",
                 no_cap: str = "judge.max_cost_usd_per_hour: 0") -> None:
    """Refuse, once at startup, a spending cap that could never apply: with no
    ``judge.input_cost_per_token_usd`` / ``output_cost_per_token_usd`` a call is costed at
    litellm's prices, and a model it has none for (released after the pinned litellm, a
    custom deployment name) would cost $0 a call, the cap (``cap_usd``, else
    ``max_cost_usd_per_hour``) never reached. Ollama's models are priced 0
    (``pin_model_info``): free."""
    cap = config.max_cost_usd_per_hour if cap_usd is None else cap_usd
    if (not config.active or not cap or config.input_cost_per_token_usd
            or config.output_cost_per_token_usd):
        return
    pin_model_info(config.model, 0.0, 0.0)
    if not priced(config.model):
        raise ConfigError([
            f"judge.model: litellm has no price for {config.model}, so {cap_name} "
            f"({cap:g} USD) would never stop the spending: set "
            "judge.input_cost_per_token_usd and judge.output_cost_per_token_usd (the model's "
            f"prices, USD per token), or {no_cap} for no cap (a free self-hosted model)"])


class JudgeClient:
    def __init__(self, config: JudgeConfig, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 repair_text: Callable[[str], str] | None = None,
                 rng: Callable[[], float] = random.random) -> None:
        self.config = config
        # the message asking for a corrected reply, given what was wrong
        self.repair_text = repair_text or (
            lambda problem: f"Your reply could not be used: {problem}\nReply with only JSON.")
        self.clock = clock
        self.sleep = sleep  # injected so tests observe backoff delays without waiting
        self._retry_log = LogLimiter(FAILURE_LOG_INTERVAL_S, clock)  # a judge down: one line
        self.limiter = RateLimiter(config.requests_per_min, config.tokens_per_min)
        self.budget = CostBudget(config.max_cost_usd_per_hour)
        self._semaphore: asyncio.Semaphore | None = None  # created on the caller's loop
        self._api_key: str | None = None  # resolved on the first request
        self._provider: str | None = None  # litellm's name for it, found on the first call
        # jittered (``rng``, [0, 1), injected by tests): max_concurrency workers and every
        # replica hit by one rate limit would otherwise all retry at the same instants
        self._backoff = Backoff(config.backoff_initial_s, config.backoff_max_s, jitter=0.5,
                                rng=rng)
        # before any litellm call: litellm asks no server about a model it was not told of
        pin_model_info(config.model, config.input_cost_per_token_usd,
                       config.output_cost_per_token_usd)
        # a model with no price (configured or litellm's): its calls cost unknown, not $0
        self._priced = bool(config.input_cost_per_token_usd or config.output_cost_per_token_usd
                            or not config.model or priced(config.model))

    def over_budget(self) -> bool:
        return self.budget.exceeded(self.clock())

    async def call(self, messages: Messages, schema: Schema, name: str = "judge",
                   check: Check | None = None, result: CallResult | None = None) -> CallResult:
        """The call's result; ``result``, when given, is filled as the call goes (a caller
        whose call is cancelled still reads what its requests made and cost)."""
        if result is None:
            result = CallResult("ok", model=self.config.model)
        if self.over_budget():
            result.status, result.error = "budget_exceeded", "hourly judge budget spent"
            return result
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.config.max_concurrency)
        started = self.clock()
        async with self._semaphore:
            if self.over_budget():  # spent by the calls this one waited behind
                result.status, result.error = "budget_exceeded", "hourly judge budget spent"
                return result
            await self._exchange(messages, schema, name, check, result)
        result.latency_s = max(self.clock() - started, 0.0)
        return result

    async def _exchange(self, messages: Messages, schema: Schema, name: str,
                        check: Check | None, result: CallResult) -> None:
        """The request, and one repair round trip when the reply is invalid."""
        text = await self._complete(messages, schema, name, result)
        if text is None:
            return
        result.data, problem = self._parse(text, schema, check)
        if result.data is None and not self._oversized(text):
            log.info("judge %s: invalid reply (%s); asking for a repair", name, problem)
            repair = [*messages, {"role": "assistant", "content": text},
                      {"role": "user", "content": self.repair_text(problem)}]
            text = await self._complete(repair, schema, name, result)
            if text is None:
                return
            result.data, problem = self._parse(text, schema, check)
        if result.data is None:
            result.status, result.error = "parse_error", problem

    def _oversized(self, text: str) -> bool:
        return reply_bytes(text) > self.config.max_reply_bytes

    def _parse(self, text: str, schema: Schema, check: Check | None) -> tuple[
            dict[str, Any] | None, str]:
        if self._oversized(text):  # not parsed, and not sent back: a repair would cost as much
            return None, (f"the reply is {reply_bytes(text)} bytes, over max_reply_bytes "
                          f"{self.config.max_reply_bytes}")
        return parse_reply(text, schema, check)

    def _client(self) -> dict[str, Any]:
        """``client=``: this loop's client that stops reading a reply past
        ``max_reply_bytes`` and tells when a request was sent (``transport``), for litellm's
        ``openai`` provider, the ``SDK_PROVIDERS`` and the ``HANDLER_PROVIDERS``; other
        providers read it whole, and a request of theirs cancelled is taken as not sent."""
        if self._provider is None:
            try:
                self._provider = litellm.get_llm_provider(
                    model=self.config.model, api_base=self.config.api_base or None)[1]
            except Exception:  # an unknown provider: the call says what is wrong
                self._provider = ""
        if self._provider in HANDLER_PROVIDERS:
            return {"client": bounded_handler()}
        api_base, api_key = self.config.api_base, self._api_key or ""
        if self._provider in SDK_PROVIDERS:  # the client is used as it is: made on the
            # server and key litellm resolves for the provider (else OpenAI's would be used)
            _, _, key, base = litellm.get_llm_provider(
                model=self.config.model, api_base=api_base or None, api_key=api_key or None)
            if not (base and key):  # litellm says what is missing
                return {}
            api_base, api_key = base, key
        elif self._provider != "openai":
            return {}
        client = bounded_client(api_base, api_key)
        return {} if client is None else {"client": client}

    def _request(self, messages: Messages, schema: Schema, name: str) -> dict[str, Any]:
        c = self.config
        kwargs: dict[str, Any] = {
            "model": c.model, "messages": messages, "temperature": c.temperature,
            "max_tokens": c.output_tokens, "timeout": c.timeout_s,
            # retries are ours (Retry-After, budget, status); none inside litellm / openai
            "num_retries": 0, "max_retries": 0,
        }
        if c.api_base:
            kwargs["api_base"] = c.api_base
        if c.api_base:
            if self._api_key is None:  # the openai client sends nothing without a key
                missing = missing_credentials(c.model, c.api_base)
                self._api_key = PLACEHOLDER_API_KEY if missing else ""
            if self._api_key:
                kwargs["api_key"] = self._api_key
        if c.response_format == "json_schema":
            kwargs["response_format"] = {"type": "json_schema", "json_schema": {
                "name": f"{name}_grade", "schema": schema, "strict": False}}
        elif c.response_format == "json_object":
            kwargs["response_format"] = {"type": "json_object"}
        return {**kwargs, **self._client()}

    async def _wait_for_rate(self, messages: Messages) -> None:
        if not (self.limiter.rpm or self.limiter.tpm):
            return
        tokens = (litellm.token_counter(model=self.config.model, messages=messages)
                  if self.limiter.tpm else 0)
        while (delay := self.limiter.reserve(self.clock(), tokens)) > 0:
            await self.sleep(delay)

    async def _complete(self, messages: Messages, schema: Schema, name: str,
                        result: CallResult) -> str | None:
        """Reply text, or None with ``result.status``/``error`` set after the last retry."""
        c = self.config
        request = self._request(messages, schema, name)
        for attempt in range(c.max_retries + 1):
            await self._wait_for_rate(messages)
            result.attempts += 1
            try:
                with reading(c.max_reply_bytes) as read:
                    # the whole exchange, not each read: litellm's timeout is per read
                    response = await asyncio.wait_for(litellm.acompletion(**request),
                                                      timeout=c.timeout_s)
            except asyncio.CancelledError:  # the stop, or its judgement ended
                if read.sent:  # the server had the prompt: billed, as a timed-out request
                    self._account_unread(request, result, 0)
                raise
            except Exception as e:  # classified below: the provider boundary
                if read.cut:  # not retried nor repaired: the next reply would be as long
                    # billed all the same: the prompt, and a reply of at least the bound
                    self._account_unread(request, result, min(
                        c.output_tokens, math.ceil(c.max_reply_bytes / CHARS_PER_TOKEN)))
                    result.status = "parse_error"
                    result.error = read.refused or (
                        f"the reply is over max_reply_bytes {c.max_reply_bytes} "
                        "(not read further)")
                    return None
                status, delay = self._classify(e, attempt)
                if status == "timeout":  # the prompt was sent: billed, whatever came back
                    self._account_unread(request, result, 0)
                result.status, result.error = status, error_text(e)
                if isinstance(e, TimeoutError):
                    result.error = f"no whole reply within timeout_s {c.timeout_s:g}"
                hint = retry_after_s(e) if hinted(e) else None
                if delay is None and hint is not None and hint > c.backoff_max_s:
                    result.error += (f" (Retry-After {hint:g} s is over backoff_max_s "
                                     f"{c.backoff_max_s:g}: not waited for)")
                if delay is None or attempt == c.max_retries:
                    return None
                left_out = self._retry_log.allow()
                if left_out is not None:
                    log.info("judge %s: %s, retry %d in %.1fs%s", name, status, attempt + 1,
                             delay, LogLimiter.since(left_out, "judge retries"))
                await self.sleep(delay)
                continue
            choices = getattr(response, "choices", None)
            message = getattr(choices[0], "message", None) if choices else None
            text = str(getattr(message, "content", None) or "")
            self._account(response, request, text, result)  # paid for, used or not
            if message is None:  # a 200 with `choices: []`: nothing to parse or repair
                result.status, result.error = "parse_error", "the reply has no choices"
                return None
            result.status, result.error = "ok", ""
            return text
        return None

    def _classify(self, e: Exception, attempt: int) -> tuple[CallStatus, float | None]:
        """(status, delay before the next attempt, None = do not retry)."""
        c = self.config
        backoff = self._backoff.delay_s(attempt)
        if isinstance(e, (litellm.Timeout, TimeoutError)):
            return "timeout", backoff
        if hinted(e):
            status: CallStatus = ("rate_limited" if isinstance(e, litellm.RateLimitError)
                                  else "error")
            hint = retry_after_s(e)
            if hint is None:
                return status, backoff
            # a hint past the cap is a failure now, not a worker asleep for an hour
            return status, hint if hint <= c.backoff_max_s else None
        return "error", None

    def _account(self, response: Any, request: dict[str, Any], text: str,
                 result: CallResult) -> None:
        """Tokens and cost of one reply into the result, the budget and the token limit. The
        reported usage is checked first (``plausible_tokens``); an implausible one is replaced
        by an estimate from the text sent and received, and counted."""
        c = self.config
        usage = getattr(response, "usage", None)
        sent_text = _sent_text(request)
        sent = reply_bytes(sent_text)
        # a prompt is never 0 tokens: 0 is a usage not reported (or a lie), so estimated
        tin = plausible_tokens(getattr(usage, "prompt_tokens", None), 2 * sent + _FRAMING,
                               floor=1)
        tout = plausible_tokens(getattr(usage, "completion_tokens", None),
                                2 * max(c.output_tokens, reply_bytes(text)) + _FRAMING)
        reported = tin is not None and tout is not None
        if tin is None or tout is None:
            result.usage_implausible += 1
            log.warning("judge reply usage %r is implausible for %d bytes sent; estimated",
                        str(usage)[:200], sent)
            tin = estimated_tokens(sent_text)
            tout = math.ceil(reply_bytes(text) / CHARS_PER_TOKEN)
        self._spend(result, tin, tout, self._cost(response, tin, tout, reported))

    def _account_unread(self, request: dict[str, Any], result: CallResult,
                        output_tokens: int) -> None:
        """A request whose reply was not read (timed out, cut at ``max_reply_bytes``, or
        cancelled once the server had it whole, ``Reading.sent``): the provider bills it
        all the same (the prompt was sent), so it is spent and counted as a
        reply without usage is, estimated from the text sent (``output_tokens``: what the
        reply is known to have been at least)."""
        tin = estimated_tokens(_sent_text(request))
        self._spend(result, tin, output_tokens, self._cost(None, tin, output_tokens, False))

    def _spend(self, result: CallResult, tin: int, tout: int, cost: float | None) -> None:
        """Count a request's tokens and cost (``None``: unknown, and so is the call's)."""
        result.input_tokens += tin
        result.output_tokens += tout
        result.cost_usd = None if cost is None or result.cost_usd is None \
            else result.cost_usd + cost
        now = self.clock()
        if cost is not None:
            self.budget.add(now, cost)
        self.limiter.add_tokens(now, tout)

    def _cost(self, response: Any, tin: int, tout: int, reported: bool) -> float | None:
        """USD these tokens cost; None when unknown (no price for the model: never $0)."""
        c = self.config
        if c.input_cost_per_token_usd or c.output_cost_per_token_usd:
            return tin * c.input_cost_per_token_usd + tout * c.output_cost_per_token_usd
        if not self._priced:
            return None
        try:
            # the most these tokens cost at litellm's prices (no cache discount)
            most = sum(litellm.cost_per_token(model=c.model, prompt_tokens=tin,
                                              completion_tokens=tout))
            if not reported:
                return float(most)
            cost = float(litellm.completion_cost(completion_response=response))
        except Exception:  # model missing from litellm's price map: unknown
            return None
        # completion_cost also reads usage fields not checked here (cached, reasoning tokens):
        # whatever they say, a reply costs no more than its checked tokens, and nothing less
        return min(max(cost, 0.0), most) if math.isfinite(cost) else float(most)


async def close_clients() -> None:
    """Close litellm's cached HTTP clients; they belong to the running loop (call on it)."""
    from litellm.llms.custom_httpx.async_client_cleanup import close_litellm_async_clients
    with contextlib.suppress(Exception):
        await close_litellm_async_clients()
    await close_bounded_clients()
    litellm.in_memory_llm_clients_cache.flush_cache()
