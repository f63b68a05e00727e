"""Hand-made evaluation objects (v1 shape) with judge critiques of three known failures."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# Three recurring failures, worded differently each time, with varying ids and numbers.
LOOP = [
    "Tool 'web_search' was called {n} times with identical arguments",
    "The agent called web_search {n} times with the same arguments again",
    "Repeated identical tool call: search called {n} times with same arguments",
]
FORMAT = [
    "Final answer missing the required units, answer format wrong",
    "The answer format is wrong: the final answer lacks units",
    "Final answer format wrong, units missing ({n} digits)",
]
AUTH = [
    "Authentication failed: API key rejected with HTTP 401 for https://api.x.io/v{n}",
    "API key rejected, authentication failed (401) at https://api.y.io/{n}",
    "Authentication failed because the API key was rejected ({n})",
]


def evaluation(trace_id: str, node_texts: list[tuple[str, str]],
               system_texts: Sequence[str] = (), agent: str = "shop") -> dict[str, Any]:
    steps = [{"index": i, "span_id": f"{trace_id}-s{i}", "node": node}
             for i, (node, _) in enumerate(node_texts)]
    critiques: list[dict[str, Any]] = [
        {"span_id": f"{trace_id}-s{i}", "score": 0.1, "text": text}
        for i, (_, text) in enumerate(node_texts)]
    critiques += [{"score": 0.0, "text": t} for t in system_texts]
    return {"trace_id": trace_id, "agent": agent, "steps": steps, "findings": [],
            "judge": {"judges": {"quality": {"critiques": critiques}}}}


def window(n_traces: int, offset: int = 0, with_auth: bool = True) -> list[dict[str, Any]]:
    """``n_traces`` evaluations: every trace loops in the searcher; even ones also get the
    format failure at system level; every third one an auth failure in the searcher."""
    out = []
    for i in range(offset, offset + n_traces):
        tid = f"{i:032x}"
        node = [("searcher", LOOP[i % 3].format(n=i + 3))]
        if with_auth and i % 3 == 0:
            node.append(("searcher", AUTH[(i // 3) % 3].format(n=i)))
        system = [FORMAT[i % 3].format(n=i)] if i % 2 == 0 else []
        out.append(evaluation(tid, node, system))
    return out
