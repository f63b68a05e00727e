"""Configuration: one frozen dataclass per stage, loaded and validated in one function.

YAML files may use ``${VAR}`` / ``${VAR:-default}`` environment substitution. Unknown keys
are rejected and every error is reported at once with its path (``assembly.grace_s: ...``).
Constructors elsewhere never read ``os.environ``: only ``load_config`` does, for substitution.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from otel_eval.base.configcheck import FieldErrors, validate
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.evaluate.detectors.config import DetectorsConfig
from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.predict.config import PredictionConfig
from otel_eval.outputs.config import ExportConfig
from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.receive.security import TlsServerConfig
from otel_eval.store.base import is_postgresql_url

__all__ = [
    "AdminConfig", "AssemblyConfig", "Config", "ConfigError", "DetectorsConfig",
    "EvaluationConfig", "ExportConfig", "IssuesConfig", "JudgeConfig", "KafkaConfig",
    "PredictionConfig", "ReceiverConfig", "StoreConfig", "TlsServerConfig", "TrajectoryConfig",
    "build", "load_config", "parse_endpoint",
]


T = TypeVar("T")


class ConfigError(ValueError):
    """All problems found in a configuration, one per line, each with its path."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("invalid configuration:\n  " + "\n  ".join(errors))
        self.errors = errors


@dataclass(frozen=True)
class ReceiverConfig:
    # OTLP/gRPC TraceService endpoint (HOST:PORT); empty string disables it.
    grpc_endpoint: str = "localhost:4317"
    # OTLP/HTTP endpoint serving POST /v1/traces (protobuf or JSON, optionally gzip).
    http_endpoint: str = "localhost:4318"
    # Largest request accepted, bytes (after gzip decompression for HTTP). Agent traces with
    # message content routinely pass gRPC's 4 MiB default.
    max_message_bytes: int = 64 * 1024 * 1024
    # Threads serving gRPC calls. Decoding is CPU bound (GIL), so more threads only add
    # queueing; a handful keeps slow clients from blocking fast ones.
    grpc_workers: int = 8
    # Retry hint sent with throttling responses (gRPC RetryInfo, HTTP Retry-After), seconds.
    retry_after_s: float = 1.0
    # TLS on both OTLP listeners (cert_file, key_file; client_ca_file requires client
    # certificates, mTLS). Files are re-read when they change. Empty: plain text.
    tls: TlsServerConfig = field(default_factory=TlsServerConfig)
    # Bearer tokens accepted on both OTLP listeners, name -> token: clients send
    # `Authorization: Bearer <token>` (OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer ..."),
    # refused with gRPC UNAUTHENTICATED / HTTP 401. The name identifies the sender in logs
    # and for re-opening traces. Use ${ENV} substitution for the tokens. Empty: no auth.
    bearer_tokens: dict[str, str] = field(default_factory=dict, repr=False)
    # Start even though an endpoint is reachable beyond this host (not loopback) without
    # both TLS and bearer tokens. Off: such a configuration is refused at startup.
    allow_insecure_non_loopback: bool = False

    def __post_init__(self) -> None:
        validate(self, minimum={"max_message_bytes": 1, "grpc_workers": 1, "retry_after_s": 0},
                 endpoints=("grpc_endpoint", "http_endpoint"))


