"""Configuration of the detectors stage: which detectors run, their thresholds, budgets,
references and per-agent overrides. Loaded by ``otel_eval.app.config.build`` (frozen, typed).

Thresholds are set from first principles (what a repeat, a cycle or a budget *means*), not
fitted to any benchmark; each comment says why the default is what it is.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal

from otel_eval.base.configcheck import validate
from otel_eval.evaluate.sessions.config import SESSION_BUDGETS

Severity = Literal["info", "warning", "error"]
MatchMode = Literal["exact", "in_order", "any_order", "superset"]
ArgumentsMode = Literal["exact", "ignore", "subset", "superset"]
OutputMode = Literal["exact", "contains", "numeric"]

DETECTOR_NAMES: tuple[str, ...] = (
    "loop", "non_termination", "budget", "tool_call", "reference", "recovery", "lucky_pass",
)
BUDGET_NAMES: tuple[str, ...] = (
    "steps", "llm_calls", "tool_calls", "input_tokens", "output_tokens", "cost_usd", "duration_s",
)
# Budgets of a whole conversation (``sessions.session_turns`` ...), also set by ``--budget``.
SESSION_BUDGET_NAMES: tuple[str, ...] = tuple(SESSION_BUDGETS)


def budget_problem(value: float) -> str | None:
    """What is wrong with a budget's limit (>= 0 and finite), or None."""
    if not (math.isfinite(value) and value >= 0):
        return f"must be >= 0 and finite, got {value!r}"
    return None


def parse_budget(text: str) -> tuple[str, float]:
    """``NAME=VALUE`` (``--budget steps=5``) -> (name, value). ValueError says what is wrong."""
    name, sep, raw = text.partition("=")
    name, raw = name.strip(), raw.strip()
    if not sep or not name or not raw:
        raise ValueError(f"budget {text!r}: expected NAME=VALUE, e.g. steps=20")
    if name not in BUDGET_NAMES + SESSION_BUDGET_NAMES:
        raise ValueError(f"budget {text!r}: unknown name {name!r} "
                         f"(known: {', '.join(BUDGET_NAMES + SESSION_BUDGET_NAMES)})")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"budget {text!r}: {raw!r} is not a number") from None
    problem = budget_problem(value)
    if problem is None and SESSION_BUDGETS.get(name, ("", False))[1] and not value.is_integer():
        problem = f"must be a whole number, got {raw!r}"
    if problem:
        raise ValueError(f"budget {text!r}: {problem}")
    return name, value


def pattern_problems(name: str, patterns: tuple[str, ...]) -> dict[str, str]:
    """``name[i]``: why pattern i cannot run as the detectors run it (each one a group of a
    case-insensitive alternation: a global flag such as ``(?i)`` inside one fails there)."""
    problems = {}
    for i, pattern in enumerate(patterns):
        try:
            re.compile(pattern, re.IGNORECASE)
            re.compile(f"(?:{pattern})", re.IGNORECASE)
        except re.error as e:
            problems[f"{name}[{i}]"] = f"not a regular expression ({e.msg}): {pattern!r:.80}"
    return problems


@dataclass(frozen=True)
class BudgetsConfig:
    """Upper limits per trace; ``None`` (the default for all) means "no budget"."""

    # Steps: top-level tool calls (one action of a code/shell agent counts once). Count.
    steps: int | None = None
    # LLM calls (the LLM spans; they are not steps). Count.
    llm_calls: int | None = None
    # Tool calls, nested ones included (a tool called from inside code counts too). Count.
    tool_calls: int | None = None
    # Input (prompt) tokens summed over LLM calls (and remote agents' spans). Tokens.
    input_tokens: int | None = None
    # Output (completion) tokens summed over LLM calls (and remote agents' spans). Tokens.
    output_tokens: int | None = None
    # Cost of LLM calls: span cost attributes, else litellm's model price map. US dollars.
    cost_usd: float | None = None
    # Wall time from the first span's start to the last span's end. Seconds.
    duration_s: float | None = None

    def __post_init__(self) -> None:
        validate(self, problems={name: problem for name in BUDGET_NAMES
                                 if getattr(self, name) is not None
                                 and (problem := budget_problem(getattr(self, name)))})


