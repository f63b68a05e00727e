"""Configuration of the evaluate stage: building trajectories (the ``trajectory:`` section),
where evaluation runs (``evaluation:``: worker processes), and what the evaluator reads of
the top-level config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from otel_eval.base.configcheck import validate

if TYPE_CHECKING:
    from otel_eval.evaluate.detectors.config import DetectorsConfig
    from otel_eval.evaluate.predict.config import PredictionConfig

# A task id is a key (a references file's, a benchmark's): a longer value of the task id
# attribute is no task id (a payload put there, as for conversation ids), never cut to fit.
MAX_TASK_ID_CHARS = 256


@dataclass(frozen=True)
class TrajectoryConfig:
    # Span or resource attribute carrying the task id (for references and trials); a value
    # longer than 256 characters is no task id.
    task_id_attribute: str = "otel_eval.task.id"
    # Root span attribute carrying the known outcome (success / failure, true / false, 1 / 0).
    outcome_attribute: str = "otel_eval.outcome"
    # Tool steps rebuilt from the code an agent wrote (code actions), per trace, at most; the
    # calls past it are counted (`code_actions.over_limit`), not made steps. Real runs stay
    # below: code agents' step limits are tens (smolagents 20) to a few hundred (mini-swe-agent
    # 250), each step a call or a few.
    max_rebuilt_steps: int = 500
    # Tool steps rebuilt from the tool calls LLM outputs asked for and no span ran, per trace,
    # at most; the calls past it are counted (a `result_truncated` finding's
    # `rebuilt_tool_calls`; their outcome not known), not made steps. As many as the tool
    # spans a trace may hold (`assembly.max_spans_per_trace`): one output's calls were
    # rebuilt without limit (a 64 MiB span made ~1.2M steps).
    max_rebuilt_calls: int = 10_000
    # Stored size of one value of a step (its arguments, each tool call's arguments, its
    # error), bytes of JSON; a larger one is stored as the first bytes of its JSON text, its
    # full size in the step's `truncated`. Detectors read the whole value first.
    max_value_bytes: int = 16 * 1024
    # Stored size of one per-trace result (the v1 object, its judge included), bytes of
    # JSON. A larger one is stored cut: the input/output messages, then the contents of
    # steps from the last one back, then the last steps themselves, then the last verdict
    # reasons and findings, with a `result_truncated` finding saying what was cut; the
    # judge's texts and details are cut to what is left (its verdict never). Also the
    # largest answer of one GET /v1/evaluations/{trace_id}.
    max_result_bytes: int = 4 * 1024 * 1024

    def __post_init__(self) -> None:
        validate(self, minimum={"max_rebuilt_steps": 0, "max_rebuilt_calls": 0,
                                "max_value_bytes": 256,
                                "max_result_bytes": 64 * 1024})


@dataclass(frozen=True)
class EvaluationConfig:
    # Processes that evaluate released traces (trajectory, detectors, store writes), each
    # trace id always in the same one; receivers, assembly, the spool, the judge and the
    # issues job stay in the serving process. 0: one per core this process may use (CPU
    # affinity, capped by a cgroup CPU limit); 1: evaluate in the serving process itself (as
    # with store.path ":memory:", a database no other process can write to).
    workers: int = 0
    # Traces handed to one worker process and not yet stored, at most. The rest wait in the
    # serving process, where their spans count in assembly.max_pending_spans (receivers
    # throttle past it).
    max_inflight_traces_per_worker: int = 64
    # A worker that dies is restarted and the traces it held are handed to it again, one at a
    # time (each alone in the worker); a trace whose worker died this many times while
    # holding it alone is stored as an evaluation error instead.
    max_attempts: int = 3
    # Seconds a worker process may take to start (imports, opening the store). When the
    # workers cannot start, serve evaluates in its own process and logs why.
    worker_start_timeout_s: float = 60.0
    # Seconds a worker process may spend on one batch of traces (a few, evaluated and stored
    # together; counted from when it takes the batch up) before it is taken for hung: it is
    # killed and restarted, and its traces are handed again as after a crash (one that hangs
    # its worker alone max_attempts times is stored as an evaluation error). Keep it above
    # the store's own waits (SQLite's 60 s for a lock; store.statement_timeout_s). At least 1.
    worker_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        validate(self, minimum={"workers": 0, "max_inflight_traces_per_worker": 1,
                                "max_attempts": 1, "worker_start_timeout_s": 1,
                                "worker_timeout_s": 1}, finite=("worker_timeout_s",))


class EvaluatorSettings(Protocol):
    """The sections ``Evaluator`` reads; the top-level ``Config`` is one (the evaluate stage
    does not import it: only the entry points do)."""

    @property
    def trajectory(self) -> TrajectoryConfig: ...

    @property
    def detectors(self) -> DetectorsConfig: ...

    @property
    def prediction(self) -> PredictionConfig: ...