@dataclass(frozen=True)
class AssemblyConfig:
    # A trace whose root span has ended is released after this many seconds without a new span.
    # Children of an agent run usually end before the root; a short wait absorbs batching delay
    # of SDK exporters (BatchSpanProcessor flushes every 5 s by default).
    grace_s: float = 10.0
    # A trace without an ended root is released as `incomplete` after this long with no new span.
    # Datadog closes traces after 3 min idle; the collector's tail sampling waits 30 s total.
    idle_timeout_s: float = 180.0
    # A trace open longer than this (first span seen to now) is cut and released `truncated`.
    max_trace_duration_s: float = 3600.0
    # Late spans for a trace released less than this long ago re-open it (re-evaluated,
    # superseding the earlier result). Later ones are rejected as `late`.
    reopen_window_s: float = 300.0
    # Upper bound on traces being assembled at once.
    max_open_traces: int = 50_000
    # Spans kept per trace; more are rejected (partial success) with reason `trace_too_large`.
    max_spans_per_trace: int = 10_000
    # Spans accepted but not yet evaluated (open + released-but-queued). Past it receivers
    # throttle (gRPC RESOURCE_EXHAUSTED, HTTP 429) so exporters retry: nothing acked is dropped.
    max_pending_spans: int = 1_000_000
    # What to do when max_open_traces is reached: `throttle` refuses spans of new traces with a
    # retryable error; `release_oldest` releases the oldest open trace early as `truncated`.
    overflow_policy: Literal["throttle", "release_oldest"] = "throttle"
    # Recently released traces kept (with their spans) for re-opening: bounds reopen memory.
    max_released_traces: int = 20_000
    # Ids of released traces remembered (no spans) so that very late spans are refused as
    # `late` instead of starting a fragment that would replace a full evaluation.
    max_tombstones: int = 1_000_000
    # Bytes of spans (as received, OTLP protobuf) accepted but not yet evaluated. Past it
    # receivers throttle (reason `pending_bytes`), as for max_pending_spans.
    max_pending_bytes: int = 512 * 1024 * 1024
    # Under slot pressure (max_open_traces reached), traces holding a single span and idle
    # this long give way first: released early (incomplete, reason `pressure`), seconds.
    pressure_idle_s: float = 30.0
    # Largest share of max_open_traces that one service.name may hold open (0..1]; spans
    # that would open more of its traces are throttled (reason `service_share`). 1.0: none.
    max_service_share: float = 1.0
    # GenAI event log records (message content sent as OTLP logs) kept per trace; more are
    # dropped with reason `trace_too_large`.
    max_log_records_per_trace: int = 10_000
    # GenAI event log records accepted but not yet evaluated. Past it the logs receivers
    # throttle (gRPC RESOURCE_EXHAUSTED, HTTP 429), as for spans.
    max_pending_log_records: int = 1_000_000

    def __post_init__(self) -> None:
        validate(self, minimum={
            "grace_s": 0, "idle_timeout_s": 0, "max_trace_duration_s": 0, "reopen_window_s": 0,
            "max_open_traces": 1, "max_spans_per_trace": 1, "max_pending_spans": 1,
            "max_released_traces": 0, "max_tombstones": 0})


@dataclass(frozen=True)
class TrajectoryConfig:
    # Span or resource attribute carrying the task id (for references and trials).
    task_id_attribute: str = "otel_eval.task.id"
    # Root span attribute carrying the known outcome (success / failure, true / false, 1 / 0).
    outcome_attribute: str = "otel_eval.outcome"


@dataclass(frozen=True)
class AdminConfig:
    # Serves /metrics, /healthz, /readyz and the results API (/v1/evaluations, /v1/feedback).
    endpoint: str = "localhost:8888"
    # TLS on the admin listener (same keys as receiver.tls; reloaded when the files change).
    tls: TlsServerConfig = field(default_factory=TlsServerConfig)
    # Tokens that may read (GET /v1/evaluations, /v1/issues), name -> token, sent as
    # `Authorization: Bearer <token>`. With any read or write token set, reads need one of them.
    read_tokens: dict[str, str] = field(default_factory=dict, repr=False)
    # Tokens that may write (POST /v1/feedback) and read, name -> token. With tokens
    # configured, a read token on a write is 403 and no token is 401.
    write_tokens: dict[str, str] = field(default_factory=dict, repr=False)
    # Paths served without a token (Prometheus scrapes and kubelet probes).
    public_paths: list[str] = field(default_factory=lambda: ["/metrics", "/healthz",
                                                             "/readyz"])
    # Start even though the endpoint is not loopback and lacks TLS or tokens.
    allow_insecure_non_loopback: bool = False
    # The page of one trace in your trace backend, `{trace_id}` replaced by the 32-hex id
    # (e.g. http://jaeger:16686/trace/{trace_id}); the web view's run page links to it.
    # Empty: no link. http(s) only.
    trace_url: str = ""

    def __post_init__(self) -> None:
        validate(self, endpoints=("endpoint",))
        if self.trace_url and (not self.trace_url.startswith(("http://", "https://"))
                               or "{trace_id}" not in self.trace_url):
            raise FieldErrors({"trace_url": "expected an http(s) URL with {trace_id} in it, "
                                             f"got {self.trace_url!r}"})