@dataclass(frozen=True)
class LoopConfig:
    # (b) A call repeated with the same result within this many steps (tool calls / actions)
    # and with no state-changing call in between is a loop. 10 steps covers the short
    # re-check patterns agents fall into, without reaching back to an unrelated early call.
    # 1 to 100 (the rule's work is calls x window).
    window_steps: int = 10
    # (c) Longest cycle pattern looked for, in calls (A B ... of up to this length). 1 to 20
    # (the rule's work is calls x period squared).
    cycle_max_period: int = 4
    # (c) A pattern of 2+ calls must occur this many times in a row to be a cycle. Three, as
    # in "A B A B A B": two occurrences are often a legitimate retry of a two-call procedure.
    cycle_min_repeats: int = 3
    # (d) Two LLM outputs whose similarity (difflib ratio over words, 0..1) is at least this are
    # "near-identical". 0.95 tolerates a changed number or word in a paragraph (one word in
    # forty), not a changed plan. Compared on what differs: the lines both outputs have (a
    # framework's template) are left out first; equal outputs are alike.
    stagnation_similarity: float = 0.95
    # (d) This many consecutive near-identical LLM outputs make a stagnation finding (2 or
    # more: one output alone is no repetition).
    stagnation_min_run: int = 3
    # (d) Outputs shorter than this (characters; a wide one, Chinese, Japanese or Korean, counts
    # two: it says what two or three letters do) are ignored: "OK" twice is not stagnation.
    stagnation_min_chars: int = 20
    # (f) Reworded repeats: two calls of the same tool whose identifiers (argument values of
    # one or two words: ids, dates, file names; a changed one is another request) are equal
    # and whose text (longer values, lowercased, whitespace collapsed) has a character-3-gram
    # Jaccard similarity of at least this are "the same request reworded". For two texts of
    # similar length, J = 0.5 means two thirds of each one's 3-grams are shared
    # (s / (2n - s) = 1/2 at s = 2n/3): the same words with a third changed, added or
    # reordered is a rewording, while queries about different things share well under a fifth.
    reworded_similarity: float = 0.5
    # (f) Each call is compared with the previous this many calls of the same tool (not all
    # earlier calls: bounded work, and a rewording comes right after the attempt it retries).
    # 1 to 100.
    reworded_window: int = 4
    # (f) A later call "brought nothing new" when it failed, or when at least this share of
    # its result's 3-grams (past the framing both results share) were already in the earlier
    # call's result (at most a fifth of it new: the same pages, the same "not found").
    reworded_result_overlap: float = 0.8
    # (f) This many calls linked by reworded repeats that brought nothing new make a finding.
    # Three, as for cycles: rewording a query once after a miss is a sensible retry; a second
    # rewording that again finds nothing new is the agent going round.
    reworded_min_calls: int = 3
    # (g) Circling (``detectors.circling``): steps of one agent that bring back what it has
    # already seen while its actions change only in form. A step's observation "adds nothing
    # new" when at least this share of its normalised text's character 3-grams (past the
    # framing both share) were in an earlier observation of the window: 0.9, stricter than
    # (f)'s 0.8, because code observations are longer and repeat their framing (a listing,
    # a traceback): a tenth new is one changed line in a ten-line listing, not a new file.
    circling_observation_overlap: float = 0.9
    # (g) Two actions "differ only in form" when their normalised texts (code or command,
    # lowercased, whitespace collapsed) have a character-3-gram Jaccard of at least this, or
    # when they invoke the same program (shell: the same first word of every command; code:
    # the same called names). 0.5 as for (f): two thirds of each text shared.
    circling_action_similarity: float = 0.5
    # (g) Each step is compared with the previous this many action steps of its agent
    # (bounded work: n x window comparisons, never n squared). Six: an agent circling goes
    # round within a few turns, and a result seen ten steps ago may rightly be read again.
    # 1 to 100.
    circling_window: int = 6
    # (g) This many linked steps make a finding: three, as for cycles and (f): one re-read is
    # a check; a third look at the same thing in other words is going round.
    circling_min_steps: int = 3
    # (e) Tools whose call is an action text (shell command, code): the loop key is the
    # canonicalized text of their `command` / `code` argument.
    action_tools: tuple[str, ...] = (
        "bash", "shell", "execute_bash", "run_shell_command", "terminal", "python_interpreter",
        "execute_python_code", "code_interpreter", "python",
    )
    # Tool-name prefixes (case-insensitive) of calls that do not change state, matched as the
    # name's first word (`check` reads `check_status`, `CheckOrder`, not `checkout_cart`). A
    # repeat with only such calls in between made no progress; any other call counts as a
    # state change (so re-running the tests after an edit is not a loop).
    read_only_prefixes: tuple[str, ...] = (
        "get", "read", "search", "list", "find", "fetch", "view", "lookup", "query", "show",
        "describe", "check", "inspect", "visit", "browse", "retrieve", "calculate", "think",
        "web_search", "page_", "inspect_file", "textinspector", "visittool",
    )
    # First words of shell commands that only read (for action tools).
    read_only_commands: tuple[str, ...] = (
        "cat", "ls", "grep", "rg", "find", "head", "tail", "wc", "pwd", "echo", "nl", "tree",
        "less", "more", "file", "stat", "which", "diff", "git diff", "git status", "git log",
        "git show", "sed -n",
    )
    # Severity of loop findings (a)-(c), (e), (f).
    severity: Severity = "error"
    # Severity of stagnation findings (d).
    stagnation_severity: Severity = "error"
    # Severity of circling findings (g): a warning until it is measured to tell runs that fail
    # from runs that make progress (SWE-bench mini-swe-agent: on 9 % of resolved runs vs 13 %
    # of unresolved ones, bench/README.md), so it does not fail a run's verdict by itself.
    circling_severity: Severity = "warning"

    def __post_init__(self) -> None:
        validate(self, minimum={
            "window_steps": 1, "cycle_max_period": 1, "cycle_min_repeats": 1,
            "stagnation_similarity": 0, "stagnation_min_run": 2, "stagnation_min_chars": 0,
            "reworded_similarity": 0, "reworded_window": 1, "reworded_result_overlap": 0,
            "reworded_min_calls": 1, "circling_observation_overlap": 0,
            "circling_action_similarity": 0, "circling_window": 1, "circling_min_steps": 2},
            maximum={"stagnation_similarity": 1, "reworded_similarity": 1,
                     "reworded_result_overlap": 1, "circling_observation_overlap": 1,
                     "circling_action_similarity": 1, "window_steps": 100,
                     "cycle_max_period": 20, "reworded_window": 100, "circling_window": 100})


