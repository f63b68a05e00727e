"""Stage: trajectory (part). The cost of an LLM call that carries model and tokens but no cost.

Prices come from litellm's model price map, the copy packaged with litellm (never fetched: the
service makes no outbound call it was not asked to). A model the map does not know leaves the
cost unknown (None), never 0; so does a price past ``MAX_STEP_COST_USD`` (1e9 USD: tokens no
real call has).

Cached input tokens (``Step.cache_read_tokens``, ``cache_write_tokens``) are part of
``input_tokens`` (the GenAI registry: they "SHOULD be included"); they are priced at the map's
``cache_read_input_token_cost`` / ``cache_creation_input_token_cost`` and the rest of the input
at ``input_cost_per_token``. Cached counts larger than ``input_tokens`` cannot be part of it:
they are the provider's separate buckets (Anthropic's usage copied as it comes), priced beside
all the input tokens. A cached count above 0 whose rate the map lacks leaves the cost unknown,
as an unpriced model: the input rate is no bound (a cache write costs 1.25x an input token at
Anthropic) and a guess is no reason for a budget finding. So does a call that recorded the
token count of one side only (input, or output): the other priced as 0 would make the run
look cheaper than it was, where an unknown cost makes its total a lower bound ("cost partly
unknown").

Long-context rates: a row's ``<rate>_above_<N>k_tokens`` keys (``input_cost_per_token_above_
200k_tokens``, ``output_...``, ``cache_read_input_token_cost_...``,
``cache_creation_input_token_cost_...``; ``N`` in tokens without the ``k``) price a whole call
whose input tokens (cached ones included) exceed ``N`` (reach it, for a row of a provider
litellm bills from the threshold on: xAI's, ``INCLUSIVE_THRESHOLD_PROVIDERS``), as litellm
bills them (``_get_token_base_cost``): the highest tier exceeded, each rate it lists
replacing the lower one, the others kept. The service-tier variants (``_priority``, ``_flex``,
``_batches``) are not read: a span does not say its call's tier. Nor are a Perplexity row's
(``FLAT_RATE_PROVIDERS``): litellm prices Perplexity's calls with a calculator of its own that
reads the flat rates only, and bills cache writes as input tokens (so does this module).

Tier tables: a row's ``tiered_pricing`` list (Alibaba's Qwen rows, Volcengine's, OpenCode
Go's) outranks its flat rates, as in litellm (``_get_tiered_base_costs``, Dashscope's
``cost_per_token``): one tier, the one whose ``range`` ``(start, end]`` holds the call's input
tokens (the last above the highest end), prices the whole call. It is read as ``Prices``
whose base is the tier starting at 0 and whose ``above`` holds each later tier from its
start. A table whose ranges do not join from 0 up, or a tier without both token rates, is not
read (the flat rates, else unknown); a cache rate not listed by every tier is no rate.

The map is read from litellm's package directory as JSON, without importing litellm (~190 MB
resident and seconds of import, which serve pays only when the judge is configured), and
kept as ``Prices`` per model name, its aliases resolved the way litellm resolves
them (``alias_of`` rows and ``aliases`` lists; tests/trajectory checks it against
``litellm.model_cost``).
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from itertools import pairwise
from pathlib import Path
from typing import Any, NamedTuple

from otel_eval.base.steps import MAX_STEP_COST_USD, Step

PRICE_FILE = "model_prices_and_context_window_backup.json"  # in litellm's package directory


class Prices(NamedTuple):
    """USD per token of one model: input, output, and the cache rates when the map has them
    (None: not listed)."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None
    # the long-context tiers, ascending: (input tokens a call must exceed, input, output,
    # cache read, cache write rates; None: the lower tier's)
    above: tuple[tuple[float, float | None, float | None, float | None, float | None], ...] = ()
    # a tier applies from its threshold on (>=), not above it only (the row's provider bills so)
    inclusive: bool = False

    def for_input(self, tokens: int) -> Prices:
        """The rates of a call of ``tokens`` input tokens (cached ones included): those of the
        highest tier it exceeds (or reaches, when ``inclusive``), each rate it lists replacing
        the lower one."""
        inp, out, read, write = self.input, self.output, self.cache_read, self.cache_write
        for threshold, t_inp, t_out, t_read, t_write in self.above:
            if tokens > threshold or (self.inclusive and tokens == threshold):
                inp, out = t_inp if t_inp is not None else inp, t_out if t_out is not None else out
                read = t_read if t_read is not None else read
                write = t_write if t_write is not None else write
        return Prices(inp, out, read, write)


