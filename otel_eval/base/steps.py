"""The normalized agent run that detectors and the judge read (the bottom layer).

    ToolCall        a tool call an LLM step asked for
    Step            one span of the run (agent, llm, tool, chain, other), or a tool call
                    rebuilt from an LLM's output
    Trajectory      the run: its steps in tree order, its input and output, who ran it

Built from a ``model.Trace`` by ``evaluate.trajectory``. Promises: one meaning of "steps"
(``Trajectory.action_steps``) and of the counts everywhere; ``Step.to_json`` is the step of
the v1 object, each text cut to ``CONTENT_CHARS`` with its full length counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from otel_eval.base.model import TraceStatus

StepKind = Literal["agent", "llm", "tool", "chain", "other"]
AgentSource = Literal["span", "child_span", "inferred_history", "unknown"]


@dataclass(slots=True)
class ToolCall:
    """A tool call an LLM step asked for (from its output messages)."""

    name: str
    arguments: Any  # parsed JSON when possible, else the raw string
    call_id: str | None = None
    # ran (a tool step ran it) | rebuilt (no span; rebuilt from the output or a later input) |
    # never_ran (asked for, and neither a span nor a later call says it ran) | "" = not known
    outcome: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments, "call_id": self.call_id,
                "outcome": self.outcome or None}


# Longest message text, tool result or LLM reply kept per step in the v1 object, characters:
# enough to read a step; the rest is counted (``truncated``), so a 20 MB tool output is not a
# 20 MB result row. Arguments and names are kept as they came (detectors report on them).
CONTENT_CHARS = 4096
# The most one step (an LLM call, a remote agent's span) plausibly costs, USD: a billion,
# far above any real run. A cost past it, recorded on the span or priced from its tokens, is
# unknown (``cost_usd`` None, the reason in ``unknown``): never summed into the run's cost
# nor observed (two runs near the largest float made the cost histogram's _sum +Inf).
MAX_STEP_COST_USD = 1e9


def _kept(out: dict[str, Any], name: str, text: str | None) -> None:
    """``out[name] = text``, cut to ``CONTENT_CHARS``; the full length of a cut value goes to
    ``out["truncated"][name]``."""
    if text is None:
        return
    if len(text) > CONTENT_CHARS:
        out.setdefault("truncated", {})[name] = len(text)
        text = text[:CONTENT_CHARS]
    out[name] = text


@dataclass(slots=True)
class Step:
    index: int
    span_id: str
    parent_span_id: str | None
    kind: StepKind
    name: str
    node: str | None = None  # the agent / sub-agent this step belongs to
    # the nearest span of unknown kind between this step and its agent's span (its id), which
    # may have been an agent of its own: then the step's agent is not known to be ``node``
    # (``agent_scope``); None for every step of a run whose markers were all understood
    within_unknown: str | None = None
    depth: int = 0
    status: Literal["ok", "error"] = "ok"
    error: str | None = None
    start_ns: int = 0
    end_ns: int = 0
    # tool steps
    tool_name: str | None = None
    arguments: Any = None  # parsed JSON when possible, else the raw string; None = not recorded
    result: str | None = None  # raw text of the tool result (or agent/chain output)
    call_id: str | None = None  # the tool-call id this tool step ran (joins it to its LLM call)
    # the decision taken on the call before it ran (``gen_ai.tool.call.decision.outcome``):
    # allow | deny | require_approval; None = not recorded. A denied call is no tool error
    decision: str | None = None
    # llm steps
    model: str | None = None
    finish_reasons: list[str] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    # input tokens written to the provider's cache (``gen_ai.usage.cache_write.input_tokens``,
    # formerly ``cache_creation``); part of ``input_tokens``; None = not recorded
    cache_write_tokens: int | None = None
    # input tokens served from the provider's cache (``gen_ai.usage.cache_read.input_tokens``);
    # part of ``input_tokens``, priced at the cache-read rate; None = not recorded. Neither
    # cache count is part of the v1 object (the cost they price is)
    cache_read_tokens: int | None = None
    # the provider's id of the reply (``gen_ai.response.id``): one call recorded by two
    # instrumentations is one call (``trajectory.llm_twins``); an LLM step's in the v1 object
    # (the events sent again from a stored evaluation name it: ``results.stored_evaluation``)
    response_id: str | None = None
    # who served the call, as recorded (``gen_ai.provider.name``, ``llm.provider``, ...): the
    # price map's row for that provider (``trajectory.prices``); not part of the v1 object
    provider: str | None = None
    input_text: str | None = None  # raw input messages / prompt as carried by the span
    output_text: str | None = None  # raw output / completion text
    reply: str | None = None  # the reply's text, when the convention records it apart
    tool_calls: list[ToolCall] = field(default_factory=list)  # calls an llm step requested
    rebuilt: bool = False  # a tool step rebuilt from an LLM's output (no span of its own)
    # a tool call made from inside a code action step (``trajectory.code_actions``): a step
    # of that action, not one of the run's own (budgets and the steps histogram count the
    # action once); the loop rules still compare it with the other calls of its tool
    in_code: bool = False
    # a code action an LLM reply wrote, made a step of its own (``trajectory.code_actions``:
    # smolagents' python_interpreter block): a step of the run, not a tool call (the calls of
    # known tools in it are, marked ``in_code``)
    code_block: bool = False
    # an agent step that ran a tool call of the agent above it, its span beside the call's
    # rather than under it (``trajectory.delegations``: Agno's team member, a CrewAI coworker,
    # a Haystack Agent run as a tool): its steps are the call's, not steps of the run
    # (``action_steps``), as those under a tool span are; the loop and recovery rules still
    # compare its calls (``top_level_tool_steps``); not part of the v1 object
    delegated: bool = False
    convention: str = "unknown"
    # the instrumentation scope of its span (two instrumentations of one client may both
    # speak GenAI: ``trajectory.llm_twins``); not part of the v1 object
    scope: str = ""
    # llm steps, readable (``conventions.messages``): the last message it was sent (user or
    # tool) and the text of its reply; None when not recorded
    prompt: str | None = None
    answer: str | None = None
    # llm steps: the output messages as its reader parsed them (a JSON list: GenAI reads the
    # calls they request), handed to the readable pass, which reads ``answer`` from them and
    # drops them: the output is parsed once. They are the parse of ``output_text`` while that
    # is not None (an output is never replaced once read, only made unknown: ``shapes``)
    parsed_output: list[Any] | None = None
    # which convention and attribute supplied each field ("genai gen_ai.tool.call.arguments",
    # "span name", "llm call <id>"), and the fields read but not understood (field -> reason);
    # for ``otel-eval inspect``, not part of the v1 object
    sources: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)
    # values cut to the result bounds (``evaluate.bounds``): field -> its full size, bytes of
    # JSON; written into the v1 object's ``truncated`` beside the texts cut there
    cut: dict[str, int] = field(default_factory=dict)

    @property
    def kind_unknown(self) -> bool:
        """Whether the span's marker carries a value its convention does not define: the step
        may have been a call or an answer, so a rule that concludes from the absence of one
        (nothing succeeded after, no call ran, nothing between) draws nothing over it."""
        return "kind" in self.unknown

    @property
    def agent_scope(self) -> tuple[str | None, str | None]:
        """Which agent made this step, as far as is known: steps of one key are one agent's
        (two keys may still be one agent, never the other way)."""
        return self.node, self.within_unknown

    @property
    def calls_unknown(self) -> bool:
        """Whether the reply asked for calls whose names were not recorded (``unnamed_calls``):
        what it asked for is unknown."""
        return "tool_calls" in self.unknown

    def unnamed_calls(self, n: int) -> None:
        """For the readers: ``n`` (> 0) calls the reply asked for were recorded with no name
        (called only then: not a call per span)."""
        self.unknown["tool_calls"] = f"{n} requested call(s) with no name recorded"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
            "kind": self.kind,
            "node": self.node,
            "name": self.name,
            "tool_name": self.tool_name,
            "arguments": self.arguments,
            "status": self.status,
            "error": self.error,
            "start_time_unix_nano": self.start_ns,
            "end_time_unix_nano": self.end_ns,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
        }
        if self.model is not None:
            out["model"] = self.model
        if self.finish_reasons:
            out["finish_reasons"] = list(self.finish_reasons)
        if self.cost_usd is not None:
            out["cost_usd"] = round(self.cost_usd, 12)  # 5.55e-05, not 5.5499999999999994e-05
        if self.call_id is not None:
            out["call_id"] = self.call_id
        if self.rebuilt:
            out["rebuilt"] = True
        if self.cut:
            out["truncated"] = dict(self.cut)
        if self.kind == "tool":
            _kept(out, "result", self.result)
        elif self.kind == "llm":
            if self.response_id is not None:
                out["response_id"] = self.response_id
            _kept(out, "prompt", self.prompt)
            _kept(out, "answer", self.answer)
            if self.tool_calls:
                out["tool_calls"] = [c.to_json() for c in self.tool_calls]
        return out


@dataclass(slots=True)
class Trajectory:
    trace_id: str
    source: str
    status: TraceStatus
    steps: list[Step]
    service: str | None = None
    agent: str | None = None
    # where ``agent`` came from: span (an agent span that arrived) | child_span (a name
    # stamped on the spans under it) | inferred_history (the service's completed runs) |
    # unknown (agent None)
    agent_source: AgentSource = "unknown"
    task_id: str | None = None
    convention: str = "unknown"
    start_ns: int = 0
    end_ns: int = 0
    input: str | None = None  # raw, as the spans carried it (messages, state, text)
    output: str | None = None
    # the user's text of ``input`` / ``output`` (the last user request, the last reply's
    # text; the raw value when it is not messages), and the messages when it is
    task: str | None = None
    answer: str | None = None
    input_messages: list[Any] | None = None
    output_messages: list[Any] | None = None
    tools: dict[str, Any] = field(default_factory=dict)  # offered tool name -> JSON schema
    # the names of ``tools`` only their own tool spans described, never offered by a span
    # (OpenInference's ``tool.name``): their schemas read arguments, but a model was not shown
    # to be offered them
    unoffered: set[str] = field(default_factory=set)
    # agent (``Step.agent_scope``) -> the tools its own spans recorded it was offered (name ->
    # schema, as ``tools``): a call by an agent not here was offered tools no span said, and
    # one tool name may be offered to two agents with two schemas (ADK's transfer_to_agent)
    offered_to: dict[tuple[str | None, str | None], dict[str, Any]] = field(
        default_factory=dict)
    root_attributes: dict[str, Any] = field(default_factory=dict)
    revision: int = 0
    span_count: int = 0
    # parts of building that failed on this trace's content, each {part, span_id, error};
    # the detectors report each as an ``evaluation_error`` finding (issue 11)
    errors: list[dict[str, str]] = field(default_factory=list)
    root_span_id: str | None = None  # ``local_root`` of the trace; None when it has none
    run_span_id: str = ""  # ``run_span_id`` of the trace: where its results are attached
    # What the instrumentation did not record, by field: how many steps lack it (``output``: 1
    # when the run's answer is unknown); ``unparsed``: values present but not understood
    # (arguments, results, LLM outputs: one per value). Detectors draw no conclusion from these.
    unrecorded: dict[str, int] = field(default_factory=dict)
    # Code actions read from LLM replies (``trajectory.code_actions``): blocks, calls, calls
    # that are steps, rebuilt steps, ``unparsed_<reason>``. Empty when no reply holds code.
    code_actions: dict[str, int] = field(default_factory=dict)
    # Tool calls asked for in LLM outputs that would have been rebuilt as steps past
    # ``TrajectoryConfig.max_rebuilt_calls`` (``trajectory.passes``): not steps; the result's
    # ``result_truncated`` finding says how many (``bounds``). Not part of the v1 object.
    calls_over_limit: int = 0
    # The conversation (session, thread) this turn belongs to and the conversation's user,
    # read from every convention that carries one (``conventions.conversations``); None
    # when no span carries one. ``conversation_sources``: field -> "<convention> <key>".
    # ``other_session_ids``: the other conversation ids its spans carried (sorted, at most
    # ``conversations.MAX_OTHER_IDS``): the turn is counted under ``session_id`` only.
    session_id: str | None = None
    user_id: str | None = None
    conversation_sources: dict[str, str] = field(default_factory=dict)
    other_session_ids: list[str] = field(default_factory=list)
    # why assembly released it (``model.Trace.release_reason``: ``root_ended``,
    # ``idle_timeout``, ``max_duration``, ``overflow``, ``pressure``, ``service_share``,
    # ``trace_too_large``, ``shutdown``, ``eof``); "" when not known
    release_reason: str = ""

    @property
    def cut_reason(self) -> str:
        """``release_reason`` of a run not released ``complete`` (why it was cut or not seen
        to end), "" otherwise: how a complete run was seen to end (its root, the end of a
        file) is assembly's detail, and differs between ``serve`` and ``eval``."""
        return self.release_reason if self.status != "complete" else ""

    @property
    def root_step(self) -> Step | None:
        """The step of the local root (``root_span_id``); None when the trace has none."""
        if self.root_span_id is None:
            return None
        return next((s for s in self.steps if s.span_id == self.root_span_id), None)

    @property
    def duration_s(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9

    @property
    def llm_steps(self) -> list[Step]:
        return [s for s in self.steps if s.kind == "llm"]

    @property
    def tool_steps(self) -> list[Step]:
        return [s for s in self.steps if s.kind == "tool"]

    def top_level_tool_steps(self, beside: bool = False) -> list[Step]:
        """The calls of each agent: tool steps not nested (at any depth) under another tool
        step of their own agent, and the calls an interpreter tool's code made
        (``Step.in_code``: ``code_actions``). An agent step starts its own calls: a sub-agent
        a tool call ran makes calls of its own, its span under the call's (AutoGen's agent
        called as a tool) as beside it (``Step.delegated``: Agno's team member), and the
        loop, recovery and reference rules compare them alike. With ``beside``, the run's
        own steps (``action_steps``): no tool step under another tool step at all, nor under
        an agent step a call ran (one delegation is one step, in both shapes).

        One pass in step order (tree order: a parent comes before its children) remembers for
        each span whether a tool step of its agent is at or above it, so a chain of n nested
        spans costs n, not n x depth. A parent not seen yet (spans caught in a parent cycle,
        or a parent that is no step) is walked up, at most 1000 levels, to a tool step or an
        agent step. Plain loops, no Python call per step: ``to_json`` counts the steps of
        every run it writes (tests/cost)."""
        tools: set[str] = set()
        agents: set[str] = set()  # where a walk up stops (not ``beside``: an agent's calls)
        parent: dict[str, str | None] = {}
        for s in self.steps:
            if s.kind == "tool":
                tools.add(s.span_id)
            elif s.kind == "agent" and not beside:
                agents.add(s.span_id)
            parent.setdefault(s.span_id, s.parent_span_id)
        under_tool: dict[str, bool] = {}  # span id -> a tool step is at or above it
        out = []
        for s in self.steps:
            p = s.parent_span_id
            if p is None:
                known = False
            elif p in under_tool:
                known = under_tool[p]
            else:  # parent after its child (only in a cycle) or no step: walk up
                known, seen = False, 0
                while p is not None and seen < 1000 and p not in agents:
                    if p in tools:
                        known = True
                        break
                    p, seen = parent.get(p), seen + 1
            if s.kind == "tool" and (not known or s.in_code):
                out.append(s)  # a call made from an interpreter tool's code is a call
            # rebuilt tool steps share their LLM step's span id: the first entry decides
            if s.span_id not in under_tool:
                if s.kind == "agent":  # a sub-agent: its calls its own, or the call's steps
                    known = beside and (known or s.delegated)
                under_tool[s.span_id] = known or s.span_id in tools
        return out

    @property
    def action_steps(self) -> list[Step]:
        """The run's steps, the one meaning of "steps" everywhere (``counts()["steps"]``, the
        run list, ``show``, ``--budget steps``, ``otel_eval_trace_steps``): the agent's own
        actions, its top-level tool steps, a code action counted once (not the calls of known
        tools made from its code, nor the tool spans nested under a tool, such as a
        sub-agent's, nor a delegated sub-agent's beside its call: one delegation is one
        step). LLM calls are not steps: they are counted as LLM calls."""
        out = []
        for s in self.top_level_tool_steps(beside=True):
            if not s.in_code:
                out.append(s)
        return out

    @property
    def tool_call_steps(self) -> list[Step]:
        """The tool calls: tool steps but the code blocks an LLM reply wrote (a block is a
        step, the calls of known tools in it are the calls; an interpreter tool's span, which
        the LLM called, is one)."""
        return [s for s in self.steps if s.kind == "tool" and not s.code_block]

    @property
    def usage_steps(self) -> list[Step]:
        """The steps whose tokens and cost make the run's: the LLM steps, and each agent step
        that recorded tokens with no LLM step and no such agent step under it (at any depth):
        a remote agent's ``invoke_agent`` client span, whose own calls are not in the trace,
        records them there (the GenAI conventions); an agent's usage over LLM steps of the
        trace is theirs, counted once. Steps in tree order (a parent before its children);
        a parent that is no step ends the walk up, as in ``top_level_tool_steps``."""
        parent: dict[str, str | None] = {}
        for s in self.steps:  # rebuilt steps share a span's id: the span's own step decides
            parent.setdefault(s.span_id, s.parent_span_id)
        covered: set[str] = set()  # span ids with a counted step at or below them
        counted: set[int] = set()
        for s in reversed(self.steps):
            if s.kind == "llm" or (s.kind == "agent" and s.span_id not in covered and (
                    s.input_tokens is not None or s.output_tokens is not None)):
                counted.add(id(s))
                p: str | None = s.span_id
                seen = 0
                while p is not None and p not in covered and seen < 1000:
                    covered.add(p)
                    p, seen = parent.get(p), seen + 1
        return [s for s in self.steps if id(s) in counted]

    def usage(self) -> dict[str, Any]:
        """The run's tokens and cost: each the sum over the ``usage_steps`` that recorded it,
        None when none did (unknown, not 0: an instrumentation that records no usage). A cost
        whose sum is past the largest float (steps' finite costs near 1e308) is None too: no
        number is no cost (never ``"Infinity"`` in the JSON, nor in the cost histogram)."""
        llm = self.usage_steps
        tin = [s.input_tokens for s in llm if s.input_tokens is not None]
        tout = [s.output_tokens for s in llm if s.output_tokens is not None]
        costs = [s.cost_usd for s in llm if s.cost_usd is not None]
        cost = round(sum(costs), 12) if costs else None
        return {
            "input_tokens": sum(tin) if tin else None,
            "output_tokens": sum(tout) if tout else None,
            "cost_usd": cost if cost is None or math.isfinite(cost) else None,
        }

    def counts(self) -> dict[str, int]:
        """``llm_calls`` as ``llm_steps``, ``tool_calls`` as ``tool_call_steps``, ``steps`` as
        ``action_steps``, counted in one loop (no Python call per step: every stored run pays
        it, tests/cost)."""
        llm = tool_calls = errors = 0
        for s in self.steps:
            if s.kind == "llm":
                llm += 1
            elif s.kind == "tool" and not s.code_block:
                tool_calls += 1
            if s.status == "error":
                errors += 1
        return {"spans": self.span_count, "steps": len(self.action_steps), "llm_calls": llm,
                "tool_calls": tool_calls, "errors": errors}


def tokens_total(usage: Any) -> int | None:
    """Input plus output tokens of a ``Trajectory.usage()`` (or its stored JSON); None when
    neither is known."""
    usage = usage if isinstance(usage, dict) else {}
    known = [v for v in (usage.get("input_tokens"), usage.get("output_tokens"))
             if isinstance(v, int) and not isinstance(v, bool)]
    return sum(known) if known else None
