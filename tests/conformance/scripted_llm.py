"""A scripted OpenAI-compatible chat completions server on loopback, for recording the corpus.

``POST /v1/chat/completions`` (also ``/chat/completions``), non-streaming and streaming (SSE
chunks with tool-call deltas, the ``stream_options.include_usage`` usage chunk, ``[DONE]``);
``POST /v1/responses`` (the Responses API: ``input`` a string or items, output a
``function_call`` item with a ``call_id`` or a ``message``; streamed as the typed SSE events
``response.created`` ... ``response.completed``, whose response carries the usage);
``POST /v1/messages`` (the Anthropic Messages API: ``system`` apart, ``tool_use`` /
``tool_result`` content blocks, ``stop_reason`` ``tool_use`` or ``end_turn``; streamed as the
named SSE events ``message_start`` ... ``message_stop`` with ``input_json_delta`` chunks);
``POST /v1beta/models/MODEL:generateContent`` and ``:streamGenerateContent?alt=sse`` (the Gemini
API, what the google-genai SDK calls: ``contents`` of ``user`` / ``model`` turns whose parts are
``text``, ``functionCall`` or ``functionResponse``; a candidate with a ``functionCall`` part or
a text part, ``usageMetadata``; streamed as unnamed SSE ``data:`` chunks).
What it answers is ``scenarios.reply(NAME, k, TURN)``:

- NAME is the ``[scenario:NAME]`` marker found in any message or input item of the
  conversation (string content or text parts);
- k is the number of tool results already in the conversation: ``role: "tool"`` (or legacy
  ``"function"``) messages, plus ``tool_result`` / ``function_call_output`` content parts or
  items, for clients that shape them so; and, in user messages, lines starting
  ``Observation:`` or ``Error:`` (optionally after a ``Call id: ...`` line): how smolagents
  feeds tool results and tool errors back, joining consecutive user messages into one text;
  counted from the last ``[turn:TURN]`` marker (the conversation scenario's user turns, whose
  earlier turns an agent may send again as history), TURN 1 when there is none; so are DSPy's
  observation fields and Gemini's ``functionResponse`` parts (below).

In ``multi_agent`` who asks is told by the tools the request offers (any API's shape:
``offered``): get_weather offered is the weather agent, else the coordinator, which calls the
first offered tool but ``final_answer`` with ``scenarios.delegation_arguments`` (and gets a
400 when nothing is offered).

A reply of ``scenarios.reply`` with ``also`` (parallel) holds one call per city, in each
API's shape; one with ``tool`` (wrong_tool) calls that tool, whatever the request offers.
In ``llm_error`` the request after the first tool result gets a 400 in the API's error shape
(``scenarios.LLM_ERRORS``: OpenAI's ``context_length_exceeded``, Anthropic's "prompt is too
long", Gemini's ``INVALID_ARGUMENT``), counted as answered.
In ``empty_answer`` the answer after the first tool result is empty (``""``).
In ``length_stop`` the answer after the first tool result is cut off at the output token
limit, in each API's words: finish reason ``length``, a Responses API response ``incomplete``
(``incomplete_details.reason`` ``max_output_tokens``; streamed, ``response.incomplete``),
stop reason ``max_tokens``, finish reason ``MAX_TOKENS``.
In ``max_turns`` a request that offers no tool (in any API's shape; not a code agent's or
DSPy's, whose tools are in the prompt) gets ``scenarios.GAVE_UP``: a framework at its cap
asking the model for a last answer.

A tool offered under a qualified name ending in ``-get_weather`` (Semantic Kernel's
``PluginName-function``) is called by that name. A client that ends a run by calling a tool
instead of answering in text (smolagents' ``final_answer``) gets its final text as that
tool's call: ``final_answer{"answer": TEXT}`` when the request offers a tool of that name
(under its one required parameter's name when it declares one: BeeAI's is ``response``). A
conversation containing ``[answer:code]`` (a code agent: smolagents' CodeAgent) gets each turn
as a Python code block instead:
``<code>\nprint(get_weather(city="Paris"))\n</code>``, then ``final_answer("...")``. A request
whose system message asks for DSPy's ReAct output fields (``[[ ## next_tool_name ## ]]``, the
ChatAdapter's text format) gets each turn in that format (``next_thought``, ``next_tool_name``
``get_weather`` or ``finish``, ``next_tool_args`` JSON), k being the ``[[ ## observation_N ## ]]``
fields of the trajectory it was sent; any other DSPy request (the ReAct's closing extract step)
gets each output field its system message names, the final text as ``answer``.

The model is always reported as ``gpt-4o-mini`` (``claude-3-5-haiku-20241022`` on the Messages
API, ``gemini-2.0-flash`` on the Gemini API; the pinned litellm's price table knows the first,
the two others retired from it: their runs' cost is unknown), with ids
shaped like real ones (``chatcmpl-...``, ``call_...``, ``msg_...``, ``toolu_...``) derived from
the conversation so a re-recording gives the same ids, and usage numbers that grow with the
conversation. A request without a marker, with an unknown scenario or not shaped like a chat
completion gets a 400 with an OpenAI-style error body (and is noted in ``errors``: ``record.py``
writes no recording then). ``requests`` counts answered calls and ``usage`` holds the
(input, output) tokens each answer reported (None for a chat completions stream asked without
``stream_options.include_usage``, and for the scripted API error: no usage was sent); requests
are served on threads, counters under a lock.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import scenarios

MODEL = "gpt-4o-mini"
ANTHROPIC_MODEL = "claude-3-5-haiku-20241022"
GEMINI_MODEL = "gemini-2.0-flash"
_GEMINI_PATH = re.compile(r"^/v1(?:beta|alpha)?/models/[^/:]+:(generateContent|"
                          r"streamGenerateContent)$")
# The API each route speaks.
_ROUTES = {"/v1/chat/completions": "chat", "/chat/completions": "chat",
           "/v1/responses": "responses", "/responses": "responses",
           "/v1/messages": "messages"}
_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


class BadRequest(ValueError):
    """The request is not a chat completion this server can script."""


class ScriptedFailure(Exception):
    """The scripted reply is the API's error (``llm_error``): answered, not refused."""