# The providers (a row's ``litellm_provider``) whose long-context tiers litellm applies from
# the threshold on, a call of exactly N input tokens included (litellm's
# ``_INCLUSIVE_THRESHOLD_PROVIDERS``, llm_cost_calc/utils.py); the others' from above it.
INCLUSIVE_THRESHOLD_PROVIDERS = frozenset({"xai"})

# The providers whose calls litellm prices with a calculator of its own that reads a row's
# flat rates only, its long-context keys ignored, cache writes billed at the input rate
# (llms/perplexity/cost_calculator.py).
FLAT_RATE_PROVIDERS = frozenset({"perplexity"})

_RATES = ("input_cost_per_token", "output_cost_per_token", "cache_read_input_token_cost",
          "cache_creation_input_token_cost")
# a long-context rate of litellm's map: <rate>_above_<N>[k]_tokens (no service-tier suffix)
_TIER_KEY = re.compile(rf"({'|'.join(_RATES)})_above_(\d+(?:\.\d+)?)(k?)_tokens")


@lru_cache(maxsize=1)
def _price_map() -> Mapping[str, Prices]:
    try:
        spec = importlib.util.find_spec("litellm")  # locates the package, does not import it
        where = spec.submodule_search_locations if spec is not None else None
        raw = json.loads((Path(next(iter(where or ()))) / PRICE_FILE).read_bytes())
    except (OSError, ValueError, StopIteration):  # litellm missing or broken: costs unknown
        return {}
    return price_table(raw) if isinstance(raw, dict) else {}


def price_table(raw: Mapping[str, Any]) -> dict[str, Prices]:
    """``Prices`` for each model of litellm's raw price map with input and output prices
    (its cache rates when it lists them); an ``alias_of`` row (pointing at a non-alias row)
    and each name in a row's ``aliases`` list (unless already a row or claimed) take their
    owner's prices."""
    rows = {k: v for k, v in raw.items() if isinstance(v, Mapping)}
    pointers = {k: v["alias_of"] for k, v in rows.items() if isinstance(v.get("alias_of"), str)}
    owners: dict[str, str] = {}
    for name, row in rows.items():
        aliases = row.get("aliases")
        if name in pointers or not isinstance(aliases, list):
            continue
        for alias in aliases:
            if isinstance(alias, str) and not (alias in rows and alias not in pointers) \
                    and alias not in owners:
                owners[alias] = name
    for alias, target in pointers.items():
        if target in rows and target not in pointers and alias not in owners:
            owners[alias] = target
    table: dict[str, Prices] = {}
    for name, row in rows.items():
        if name in pointers:
            continue
        inp, out = row.get("input_cost_per_token"), row.get("output_cost_per_token")
        tiered = _tier_table(row.get("tiered_pricing"))
        if tiered is not None:
            table[name] = tiered
        elif isinstance(inp, int | float) and isinstance(out, int | float):
            flat = row.get("litellm_provider") in FLAT_RATE_PROVIDERS
            table[name] = Prices(float(inp), float(out),
                                 _rate(row.get("cache_read_input_token_cost")),
                                 float(inp) if flat else
                                 _rate(row.get("cache_creation_input_token_cost")),
                                 () if flat else _tiers(row),
                                 row.get("litellm_provider") in INCLUSIVE_THRESHOLD_PROVIDERS)
    table.update((alias, table[owner]) for alias, owner in owners.items() if owner in table)
    return table


