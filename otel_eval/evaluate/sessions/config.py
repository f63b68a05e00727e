"""Configuration of session (conversation) evaluation: the ``sessions:`` section."""

from __future__ import annotations

from dataclasses import dataclass

from otel_eval.base.configcheck import validate

# ``--budget NAME=VALUE`` of a conversation -> (its SessionsConfig field, a whole number?).
# The budget finding's kind is the name.
SESSION_BUDGETS: dict[str, tuple[str, bool]] = {
    "session_turns": ("session_turns", True),
    "session_steps": ("session_steps", True),
    "session_tokens": ("session_tokens", True),
    "session_cost": ("session_cost_usd", False),
    "session_time": ("session_time_s", False),
}


@dataclass(frozen=True)
class SessionsConfig:
    # A session is open while its last turn is newer than this; after it with no new turn,
    # the conversation is complete (and judged as ended: an unanswered question or a pending
    # tool call in its last turn is a non-termination). Seconds, default 30 min.
    idle_timeout_s: float = 1800.0
    # How often the session completion job looks for sessions idle past idle_timeout_s (and
    # completes them: evaluated once, stored, counted). Seconds, default 10.
    check_interval_s: float = 10.0
    # Sessions completed per check at most (the rest wait for the next one). Count.
    max_completions_per_check: int = 1000
    # A session claimed by a process that died (kill -9 between claim and completion) is
    # taken over by another after this long; so is a completion's event that its process did
    # not deliver (a crash, or a stop while the collector was away). Seconds, default 300.
    claim_timeout_s: float = 300.0
    # Open sessions in the store at most; past it the job completes early the oldest (least
    # recently active) of the services holding the most open sessions (a service gives way
    # until it holds no more than the next: one opening new ids completes its own, not
    # another service's), counted in otel_eval_sessions_evicted_total{reason=
    # "max_open_sessions"}; a turn after that re-opens it. Count, default 100,000.
    max_open_sessions: int = 100_000
    # A session still open this long after its first turn (or its first turn since its last
    # completion) is completed as it stands, counted in otel_eval_sessions_evicted_total{reason=
    # "max_session_duration"}; a turn after that re-opens it. A conversation whose turns
    # never leave idle_timeout_s between them is evaluated at least this often. Seconds,
    # default 24 h.
    max_session_duration_s: float = 86400.0
    # Turns of one session read to evaluate it, at most (the newest ones, by when each turn
    # began); the turns past it are counted in the session's `counts.turns_cut`, not read.
    # Count.
    max_turns: int = 500
    # JSON of the turns read to evaluate one session, characters at most (the newest turns;
    # always at least one): a turn's object can be up to trajectory.max_result_bytes (4 MiB).
    # The turns past it are counted in `counts.turns_cut`. A page of GET /v1/sessions reads
    # at most this much of its open sessions' turns too (at least one session). Default 64 Mi.
    max_turns_chars: int = 64 * 1024 * 1024
    # The same call (same tool, same canonical arguments) made in at least this many turns
    # of one conversation is a session loop. Turns.
    loop_turns: int = 3
    # The user's request (a turn's last user message, whitespace and case folded)
    # repeated in at least this many turns is a `repeated_request` finding. Turns.
    repeated_request_turns: int = 2
    # Requests shorter than this are not compared ("yes", "ok", "thanks" repeat without the
    # agent failing). Characters; a wide one (Chinese, Japanese, Korean) counts two: it says
    # what two or three letters do.
    min_request_chars: int = 16
    # Two requests whose character-3-gram Jaccard similarity is at least this are the same
    # request reworded (`repeated_request` / `reworded_request`). 0.5, as the reworded tool
    # calls' rule (detectors.loop.reworded_similarity): for two texts of similar length two
    # thirds of each one's 3-grams shared, the same words with a third changed, added or
    # reordered; requests about different things share well under a fifth. 0..1.
    reworded_request_similarity: float = 0.5
    # Each request is compared with this many requests before it for a rewording (equal
    # requests are found at any distance): bounded work, and a user rewords what the agent
    # just failed to do. Turns.
    reworded_window: int = 4
    # Session budgets (a `budget` finding past one, its kind the `--budget` name; None, the
    # default, is unchecked). Turns per conversation (`--budget session_turns=N`). Count.
    session_turns: int | None = None
    # Steps over all turns, as the session's `counts.steps`: each turn's steps as `--budget
    # steps` counts them (top-level tool calls, a code action once) (`--budget
    # session_steps=N`). Count.
    session_steps: int | None = None
    # Input plus output tokens over all turns, the known ones (`--budget session_tokens=N`).
    # Tokens.
    session_tokens: int | None = None
    # Cost over all turns (each turn's usage.cost_usd; a turn of unknown cost leaves the
    # total unknown unless the known part alone is past the budget)
    # (`--budget session_cost=USD`). US dollars.
    session_cost_usd: float | None = None
    # Wall time from the first turn's start to the last turn's end: the user's time in the
    # conversation (`--budget session_time=S`). Seconds.
    session_time_s: float | None = None

    def __post_init__(self) -> None:
        validate(self, above={"check_interval_s": 0, "claim_timeout_s": 0,
                              "max_session_duration_s": 0},
                 finite=("check_interval_s", "claim_timeout_s", "max_session_duration_s"),
                 minimum={"max_completions_per_check": 1, "max_open_sessions": 1})
        validate(self, above={"idle_timeout_s": 0},
                 finite=("idle_timeout_s", "reworded_request_similarity", "session_cost_usd",
                         "session_time_s"),
                 minimum={"max_turns": 1, "max_turns_chars": 1, "loop_turns": 2,
                          "repeated_request_turns": 2, "min_request_chars": 0,
                          "reworded_request_similarity": 0, "reworded_window": 1,
                          "session_turns": 0, "session_steps": 0, "session_tokens": 0,
                          "session_cost_usd": 0, "session_time_s": 0},
                 maximum={"reworded_request_similarity": 1})