@dataclass(frozen=True)
class StoreConfig:
    # SQLite file for evaluations (survives restarts). ":memory:" keeps nothing. With `url`
    # set it only places the local files: the spool and the judge's rubric cache.
    path: str = "otel-eval.db"
    # PostgreSQL URL (postgresql://USER@HOST:5432/DB?sslmode=verify-full; libpq's PGPASSWORD
    # and other PG* variables apply, or use ${ENV} substitution for the password): every
    # worker and replica keeps evaluations, feedback and the issues catalogue there, so the
    # results API of any shows the fleet's traces and one issues job runs at a time. Each
    # process opens its own connection. Empty: SQLite at `path`.
    url: str = field(default="", repr=False)
    # Evaluations older than this are deleted, days (0 keeps everything).
    retention_days: float = 7.0
    # Acknowledged means durable: each OTLP request's accepted spans are written to a spool
    # (SQLite, one transaction per request) before the request is acknowledged, and what was
    # not yet evaluated is replayed at start. false: faster, but a crash (kill -9, OOM kill)
    # loses acknowledged traces not yet evaluated. Kafka ingest needs none (the topic is the log).
    spool: bool = True
    # Spool file; empty: "<path>-spool" beside the store (no spool when path is ":memory:").
    spool_path: str = ""
    # Bytes of requests held in the spool (accepted, not yet evaluated). Past it the receivers
    # throttle (reason `spool_full`; gRPC RESOURCE_EXHAUSTED, HTTP 429) and exporters retry.
    spool_max_bytes: int = 512 * 1024 * 1024
    # fsync every spooled request: survives power loss too, not only a crash of the process.
    spool_fsync: bool = False

    def __post_init__(self) -> None:
        validate(self, minimum={"retention_days": 0, "spool_max_bytes": 1})
        if not self.path:
            raise FieldErrors({"path": "must name a file (or :memory:)"})
        if self.url and not is_postgresql_url(self.url):
            raise FieldErrors({"url": "must be a postgresql:// URL (or empty for SQLite)"})

    @property
    def target(self) -> str:
        """What ``otel_eval.store.open_store`` opens: the URL, else the SQLite file."""
        return self.url or self.path

    def spool_file(self) -> str | None:
        """Where the spool lives, or None when there is none (off, or an in-memory store)."""
        if not self.spool or self.path == ":memory:":
            return None
        return self.spool_path or f"{self.path}-spool"


@dataclass(frozen=True)
class EvaluationConfig:
    # Processes that evaluate released traces (trajectory, detectors, store writes), each
    # trace id always in the same one; receivers, assembly, the spool, the judge and the
    # issues job stay in the serving process. 0: one per core this process may use (CPU
    # affinity, capped by a cgroup CPU limit); 1: evaluate in the serving process itself.
    workers: int = 0
    # Traces handed to one worker process and not yet stored, at most. The rest wait in the
    # serving process, where their spans count in assembly.max_pending_spans (receivers
    # throttle past it).
    max_inflight_traces_per_worker: int = 64
    # A worker that dies is restarted and the traces it held are handed to it again; a trace
    # held by a worker that died this many times is stored as an evaluation error instead.
    max_attempts: int = 3
    # Seconds a worker process may take to start (imports, opening the store). When the
    # workers cannot start, serve evaluates in its own process and logs why.
    worker_start_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        validate(self, minimum={"workers": 0, "max_inflight_traces_per_worker": 1,
                                "max_attempts": 1, "worker_start_timeout_s": 1})