def _rate(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


def _tiers(row: Mapping[str, Any]) -> tuple[tuple[float, float | None, float | None,
                                                  float | None, float | None], ...]:
    """A row's long-context tiers (``Prices.above``), ascending by threshold."""
    found: dict[float, list[float | None]] = {}
    for key, value in row.items():
        match = _TIER_KEY.fullmatch(key) if "_above_" in key else None
        rate = _rate(value) if match else None
        if match and rate is not None:
            threshold = float(match[2]) * (1000 if match[3] else 1)
            found.setdefault(threshold, [None] * 4)[_RATES.index(match[1])] = rate
    return tuple((t, *found[t]) for t in sorted(found))  # type: ignore[misc]


def _tier_table(table: Any) -> Prices | None:
    """A row's ``tiered_pricing`` list as ``Prices`` (the module's "Tier tables"), or None when
    it is absent or not read."""
    if not isinstance(table, list) or not table:
        return None
    tiers: list[tuple[float, float, float, float, float | None, float | None]] = []
    for tier in table:
        bounds = tier.get("range") if isinstance(tier, Mapping) else None
        if not isinstance(bounds, list) or len(bounds) != 2:
            return None
        start, end, inp, out = (_rate(v) for v in (*bounds, tier.get(_RATES[0]),
                                                    tier.get(_RATES[1])))
        if start is None or end is None or inp is None or out is None:
            return None
        tiers.append((start, end, inp, out, _rate(tier.get(_RATES[2])),
                      _rate(tier.get(_RATES[3]))))
    tiers.sort(key=lambda t: t[:2])
    if tiers[0][0] != 0 or any(low[1] != high[0] for low, high in pairwise(tiers)):
        return None
    read, write = (all(t[i] is not None for t in tiers) for i in (4, 5))
    rates = [(t[0], t[2], t[3], t[4] if read else None, t[5] if write else None) for t in tiers]
    return Prices(rates[0][1], rates[0][2], rates[0][3], rates[0][4], tuple(rates[1:]))


# The attributes that name who served an LLM call: GenAI's (``gen_ai.system`` before
# ``gen_ai.provider.name``), OpenInference's, the AI SDK's (``mistral.chat``: before the dot).
PROVIDER_KEYS = ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system",
                 "ai.model.provider")
# A provider as those attributes name it -> the prefix of its rows in litellm's map, for the
# models the map lists only under it (``mistral/mistral-large-latest``, ``xai/...``,
# ``vertex_ai/...``), as litellm itself looks a model up with its provider.
PRICE_PREFIXES = {
    "openai": "openai", "anthropic": "anthropic", "gcp.gemini": "gemini", "gemini": "gemini",
    "google": "gemini", "gcp.vertex_ai": "vertex_ai", "vertex_ai": "vertex_ai",
    "vertexai": "vertex_ai", "aws.bedrock": "bedrock", "bedrock": "bedrock", "aws": "bedrock",
    "azure.ai.openai": "azure", "azure": "azure", "azure.ai.inference": "azure_ai",
    "az.ai.inference": "azure_ai", "mistral_ai": "mistral", "mistralai": "mistral",
    "mistral": "mistral", "x_ai": "xai", "xai": "xai", "moonshot_ai": "moonshot",
    "moonshot": "moonshot", "groq": "groq", "deepseek": "deepseek",
    "cohere": "cohere", "perplexity": "perplexity", "ibm.watsonx.ai": "watsonx",
}


def provider(attrs: Mapping[str, Any]) -> str | None:
    """Who served an LLM call, as its span names it (``PROVIDER_KEYS``, the first present);
    None when none does."""
    for key in PROVIDER_KEYS:
        value = attrs.get(key)
        if isinstance(value, str) and value:
            return value.split(".", 1)[0] if key == "ai.model.provider" else value
    return None


def _prefix(provider: str) -> str | None:
    """The prefix of the price map's rows for a provider as a span names it:
    ``PRICE_PREFIXES``, else the name itself when the map has rows under it (LiteLLM's own
    spans name the provider as litellm does, ``gen_ai.system: dashscope`` beside the model
    ``qwen-flash``: its row is ``dashscope/qwen-flash``)."""
    known = PRICE_PREFIXES.get(provider)
    return known if known is not None else (provider if provider in _row_prefixes() else None)


@lru_cache(maxsize=1)
def _row_prefixes() -> frozenset[str]:
    return frozenset(name.split("/", 1)[0] for name in _price_map() if "/" in name)


@lru_cache(maxsize=1024)
def model_prices(model: str, provider: str | None = None) -> Prices | None:
    """``Prices`` (USD per token) for ``model``, or None when the price map lacks it; the
    row of the call's ``provider`` first (``PRICE_PREFIXES``: an Azure deployment's price, a
    model the map lists only under its provider), then the model's own."""
    prices = _price_map()
    candidates = [model, model.lower()]
    prefix = _prefix(provider.lower()) if provider else None
    if prefix and not model.startswith(prefix + "/"):
        candidates[:0] = [f"{prefix}/{model}", f"{prefix}/{model.lower()}"]
    if "/" in model:  # "openai/gpt-4o" -> "gpt-4o"
        candidates.append(model.split("/", 1)[1])
    for name in candidates:
        entry = prices.get(name)
        if entry is not None:
            return entry
    return None


def step_cost(step: Step) -> float | None:
    """USD cost of one LLM step: its own, else priced from model and tokens, else None (and
    None for a price past ``MAX_STEP_COST_USD``: tokens no real call has)."""
    if step.cost_usd is not None:
        return step.cost_usd
    cost = _priced(step)
    return cost if cost is None or cost <= MAX_STEP_COST_USD else None


