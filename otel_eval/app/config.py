"""Configuration: one frozen dataclass per stage, loaded and validated in one function.

YAML files may use ``${VAR}`` / ``${VAR:-default}`` environment substitution. Unknown keys
are rejected and every error is reported at once with its path (``assembly.grace_s: ...``).
A section or a mapping of names given null (its keys commented out) is read as absent: its
defaults; a section given in part keeps its field's own defaults for the rest; a list or value
given null is an error unless null is its default. Several files are read in order, each laid
over the ones before it. Constructors elsewhere never read ``os.environ``: only
``load_config`` does, for substitution.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from otel_eval.app.admin_config import AdminConfig
from otel_eval.app.lifecycle import ServiceConfig
from otel_eval.assemble.config import AssemblyConfig
from otel_eval.base.configcheck import (
    ConfigError,
    FieldErrors,
    StartupError,
    parse_endpoint,
)
from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.evaluate.config import EvaluationConfig, TrajectoryConfig
from otel_eval.evaluate.detectors.config import DetectorsConfig
from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.predict.config import PredictionConfig
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.outputs.config import ExportConfig
from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.receive.config import ReceiverConfig
from otel_eval.receive.security import TlsServerConfig
from otel_eval.store.config import StoreConfig

__all__ = [
    "AdminConfig", "AssemblyConfig", "Config", "ConfigError", "DetectorsConfig",
    "EvaluationConfig", "ExportConfig", "IssuesConfig", "JudgeConfig", "KafkaConfig",
    "PredictionConfig", "ReceiverConfig", "ServiceConfig", "SessionsConfig", "StoreConfig",
    "TlsServerConfig",
    "TrajectoryConfig",
    "build", "check_exposure", "load_config", "parse_endpoint",
]


T = TypeVar("T")
log = logging.getLogger(__name__)


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
    # The learned success predictor (on, with the model shipped in the package).
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
    # Conversations (sessions): when one is complete, and the detectors across its turns.
    sessions: SessionsConfig = field(default_factory=SessionsConfig)
    # The serve process itself: how long it has to stop.
    service: ServiceConfig = field(default_factory=ServiceConfig)


def check_exposure(config: Config) -> None:
    """What ``serve`` checks of the whole configuration before it listens (the loader cannot:
    the flags come after the file, and ``eval`` listens on nothing): every listener reachable
    beyond this host without TLS and tokens is refused with its path (``ConfigError``),
    unless its section says ``allow_insecure_non_loopback: true``; then it is a warning."""
    rc, ac = config.receiver, config.admin
    errors = [*rc.exposure_problems(), *ac.exposure_problems()]
    if errors:
        raise ConfigError(errors)
    if rc.exposed_insecurely() or ac.exposed_insecurely():
        log.warning("a listener is reachable beyond this host without TLS or authentication "
                    "(allow_insecure_non_loopback); restrict it at the network level")


def named_agents(config: Config) -> tuple[str, ...]:
    """The agents the configuration names (``detectors.agents``'s and
    ``judge.sampling.rate_by_agent``'s keys): their (service, agent) pairs are admitted to the
    per-trace metrics outside ``admin.metrics_max_pairs`` (``telemetry.labels.Pairs``), so no
    sender of junk names can put an agent someone configured under ``_other``."""
    return tuple(sorted({*config.detectors.agents, *config.judge.sampling.rate_by_agent}))


_INT = re.compile(r"-?[0-9]{1,30}")  # a count or a number of seconds, as text
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _substitute(text: str, environ: typing.Mapping[str, str], errors: list[str]) -> str:
    def repl(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if default is not None and "${" in default:
            errors.append(f"${{{name}:-...}}: a default is text, not another ${{...}}")
            return ""
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        errors.append(f"environment variable {name} is not set (use ${{{name}:-default}})")
        return ""

    return _ENV.sub(repl, text)


def _substituted(data: Any, environ: typing.Mapping[str, str], errors: list[str]) -> Any:
    """``data`` parsed, each string value with its ``${VAR}`` replaced, the variable's text
    as it is (read after the YAML: "0123" stays "0123", "a #b" stays whole; comments and keys
    are not read). A key holding a ``${VAR}`` is an error with its path: files of earlier
    versions (which replaced it in the raw text) keyed per-agent sections so, and the literal
    name matches no agent. A value YAML shares (an alias) is walked once; one inside its own
    anchor (``a: &a [*a]``) is an error with its path, walked no further (endless)."""
    done: dict[int, Any] = {}
    inside: set[int] = set()  # the mappings and lists being walked: an alias of one loops

    def walk(value: Any, path: str) -> Any:
        if isinstance(value, str):
            return _substitute(value, environ, errors) if "${" in value else value
        if not isinstance(value, dict | list):
            return value
        if id(value) in inside:
            errors.append(f"{path[:-1] or '(top)'}: refers to itself (a YAML alias inside its "
                          "own anchor)")
            return None
        if id(value) not in done:
            inside.add(id(value))
            if isinstance(value, dict):
                errors.extend(f"{path}{k}: ${{...}} is not replaced in a key (only in values)"
                              for k in value if isinstance(k, str) and _ENV.search(k))
            done[id(value)] = ({k: walk(v, f"{path}{k}.") for k, v in value.items()}
                               if isinstance(value, dict)
                               else [walk(v, f"{path[:-1]}[{i}].") for i, v in enumerate(value)])
            inside.discard(id(value))
        return done[id(value)]

    return walk(data, "")


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (the last one
    silently won: a second ``assembly:`` section dropped the first). A merge key
    (``<<: *anchor``) is PyYAML's to flatten: its keys yield to the mapping's own."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # no value of its own to build
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool):
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} given twice", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: Any) -> Any:
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # past Python's digit limit: the text, which its field refuses
            return self.construct_scalar(node)


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


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
    if tp is float and isinstance(value, int | float | str) and not isinstance(value, bool):
        return _float(value, path, errors)
    if tp in (int, str, bool) and type(value) is tp:
        return value
    if tp is int and isinstance(value, str) and _INT.fullmatch(value.strip()):
        return int(value)  # env-substituted numbers arrive as strings
    if tp is bool and isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if tp is str and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    errors.append(f"{path}: expected {getattr(tp, '__name__', tp)}, got {value!r:.80}")
    return value


def _float(value: int | float | str, path: str, errors: list[str]) -> Any:
    """A float setting's number (env-substituted ones, and YAML 1.1's ``1e400``, arrive as
    text). One that is not finite is refused here, for every float setting at once: ``inf``,
    ``nan``, and numbers past a float's range (``1e400``, 400 digits), which its bounds
    (``>= 0``) let through as infinity, or an int's ``float`` raised out of the loader."""
    try:
        number = float(value)
    except OverflowError:  # an int past a float's range
        number = math.inf
    except ValueError:
        errors.append(f"{path}: expected float, got {value!r:.80}")
        return value
    if not math.isfinite(number):
        errors.append(f"{path}: must be a finite number, got {value!r:.80}")
    return number  # not finite: its section's own checks skip it (``build``: told once)


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
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    names = set(fields)
    for key in data:
        if key not in names:
            errs.append(f"{path + '.' if path else ''}{key}: unknown key "
                        f"(known: {', '.join(sorted(names))})")
    data = _over_defaults(data, fields, hints)
    before = len(errs)
    kwargs = {k: _convert(hints[k], v, f"{path + '.' if path else ''}{k}", errs)
              for k, v in data.items() if k in names}
    obj: Any = None
    if not errs or not top:
        try:
            obj = cls(**kwargs)
        except FieldErrors as e:  # __post_init__ validation, field by field, each setting
            told = {err.split(": ", 1)[0] for err in errs}  # once (its value was refused)
            errs += [line for k, v in e.problems.items()
                     if (line := f"{path + '.' if path else ''}{k}: {v}").split(": ", 1)[0]
                     not in told]
        except Exception as e:  # __post_init__ validation, or its checks given a value not
            # converted (a list for a mapping, None for a section that failed its own): that
            # value is reported with its path already
            if len(errs) > before:
                pass
            elif isinstance(e, TypeError | ValueError):
                errs.append(f"{path or '<root>'}: {e}")
            else:
                raise
    if top and errs:
        raise ConfigError(errs)
    return typing.cast(T, obj)


