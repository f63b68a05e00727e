"""The results API's query: filters and a cursor over stored evaluations, validated once.

``GET /v1/evaluations`` and the Python API (``Store.query``) take the same ``EvaluationQuery``:

    service, agent                    the runs the metrics count under that label value
                                      (``label_condition``): equal to the stored value, or
                                      "unknown" for none, a name's first 128 characters for
                                      a longer one, a name with controls for their escapes
                                      (``\\x1b``); "_other" filters nothing
    task_id, status                   equal to the stored value
    passed                            true | false (the verdict; traces without one never match)
    detector                          a finding by this detector ("loop"), or of this kind
                                      ("loop:stagnation"), or of one of these kinds
                                      ("budget:steps_exceeded,cost_usd_exceeded", at most
                                      ``MAX_KINDS``: what a metric counts, its alert's link)
    since, until                      evaluation time, Unix seconds or RFC 3339; since <= t < until
    window                            with ``until``: the window before it, a Prometheus
                                      duration ("15m", "1h", "1h30m"), so since = until - window
                                      (the later of the two with ``since``): what a dashboard
                                      point over ``[$window]`` counts, up to its time
    counted_since, counted_until      the window the run metrics count the run in, as the
                                      alerts' and the dashboard's links give it: when it was
                                      first evaluated (``first_evaluated_at_ns``; a
                                      re-evaluation after late spans counts only as
                                      superseded, and moves the evaluation time), Unix seconds
                                      or RFC 3339; since <= t < until. A run re-evaluated
                                      before migration 19 is in no such window; one an
                                      earlier release's worker stored at revision 0 (a
                                      rolling upgrade) is counted at that evaluation
    counted_window                    with ``counted_until``: the window before it, as
                                      ``window``
    limit                             1..1000, default 20
    cursor                            ``next_cursor`` of the previous page

Pages are newest first (evaluation time, then trace id), and hold at most ``max_bytes`` of
JSON as the API sends it, non-ASCII escaped (``MAX_PAGE_BYTES``, 16 MiB; always at least one
evaluation): a page cut by its
size ends early, with its cursor. The cursor is the position after the last row returned
(keyset pagination: rows stored meanwhile do not shift later pages). A bad
parameter raises ``QueryError`` naming it (the API answers 400 with the message).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import ROUND_CEILING, Decimal
from typing import Any

from otel_eval.base.configcheck import is_ascii_digits
from otel_eval.base.model import is_trace_id
from otel_eval.base.printable import QUOTED_CHARS, unescaped

STATUSES = ("complete", "incomplete", "truncated")


def first_evaluated(row: str = "") -> str:
    """When a run was first evaluated (what ``counted_since``/``counted_until`` select on), of
    the row named ``row`` (a table alias with its dot, or none): the column, or for a run
    stored at revision 0 without it, that evaluation (a worker of the release before migration
    19, still running after a new one migrated the fleet's store, a rolling upgrade, stores
    runs without setting it; one re-evaluated before migration 19 stays unknown)."""
    return (f"COALESCE({row}first_evaluated_at_ns, "
            f"CASE WHEN {row}revision = 0 THEN {row}evaluated_at_ns END)")
MAX_LIMIT = 1000
# Kinds of one ``detector`` filter (``detector:kind,kind``), at most: the budget detector's
# overruns, seven, are the most a metric counts
MAX_KINDS = 16
# Stored JSON of one page, bytes, at most (past its first evaluation): 4 results of the
# largest size stored (trajectory.max_result_bytes, 4 MiB), or 1,000 of 16 kB.
MAX_PAGE_BYTES = 16 * 1024 * 1024
_TEXT = ("service", "agent", "task_id", "status", "detector")
PARAMETERS = (*_TEXT, "passed", "since", "until", "window", "counted_since", "counted_until",
              "counted_window", "limit", "cursor")


# How the metrics label a run's service and agent (``telemetry.labels``: missing or "" is
# "unknown", a name is cut to 128 characters and its controls escaped, pairs past
# admin.metrics_max_pairs are "_other"):
# the store's layer cannot import telemetry's, the test of label_condition ties them.
UNKNOWN_LABEL = "unknown"
OTHER_LABEL = "_other"
LABEL_CHARS = 128


def in_window(expr: str, since_ns: int | None, until_ns: int | None,
              mark: str) -> tuple[list[str], list[int]]:
    """``expr`` within [``since_ns``, ``until_ns``) (either bound may be None): the
    conditions and their arguments, in order."""
    conditions: list[str] = []
    args: list[int] = []
    if since_ns is not None:
        conditions.append(f"{expr} >= {mark}")
        args.append(since_ns)
    if until_ns is not None:
        conditions.append(f"{expr} < {mark}")
        args.append(until_ns)
    return conditions, args


def _named(value: str) -> list[str]:
    """The names a label ``value`` stands for: itself, and with ``printable``'s escapes
    turned back when it holds any (the metrics escape a name's control characters,
    ``telemetry.labels.label_text``; a name may also hold the escape's characters)."""
    raw = unescaped(value)
    return [value] if raw == value else [value, raw]


def label_condition(column: str, value: str, mark: str) -> tuple[str | None, list[str]]:
    """(SQL condition, its arguments) selecting the rows whose ``column`` (service or agent)
    the metrics label ``value``, so a dashboard's or an alert's link lists the runs behind
    its series: "unknown" is also a missing or empty name, a value of 128 characters also
    every longer name it begins, a value with escapes (``\\x1b``) also the name holding the
    controls they stand for; "_other" (the pairs past the label budget, known only to the
    process that counted them) is no condition (None)."""
    if value == OTHER_LABEL:
        return None, []
    if value == UNKNOWN_LABEL:
        return f"({column} IS NULL OR {column} = '' OR {column} = {mark})", [value]
    names = _named(value)
    conditions = [f"SUBSTR({column}, 1, {LABEL_CHARS}) = {mark}" if len(name) == LABEL_CHARS
                  else f"{column} = {mark}" for name in names]
    return (conditions[0] if len(names) == 1 else f"({' OR '.join(conditions)})"), names


def label_matches(name: str | None, value: str) -> bool:
    """``label_condition`` over a value read, not a column: whether the metrics label a
    ``name`` ``value``."""
    if value == OTHER_LABEL:
        return True
    if value == UNKNOWN_LABEL:
        return not name or name == value
    return any((name or "")[:LABEL_CHARS] == n if len(n) == LABEL_CHARS else name == n
               for n in _named(value))


class QueryError(ValueError):
    """A query parameter that cannot be used; ``param`` names it: its first
    ``QUOTED_CHARS`` characters (an unknown one is the client's text, up to the whole query
    string, and the API's 400 sends it back twice)."""

    def __init__(self, param: str, message: str) -> None:
        param = param[:QUOTED_CHARS]
        super().__init__(f"{param}: {message}")
        self.param = param


@dataclass(frozen=True)
class Cursor:
    """Where the next page starts: after this row of the newest-first order."""

    evaluated_at_ns: int
    trace_id: str

    def encode(self) -> str:
        return encode_cursor(self.evaluated_at_ns, self.trace_id)

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """The cursor ``encode`` wrote; anything else (a forged number past int64, which the
        store cannot bind, a trace id that is not 32 hex digits) is a ``QueryError``."""
        at, trace_id = decode_cursor(text, is_trace_id)
        return cls(at, trace_id)


def encode_cursor(at_ns: int, key: str) -> str:
    """A page cursor: ``at_ns:key``, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(f"{at_ns}:{key}".encode()).decode().rstrip("=")


def decode_cursor(text: str, key_ok: Callable[[str], bool]) -> tuple[int, str]:
    """(at_ns, key) of a cursor ``encode_cursor`` wrote; anything else (not base64, a number
    past int64, which the store cannot bind, a key ``key_ok`` refuses) is a ``QueryError``."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raw = ""
    at, _, key = raw.partition(":")
    if not (is_ascii_digits(at) and len(at) <= 19 and int(at) < 2**63 and key_ok(key)):
        raise QueryError("cursor", "not a cursor returned by this API")
    return int(at), key


@dataclass(frozen=True)
class EvaluationQuery:
    # Equality filters on the stored columns; None = any.
    service: str | None = None
    agent: str | None = None
    task_id: str | None = None
    status: str | None = None
    # The verdict; None = any (including traces without a verdict).
    passed: bool | None = None
    # "detector", "detector:kind" or "detector:kind,kind" of at least one finding; None = any.
    detector: str | None = None
    # Evaluation time bounds, Unix nanoseconds: since <= t < until; None = open.
    since_ns: int | None = None
    until_ns: int | None = None
    # When the run was first evaluated, Unix nanoseconds: since <= t < until (the window the
    # run metrics counted it in; None = open).
    counted_since_ns: int | None = None
    counted_until_ns: int | None = None
    # Page size, 1..1000.
    limit: int = 20
    # Position after the previous page's last row; None = the newest.
    cursor: Cursor | None = None
    # JSON of the page as the API sends it (non-ASCII escaped), bytes, at most (it ends
    # early, with its cursor); not a URL parameter.
    max_bytes: int = MAX_PAGE_BYTES

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= MAX_LIMIT:
            raise QueryError("limit", f"must be an integer in 1..{MAX_LIMIT}")
        if self.status is not None and self.status not in STATUSES:
            raise QueryError("status", f"must be one of {', '.join(STATUSES)}")
        if self.detector is not None:
            check_detector(self.detector)

    @classmethod
    def from_params(cls, params: Mapping[str, Sequence[str]]) -> EvaluationQuery:
        """From URL query parameters (``urllib.parse.parse_qs`` output)."""
        values = single_values(params, PARAMETERS)
        kwargs = filter_values(values, _TEXT)
        time_bounds(values, kwargs)
        windowed(values, kwargs, "window", "since", "until")
        windowed(values, kwargs, "counted_window", "counted_since", "counted_until")
        page_limit(values, kwargs, MAX_LIMIT)
        if values.get("cursor"):
            kwargs["cursor"] = Cursor.decode(values["cursor"])
        return cls(**kwargs)


def detector_kinds(detector: str) -> tuple[str, list[str]]:
    """(detector, kinds) of a ``detector`` filter: no kind, one, or several comma-separated
    (any of them)."""
    name, _, kinds = detector.partition(":")
    return name, kinds.split(",") if kinds else []


def check_detector(detector: str) -> None:
    """``QueryError`` unless ``detector`` is a filter ``detector_kinds`` reads: ``detector``,
    ``detector:kind`` or ``detector:kind,kind`` (at most ``MAX_KINDS``), the one shape of
    ``/v1/evaluations`` and ``/v1/sessions``. "loop:" (read as any kind), ":kind" and
    "loop:a,,b" (no detector's, no kind's: an empty page) are typos."""
    name, kinds = detector_kinds(detector)
    if not name or detector.endswith(":") or len(kinds) > MAX_KINDS or "" in kinds:
        raise QueryError("detector", "expected detector, detector:kind or "
                                     f"detector:kind,kind (at most {MAX_KINDS} kinds)")


def single_values(params: Mapping[str, Sequence[str]], known: Sequence[str]) -> dict[str, str]:
    """The value of each of ``params`` (``urllib.parse.parse_qs`` output); ``QueryError`` for
    a parameter not ``known`` or given more than once."""
    values: dict[str, str] = {}
    for name, given in params.items():
        if name not in known:
            raise QueryError(name, f"unknown parameter (known: {', '.join(known)})")
        if len(given) != 1:
            raise QueryError(name, "given more than once")
        values[name] = given[0]
    return values


def filter_values(values: Mapping[str, str], text: Sequence[str]) -> dict[str, Any]:
    """The keyword arguments of the ``text`` parameters in ``values`` ("": None) and of
    ``passed`` (true or false)."""
    kwargs: dict[str, Any] = {k: values[k] or None for k in text if k in values}
    if "passed" in values:
        if values["passed"].lower() not in ("true", "false"):
            raise QueryError("passed", "must be true or false")
        kwargs["passed"] = values["passed"].lower() == "true"
    return kwargs


def time_bounds(values: Mapping[str, str], kwargs: dict[str, Any]) -> None:
    """The ``since``, ``until``, ``counted_since`` and ``counted_until`` of ``values`` into
    ``kwargs`` as Unix ns (``<name>_ns``; ``parse_time``)."""
    for name in ("since", "until", "counted_since", "counted_until"):
        if name in values:
            kwargs[f"{name}_ns"] = parse_time(name, values[name])


def page_limit(values: Mapping[str, str], kwargs: dict[str, Any], most: int) -> None:
    """The ``limit`` of ``values`` into ``kwargs``: digits, checked against 1..``most`` by
    the query built of them."""
    if "limit" in values:
        if not is_ascii_digits(values["limit"]) or len(values["limit"]) > 4:
            raise QueryError("limit", f"must be an integer in 1..{most}")
        kwargs["limit"] = int(values["limit"])


def parse_time(param: str, text: str) -> int:
    """Unix seconds ("1733011200", "1733011200.5") or RFC 3339 with an offset, as Unix ns,
    exactly: rows are stored at whole nanoseconds, so a bound between two is taken up to the
    next (``since`` <= t and t < ``until`` read the same of every row as the bound itself)."""
    try:
        seconds = Decimal(text)
    except ArithmeticError:  # not a number
        seconds = Decimal("NaN")
    if seconds.is_finite():
        fraction = Decimal(0)
    else:  # nan, inf, or not a number: a time
        seconds, fraction = _rfc3339(param, text)
    # compared before any arithmetic: an exponent of a million digits is no work here
    ns = int((seconds + fraction).scaleb(9).to_integral_value(rounding=ROUND_CEILING)) \
        if 0 <= seconds < _MAX_SECONDS else -1
    if not 0 <= ns < 2**63:
        raise QueryError(param, "out of range")
    return ns


# A Prometheus duration, as the dashboard's $window holds one: whole units, largest first
_DURATION = re.compile(r"(?:[0-9]{1,9}[wdhms]){1,5}")
_DURATION_PART = re.compile(r"([0-9]+)([wdhms])")
_UNIT_S = {"w": 604_800, "d": 86_400, "h": 3_600, "m": 60, "s": 1}


def windowed(values: Mapping[str, str], kwargs: dict[str, Any], window: str, since: str,
             until: str) -> None:
    """The ``window`` parameter of ``values`` into ``kwargs``: ``since``'s bound becomes the
    window's start before ``until``'s (the later of the two when both are given), as a
    dashboard's link gives the window a point counts (``${__value.time:date:seconds}``,
    ``${window}``): Grafana has no arithmetic on its variables."""
    if window not in values:
        return
    text = values[window]
    if len(text) > 50 or _DURATION.fullmatch(text) is None:
        raise QueryError(window, "expected a duration (15m, 1h, 6h, 24h, 1d, 1h30m)")
    span_ns = sum(int(n) * _UNIT_S[u] for n, u in _DURATION_PART.findall(text)) * 10**9
    if span_ns <= 0:
        raise QueryError(window, "must be longer than 0s")
    end = kwargs.get(f"{until}_ns")
    if end is None:
        raise QueryError(window, f"needs {until} (the window's end)")
    kwargs[f"{since}_ns"] = max(end - span_ns, kwargs.get(f"{since}_ns") or 0)


_MAX_SECONDS = Decimal(2**63).scaleb(-9)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# the seconds' fraction, read apart: datetime keeps 6 digits of it
_FRACTION = re.compile(r"(\d\d:\d\d:\d\d)[.,](\d+)")


def _rfc3339(param: str, text: str) -> tuple[Decimal, Decimal]:
    """(whole seconds since the epoch, the fraction) of an RFC 3339 time with an offset."""
    found = _FRACTION.search(text)
    fraction = Decimal(0)
    if found is not None:
        fraction = Decimal("0." + found.group(2)[:_FRACTION_DIGITS])
        text = text[:found.end(1)] + text[found.end(2):]
    try:
        when = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise QueryError(param, "expected Unix seconds or an RFC 3339 time "
                                "(2026-12-01T09:00:00Z)") from None
    if when.tzinfo is None:
        raise QueryError(param, "an RFC 3339 time needs an offset (Z or +01:00)") from None
    since = when - _EPOCH
    return Decimal(since.days * 86_400 + since.seconds), fraction


_FRACTION_DIGITS = 30  # past a nanosecond: enough to take a bound up to the next one


@dataclass
class Page:
    """One page of results: ``{"evaluations": [...], "next_cursor": ... | null}``."""

    evaluations: list[dict[str, Any]] = field(default_factory=list)
    next_cursor: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"evaluations": self.evaluations, "next_cursor": self.next_cursor}