def _priced(step: Step) -> float | None:
    """The step's model price times its tokens, or None when either is unknown (a count of
    one side alone too: the other priced as 0 would be a cost lower than the call's)."""
    if not step.model or step.input_tokens is None or step.output_tokens is None:
        return None
    prices = _step_prices(step)
    if prices is None or _missing_rate(step, prices):
        return None
    read, write = step.cache_read_tokens or 0, step.cache_write_tokens or 0
    inputs = step.input_tokens or 0
    if read + write <= inputs:  # part of the input tokens (else beside them)
        inputs -= read + write
    cost = inputs * prices.input + (step.output_tokens or 0) * prices.output
    if read:
        cost += read * (prices.cache_read or 0.0)
    if write:
        cost += write * (prices.cache_write or 0.0)
    return cost


def _step_prices(step: Step) -> Prices | None:
    """The prices of the step's model, as served by its provider (names bounded), at the
    long-context tier of its input tokens (cached ones included: beside them when more)."""
    prices = model_prices(step.model[:200] if step.model else "",
                          step.provider[:100] if step.provider else None)
    if prices is None or not prices.above:
        return prices
    read, write = step.cache_read_tokens or 0, step.cache_write_tokens or 0
    inputs = step.input_tokens or 0
    return prices.for_input(inputs if read + write <= inputs else inputs + read + write)


def unpriced(step: Step) -> str:
    """Why ``step_cost`` of an LLM step is None, in a few words naming its model: no model,
    no token counts (or one side's only), a model the price map lacks, or a cache rate it
    lacks."""
    model = step.model[:200] if step.model else None
    if model is None:
        return "no model recorded"
    if step.input_tokens is None and step.output_tokens is None:
        return f"no token counts for {model}"
    if (side := _missing_count(step)) is not None:
        return f"no {side} token count for {model}"
    if (cost := _priced(step)) is not None:  # past MAX_STEP_COST_USD
        return _implausible(model, cost)
    prices = _step_prices(step)
    missing = _missing_rate(step, prices) if prices is not None else None
    return f"no {missing} price for {model}" if missing else f"no price for {model}"


def _implausible(model: str, cost: float) -> str:
    """Why a priced cost past ``MAX_STEP_COST_USD`` is unknown."""
    return (f"the tokens of {model} price at {cost:g} USD, past any plausible cost of one "
            f"call ({MAX_STEP_COST_USD:g})")


def _missing_count(step: Step) -> str | None:
    """The side (input, output) whose token count a call with the other recorded lacks."""
    if step.input_tokens is None and step.output_tokens is not None:
        return "input"
    if step.output_tokens is None and step.input_tokens is not None:
        return "output"
    return None


def _missing_rate(step: Step, prices: Prices) -> str | None:
    """The cache rate the step's tokens need and the price map lacks, if any."""
    if step.cache_read_tokens and prices.cache_read is None:
        return "cache-read"
    if step.cache_write_tokens and prices.cache_write is None:
        return "cache-write"
    return None


def price_steps(steps: Iterable[Step]) -> None:
    """Fill ``cost_usd`` of LLM steps that have none (a cost the span recorded comes first)
    and whose model the price map knows; the source says it was priced here, and a cache rate
    the map lacks, a token count of one side alone, or a price past ``MAX_STEP_COST_USD``, is
    said in ``Step.unknown`` (the cost stays unknown)."""
    for step in steps:
        if step.kind == "llm" and step.cost_usd is None and step.model:
            cost = _priced(step)
            if cost is not None and cost <= MAX_STEP_COST_USD:
                step.cost_usd = cost
                step.sources["cost_usd"] = "price list (litellm) by model and tokens"
                continue
            if cost is not None:
                if "cost_usd" not in step.unknown:
                    step.unknown["cost_usd"] = _implausible(step.model[:200], cost)
                continue
            side = _missing_count(step)
            if side is not None:  # a count of one side alone: the call's cost not known
                step.unknown.setdefault("cost_usd", f"no {side} token count for "
                                                    f"{step.model[:200]}")
                continue
            prices = _step_prices(step)
            missing = _missing_rate(step, prices) if prices is not None else None
            if missing and "cost_usd" not in step.unknown:
                step.unknown["cost_usd"] = f"no {missing} price for {step.model[:200]} in " \
                                           "the price list (litellm)"