def _is_section(tp: Any) -> bool:
    """A key whose value is a section (a dataclass) or a mapping of names to values."""
    return dataclasses.is_dataclass(tp) or typing.get_origin(tp) is dict


def _over_defaults(data: dict[str, Any], fields: dict[str, dataclasses.Field[Any]],
                   hints: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each null section or mapping left out (``assembly:`` with its keys
    commented out: as if absent, the defaults), and each section laid over the field's own
    default (admin.limits keeps its reserved_connections: 16, not HttpLimits()'s 0)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        tp = hints.get(key)
        if value is None and _is_section(tp):
            continue
        if isinstance(value, dict) and dataclasses.is_dataclass(tp):
            f = fields[key]
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING \
                else f.default
            if dataclasses.is_dataclass(default) and not isinstance(default, type):
                value = _merged(dataclasses.asdict(default), value)
        out[key] = value
    return out


def load_config(path: str | Path | typing.Sequence[str | Path] | None = None,
                environ: typing.Mapping[str, str] | None = None) -> Config:
    """Read a YAML file (or the embedded defaults when ``path`` is None). Several files are
    read in order, each over the ones before it: a mapping merges key by key, any other value
    (a list, a scalar, ``""``) replaces; a key a later file leaves out keeps the earlier
    file's value (the image's endpoints under the user's file: ``--config`` given twice)."""
    paths = [] if path is None else [path] if isinstance(path, str | Path) else list(path)
    if not paths:
        return Config()
    env = os.environ if environ is None else environ
    errors: list[str] = []
    data: dict[str, Any] = {}
    for one in paths:
        layer = _substituted(_read(one), env, errors)
        if layer is not None and not isinstance(layer, dict):
            errors.append(f"{one}: expected a mapping, got {type(layer).__name__}")
            continue
        data = _merged(data, layer or {})
    cfg = build(Config, data, "", errors) if not errors else None
    if errors:
        raise ConfigError(errors)
    assert cfg is not None
    return cfg


def _read(path: str | Path) -> Any:
    """One configuration file's YAML, parsed (a key given twice refused)."""
    try:
        raw = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise StartupError(f"config file {path}: {getattr(e, 'strerror', None) or e}") from None
    try:
        return yaml.load(raw, Loader=_Loader)  # a SafeLoader (its subclass)
    except yaml.YAMLError as e:
        raise ConfigError([f"{path}: not valid YAML: {_yaml_problem(e)}"]) from None
    except ValueError as e:  # an integer past Python's digit limit
        raise ConfigError([f"{path}: {e}"]) from e
    except RecursionError:  # the composer's and the constructor's recursion
        raise ConfigError([f"{path}: not valid YAML: nested too deep"]) from None


def _yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's error as one line: where (line, column: the file is named before it) and
    what, never the file's text (its own message quotes the line, which may hold a token)."""
    if not isinstance(e, yaml.MarkedYAMLError):
        return str(e).splitlines()[0] if str(e) else type(e).__name__
    mark, context_mark = e.problem_mark or e.context_mark, e.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    problem = e.problem or e.context or "syntax error"
    context = ""
    if e.problem and e.context:
        place = (f" from line {context_mark.line + 1}, column {context_mark.column + 1}"
                 if context_mark and context_mark is not mark else "")
        context = f" ({e.context}{place})"
    return " ".join(f"{where}{problem}{context}".split())


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` laid on ``base``: mappings merge key by key, other values replace."""
    out = dict(base)
    for key, value in over.items():
        if value is None and isinstance(out.get(key), dict):
            continue  # a section with nothing under it: the earlier file's stays
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def replace(cfg: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` for nested dotted paths: replace(cfg, **{"admin.endpoint": x})."""
    for dotted, value in changes.items():
        head, _, rest = dotted.partition(".")
        if rest:
            value = replace(getattr(cfg, head), **{rest: value})
        cfg = dataclasses.replace(cfg, **{head: value})
    return cfg