@dataclass(frozen=True)
class Config:
    # OTLP receivers (gRPC and HTTP).
    receiver: ReceiverConfig = field(default_factory=ReceiverConfig)
    # Trace assembly: when a trace counts as finished, and the bounds on what is held open.
    assembly: AssemblyConfig = field(default_factory=AssemblyConfig)
    # Building trajectories from spans: where task ids and known outcomes are read.
    trajectory: TrajectoryConfig = field(default_factory=TrajectoryConfig)
    # Deterministic detectors: loops, non-termination, budgets, tool calls, references.
    detectors: DetectorsConfig = field(default_factory=DetectorsConfig)
    # The LLM judge (off unless a model is set).
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    # The learned success predictor (off unless a model file is set).
    prediction: PredictionConfig = field(default_factory=PredictionConfig)
    # Results written back as telemetry: evaluation events and pass-through forwarding.
    export: ExportConfig = field(default_factory=ExportConfig)
    # Recurring-issue clustering of critiques and findings.
    issues: IssuesConfig = field(default_factory=IssuesConfig)
    # Kafka consumer / publisher (off unless brokers are set).
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    # Admin endpoint: /metrics, health, results API.
    admin: AdminConfig = field(default_factory=AdminConfig)
    # Where evaluations are kept.
    store: StoreConfig = field(default_factory=StoreConfig)
    # Where evaluation runs: worker processes (serve --workers N) or the serving process.
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)


_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _substitute(text: str, environ: typing.Mapping[str, str], errors: list[str]) -> str:
    def repl(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        errors.append(f"environment variable {name} is not set (use ${{{name}:-default}})")
        return ""

    return _ENV.sub(repl, text)


def parse_endpoint(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:4317`` for IPv6) -> (host, port). Raises ValueError."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


def _convert(tp: Any, value: Any, path: str, errors: list[str]) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return build(tp, value, path, errors)
    if origin is Literal:
        if value not in args:
            errors.append(f"{path}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, path, errors)
    if origin is list or origin is tuple:
        if not isinstance(value, list | tuple):
            errors.append(f"{path}: expected a list, got {type(value).__name__}")
            return value
        item = args[0] if args else Any
        items = [_convert(item, v, f"{path}[{i}]", errors) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a mapping, got {type(value).__name__}")
            return value
        vt = args[1] if len(args) == 2 else Any
        return {str(k): _convert(vt, v, f"{path}.{k}", errors) for k, v in value.items()}
    if tp is Any:
        return value
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if tp in (int, str, bool) and type(value) is tp:
        return value
    if tp is int and isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)  # env-substituted numbers arrive as strings
    if tp is float and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    if tp is bool and isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if tp is str and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    errors.append(f"{path}: expected {getattr(tp, '__name__', tp)}, got {value!r}")
    return value


def build(cls: type[T], data: Any, path: str = "", errors: list[str] | None = None) -> T:
    """Build dataclass ``cls`` from plain data; collects errors (raises only at top level)."""
    top = errors is None
    errs: list[str] = [] if errors is None else errors
    if data is None:
        data = {}
    if not isinstance(data, dict):
        errs.append(f"{path or '<root>'}: expected a mapping, got {type(data).__name__}")
        data = {}
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key in data:
        if key not in names:
            errs.append(f"{path + '.' if path else ''}{key}: unknown key "
                        f"(known: {', '.join(sorted(names))})")
    kwargs = {k: _convert(hints[k], v, f"{path + '.' if path else ''}{k}", errs)
              for k, v in data.items() if k in names}
    obj: Any = None
    if not errs or not top:
        try:
            obj = cls(**kwargs)
        except FieldErrors as e:  # __post_init__ validation, field by field
            errs += [f"{path + '.' if path else ''}{k}: {v}" for k, v in e.problems.items()]
        except (TypeError, ValueError) as e:  # __post_init__ validation
            errs.append(f"{path or '<root>'}: {e}")
    if top and errs:
        raise ConfigError(errs)
    return typing.cast(T, obj)


def load_config(path: str | Path | None = None,
                environ: typing.Mapping[str, str] | None = None) -> Config:
    """Read a YAML file (or the embedded defaults when ``path`` is None)."""
    if path is None:
        return Config()
    env = os.environ if environ is None else environ
    errors: list[str] = []
    text = _substitute(Path(path).read_text(encoding="utf-8"), env, errors)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError([f"{path}: not valid YAML: {e}"]) from e
    cfg = build(Config, data, "", errors) if not errors else None
    if errors:
        raise ConfigError(errors)
    assert cfg is not None
    return cfg


def replace(cfg: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` for nested dotted paths: replace(cfg, **{"admin.endpoint": x})."""
    for dotted, value in changes.items():
        head, _, rest = dotted.partition(".")
        if rest:
            value = replace(getattr(cfg, head), **{rest: value})
        cfg = dataclasses.replace(cfg, **{head: value})
    return cfg