@dataclass(frozen=True)
class NonTerminationConfig:
    # Regular expressions (case-insensitive) of framework halt markers, looked for in the
    # final output, error messages and agent/chain outputs. Defaults cover smolagents,
    # LangGraph, LangChain AgentExecutor, OpenAI Agents SDK, CrewAI, AutoGen, LlamaIndex,
    # pydantic-ai, mini-swe-agent, BeeAI (AgentError at max_iterations), Google ADK
    # (LlmCallsLimitExceededError at max_llm_calls), Microsoft Agent Framework (its answer
    # at max_iterations), LangGraph's create_react_agent (its answer a step before the
    # recursion limit), LlamaIndex workflows (WorkflowRuntimeError at max_iterations) and
    # Haystack's Agent (its output's exit_reason at max_agent_steps).
    halt_patterns: tuple[str, ...] = (
        r"reached max(imum)? (steps|iterations|turns)",
        r"max(imum)?[ _]?(turns|iterations|steps)[ _]?(exceeded|reached)",
        r"recursion limit of \d+ reached",
        r"GraphRecursionError",
        r"agent stopped due to (max iterations|iteration limit|time limit)",
        r"MaxTurnsExceeded",
        r"UsageLimitExceeded",
        r"LimitsExceeded",
        # reached, or exceeded: an answer may speak of a maximum number of rounds
        r"reached (the )?maximum number of (turns|iterations|steps|rounds)",
        r"maximum number of (turns|iterations|steps|rounds)( \(\d+\))? (reached|exceeded)",
        r"not able to resolve the task in \d+ iterations",
        r"LlmCallsLimitExceeded|max number of llm calls limit of `?\d+`? exceeded",
        r"function invocation limit reached before a final answer",
        r"need more steps to process this request",
        r"max iterations of \d+ reached",
        r'"exit_reason": ?"max_agent_steps"',
    )
    # The prompts a framework sends the model at its cap to force a last answer out of it,
    # looked for in the last LLM call's input: smolagents' provide_final_answer (max_steps),
    # CrewAI's handle_max_iterations_exceeded (max_iter). The model then answers, so no
    # error or output says the run was stopped.
    forced_answer_patterns: tuple[str, ...] = (
        r"got stuck and failed to do so\. You are tasked with providing an answer instead",
        r"Now it's time you MUST give your absolute best final answer",
    )
    # Severity when no final output could be found at all (some instrumentations do not
    # record it, so this is a warning by default).
    no_output_severity: Severity = "warning"
    # Severity for a trace cut at the maximum trace duration (`truncated`). When the run's
    # root ended (spans past `assembly.max_spans_per_trace`, or refused for a share), the run
    # ended: an info note `evaluation/spans_cut` instead; one otel-eval cut while it went on
    # (the `release_oldest` overflow, slot pressure, spans refused for a service's share):
    # the note `evaluation/run_cut`; neither counted as non-terminated.
    truncated_severity: Severity = "warning"

    def __post_init__(self) -> None:
        validate(self, problems={
            **pattern_problems("halt_patterns", self.halt_patterns),
            **pattern_problems("forced_answer_patterns", self.forced_answer_patterns)})


