"""Stage: trajectory (part). The cost of an LLM call that carries model and tokens but no cost.

Prices come from litellm's model price map, the copy packaged with litellm (never fetched: the
service makes no outbound call it was not asked to). A model the map does not know leaves the
cost unknown (None), never 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from otel_eval.model import Step


@lru_cache(maxsize=1)
def _price_map() -> Mapping[str, Any]:
    # Imported lazily: litellm takes seconds to import, and only priced runs need it.
    # otel_eval.llm makes it use its packaged price map (no network I/O at import).
    try:
        from otel_eval.llm import litellm
    except Exception:  # litellm missing or broken: every model's cost is unknown
        return {}
    return dict(getattr(litellm, "model_cost", {}) or {})


@lru_cache(maxsize=1024)
def model_prices(model: str) -> tuple[float, float] | None:
    """(input, output) USD per token for ``model``, or None when the price map lacks it."""
    prices = _price_map()
    candidates = [model, model.lower()]
    if "/" in model:  # "openai/gpt-4o" -> "gpt-4o"
        candidates.append(model.split("/", 1)[1])
    for name in candidates:
        entry = prices.get(name)
        if isinstance(entry, Mapping):
            inp, out = entry.get("input_cost_per_token"), entry.get("output_cost_per_token")
            if isinstance(inp, int | float) and isinstance(out, int | float):
                return float(inp), float(out)
    return None


def step_cost(step: Step) -> float | None:
    """USD cost of one LLM step: its own, else priced from model and tokens, else None."""
    if step.cost_usd is not None:
        return step.cost_usd
    if not step.model or (step.input_tokens is None and step.output_tokens is None):
        return None
    prices = model_prices(step.model[:200])
    if prices is None:
        return None
    return (step.input_tokens or 0) * prices[0] + (step.output_tokens or 0) * prices[1]


def price_steps(steps: Iterable[Step]) -> None:
    """Fill ``cost_usd`` of LLM steps that have none and whose model the price map knows."""
    for step in steps:
        if step.kind == "llm" and step.cost_usd is None and step.model:
            step.cost_usd = step_cost(step)
