"""The calls of a trajectory as the detectors see them (stage: evaluate).

A *call* is a tool step of an agent's own (``Trajectory.top_level_tool_steps``: a tool span
under another tool step of the same agent is part of that action, not a step of its own; a
sub-agent a tool call ran makes calls of its own, its span under the call's or beside it;
and a call of a known tool read from an interpreter tool's code, ``Step.in_code``, is one).
Each call gets a canonical ``key`` so that repeats can
be compared: tool name + JSON with sorted keys and normalized whitespace (of the parameters
the tool's schema declares, when it lists them), or, for agents that act through code or
shell, the canonicalized action text; a text past 256 characters is keyed by its head and a
digest (``canonical``: bounded memory per call). Also here: the detector
context (outcome, budgets, reference, earlier findings) and the failure test for results.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from otel_eval.base.results import Finding
from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.conventions.values import cut_json
from otel_eval.evaluate.detectors.canonical import arguments_key, key_text, norm_ws, normalized_text
from otel_eval.evaluate.detectors.config import DetectorsConfig, LoopConfig, ToolCallConfig
from otel_eval.evaluate.trajectory.interpreters import MAX_TOOL_NAME
from otel_eval.evaluate.trajectory.links import AS_ONLY_PARAMETER
from otel_eval.evaluate.trajectory.shell import shell_commands

_COMMAND_SEPARATORS = re.compile(r"&&|\|\||;|\|")
_ACTION_KEYS = ("command", "code", "cmd", "script", "input")
_PYTHON_TOOL = re.compile(r"python|code", re.IGNORECASE)  # action tools that run Python
# ``find`` options that write (delete what it finds, write a list to a file), and those that
# run a command on what it finds (read-only when that command is: ``-exec grep``, not
# ``-exec sed -i``); ``sed`` edits in place with ``-i`` (``sed -n -i``, ``-i.bak``).
_FIND_WRITES = frozenset({"-delete", "-fprint", "-fprint0", "-fprintf", "-fls"})
_FIND_RUNS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_FIND_RUN_ENDS = frozenset({";", "\\;", "+"})


@dataclass(frozen=True, slots=True)
class RefCall:
    """One expected call of a reference trajectory."""

    name: str
    arguments: Any = None


@dataclass(frozen=True, slots=True)
class Reference:
    """Expected calls for one task id, with how to compare them."""

    task_id: str
    calls: tuple[RefCall, ...]
    match: str | None = None  # None: the configured default
    arguments_match: str | None = None
    arguments_match_by_tool: Mapping[str, str] = field(default_factory=dict)
    # Compare only calls to these tools (None: all calls). tau-bench: its write tools.
    tools: frozenset[str] | None = None
    # The expected final answer (text or a number; None: the answer is not compared), how
    # it is compared (None: the configured default) and the numeric mode's tolerance.
    expected_output: str | int | float | None = None
    output_match: str | None = None
    output_tolerance: float | None = None
    # False when the reference gave no calls (an answer only): the calls are not compared.
    compare_calls: bool = True


@dataclass(slots=True)
class Context:
    """What a detector may know besides the trajectory and the config."""

    outcome: str | None = None  # success | failure | None
    budgets: Mapping[str, float] = field(default_factory=dict)  # resolved, unset ones absent
    reference: Reference | None = None
    findings: Sequence[Finding] = ()  # findings of the detectors that ran before
    # Derived views of *this* trajectory shared by detectors (a memo, never an input).
    memo: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Call:
    """A top-level tool step with its canonical key."""

    step: Step
    key: str
    action: bool  # an action text of a code/shell agent
    failed: bool
    read_only: bool
    # the last call rebuilt from an output whose calls are known only in part
    # (``Step.calls_unknown``: past ``MAX_OUTPUT_CALLS``, or unnamed): calls no step
    # records may have come after it, so the next call is not back to back with it
    cut_after: bool = False
    # the run of an agent that made it (``Step.agent_scope`` and ``invocations``): the calls
    # the rules that compare an agent's calls with its own take for one sequence
    agent: tuple[str | None, str | None, str | None] = (None, None, None)


def action_text(step: Step) -> str | None:
    """The code or command of an action step, or None when its arguments carry none."""
    args = step.arguments
    if isinstance(args, str):
        return args
    if isinstance(args, Mapping):
        for k in _ACTION_KEYS:
            if isinstance(args.get(k), str):
                return str(args[k])
        if len(args) == 1:
            only = next(iter(args.values()))
            return only if isinstance(only, str) else None
    return None


def is_action_tool(name: str, loop: LoopConfig) -> bool:
    return name.lower() in _lowered(loop.action_tools)


@lru_cache(maxsize=16)
def _lowered(names: tuple[str, ...]) -> tuple[str, ...]:
    """Configured tool names or prefixes as tool names are compared: lowercased."""
    return tuple(n.lower() for n in names)


@lru_cache(maxsize=16)
def _first_words(prefixes: tuple[str, ...]) -> re.Pattern[str]:
    """The configured read-only prefixes as the first word of a tool's name, its letters in
    any case: the name goes on past it with no lowercase letter (a separator, a digit, a
    capital of camelCase, or nothing), so ``check`` reads ``check_status`` and ``CheckOrder``
    but not ``checkout_cart``. A prefix that ends in a separator (``page_``) already ends a
    word; one of several words run together (``textinspector``) matches as written."""
    words = [f"(?i:{re.escape(p)})" + ("(?![a-z])" if p[-1].isalnum() else "")
             for p in prefixes if p]
    return re.compile("|".join(words) or "(?!)")  # none configured: no tool is read-only


def _is_read_only(name: str, text: str | None, loop: LoopConfig) -> bool:
    if text is None:
        return _first_words(loop.read_only_prefixes).match(name) is not None
    if not _PYTHON_TOOL.search(name):
        # a shell command: read-only when every command of its lists and pipelines is, and
        # no redirection writes a file (``shlex``: quoted "|" or ";" are no separators). The
        # first word decides most commands without lexing: ``python``, ``cd``, ``pip`` ...
        head = text.split(None, 1)
        if not head or head[0] not in _read_only_heads(loop.read_only_commands):
            return False
        commands, writes, problem = shell_commands(text)
        if problem is None:
            return bool(commands) and not writes and all(
                _starts_with_one(" ".join(argv), loop.read_only_commands)
                and not _writing(argv, loop.read_only_commands) for argv in commands)
    cmd = norm_ws(text)
    # A pipeline or command list is read-only only if every part is; writes via `>`.
    if ">" in cmd.replace("2>&1", "").replace(">/dev/null", ""):
        return False
    parts = [p.strip() for p in _COMMAND_SEPARATORS.split(cmd) if p.strip()]
    return bool(parts) and all(_starts_with_one(p, loop.read_only_commands)
                               and not _writing(p.split(), loop.read_only_commands)
                               for p in parts)


def _writing(argv: list[str], commands: tuple[str, ...]) -> bool:
    """Whether a command's options make it write or run a command that does not only read
    (``find -delete``, ``find -exec sed -i``, ``sed -i``; ``find -exec grep`` only reads:
    ``commands``, the read-only ones), in one pass over its words."""
    if not argv or argv[0] not in ("find", "sed"):
        return False
    if argv[0] == "sed":
        return any(_in_place(word) for word in argv[1:])
    n = 1
    while n < len(argv):
        if argv[n] in _FIND_WRITES:
            return True
        if argv[n] in _FIND_RUNS:
            end = n + 1
            while end < len(argv) and argv[end] not in _FIND_RUN_ENDS:
                end += 1
            run = argv[n + 1:end]
            if not run or run[0] == "find" \
                    or not _starts_with_one(" ".join(run), commands) \
                    or (run[0] == "sed" and any(_in_place(word) for word in run[1:])):
                return True  # a find it runs is not read (one pass): taken to write
            n = end
        n += 1
    return False


def _in_place(word: str) -> bool:
    """A ``sed`` option editing in place: ``-i``, ``-i.bak``, ``-ni``, ``--in-place[=..]``."""
    if word.startswith("--"):
        return word == "--in-place" or word.startswith("--in-place=")
    return word.startswith("-") and "i" in word


@lru_cache(maxsize=16)
def _read_only_heads(commands: tuple[str, ...]) -> frozenset[str]:
    """The first words of the read-only commands."""
    return frozenset(c.split()[0] for c in commands if c.split())


def _starts_with_one(command: str, prefixes: tuple[str, ...]) -> bool:
    return any(command == c or command.startswith(c + " ") for c in prefixes)


@lru_cache(maxsize=64)
def _patterns(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)


def result_failed(step: Step, action: bool, cfg: ToolCallConfig) -> str | None:
    """Why a tool step failed (span error or an error payload as result), or None. A denied
    call (``Step.decision``) did not run: it never failed, whatever its result says."""
    if step.decision == "deny":
        return None
    if step.status == "error":
        return step.error or "tool span status error"
    if action or not step.result:
        return None
    pat = _patterns(cfg.error_result_patterns)
    head = step.result[:500]
    if pat is not None and pat.search(head):
        return norm_ws(head)[:200]
    return None


def top_level_tool_steps(trajectory: Trajectory) -> list[Step]:
    """``Trajectory.top_level_tool_steps``: each agent's tool steps not nested under another
    tool step of its own (a sub-agent's under the call that ran it are its calls), and the
    calls an interpreter tool's code made."""
    return trajectory.top_level_tool_steps()


def invocations(trajectory: Trajectory) -> dict[str, str | None]:
    """Span id -> the invocation of a sub-agent its step is part of: the span id of an agent
    step a tool call of the agent above it ran (its span under the call's, at any depth
    below that agent's, or beside it: ``Step.delegated``); None for the steps of no such
    invocation (the run's own agents). A sub-agent delegated to twice made two runs, each
    compared with itself as a run of that agent alone would be; the repeat is its caller's
    (the delegating call made again). Tree order (a parent before its children); a parent
    that is no step, or comes later (a cycle), starts no invocation. A step whose parent span
    is missing (a sampler dropped it) is part of the invocation it ran in: the step above it
    in the tree, where ``spans.tree_order`` put it and ``place_missing_parents`` found its
    agent (a group no agent's calls name is within the missing span: ``Step.within_unknown``
    keeps it apart). One Python call per run, plain loops (tests/cost)."""
    run: dict[str, str | None] = {}
    called: dict[str, bool] = {}  # span id -> a tool step at or above it, below its agent
    path: list[str] = []  # span ids of the steps above the current one, by depth
    for s in trajectory.steps:
        if s.span_id in run:
            continue  # rebuilt steps and calls from code share a span: the span's step decides
        del path[s.depth:]
        parent = s.parent_span_id or ""
        if path and parent not in run:
            # missing: where it ran (a span of a parent cycle, its parent later, is at depth 0)
            parent = path[-1]
        if s.kind == "agent":
            run[s.span_id] = (s.span_id if s.delegated or called.get(parent, False)
                              else run.get(parent))
            called[s.span_id] = False
        else:
            run[s.span_id] = run.get(parent)
            called[s.span_id] = s.kind == "tool" or called.get(parent, False)
        path.append(s.span_id)
    return run


def invocations_for(trajectory: Trajectory, context: Context) -> dict[str, str | None]:
    """``invocations`` worked out once per evaluation (the calls and stagnation need it)."""
    cached = context.memo.get("invocations")
    if cached is None:
        cached = context.memo["invocations"] = invocations(trajectory)
    return cached


def by_invocation(steps: Sequence[Step], runs: Mapping[str, str | None]) -> list[list[Step]]:
    """``steps`` split by the invocation each is part of (``invocations``: ``runs``), each
    part in order; the run's own agents' steps are one part."""
    groups: dict[str | None, list[Step]] = {}
    for s in steps:
        groups.setdefault(runs.get(s.span_id), []).append(s)
    return list(groups.values())


def calls(trajectory: Trajectory, loop: LoopConfig, tool_cfg: ToolCallConfig,
          runs: Mapping[str, str | None] | None = None) -> list[Call]:
    """The calls of a trajectory (every agent's, a sub-agent's too), in order, each with its
    canonical key and the agent run that made it (``Call.agent``; ``runs``: the trajectory's
    ``invocations``, worked out when not given)."""
    out = []
    if runs is None:
        runs = invocations(trajectory)
    for s in top_level_tool_steps(trajectory):
        name = s.tool_name or s.name
        text = action_text(s) if is_action_tool(name, loop) else None
        if text is not None:  # keys bounded: ``canonical``
            key = f"{name}\x00{key_text(normalized_text(text))}"
        elif s.arguments is None or s.sources.get("arguments", "").endswith(AS_ONLY_PARAMETER) \
                or (isinstance(s.arguments, str) and cut_json(s.arguments)):
            # not recorded, a text read as the only parameter that no call confirmed, or the
            # text of an object cut at a length limit (the model's own call, kept as it asked):
            # equal to no other call (unknown != same; "Paris" may have been {"town":
            # "Paris"}, and two requests cut alike may differ past the cut)
            key = f"{name}\x01unrecorded\x00{s.index}"
        else:
            args = _declared(s.arguments, trajectory.tools.get(name))
            key = f"{name}\x00{arguments_key(args)}"
        failed = result_failed(s, text is not None, tool_cfg) is not None
        out.append(Call(s, key, text is not None, failed, _is_read_only(name, text, loop),
                        _last_of_cut_output(trajectory, s),
                        (s.node, s.within_unknown, runs.get(s.span_id))))
    return out


def _last_of_cut_output(trajectory: Trajectory, step: Step) -> bool:
    """Whether ``step`` is the last call rebuilt from an LLM output whose calls are known only
    in part (the rebuilt calls follow their output's step, on its span)."""
    if not step.rebuilt or step.code_block:
        return False
    steps = trajectory.steps
    after = step.index + 1
    if after < len(steps) and steps[after].rebuilt and steps[after].span_id == step.span_id:
        return False
    for k in range(step.index - 1, -1, -1):
        if steps[k].span_id != step.span_id:
            return False
        if steps[k].kind == "llm":
            return steps[k].calls_unknown
    return False


def _declared(arguments: Any, schema: Any) -> Any:
    """The arguments the tool declares, when its schema lists its parameters: a tool does not
    read the others, so they do not make a call different (smolagents' ``page_down`` called
    with ``{"": ""}`` and with ``{"": {}}`` scrolls the same page)."""
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(arguments, dict) or not isinstance(props, Mapping):
        return arguments
    if all(k in props for k in arguments):
        return arguments
    declared = {k: v for k, v in arguments.items() if k in props}
    if props and not declared:
        # none of the parameters it declares: two such calls are never compared on
        # parameters neither of them has (all absent would read as equal)
        return arguments
    return declared


def calls_for(trajectory: Trajectory, config: DetectorsConfig, context: Context) -> list[Call]:
    """``calls`` computed once per evaluation (loop and recovery both need them)."""
    cached = context.memo.get("calls")
    if cached is None:
        cached = context.memo["calls"] = calls(trajectory, config.loop, config.tool_call,
                                               invocations_for(trajectory, context))
    return list(cached)


def through_code(cs: Sequence[Call]) -> list[Call]:
    """The calls rules (a)-(c) compare: a code step (a block an LLM reply wrote, or an
    interpreter tool's call) whose code called known tools stands for those calls (its
    ``in_code`` steps, right after it), so two blocks that make the same
    call are the same call repeated, whatever else their code says; a block that called no
    known tool is its own action. (Rule (g) compares the code steps themselves.)"""
    return [c for i, c in enumerate(cs)
            if not (not c.step.in_code and i + 1 < len(cs) and cs[i + 1].step.in_code)]


def call_label(call: Call, limit: int = 60) -> str:
    """A short human label: ``read_file`` or ``bash: pytest -x`` (the name cut to
    ``MAX_TOOL_NAME``: it is span content, and labels go into finding messages)."""
    name = (call.step.tool_name or call.step.name)[:MAX_TOOL_NAME]
    if call.action:
        text = call.key.split("\x00", 1)[1]
        return f"{name}: {text[:limit]}{'...' if len(text) > limit else ''}"
    return name
