"""mini-swe-agent trajectories (``*.traj.json``): ``{"info", "messages", "instance_id"}``.

Each assistant turn is a ``chat`` span (model, tokens, cost and finish reason from its
``extra.response`` when present). mini-swe-agent executes an assistant turn only when it holds
exactly ONE bash block (otherwise it answers with a format error): each executed block is a
``bash`` ``execute_tool`` span with arguments ``{"command": ...}`` and, as result, the next
user message (``<returncode>N</returncode><output>...``). A non-zero return code or a
timeout marks the tool span ERROR. ``info.exit_status`` and the submission go on the root.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from otel_eval.base.model import Trace
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.receive.loaders.chat import ChatTrace, content_digest, dumps, message_json
from otel_eval.receive.loaders.files import LoaderError

AGENT = "mini-swe-agent"
# the action regex of mini-swe-agent's DefaultAgent (run by ``actions``)
_ACTION = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_CLOSE = "\n```"
_RETURNCODE = re.compile(r"\s*<returncode>(-?\d+)</returncode>")


def is_traj(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("messages"), list) and (
        "info" in doc or "trajectory_format" in doc)


def _response_attrs(msg: dict[str, Any]) -> dict[str, Any]:
    response = (msg.get("extra") or {}).get("response")
    if not isinstance(response, dict):
        return {"finish_reason": None}
    usage = response.get("usage") or {}
    choices = response.get("choices") or [{}]
    reason = choices[0].get("finish_reason") if isinstance(choices[0], dict) else None
    return {"gen_ai.request.model": response.get("model"),
            "gen_ai.response.model": response.get("model"),
            "gen_ai.response.id": response.get("id"),
            "gen_ai.usage.input_tokens": usage.get("prompt_tokens"),
            "gen_ai.usage.output_tokens": usage.get("completion_tokens"),
            "gen_ai.usage.cost": usage.get("cost"),
            "finish_reason": reason}


def actions(content: str) -> list[str]:
    """The bash blocks of an assistant message, as ``_ACTION.findall`` finds them, in linear
    time. Every match ends with a closing fence, so the text after the last one holds none;
    but from each ``bash`` fence there, the regex scanned that whole tail for a closing fence
    it never found: quadratic (a 144 kB reply of unclosed fences took 17 s, 1 MB a quarter
    hour). Cut at the last closing fence, each attempt ends at the next one (a match)."""
    last = content.rfind(_CLOSE)
    return _ACTION.findall(content, 0, last + len(_CLOSE)) if last >= 0 else []


def _tool_error(result: str | None) -> str | None:
    if result is None:
        return None
    m = _RETURNCODE.match(result)
    if m and m.group(1) != "0":
        return f"returncode {m.group(1)}"
    if "timed out and has been killed" in result[:1000]:
        return "timeout"
    return None


def from_doc(doc: dict[str, Any], path: Path, config: TrajectoryConfig,
             digest: str | None = None) -> Trace:
    try:
        return _convert(doc, path, config, digest)
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise LoaderError(path, f"malformed mini-swe-agent trajectory: {e!r}") from e


def _convert(doc: dict[str, Any], path: Path, config: TrajectoryConfig,
             digest: str | None) -> Trace:
    # one trajectory per file; its content in the ids: ``a/x.traj.json`` and ``b/x.traj.json``
    # (two runs of one instance) are two traces
    trace = ChatTrace(f"{path.name}:0:{digest or content_digest(doc)}", 0, AGENT)
    messages = doc["messages"]
    history: list[str] = []
    first_user = None
    for i, msg in enumerate(messages):
        serialized = message_json(msg)
        content = msg.get("content")
        if msg.get("role") == "assistant":
            attrs = _response_attrs(msg)
            trace.chat(history, serialized, attrs.pop("finish_reason") or "stop", **attrs)
            blocks = actions(content) if isinstance(content, str) else []
            if len(blocks) == 1:
                nxt = messages[i + 1] if i + 1 < len(messages) else None
                result = str(nxt.get("content")) if nxt and nxt.get("role") == "user" else None
                trace.tool("bash", None, {"command": blocks[0].strip()}, result,
                           _tool_error(result))
        elif msg.get("role") == "user" and first_user is None:
            first_user = serialized
        history.append(serialized)
    info = doc.get("info") or {}
    submission = info.get("submission")
    return trace.finish(AGENT, str(path), {
        config.task_id_attribute: doc.get("instance_id"),
        "mini_swe_agent.exit_status": info.get("exit_status"),
        "gen_ai.input.messages": f"[{first_user}]" if first_user else None,  # dumps([m])
        "gen_ai.output.messages": dumps([{"role": "assistant", "parts": [
            {"type": "text", "content": submission}], "finish_reason": "stop"}])
        if submission else None,
    })