@dataclass(frozen=True)
class ToolCallConfig:
    # A call to a tool that was not offered.
    selection_severity: Severity = "error"
    # Arguments that are not JSON or fail the tool's JSON schema.
    argument_severity: Severity = "error"
    # A tool execution failure (its consequences are judged by `recovery`).
    runtime_severity: Severity = "warning"
    # Flag parameters a schema does not declare even when it does not say
    # `additionalProperties: false` (a model inventing a parameter is an argument error).
    reject_unknown_parameters: bool = True
    # Regular expressions (case-insensitive) matching a tool result that reports a failure,
    # for tools that return errors as text. Not applied to action tools (a shell command's
    # traceback is an observation, not a failed call).
    error_result_patterns: tuple[str, ...] = (
        r"^\s*(error|exception)\b",
        r"^\s*traceback \(most recent call last\)",
        r'^\s*\{\s*"error"\s*:(?!\s*null)',
    )

    def __post_init__(self) -> None:
        validate(self, problems=pattern_problems("error_result_patterns",
                                                 self.error_result_patterns))


@dataclass(frozen=True)
class ReferenceConfig:
    # Match mode for references that do not say: exact | in_order | any_order | superset.
    match: MatchMode = "in_order"
    # Argument mode for references that do not say: exact | ignore | subset | superset.
    arguments_match: ArgumentsMode = "exact"
    # Severity of a reference mismatch (of the calls, or of the answer).
    severity: Severity = "error"
    # Answer mode for references with an `expected_output` that do not say: exact (equal
    # after Unicode NFC, case and whitespace folding) | contains (the expected text, so
    # folded, is in the answer) | numeric (the answer's last number within the reference's
    # `output_tolerance`, default 0, of the expected number).
    output_match: OutputMode = "exact"
    # Characters at which the instrumentation cuts attribute values (the SDK's
    # OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT); an answer this long is known only in part: its
    # match is unknown (`reference/answer_unknown`), never a mismatch. 0: no limit known.
    answer_length_limit: int = 0

    def __post_init__(self) -> None:
        validate(self, minimum={"answer_length_limit": 0})