def _failure(api: str) -> dict[str, Any]:
    """The API's error body for a context window exceeded (``scenarios.LLM_ERRORS``)."""
    if api == "messages":
        return {"type": "error", "error": {"type": "invalid_request_error",
                                           "message": scenarios.LLM_ERRORS["anthropic"]}}
    if api in ("generateContent", "streamGenerateContent"):
        return {"error": {"code": 400, "message": scenarios.LLM_ERRORS["gemini"],
                          "status": "INVALID_ARGUMENT"}}
    return {"error": {"message": scenarios.LLM_ERRORS["openai"], "type": "invalid_request_error",
                      "param": "messages", "code": "context_length_exceeded"}}


def _token_id(seed: str, n: int) -> str:
    digest = hashlib.sha256(seed.encode()).digest()
    while len(digest) < n:
        digest += hashlib.sha256(digest).digest()
    return "".join(_ALNUM[b % len(_ALNUM)] for b in digest[:n])


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [p.get("text", "") for p in content
                if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return []


# smolagents sends each tool result (or tool error) as user text starting so.
_OBSERVATION = re.compile(r"^(?:Call id: [^\n]*\n)?(?:Observation:|Error:)", re.M)
FINAL_ANSWER_TOOL = "final_answer"
CODE_MARKER = "[answer:code]"


# A code agent's system message shows each tool (and managed agent) as a Python function.
_CODE_TOOL = re.compile(r"^\s*def (\w+)\(", re.M)


def _code_tools(messages: list[Any]) -> dict[str, Any]:
    """The functions a code agent's system message offers (but final_answer), name -> {}."""
    system = "".join(t for m in messages if isinstance(m, dict) and m.get("role") == "system"
                     for t in _texts(m.get("content")))
    return {n: {} for n in _CODE_TOOL.findall(system) if n != FINAL_ANSWER_TOOL}


def _code(cities: tuple[str, ...], text: str | None, delegate: str | None = None,
          tool: str = scenarios.TOOL_NAME, argument: str = "city") -> str:
    """A code agent's turn: a thought, then one code block calling the tool (once per city)
    or final_answer; ``delegate``: the managed agent the coordinator asks (multi_agent), with
    the prompt."""
    if delegate is not None:
        task = json.dumps(scenarios.prompt("multi_agent") + " " + CODE_MARKER)
        return (f"Thought: The weather agent can answer this.\n<code>\n"
                f"print({delegate}(task={task}))\n</code>")
    if cities:
        calls = "".join(f"print({tool}({argument}={json.dumps(c)}))\n" for c in cities)
        return (f"Thought: I will look up the weather in {' and '.join(cities)}.\n<code>\n"
                f"{calls}</code>")
    return f"Thought: I have the answer.\n<code>\n{FINAL_ANSWER_TOOL}({json.dumps(text)})\n</code>"


# DSPy's ChatAdapter: output fields as [[ ## name ## ]] sections, ended by [[ ## completed ## ]];
# the ReAct trajectory fed back holds one observation_N field per tool result (or error).
_DSPY_OUTPUTS = re.compile(r"Your output fields are:\n(.*?)(?:\n\n|\Z)", re.S)
_DSPY_OBSERVATION = re.compile(r"\[\[ ## observation_\d+ ## \]\]")
DSPY_REACT_FIELD = "next_tool_name"
# A thought as long as a real model's: the turns of ``distinct`` then differ in two words of
# fifty (the city, in the thought and in the arguments), the rest being DSPy's template.
_DSPY_THOUGHT = ("The user asked about the weather. The get_weather tool gives the current "
                 "weather for one city, so I will call it for {city} and read what it returns "
                 "before I write the answer.")


def _dspy_outputs(messages: list[Any]) -> list[str] | None:
    """The output fields a DSPy ChatAdapter request asks for (its system message's list), or
    None when the request is not DSPy's."""
    system = "".join(t for m in messages if isinstance(m, dict) and m.get("role") == "system"
                     for t in _texts(m.get("content")))
    found = _DSPY_OUTPUTS.search(system)
    if found is None or "[[ ## completed ## ]]" not in system:
        return None
    return re.findall(r"^\d+\. `(\w+)`", found.group(1), re.M)


# DSPy ReAct lists its tools in the system message: (1) NAME, whose description is <desc>...
# </desc>. It takes arguments {...}. (a Python dict repr of the parameters' properties)
_DSPY_TOOL = re.compile(r"^\s*\(\d+\) (\w+), whose description is .*? It takes arguments "
                        r"(\{.*\})\.\s*$", re.M)


def _dspy_tools(messages: list[Any]) -> dict[str, Any]:
    """The tools a DSPy ReAct request lists (but ``finish``), name -> parameters' schema."""
    system = "".join(t for m in messages if isinstance(m, dict) and m.get("role") == "system"
                     for t in _texts(m.get("content")))
    out: dict[str, Any] = {}
    for name, args in _DSPY_TOOL.findall(system):
        if name != "finish":
            try:
                props = ast.literal_eval(args)
            except (ValueError, SyntaxError):
                props = {}
            out[name] = {"properties": props if isinstance(props, dict) else {}}
    return out


def _dspy(fields: list[str], r: scenarios.Reply, call: dict[str, Any] | None = None) -> str:
    """A DSPy ChatAdapter answer: the ReAct step's fields, or the extract step's; ``call``: the
    delegation the coordinator makes (multi_agent), as ``_delegation`` gives it."""
    if DSPY_REACT_FIELD in fields and call is not None:
        values = {"next_thought": "The weather agent can answer this.",
                  "next_tool_name": call["function"]["name"],
                  "next_tool_args": call["function"]["arguments"]}
    elif DSPY_REACT_FIELD in fields:
        values = {"next_thought": _DSPY_THOUGHT.format(city=r.city) if r.city
                  else "I have the answer.",
                  "next_tool_name": (r.tool or scenarios.TOOL_NAME) if r.city else "finish",
                  "next_tool_args": json.dumps({r.argument: r.city} if r.city else {})}
    else:
        values = {f: (r.text or "") if f == "answer" else "The observations give the answer."
                  for f in fields}
    return "".join(f"[[ ## {f} ## ]]\n{values.get(f, '')}\n\n" for f in fields) + \
        "[[ ## completed ## ]]"


def _observations(message: dict[str, Any], text: str) -> int:
    """The tool results fed back in ``text`` (of a user message): smolagents' ``Observation:``
    / ``Error:`` lines, DSPy ReAct's ``[[ ## observation_N ## ]]`` trajectory fields."""
    if message.get("role") != "user":
        return 0
    return len(_OBSERVATION.findall(text)) + len(_DSPY_OBSERVATION.findall(text))


def _is_tool_result(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    return item.get("role") in ("tool", "function") or \
        item.get("type") in ("tool_result", "function_call_output")


def _offers(body: dict[str, Any], tool: str) -> bool:
    tools = body.get("tools")
    return isinstance(tools, list) and any(
        isinstance(t, dict) and isinstance(t.get("function"), dict)
        and t["function"].get("name") == tool for t in tools)


def _final_answer_parameter(body: dict[str, Any]) -> str | None:
    """The parameter of the offered final_answer tool that takes the answer (its one required
    parameter, else ``answer``); None when no such tool is offered."""
    if not _offers(body, FINAL_ANSWER_TOOL):
        return None
    for t in body["tools"]:
        fn = t.get("function") if isinstance(t, dict) else None
        if isinstance(fn, dict) and fn.get("name") == FINAL_ANSWER_TOOL:
            required = (fn.get("parameters") or {}).get("required")
            if isinstance(required, list) and len(required) == 1 and isinstance(required[0], str):
                return required[0]
    return "answer"


def offered(body: dict[str, Any]) -> dict[str, Any]:
    """The tools a request offers, name -> parameters' JSON schema, in any API's shape: chat
    completions' ``function``, the Responses API's and Anthropic's flat tools
    (``parameters`` / ``input_schema``), Gemini's ``functionDeclarations`` (``parameters``, or
    the JSON schema google-genai sends as ``parameters_json_schema``)."""
    out: dict[str, Any] = {}
    tools = body.get("tools")
    for t in tools if isinstance(tools, list) else []:
        if not isinstance(t, dict):
            continue
        decls = t.get("functionDeclarations") or t.get("function_declarations")
        for d in decls if isinstance(decls, list) else [t.get("function") or t]:
            if isinstance(d, dict) and isinstance(d.get("name"), str):
                out[d["name"]] = (d.get("parameters") or d.get("input_schema")
                                  or d.get("parametersJsonSchema")
                                  or d.get("parameters_json_schema") or {})
    return out


def _offers_weather(tools: dict[str, Any]) -> bool:
    return any(n == scenarios.TOOL_NAME or n.endswith("-" + scenarios.TOOL_NAME) for n in tools)


def _delegation(seed: str, tools: dict[str, Any]) -> dict[str, Any]:
    """The coordinator's call of its delegation tool: the first offered but final_answer."""
    for name, parameters in tools.items():
        if name != FINAL_ANSWER_TOOL:
            return _call(seed, name, scenarios.delegation_arguments(parameters))
    raise BadRequest("multi_agent: the coordinator was offered no tool to delegate with")


def _call(seed: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": "call_" + _token_id(seed + "/call", 24), "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def scenario_of(messages: list[Any]) -> tuple[str, int]:
    """(scenario name, tool results so far) of a conversation; BadRequest when unscripted."""
    name, k, _ = scripted_turn(messages)
    return name, k


def scripted_turn(messages: list[Any]) -> tuple[str, int, int]:
    """(scenario name, tool results in this user turn, user turn) of a conversation: the
    results are counted from the last ``[turn:n]`` marker (1 and all results when none)."""
    name = None
    k, turn = 0, 1
    for m in messages:
        if not isinstance(m, dict):
            raise BadRequest("messages must be objects")
        for text in _texts(m.get("content")):
            if name is None and (found := scenarios.MARKER.search(text)):
                name = found.group(1)
            if marks := list(scenarios.TURN_MARKER.finditer(text)):
                # smolagents joins the earlier turn's last observation and the new task into
                # one user message: only what follows the marker is of this turn
                k, turn = 0, int(marks[-1].group(1))
                text = text[marks[-1].end():]
            k += _observations(m, text)
        content = m.get("content")
        parts = content if isinstance(content, list) else []
        k += _is_tool_result(m) + sum(_is_tool_result(p) for p in parts)
    if name is None:
        raise BadRequest("no [scenario:NAME] marker in the conversation")
    if name not in scenarios.SCENARIOS:
        raise BadRequest(f"unknown scenario {name!r}")
    if name == "conversation" and not 1 <= turn <= len(scenarios.CONVERSATION_CITIES):
        raise BadRequest(f"no turn {turn} in the conversation scenario")
    return name, k, turn


def _usage(messages: list[Any], answer: str) -> dict[str, int]:
    prompt = 40 + len(json.dumps(messages)) // 4
    completion = 9 + len(answer) // 4
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _tool_name(body: dict[str, Any]) -> str:
    """get_weather, or the offered tool whose name qualifies it (Semantic Kernel offers a
    plugin's function as ``WeatherPlugin-get_weather``)."""
    tools = body.get("tools")
    for t in tools if isinstance(tools, list) else []:
        name = t.get("function", {}).get("name") if isinstance(t, dict) else None
        if isinstance(name, str) and name.endswith("-" + scenarios.TOOL_NAME):
            return name
    return scenarios.TOOL_NAME


def plan(body: dict[str, Any]) -> dict[str, Any]:
    """The scripted answer to a chat completions request body: ids, message, usage."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    return _plan(messages, final_answer=_final_answer_parameter(body), tool=_tool_name(body),
                 tools=offered(body))


def _plan(messages: list[Any], final_answer: str | None = None,
          tool: str = scenarios.TOOL_NAME, tools: dict[str, Any] | None = None
          ) -> dict[str, Any]:
    name, k, turn = scripted_turn(messages)
    tools = tools or {}
    dspy_fields = _dspy_outputs(messages)
    coded = any(CODE_MARKER in t for m in messages for t in _texts(m.get("content")))
    if name == "multi_agent" and not tools:  # offered in the prompt's text, not as API tools
        tools = _code_tools(messages) if coded else _dspy_tools(messages) if dspy_fields else {}
    seed = f"{name}/{k}/{len(messages)}" + (f"/{turn}" if name == "conversation" else "")
    if name == "multi_agent":
        worker = _offers_weather(tools)
        seen = scenarios.weather("Paris") in json.dumps(messages)
        r = scenarios.multi_agent_reply(worker, seen, k)
        seed += f"/{scenarios.WEATHER_AGENT if worker else scenarios.COORDINATOR}/{seen}"
    elif name == "max_turns" and not tools and not coded and not dspy_fields:
        r = scenarios.Reply(text=scenarios.GAVE_UP)  # asked for an answer at the cap
    else:
        r = scenarios.reply(name, k, turn)
    if r.failed:
        raise ScriptedFailure(name)
    out: dict[str, Any] = {"id": "chatcmpl-" + _token_id(seed, 29),
                           "fingerprint": "fp_" + _token_id("fp", 10)}
    if coded:
        delegate = next(iter(tools), None) if r.delegate else None
        if r.delegate and delegate is None:
            raise BadRequest("multi_agent: the coordinator was offered no tool to delegate with")
        code = _code(r.cities, r.text, delegate, r.tool or scenarios.TOOL_NAME, r.argument)
        out.update(message={"role": "assistant", "content": code, "refusal": None},
                   finish_reason="stop", usage=_usage(messages, code))
        return _cut(out, r)
    if dspy_fields:
        if DSPY_REACT_FIELD not in dspy_fields:  # the extract step after ReAct's finish
            r = scenarios.Reply(text=scenarios.FINAL if r.text is None else r.text,
                                truncated=r.truncated)
        elif r.truncated:  # ReAct's finish step: the extract step writes the answer (cut)
            r = scenarios.Reply(text=r.text)
        text = _dspy(dspy_fields, r, _delegation(seed, tools) if r.delegate else None)
        out.update(message={"role": "assistant", "content": text, "refusal": None},
                   finish_reason="stop", usage=_usage(messages, text))
        return _cut(out, r)
    calls = []
    if r.delegate:
        calls = [_delegation(seed, tools)]
    elif r.cities:  # a further call's id is seeded apart (the first's is as it always was)
        calls = [_call(seed + (f"/{i}" if i else ""), r.tool or tool, {r.argument: c})
                 for i, c in enumerate(r.cities)]
    elif final_answer is not None:
        calls = [_call(seed, FINAL_ANSWER_TOOL, {final_answer: r.text})]
    if calls:
        out.update(message={"role": "assistant", "content": None, "tool_calls": calls,
                            "refusal": None},
                   finish_reason="tool_calls",
                   answer=" ".join(json.dumps(c) for c in calls))
    else:
        out.update(message={"role": "assistant", "content": r.text, "refusal": None},
                   finish_reason="stop", answer=r.text or "")
    out["usage"] = _usage(messages, out.pop("answer"))
    return _cut(out, r)


def _cut(out: dict[str, Any], r: scenarios.Reply) -> dict[str, Any]:
    """``out`` as cut off at the output token limit when ``r`` was (length_stop): finish
    reason ``length``, which each API's shape words its own way."""
    if r.truncated:
        out["finish_reason"] = "length"
    return out


def completion(p: dict[str, Any], created: int) -> dict[str, Any]:
    return {"id": p["id"], "object": "chat.completion", "created": created, "model": MODEL,
            "system_fingerprint": p["fingerprint"], "service_tier": "default",
            "choices": [{"index": 0, "message": p["message"], "logprobs": None,
                         "finish_reason": p["finish_reason"]}],
            "usage": {**p["usage"], "prompt_tokens_details": {"cached_tokens": 0},
                      "completion_tokens_details": {"reasoning_tokens": 0}}}


def chunks(p: dict[str, Any], created: int, include_usage: bool) -> list[dict[str, Any]]:
    """The SSE chunk objects of a streamed answer, in order (without ``[DONE]``)."""
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        c: dict[str, Any] = {"id": p["id"], "object": "chat.completion.chunk",
                             "created": created, "model": MODEL,
                             "system_fingerprint": p["fingerprint"],
                             "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                          "finish_reason": finish}]}
        if include_usage:
            c["usage"] = None
        return c

    msg = p["message"]
    out = [chunk({"role": "assistant", "content": "" if msg["content"] else None,
                  "refusal": None})]
    for n, call in enumerate(msg.get("tool_calls") or []):
        out.append(chunk({"tool_calls": [{"index": n, "id": call["id"], "type": "function",
                                          "function": {"name": call["function"]["name"],
                                                       "arguments": ""}}]}))
        args = call["function"]["arguments"]
        for i in range(0, len(args), 8):
            out.append(chunk({"tool_calls": [{"index": n,
                                              "function": {"arguments": args[i:i + 8]}}]}))
    if not msg.get("tool_calls"):
        words = msg["content"].split(" ")
        for i, w in enumerate(words):
            out.append(chunk({"content": w if i == 0 else " " + w}))
    out.append(chunk({}, p["finish_reason"]))
    if include_usage:
        out.append({**chunk({}), "choices": [], "usage": p["usage"]})
    return out


def _response_usage(usage: dict[str, int]) -> dict[str, Any]:
    return {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
            "total_tokens": usage["total_tokens"], "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0}}


def response(body: dict[str, Any], created: int) -> dict[str, Any]:
    """The scripted Responses API answer to a ``/v1/responses`` request body."""
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise BadRequest("'input' must be a string or a non-empty list")
    p = _plan(items, tools=offered(body))
    suffix = p["id"].removeprefix("chatcmpl-")
    msg, cut = p["message"], p["finish_reason"] == "length"
    if msg.get("tool_calls"):
        items = [{"type": "function_call", "id": "fc_" + suffix + (f"{n}" if n else ""),
                  "call_id": call["id"], "name": call["function"]["name"],
                  "arguments": call["function"]["arguments"], "status": "completed"}
                 for n, call in enumerate(msg["tool_calls"])]
    else:
        items = [{"type": "message", "id": "msg_" + suffix,
                  "status": "incomplete" if cut else "completed",
                  "role": "assistant", "content": [{"type": "output_text",
                                                    "text": msg["content"],
                                                    "annotations": [], "logprobs": []}]}]
    return {"id": "resp_" + suffix, "object": "response", "created_at": created,
            "status": "incomplete" if cut else "completed", "model": MODEL, "output": items,
            "usage": _response_usage(p["usage"]), "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
            "instructions": body.get("instructions"), "metadata": {}, "tools": body.get("tools")
            or [], "tool_choice": body.get("tool_choice") or "auto", "parallel_tool_calls":
            True, "temperature": 1.0, "top_p": 1.0, "text": {"format": {"type": "text"}},
            "truncation": "disabled", "previous_response_id": None, "reasoning": None,
            "service_tier": "default", "store": bool(body.get("store", True))}


def response_events(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The typed SSE events of a streamed Responses API answer, in order (each output item's
    in turn)."""
    started = {**r, "status": "in_progress", "output": [], "usage": None}
    out: list[dict[str, Any]] = [{"type": "response.created", "response": started},
                                 {"type": "response.in_progress", "response": started}]
    for index, item in enumerate(r["output"]):
        out += _item_events(item, index)
    done = "response.incomplete" if r["status"] == "incomplete" else "response.completed"
    out.append({"type": done, "response": r})
    return [{**e, "sequence_number": i} for i, e in enumerate(out)]


def _item_events(item: dict[str, Any], index: int) -> list[dict[str, Any]]:
    """The streamed events of one Responses API output item, from added to done."""
    at = {"item_id": item["id"], "output_index": index}
    out: list[dict[str, Any]] = []
    if item["type"] == "function_call":
        out.append({"type": "response.output_item.added", "output_index": index,
                    "item": {**item, "arguments": "", "status": "in_progress"}})
        args = item["arguments"]
        out += [{"type": "response.function_call_arguments.delta", **at, "delta": args[i:i + 8]}
                for i in range(0, len(args), 8)]
        out.append({"type": "response.function_call_arguments.done", **at, "arguments": args,
                    "name": item["name"]})
    else:
        part = item["content"][0]
        out += [{"type": "response.output_item.added", "output_index": index,
                 "item": {**item, "content": [], "status": "in_progress"}},
                {"type": "response.content_part.added", **at, "content_index": 0,
                 "part": {**part, "text": ""}}]
        words = part["text"].split(" ")
        out += [{"type": "response.output_text.delta", **at, "content_index": 0, "logprobs": [],
                 "delta": w if i == 0 else " " + w} for i, w in enumerate(words)]
        out += [{"type": "response.output_text.done", **at, "content_index": 0, "logprobs": [],
                 "text": part["text"]},
                {"type": "response.content_part.done", **at, "content_index": 0, "part": part}]
    out.append({"type": "response.output_item.done", "output_index": index, "item": item})
    return out


def message(body: dict[str, Any]) -> dict[str, Any]:
    """The scripted Anthropic Messages API answer to a ``/v1/messages`` request body."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    p = _plan(messages, tools=offered(body))
    suffix = p["id"].removeprefix("chatcmpl-")[:24]
    msg = p["message"]
    if msg.get("tool_calls"):
        blocks: list[dict[str, Any]] = [
            {"type": "tool_use", "id": "toolu_01" + call["id"][5:27],
             "name": call["function"]["name"], "input": json.loads(call["function"]["arguments"])}
            for call in msg["tool_calls"]]
        stop = "tool_use"
    else:
        blocks, stop = [{"type": "text", "text": msg["content"]}], "end_turn"
    if p["finish_reason"] == "length":
        stop = "max_tokens"
    usage = p["usage"]
    return {"id": "msg_01" + suffix, "type": "message", "role": "assistant",
            "model": ANTHROPIC_MODEL, "content": blocks, "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": usage["prompt_tokens"],
                      "output_tokens": usage["completion_tokens"],
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}


def message_events(m: dict[str, Any]) -> list[dict[str, Any]]:
    """The named SSE events of a streamed Messages API answer, in order (each content block
    in turn)."""
    usage = m["usage"]
    started = {**m, "content": [], "stop_reason": None,
               "usage": {**usage, "output_tokens": 1}}
    out: list[dict[str, Any]] = [{"type": "message_start", "message": started}]
    for index, block in enumerate(m["content"]):
        if block["type"] == "tool_use":
            out.append({"type": "content_block_start", "index": index,
                        "content_block": {**block, "input": {}}})
            args = json.dumps(block["input"])
            out += [{"type": "content_block_delta", "index": index,
                     "delta": {"type": "input_json_delta", "partial_json": args[i:i + 8]}}
                    for i in range(0, len(args), 8)]
        else:
            out.append({"type": "content_block_start", "index": index,
                        "content_block": {"type": "text", "text": ""}})
            words = block["text"].split(" ")
            out += [{"type": "content_block_delta", "index": index,
                     "delta": {"type": "text_delta", "text": w if i == 0 else " " + w}}
                    for i, w in enumerate(words)]
        out.append({"type": "content_block_stop", "index": index})
    out += [{"type": "message_delta", "delta": {"stop_reason": m["stop_reason"],
                                                "stop_sequence": None},
             "usage": {"output_tokens": usage["output_tokens"]}},
            {"type": "message_stop"}]
    return out


def _gemini_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Gemini ``contents`` as the chat messages ``_plan`` reads: text parts as content, a
    ``functionResponse`` part as a tool message."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise BadRequest("'contents' must be a non-empty list")
    out: list[dict[str, Any]] = []
    for c in contents:
        parts = c.get("parts") if isinstance(c, dict) else None
        if not isinstance(parts, list):
            raise BadRequest("each content needs 'parts'")
        texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
        out.append({"role": c.get("role") or "user", "content": "\n".join(texts)})
        out += [{"role": "tool", "content": json.dumps(p["functionResponse"])}
                for p in parts if isinstance(p, dict) and "functionResponse" in p]
    return out


def generate_content(body: dict[str, Any]) -> dict[str, Any]:
    """The scripted Gemini API answer to a ``generateContent`` request body."""
    p = _plan(_gemini_messages(body), tools=offered(body))
    msg, usage = p["message"], p["usage"]
    if msg.get("tool_calls"):
        parts: list[dict[str, Any]] = [
            {"functionCall": {"name": c["function"]["name"],
                              "args": json.loads(c["function"]["arguments"])}}
            for c in msg["tool_calls"]]
    else:
        parts = [{"text": msg["content"]}]
    finish = "MAX_TOKENS" if p["finish_reason"] == "length" else "STOP"
    return {"candidates": [{"content": {"role": "model", "parts": parts},
                            "finishReason": finish, "index": 0}],
            "usageMetadata": {"promptTokenCount": usage["prompt_tokens"],
                              "candidatesTokenCount": usage["completion_tokens"],
                              "totalTokenCount": usage["total_tokens"]},
            "modelVersion": GEMINI_MODEL,
            "responseId": p["id"].removeprefix("chatcmpl-")[:22]}


def generate_content_chunks(g: dict[str, Any]) -> list[dict[str, Any]]:
    """A streamed ``generateContent`` answer: text in word chunks (function calls whole, all
    in one chunk), the finish reason and usage on the last chunk."""
    cand = g["candidates"][0]
    parts = cand["content"]["parts"]
    pieces = [parts] if "text" not in parts[0] else [
        [{"text": w if i == 0 else " " + w}] for i, w in enumerate(parts[0]["text"].split(" "))]
    out = [{"candidates": [{"content": {"role": "model", "parts": p}, "index": 0}],
            "modelVersion": g["modelVersion"], "responseId": g["responseId"]} for p in pieces]
    out[-1]["candidates"][0]["finishReason"] = cand["finishReason"]
    out[-1]["usageMetadata"] = g["usageMetadata"]
    return out


class ScriptedLLM:
    """The server: ``start()`` binds 127.0.0.1:0; ``base_url`` ends in ``/v1``."""

    def __init__(self, clock: Any = time.time) -> None:
        self.clock = clock
        self.requests = 0
        # per answered call, in answer order: the (input, output) tokens its answer reported
        self.usage: list[tuple[int, int] | None] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    @property
    def root_url(self) -> str:
        """Without ``/v1``: the Anthropic SDK's ``base_url`` (it appends ``/v1/messages``)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> ScriptedLLM:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def refused(self, reason: str) -> None:
        with self._lock:
            self.errors.append(reason)

    def answer(self, body: Any, api: str = "chat") -> tuple[bool, Any]:
        """(stream?, completion or chunk list) for a request body; BadRequest when unscripted.
        ``api``: "chat" (chat completions), "responses" (the Responses API), "messages"
        (the Anthropic Messages API) or "generateContent" / "streamGenerateContent" (the
        Gemini API)."""
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        created = int(self.clock())
        if api in ("generateContent", "streamGenerateContent"):
            g = generate_content(body)
            meta = g["usageMetadata"]
            self._answered((meta["promptTokenCount"], meta["candidatesTokenCount"]))
            return (api == "streamGenerateContent",
                    generate_content_chunks(g) if api == "streamGenerateContent" else g)
        if api == "messages":
            m = message(body)
            self._answered((m["usage"]["input_tokens"], m["usage"]["output_tokens"]))
            return (True, message_events(m)) if body.get("stream") else (False, m)
        if api == "responses":
            r = response(body, created)
            self._answered((r["usage"]["input_tokens"], r["usage"]["output_tokens"]))
            return (True, response_events(r)) if body.get("stream") else (False, r)
        p = plan(body)
        sent = (p["usage"]["prompt_tokens"], p["usage"]["completion_tokens"])
        if body.get("stream"):
            opts = body.get("stream_options") or {}
            usage = bool(opts.get("include_usage"))
            self._answered(sent if usage else None)
            return True, chunks(p, created, usage)
        self._answered(sent)
        return False, completion(p, created)

    def _answered(self, usage: tuple[int, int] | None) -> None:
        """Count an answered call, with the (input, output) tokens its answer reported (None:
        a stream the client asked without usage, or an error)."""
        with self._lock:
            self.requests += 1
            self.usage.append(usage)


def _handler(llm: ScriptedLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            gemini = _GEMINI_PATH.match(path)
            api = gemini.group(1) if gemini else _ROUTES.get(path)
            if api is None:
                self._json(404, {"error": {"message": f"no route {self.path}",
                                           "type": "invalid_request_error"}})
                return
            try:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                stream, answer = llm.answer(json.loads(raw or b"null"), api)
            except ScriptedFailure:
                llm._answered(None)
                self._json(400, _failure(api))
                return
            except (BadRequest, ValueError, KeyError, IndexError) as e:
                llm.refused(str(e))
                self._json(400, {"error": {"message": str(e), "type": "invalid_request_error",
                                           "code": "unscripted_request"}})
                return
            if stream:
                self._sse(answer, api == "chat", named=api in ("responses", "messages"))
            else:
                self._json(200, answer)

        def _json(self, code: int, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _sse(self, items: list[Any], done: bool, named: bool) -> None:
            """Chat chunks end with ``[DONE]``; Responses and Messages events are named
            (``event:``); Gemini chunks are neither."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            for item in items:
                event = b"event: " + item["type"].encode() + b"\n" if named else b""
                self.wfile.write(event + b"data: " + json.dumps(item).encode() + b"\n\n")
            if done:
                self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return Handler
