"""Configuration of the LLM judge stage (issue 5): model, limits, budget, judges, compaction.

Every field: meaning, unit, default. Built by ``otel_eval.app.config.build`` from the ``judge:``
section of the YAML file; constructors never read the environment (the provider key is read
by litellm itself from its usual variables, e.g. ``OPENAI_API_KEY``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from otel_eval.base.configcheck import FieldErrors, validate

JudgeName = Literal["step", "trace", "rubric", "process", "outcome", "session"]
JUDGE_NAMES: tuple[JudgeName, ...] = ("step", "trace", "rubric", "process", "outcome",
                                      "session")


# The built-in redaction classes (``RedactionConfig.builtin``; their rules: ``redact._RULES``).
BUILTIN_CLASSES = ("email", "phone", "credit_card", "api_key", "bearer_token", "private_key",
                   "jwt", "iban", "ssn")


def compile_redaction(pattern: str) -> Any:
    """``pattern`` compiled as the ``Redactor`` runs it (RE2: linear time); ValueError saying
    why it cannot be (RE2 syntax has no lookarounds or backreferences)."""
    import re2  # only where a pattern is compiled: the config is imported everywhere

    options = re2.Options()
    options.log_errors = False  # a bad configured pattern is an error, not stderr noise
    options.max_mem = 64 << 20  # the built-in classes' large alternations need more than 8 MiB
    try:
        return re2.compile(pattern, options=options)
    except re2.error as e:
        raise ValueError(f"not RE2 syntax (no lookarounds or backreferences): {e}") from None


@dataclass(frozen=True)
class RedactionConfig:
    # Built-in PII / secret classes replaced by a placeholder (``[EMAIL]`` ...) before any text
    # is sent. Known: email, phone, credit_card, api_key (incl. AWS secret keys, github_pat_,
    # Stripe), bearer_token, private_key (PEM), jwt, iban, ssn. Default: all of them.
    builtin: tuple[str, ...] = ("email", "phone", "credit_card", "api_key", "bearer_token",
                                "private_key", "jwt", "iban", "ssn")
    # Extra regular expressions, RE2 syntax (no lookarounds or backreferences); each match
    # becomes ``[REDACTED]``. One search is linear; a lazy optional body (``BEGIN(?:.*?END)?``)
    # searches to the end of the text from each match, quadratic: bound it
    # (``key=[^;\n]{0,200}``) or require its end (``BEGIN.*?END``). Default none.
    extra_patterns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        problems = {f"builtin[{i}]": f"unknown redaction class {name!r} (known: "
                    f"{', '.join(BUILTIN_CLASSES)})"
                    for i, name in enumerate(self.builtin) if name not in BUILTIN_CLASSES}
        for i, pattern in enumerate(self.extra_patterns):
            try:
                compile_redaction(pattern)
            except ValueError as e:
                problems[f"extra_patterns[{i}]"] = f"{e}: {pattern!r:.80}"
        if problems:
            raise FieldErrors(problems)


@dataclass(frozen=True)
class CompactionConfig:
    # Tool results longer than this are cut to head + tail, characters. Default 1200.
    max_tool_output_chars: int = 1200
    # LLM outputs and tool-call arguments longer than this are cut, characters. Default 2000.
    max_message_chars: int = 2000
    # The new text of an LLM call's input messages other than tool results and the system
    # prompt (user turns, prompt templates, re-sent notes) is cut to this, characters.
    # Default 1000: on TRAIL these are mostly smolagents' planning and final-answer templates.
    max_input_message_chars: int = 1000
    # A system prompt is shown once (later ones show only their new lines), cut to this, chars.
    # Default 1500.
    max_system_prompt_chars: int = 1500
    # Task input and final output shown to the judges are cut to this, chars. Default 4000.
    max_task_chars: int = 4000
    # The judge's view of a run (task, steps, final output, findings) is held to this share
    # of the agent's own input tokens (its LLM calls' usage, else their input text at 3.5
    # chars a token, a file in it as the judge is shown it, [image/png, 49 kB], not its
    # bytes; the view's own text counted the same way, a Chinese, Japanese or Korean
    # character a token): an agent re-sends its history on every call, the judge reads each text
    # once, so the share scales with the run. Filled by priority: the task and final output,
    # step headers (the ids the judge cites), tool calls and their arguments, errors and user
    # turns, then replies, tool results and prompts cut to head + tail at one common length
    # (short texts stay whole). 0 = no budget, only the per-text limits. Default 0.025.
    view_share: float = 0.025
    # Floor of that budget, tokens: a short run is shown up to this whatever its own input.
    # Default 800.
    min_view_tokens: int = 800
    # Upper bound on the view whatever the share, characters; past it (step headers and the
    # shortest cuts alone) the middle of the run is cut. Default 60000 (~15k tokens).
    max_trajectory_chars: int = 60_000
    # Share of a cut text kept from its start (the rest from its end), 0-1. Default 0.6.
    head_ratio: float = 0.6

    def __post_init__(self) -> None:
        validate(self, minimum={
            "max_tool_output_chars": 0, "max_message_chars": 0, "max_input_message_chars": 0,
            "max_system_prompt_chars": 0, "max_task_chars": 0, "max_trajectory_chars": 0,
            "head_ratio": 0, "view_share": 0, "min_view_tokens": 0},
            maximum={"head_ratio": 1, "view_share": 1})


@dataclass(frozen=True)
class SamplingConfig:
    # Share of traces judged, 0-1, chosen by trace id hash (stable across re-opened traces).
    rate: float = 1.0
    # Per-agent override of ``rate`` (agent name as in Trajectory.agent -> 0-1). Default none.
    rate_by_agent: dict[str, float] = field(default_factory=dict)
    # Traces with a finding of one of these severities (info, warning, error) are always
    # judged. Default ("error",).
    always_severities: tuple[Literal["info", "warning", "error"], ...] = ("error",)

    def __post_init__(self) -> None:
        validate(self, minimum={"rate": 0}, maximum={"rate": 1},
                 values={"rate_by_agent": (0, 1)})


# Providers for which litellm asks a server judge.api_base does not name, whatever the call
# says: Lemonade's model list (``GET /models/<name>`` at LEMONADE_API_BASE or localhost:8000,
# before each call). The service makes no outbound call it was not configured to make.
_UNCONFIGURED_CALLS = {"lemonade": "litellm asks LEMONADE_API_BASE or localhost:8000 about "
                                   "the model whatever api_base says; use openai/<model> "
                                   "with api_base set to the server's OpenAI-compatible URL"}


def _model_problems(model: str) -> dict[str, str] | None:
    provider = model.partition("/")[0].lower() if "/" in model else ""
    why = _UNCONFIGURED_CALLS.get(provider)
    return {"model": f"provider {provider!r} is not supported: {why}"} if why else None


# max_output_tokens 0: the model's own limit up to this (a 60-step combined reply is ~14,800
# tokens: prompting.REPLY_TOKENS), or this when litellm's map does not know the model
AUTO_OUTPUT_TOKENS = 16_384
UNKNOWN_OUTPUT_TOKENS = 4_096


@dataclass(frozen=True)
class JudgeConfig:
    # litellm model string ("openai/gpt-4o-mini", "anthropic/claude-3-5-haiku-latest",
    # "ollama/llama3.1", ...); empty means no judge. Default "" (off).
    model: str = ""
    # Base URL of an OpenAI-compatible or self-hosted endpoint (vLLM, Ollama); "" = provider's.
    api_base: str = ""
    # Sampling temperature of judge calls, >= 0. Default 0.0 (repeatable grades).
    temperature: float = 0.0
    # Largest completion per judge call, tokens; a call asks for no more step grades than
    # fit (see max_steps_per_call). 0 = the model's own limit in litellm's packaged map, at
    # most 16,384, else 4,096 (judge.llm.output_limit: the map read, no server asked).
    # Default 0.
    max_output_tokens: int = 0
    # Largest reply text used, bytes (UTF-8); a longer one is a `parse_error`, not parsed nor
    # sent back for repair. With the `openai` provider (`openai/<model>`, any api_base),
    # those litellm sends through the openai SDK (litellm_proxy, perplexity, cerebras,
    # deepinfra, ...: judge.transport.SDK_PROVIDERS) and those it sends through its
    # own HTTP handler (anthropic, bedrock, gemini, ollama, mistral, groq, ...:
    # judge.transport.HANDLER_PROVIDERS) the reply is not read past it (6x, escaped, plus
    # 64 KiB); other providers read it whole first. Default 1 MiB (4096 tokens of JSON are
    # ~20 KB).
    max_reply_bytes: int = 1024 * 1024
    # Deadline of one request, seconds: the whole exchange, from sending to the last byte of
    # the reply (not per read: a reply trickled a byte at a time is cut too). Default 60.
    timeout_s: float = 60.0
    # Retries after a timeout, 429, 5xx or connection error (not after 4xx). Default 3.
    max_retries: int = 3
    # First backoff, seconds; doubles per retry, capped at ``backoff_max_s``, each delay then
    # drawn at random from [half, all] of that (jitter: workers and replicas limited together
    # do not retry in lockstep); a Retry-After
    # header from the provider wins when present, up to ``backoff_max_s``: a longer one ends
    # the call with its failure status (counted), not a worker asleep. Defaults 1 s / 30 s.
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 30.0
    # Judge calls in flight at once (also the number of queue workers). Default 4.
    max_concurrency: int = 4
    # Requests started per rolling minute; 0 = unlimited. Default 0.
    requests_per_min: int = 0
    # Prompt + completion tokens per rolling minute (prompt counted before the call); 0 =
    # unlimited. Default 0.
    tokens_per_min: int = 0
    # Spend per rolling hour (litellm's cost accounting), USD; calls past it get status
    # `budget_exceeded` and new traces are skipped `over_budget`; 0 = unlimited. A cap on a
    # model litellm has no price for, with no prices below, is refused at start (it would
    # never apply): set the prices, or 0 here for a free self-hosted model. Default 1.0.
    max_cost_usd_per_hour: float = 1.0
    # Prices for models litellm does not know (self-hosted, newer than the pinned litellm),
    # USD per token; both 0 = use litellm's price map (Ollama's models are priced 0 there).
    # Defaults 0.
    input_cost_per_token_usd: float = 0.0
    output_cost_per_token_usd: float = 0.0
    # How the JSON reply is requested: `json_schema` (response_format with the schema),
    # `json_object` (JSON mode only) or `none` (prompt only). Replies are validated either way.
    response_format: Literal["json_schema", "json_object", "none"] = "json_schema"
    # Judges switched on. step = Agentic CLEAR J_s per LLM call; trace = J_t; rubric = J_r+J_v;
    # process = ClawTrack 4-dimension turn grader; outcome = task completion (only when no
    # outcome label is known); session = one call per completed conversation (its turns as a
    # transcript, docs/sessions.md), with the same limits and budget. Default: all but rubric
    # (2 calls per new task).
    enabled: tuple[JudgeName, ...] = ("step", "trace", "process", "outcome", "session")
    # One structured call per trace carrying the step, trace, process and outcome scores
    # (rubric stays separate). Default True: ~4x fewer prompt tokens than separate calls.
    combined: bool = True
    # LLM steps scored per step-judge call (all in one call when they fit), at most; fewer
    # when their grades would not fit max_output_tokens (about 48 tokens a step's, 192 a
    # turn's: judge.prompting.REPLY_TOKENS). Default 60.
    max_steps_per_call: int = 60
    # Dual-threshold pass: outcome >= tau_task and process >= tau_process (0-1). ClawTrack
    # evaluates at 0.6 process. Defaults 0.5 / 0.6.
    tau_task: float = 0.5
    tau_process: float = 0.6
    # Scores below this are "low": evaluation events label them fail. 0-1. (Issue clustering
    # has its own threshold, issues.low_score_threshold.)
    low_score_threshold: float = 0.5
    # Evaluations waiting for the judge, and apart from them session judgements under way;
    # when full, new ones are skipped `queue_full`.
    queue_size: int = 1000
    # Bytes of traces (as received, OTLP protobuf) whose evaluations wait for the judge and
    # of the sessions handed to it until judged (their turns' JSON as stored), together; past
    # it new ones are skipped `queue_full` (one alone is always taken). Each holds its texts:
    # by count alone, 1,000 of the largest traces, or sessions of 64 Mi characters (64 GiB).
    max_queue_bytes: int = 256 * 1024 * 1024
    # Directory whose <name>.txt files replace the packaged prompts
    # (otel_eval/evaluate/judge/prompts); "" = packaged only. Missing files fall back to the
    # packaged ones.
    prompt_dir: str = ""
    # Cached rubric criteria older than this are regenerated and deleted, days (0 = never).
    # The cache keeps at most 10,000 tasks (the oldest written go), keyed by a hash of the
    # task id within its service (service.name), else of the input, and of the judge model
    # and the system and rubric_generate prompts that wrote them (a change of either writes
    # them again). Default 30.
    rubric_ttl_days: float = 30.0
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    redaction: RedactionConfig = field(default_factory=RedactionConfig)
    compaction: CompactionConfig = field(default_factory=CompactionConfig)

    @property
    def output_tokens(self) -> int:
        """The completion limit a call asks for: ``max_output_tokens``, or when 0 the
        model's own (litellm's map), at most ``AUTO_OUTPUT_TOKENS``, else 4,096."""
        if self.max_output_tokens:
            return self.max_output_tokens
        from otel_eval.evaluate.judge.llm import output_limit  # litellm: imported when judged
        return min(output_limit(self.model) or UNKNOWN_OUTPUT_TOKENS, AUTO_OUTPUT_TOKENS)

    @property
    def active(self) -> bool:
        """A model is set and the judge is not switched off: traces get judged."""
        return bool(self.model and self.enabled)

    def __post_init__(self) -> None:
        shares = ("tau_task", "tau_process", "low_score_threshold")
        validate(self, minimum={
            **dict.fromkeys(shares, 0), "max_concurrency": 1, "queue_size": 1,
            "max_queue_bytes": 1, "max_steps_per_call": 1, "max_retries": 0, "max_output_tokens": 0,
            "max_reply_bytes": 1,
            "temperature": 0, "backoff_initial_s": 0, "backoff_max_s": 0,
            "requests_per_min": 0, "tokens_per_min": 0, "max_cost_usd_per_hour": 0,
            "input_cost_per_token_usd": 0, "output_cost_per_token_usd": 0,
            "rubric_ttl_days": 0}, above={"timeout_s": 0}, maximum=dict.fromkeys(shares, 1),
            problems=_model_problems(self.model))


def call_names(config: JudgeConfig) -> tuple[str, ...]:
    """The ``judge`` label values of the calls ``config`` can make (``prompting.plan``: a
    combined call, or one judge alone when it is the only part of a call; the rubric's two
    calls; the session's)."""
    parts = [j for j in config.enabled if j not in ("rubric", "session")]
    names = (["combined"] if config.combined and len(parts) > 1 else []) + parts
    if "rubric" in config.enabled:
        names += ["rubric_generate", "rubric_verify"]
    if "session" in config.enabled:
        names.append("session")
    return tuple(names)