@dataclass(frozen=True)
class RecoveryConfig:
    # The same failing call issued again (and never recovered from).
    repeated_severity: Severity = "error"
    # A tool error never followed by a successful call (a sub-agent's by one of the same
    # invocation of it), outcome not known to be success.
    gave_up_severity: Severity = "error"
    # A tool error never recovered from, but the outcome is success.
    unrecovered_severity: Severity = "warning"


@dataclass(frozen=True)
class LuckyPassConfig:
    # A known success reached through loops, unrecovered errors or a blown budget. The
    # other findings already carry the errors; this one explains the success, so: warning.
    severity: Severity = "warning"


@dataclass(frozen=True)
class AgentOverrides:
    """Settings for one agent (`gen_ai.agent.name` / service), for the runs it is the
    agent of (whole, sub-agents' steps included); unset fields inherit."""

    # Budgets for this agent; each field that is not None replaces the global one.
    budgets: BudgetsConfig = field(default_factory=BudgetsConfig)
    # Detectors for this agent; None inherits `detectors.enabled`.
    enabled: tuple[str, ...] | None = None


@dataclass(frozen=True)
class DetectorsConfig:
    # Detectors switched on, by name.
    enabled: tuple[str, ...] = DETECTOR_NAMES
    # Budgets for every trace (None = unchecked). `--budget NAME=VALUE` overrides them.
    budgets: BudgetsConfig = field(default_factory=BudgetsConfig)
    # Budgets that win over `budgets` and every agent's own, name -> limit (each a finite
    # number >= 0): what `--budget NAME=VALUE` sets. Empty by default.
    budget_overrides: dict[str, float] = field(default_factory=dict)
    # Loop rules (a)-(f): window, cycle and stagnation thresholds, what counts as read-only.
    loop: LoopConfig = field(default_factory=LoopConfig)
    # Halt markers and the severities of the softer non-termination findings.
    non_termination: NonTerminationConfig = field(default_factory=NonTerminationConfig)
    # Selection / argument / runtime severities and the error-payload patterns.
    tool_call: ToolCallConfig = field(default_factory=ToolCallConfig)
    # References file (JSON lines, or a tau-bench task file); empty string means none.
    # `eval --references FILE` overrides it. Traces find theirs by task id. `serve` reads it
    # once, at start: its worker processes, one restarted after a crash too, use those.
    references_path: str = ""
    # Default match / argument modes for references that do not set them, and severity.
    reference: ReferenceConfig = field(default_factory=ReferenceConfig)
    # Severities of the recovery findings.
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)
    # Severity of the lucky-pass finding.
    lucky_pass: LuckyPassConfig = field(default_factory=LuckyPassConfig)
    # Per-agent overrides keyed by agent name (empty by default). The run's agent (the
    # results' `agent`) takes its entry, over the whole run as every budget measures it
    # (its sub-agents' calls and tokens included); a sub-agent's entry applies to the runs
    # it is the agent of, not to its part of another agent's run. A run with no agent name
    # takes the global settings (an empty name is refused).
    agents: dict[str, AgentOverrides] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = {}
        names = [self.enabled, *(a.enabled for a in self.agents.values() if a.enabled)]
        unknown = sorted({n for group in names for n in group} - set(DETECTOR_NAMES))
        if unknown:
            problems["enabled"] = (f"unknown detector(s) {', '.join(unknown)} "
                                   f"(known: {', '.join(DETECTOR_NAMES)})")
        if "" in self.agents:  # else the overrides of every run with no agent name
            problems["agents"] = ("an empty agent name matches no agent (an unset variable in "
                                  "the key?); runs with no agent name take the global settings")
        for name, value in self.budget_overrides.items():
            problem = (budget_problem(value) if name in BUDGET_NAMES else
                       f"unknown budget (known: {', '.join(BUDGET_NAMES)})")
            if problem:
                problems[f"budget_overrides.{name}"] = problem
        validate(self, problems=problems)
