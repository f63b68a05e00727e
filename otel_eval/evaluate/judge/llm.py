"""The one place litellm is imported (the judge's and the budget detector's way to it).

Promises, whatever the importer:
- no outbound call at import: litellm is told to use its packaged price map
  (``LITELLM_LOCAL_MODEL_COST_MAP``) before it is first imported, instead of fetching the
  latest one from GitHub (three attempts, then the same packaged map); nor when counting
  tokens (``HF_HUB_OFFLINE``: no tokenizer download from the Hugging Face Hub);
- no provider text through a backtracking regex: litellm's secret redaction
  (``LITELLM_DISABLE_REDACT_SECRETS``) runs a pattern that is quadratic on some texts over
  every provider error message, on the event loop (a 200 KB error body held it 185 s). It is
  off; the error text the judge keeps is cut first, then redacted (``client.error_text``);
- stdout carries results only: litellm's own handler writes records below WARNING to stdout
  (``otel-eval eval --format jsonl | jq`` broke on them); its loggers here propagate to ours,
  which write to stderr, and its per-call INFO chatter is kept below the threshold.
"""

from __future__ import annotations

import functools
import logging
import os

# Before the import: litellm reads it at import time. Forced, not defaulted: a sidecar makes
# no outbound call it was not configured to make, and nothing configures this one.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
# Same for tokenizers: litellm's token_counter (the judge's tokens_per_min limit) fetches a
# Llama or Cohere model's tokenizer from the Hugging Face Hub (a minute of retries when it is
# unreachable, on the event loop); offline, it counts with the tokenizer it ships instead.
os.environ["HF_HUB_OFFLINE"] = "1"
# Forced too, not defaulted: litellm reads it once, at import (``litellm._logging``), and with
# it unset every provider exception's text goes whole through its redaction regex, quadratic
# on a "{" followed by repeated ``"type":"service_account"`` with no "}" (its JSON-blob
# alternative scans to the end from each of them). A provider's error body is not ours to
# bound, so neither is that time, and an operator's ``false`` would bring it back. The error
# text the judge keeps (in the result and its log line) is redacted by the client after the
# cut (it was not before: a token in a provider's error message came back whole).
os.environ["LITELLM_DISABLE_REDACT_SECRETS"] = "true"

import litellm as litellm  # re-exported: ``from otel_eval.evaluate.judge.llm import litellm``

# litellm's own patterns, whatever the switch above says (re-exported for the client)
from litellm.litellm_core_utils.secret_redaction import redact_string as redact_secrets

# litellm's loggers by name: the SDK's, the router's and the proxy's
_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")


def _quiet_litellm() -> None:
    litellm.suppress_debug_info = True  # otherwise every provider error prints a banner
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):  # its LevelRoutingStreamHandler: INFO -> stdout
            logger.removeHandler(handler)
        logger.propagate = True  # to the root handler (stderr), formatted like our own lines
        logger.setLevel(logging.WARNING)  # one INFO line per completion() is noise to us


_quiet_litellm()


def missing_credentials(model: str, api_base: str) -> list[str]:
    """The environment variables holding an API key that ``model`` needs and that are unset
    (empty when the provider needs none, or finds its key)."""
    try:
        check = litellm.validate_environment(model=model, api_base=api_base or None)
    except Exception:  # an unknown provider: let the first call say what is wrong
        return []
    return [k for k in check.get("missing_keys", []) if str(k).endswith("_KEY")]


# Providers whose model information litellm asks a server for when the model is not in its
# price map: Ollama's ``/api/show`` (``OllamaModelInfo.get_model_info``). litellm's cost,
# response-schema and Responses-bridge checks ask without the request's api_base, so the
# request goes to OLLAMA_API_BASE or http://localhost:11434 whatever judge.api_base says:
# synchronous, on the event loop, with no deadline of ours (a listener that never answers
# held every call).
_ASKS_A_SERVER = ("ollama", "ollama_chat")


def pin_model_info(model: str, input_cost_per_token: float,
                   output_cost_per_token: float) -> None:
    """Put ``model`` in litellm's price map (at the configured prices, else 0, as Ollama's
    own answer would say) when its provider would otherwise ask a server for it, so it never
    does. Idempotent; a model the packaged map knows keeps its entry."""
    provider, _, name = model.partition("/")
    if provider not in _ASKS_A_SERVER or not name:
        return
    # the names litellm's own "is it in the map" check tries (OllamaModelInfo)
    names = {model.lower(), name.lower(), f"ollama/{name}".lower(), f"ollama_chat/{name}".lower()}
    if any(key.lower() in names for key in litellm.model_cost):
        return
    # Under the bare name, which that check tries too: register_model looks the key up first,
    # and under "ollama/<name>" that lookup is the very /api/show call. Cache prices 0 (Ollama
    # has none) or litellm warns that they default to 0.
    litellm.register_model({name: {
        "litellm_provider": provider, "mode": "chat",
        "input_cost_per_token": input_cost_per_token,
        "output_cost_per_token": output_cost_per_token,
        "cache_creation_input_token_cost": 0.0, "cache_read_input_token_cost": 0.0}})


def priced(model: str) -> bool:
    """Whether litellm has a price for ``model`` (0 is a price: Ollama's, once
    ``pin_model_info``): a row of its map under the model's name with or without its
    provider, or a cost it computes. Not ``cost_per_token`` alone: for an OpenAI name it
    does not know (``gpt-``, ``o``: a model newer than the pinned litellm) it gives 0."""
    names = (model, model.partition("/")[2])
    for name in filter(None, names):
        row = litellm.model_cost.get(name) or litellm.model_cost.get(name.lower())
        if isinstance(row, dict) and ("input_cost_per_token" in row
                                      or "output_cost_per_token" in row):
            return True
    try:
        return sum(litellm.cost_per_token(model=model, prompt_tokens=1_000_000,
                                          completion_tokens=1_000_000)) > 0
    except Exception:  # not mapped
        return False


@functools.lru_cache(maxsize=64)
def output_limit(model: str) -> int | None:
    """The largest completion litellm's packaged map gives ``model`` (``max_output_tokens``,
    under the model's name with or without its provider), or None: the map read, no server
    asked (``get_model_info`` would ask Ollama's)."""
    names = (model, model.partition("/")[2])
    for name in filter(None, names):
        row = litellm.model_cost.get(name) or litellm.model_cost.get(name.lower())
        limit = row.get("max_output_tokens") if isinstance(row, dict) else None
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            return limit
    return None


__all__ = ["PLACEHOLDER_API_KEY", "litellm", "missing_credentials", "output_limit",
           "pin_model_info", "priced", "redact_secrets"]

# Sent as the key to an OpenAI-compatible server at ``api_base`` when no key is configured:
# local servers (vLLM, llama.cpp, Ollama's /v1) ignore it, but the openai client refuses to
# send a request without one ("Missing credentials").
PLACEHOLDER_API_KEY = "no-key-configured"
