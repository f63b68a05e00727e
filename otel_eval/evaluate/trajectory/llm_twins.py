"""Stage: trajectory (part). One LLM call recorded twice is one call.

Two instrumentations of one client each record its calls: OpenInference's or OpenLLMetry's
Anthropic instrumentation and the Anthropic SDK's own spans (``anthropic.messages.create``,
scope ``com.anthropic.sdk.python``); OpenInference's DSPy ``LM.__call__`` and its LiteLLM
``completion``. Counted as two, a run makes twice its LLM calls and spends twice its tokens
and cost (a budget finding the run never earned). The twin is found by what identifies the
call, never by its position alone:

1. nested: an LLM span directly under an LLM span;
2. the same response id (``gen_ai.response.id``, the provider's id of the reply) on two LLM
   steps, one within the other's time (OpenLLMetry's ``anthropic.chat`` beside the SDK's
   span, both under the agent); one after the other, they are two calls (a cache answering
   the second with the first's reply: a repeat the loop rules must see);
3. where one of the two records no response id (OpenInference's ``messages.stream``): an
   LLM step of another instrumentation (another convention, or another scope: OpenLLMetry's
   Anthropic and the SDK's own both speak GenAI) under the same parent, started within the
   few LLM steps before it there (``_WINDOW``), whose time holds its own and whose input
   tokens are its own (both recorded), or, for a failed call (an API's 400: no reply, no id,
   no tokens), that failed too and recorded no tokens either; only when exactly one step is
   so.

The outer step (the parent; else the one whose time holds the other's; else the first)
takes what only the inner one carries (model, tokens, cost, reply, output, finish reasons,
the requested calls, its error, its response id); the inner one is no call of its own: kind
``other``, ``Step.sources["kind"]`` says whose call it is. Linear in the steps.
"""

from __future__ import annotations

from otel_eval.base.steps import Step

__all__ = ["fold", "merge_llm_twins"]

# What the inner span of one LLM call recorded twice may add to the outer one.
_FIELDS = ("model", "provider", "input_tokens", "output_tokens", "cost_usd", "cache_write_tokens",
           "cache_read_tokens", "reply", "output_text", "response_id")
# LLM steps under one parent looked back through for a twin without a response id: a
# call's twin starts right after it, other calls running beside it at most a few more.
_WINDOW = 4


def merge_llm_twins(steps: list[Step]) -> None:
    llm = [s for s in steps if s.kind == "llm" and not s.rebuilt]
    if len(llm) < 2:
        return
    by_span = {s.span_id: s for s in llm}
    for step in llm:
        outer = by_span.get(step.parent_span_id or "")
        if outer is not None and outer is not step:
            fold(step, outer, f"the call of its parent LLM step {outer.span_id}")
            by_span[step.span_id] = outer  # one nested deeper is the same call: the outer's
    if any(s.response_id is not None for s in llm):
        _same_response(llm)
    if len({(s.scope, s.convention) for s in llm}) > 1:
        _beside(llm)


def _same_response(llm: list[Step]) -> None:
    first: dict[str, Step] = {}
    for step in llm:
        rid = step.response_id
        if rid is None or step.kind != "llm":
            continue
        twin = first.get(rid)
        if twin is not None and _holds(step, twin):
            outer, inner = step, twin
        elif twin is not None and _holds(twin, step):
            outer, inner = twin, step
        else:  # the first, or a later call answered from a cache with the same reply
            first[rid] = step
            continue
        fold(inner, outer, f"the call of LLM step {outer.span_id} (the same response id)")
        first[rid] = outer


def _beside(llm: list[Step]) -> None:
    seen: dict[str | None, list[Step]] = {}
    taken: set[str] = set()  # steps that took a twin, or were one
    for step in llm:
        if step.kind != "llm":
            continue
        before = seen.setdefault(step.parent_span_id, [])
        tokens, failed = step.input_tokens, step.status == "error"
        if (tokens is not None or failed) and step.span_id not in taken:
            found = [o for o in before[-_WINDOW:]
                     if (o.scope != step.scope or o.convention != step.convention)
                     and o.span_id not in taken
                     and o.input_tokens == tokens
                     and (tokens is not None or o.status == "error")
                     and (o.response_id is None or step.response_id is None)
                     and _holds(o, step)]
            if len(found) == 1:
                outer = found[0]
                fold(step, outer, f"the call of LLM step {outer.span_id} (recorded beside "
                                   "it by another instrumentation)")
                taken.update((outer.span_id, step.span_id))
                continue
        before.append(step)


def _holds(outer: Step, inner: Step) -> bool:
    return outer.start_ns <= inner.start_ns and inner.end_ns <= outer.end_ns


def fold(inner: Step, outer: Step, why: str, fields: tuple[str, ...] = _FIELDS) -> None:
    """``inner`` is ``outer``'s call recorded again (a tool's or an LLM's): ``outer`` takes
    what only ``inner`` carries (``fields``, the requested calls and finish reasons, its
    error), and ``inner`` is no call of its own (kind ``other``, ``sources["kind"]`` why)."""
    for name in fields:
        if getattr(outer, name) is None and getattr(inner, name) is not None:
            setattr(outer, name, getattr(inner, name))
            if name in inner.sources:
                outer.sources[name] = inner.sources[name]
    if not outer.finish_reasons:
        outer.finish_reasons = list(inner.finish_reasons)
    if not outer.tool_calls:
        outer.tool_calls = list(inner.tool_calls)
        if inner.calls_unknown and not outer.calls_unknown:  # known only in part there too
            outer.unknown["tool_calls"] = inner.unknown["tool_calls"]
    if inner.status == "error" and outer.status != "error":
        outer.status, outer.error = "error", inner.error
    inner.kind = "other"
    inner.sources["kind"] = why
