"""Session budgets (turns, steps, tokens, cost, time: ``--budget session_*``) and the user
rewording the same request across turns, table-driven over turns as stored (v1 objects)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from conversations import call, scripted
from test_session_detectors import evaluated

from otel_eval.app.cli import build_parser, cmd_eval, config_from_args
from otel_eval.base.configcheck import FieldErrors
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.evaluate import evaluate_session

S = 10**9
START_S = 1_750_000_000  # the first turn's start (June 2025): 0 is an unknown start


def _turn(n: int, *, steps: int = 2, tokens: tuple[int | None, int | None] = (10, 5),
          cost: float | None = 0.01, start_s: float | None = None,
          duration_s: float | None = 1.0, text: str | None = None) -> dict[str, Any]:
    return {"trace_id": f"{n:032x}", "start_time_unix_nano":
            int((START_S + n * 60 if start_s is None else start_s) * S),
            "duration_s": duration_s,
            "input": text or f"a different question, number {n}", "output": "Done.",
            "counts": {"steps": steps}, "steps": [],
            "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1], "cost_usd": cost},
            "verdict": {"passed": True, "reasons": []}, "findings": []}


def _budgets(turns: list[dict[str, Any]], **config: Any) -> list[tuple[str, Any, Any, str]]:
    record = evaluate_session("s", turns, SessionsConfig(**config), "complete")
    return [(f["kind"], f["attributes"]["value"], f["attributes"]["limit"], f["trace_id"])
            for f in record["findings"] if f["detector"] == "budget"]


T = [_turn(n) for n in range(4)]  # 4 turns, 2 steps, 15 tokens, $0.01 each, a minute apart
BUDGETS: list[tuple[str, list[dict[str, Any]], dict[str, Any], list[tuple[str, Any, Any, int]]]] = [
    ("none set", T, {}, []),
    ("turns within", T, {"session_turns": 4}, []),
    ("turns past: on the first turn past", T, {"session_turns": 2},
     [("session_turns", 4, 2, 2)]),
    ("steps within", T, {"session_steps": 8}, []),
    ("steps past on the third turn", T, {"session_steps": 5}, [("session_steps", 8, 5, 2)]),
    ("tokens past on the second turn", T, {"session_tokens": 20},
     [("session_tokens", 60, 20, 1)]),
    ("tokens: a turn without counts adds none", [_turn(0, tokens=(None, None)), _turn(1)],
     {"session_tokens": 15}, []),
    ("cost within", T, {"session_cost_usd": 0.04}, []),
    ("cost past", T, {"session_cost_usd": 0.025}, [("session_cost", 0.04, 0.025, 2)]),
    ("unknown cost is no finding while the known part is within",
     [_turn(0, cost=None), _turn(1), _turn(2, cost=None)], {"session_cost_usd": 0.015}, []),
    ("the known part alone past the budget is a finding",
     [_turn(0, cost=None), _turn(1), _turn(2)], {"session_cost_usd": 0.015},
     [("session_cost", 0.02, 0.015, 2)]),
    ("time: first start to last end", T, {"session_time_s": 181}, []),
    ("time past: on the turn that ended past it", T, {"session_time_s": 150},
     [("session_time", 181.0, 150, 3)]),
    ("a turn of unknown time is left out", [_turn(0), _turn(1, duration_s=None)],
     {"session_time_s": 2}, []),
    ("a turn of unknown start (0) is left out, not a start in 1970",
     [_turn(0, start_s=0), _turn(1), _turn(2)], {"session_time_s": 150}, []),
    ("the known turns past it are still a finding",
     [_turn(0), _turn(1, start_s=0), _turn(3)], {"session_time_s": 150},
     [("session_time", 181.0, 150, 2)]),
]


@pytest.mark.parametrize(("name", "turns", "config", "expected"), BUDGETS,
                         ids=[b[0] for b in BUDGETS])
def test_session_budgets(name: str, turns: list[dict[str, Any]], config: dict[str, Any],
                         expected: list[tuple[str, Any, Any, int]]) -> None:
    found = _budgets(turns, **config)
    assert [(k, pytest.approx(v), lim) for k, v, lim, _ in found] == [
        (k, pytest.approx(v), lim) for k, v, lim, _ in expected]
    assert [t for *_, t in found] == [turns[n]["trace_id"] for *_, n in expected]


def test_tokens_past_with_a_turn_of_unknown_tokens_are_at_least_that() -> None:
    """A turn whose spans recorded no token count (usage null, not 0) leaves the total a
    lower bound: the finding says so, as an unknown cost does."""
    turns = [_turn(0, tokens=(None, None)), _turn(1), _turn(2)]
    record = evaluate_session("s", turns, SessionsConfig(session_tokens=20), "complete")
    [finding] = [f for f in record["findings"] if f["kind"] == "session_tokens"]
    assert finding["attributes"]["unknown_turns"] is True
    assert "tokens 30 at least in the conversation" in finding["message"]
    assert finding["trace_id"] == turns[2]["trace_id"]


def test_cost_past_with_a_partly_priced_turn_is_at_least_that() -> None:
    """A turn whose LLM call has no cost (a model the price list lacks) has the known part
    for its ``usage.cost_usd``: summed as the whole, the finding said "cost 0.03 USD in
    the conversation" for a cost higher than that. It says "at least", as for a turn of
    unknown cost."""
    partly = _turn(1)
    partly["steps"] = [{"index": 0, "span_id": "1", "kind": "llm", "model": "gpt-4o",
                        "cost_usd": 0.01},
                       {"index": 1, "span_id": "2", "kind": "llm", "model": "in-house-7b"}]
    turns = [_turn(0), partly, _turn(2)]
    record = evaluate_session("s", turns, SessionsConfig(session_cost_usd=0.025), "complete")
    [finding] = [f for f in record["findings"] if f["kind"] == "session_cost"]
    assert "cost 0.03 USD at least in the conversation" in finding["message"], finding
    assert finding["attributes"]["unknown_turns"] is True


def test_the_turns_budget_points_at_the_first_turn_past_it_when_only_the_newest_were_read(
        ) -> None:
    """10 turns, the newest 5 read (turns 6-10), a budget of 7: on turn 8 (it was on the
    last turn read whatever the budget); a budget of 3 is past before the turns read: on the
    first one read."""
    from otel_eval.evaluate.sessions.detectors import budget

    newest = [_turn(n) for n in range(5, 10)]
    [at_8] = budget(newest, SessionsConfig(session_turns=7), True, total=10)
    assert at_8["trace_id"] == newest[2]["trace_id"]
    [at_6] = budget(newest, SessionsConfig(session_turns=3), True, total=10)
    assert at_6["trace_id"] == newest[0]["trace_id"]


def test_budgets_fail_the_conversation_and_are_counted() -> None:
    record = evaluate_session("s", T, SessionsConfig(session_steps=1, session_time_s=1),
                              "complete")
    assert record["verdict"]["passed"] is False
    assert record["counts"]["findings"] == 2 and record["counts"]["steps"] == 8


@pytest.mark.parametrize(("given", "field", "value"), [
    ("session_turns=3", "session_turns", 3), ("session_steps=40", "session_steps", 40),
    ("session_tokens=20000", "session_tokens", 20000),
    ("session_cost=0.5", "session_cost_usd", 0.5), ("session_time=600", "session_time_s", 600.0),
])
def test_budget_flags_set_the_session_budgets(given: str, field: str, value: float) -> None:
    cfg = config_from_args(build_parser().parse_args(["eval", "x", "--budget", given,
                                                      "--budget", "steps=9"]))
    assert getattr(cfg.sessions, field) == value
    assert isinstance(getattr(cfg.sessions, field), type(value))
    assert cfg.detectors.budget_overrides == {"steps": 9.0}  # the trace budgets apart


@pytest.mark.parametrize("given", ["session_steps=2.5", "session_tokens=1e3.5",
                                   "session_cost=-1", "session_time=nan", "session_x=1"])
def test_bad_session_budget_flags_are_refused(given: str) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["eval", "x", "--budget", given])


def test_bad_session_budgets_in_the_config_name_their_field() -> None:
    with pytest.raises(FieldErrors) as e:
        SessionsConfig(session_cost_usd=float("inf"), session_steps=-1,
                       reworded_request_similarity=1.5)
    for field in ("session_cost_usd", "session_steps", "reworded_request_similarity"):
        assert field in str(e.value)


def test_budget_session_steps_offline_counts_every_step(tmp_path: Path) -> None:
    """Offline, the turns kept are slim; a session's steps are its turns' steps (each turn's
    top-level tool calls, what `--budget steps` counts), as the service's stored turns give."""
    turns = scripted("offline-steps", "gen_ai.conversation.id", [
        (f"a different question, number {n}",
         [call("lookup", {"n": n, "k": k}, f"c{n}{k}") for k in range(n + 1)]
         + [{"role": "assistant", "content": "Done."}])
        for n in range(3)])
    paths = []
    for n, (_, body) in enumerate(turns):
        paths.append(str(tmp_path / f"t{n}.json"))
        Path(paths[-1]).write_text(json.dumps(body))
    steps = sum(t["counts"]["steps"] for t in evaluated(turns))
    assert steps == 6  # 1 + 2 + 3 tool calls
    out = io.StringIO()
    assert cmd_eval(build_parser().parse_args(["eval", *paths, "--format", "jsonl", "--budget",
                                               f"session_steps={steps - 1}"]), out) == 0
    record = json.loads(out.getvalue().splitlines()[-1])
    assert record["counts"]["steps"] == steps
    assert [(f["kind"], f["attributes"]["value"]) for f in record["findings"]] == [
        ("session_steps", steps)]


_OTHER = ("Add two checked bags to my reservation", "What is my baggage allowance?",
          "Which meals are served on board?", "Is travel insurance refundable at all?")


_LOG = "error log line: connection refused at port 5432 on host db-1\n" * 10  # 600 chars


def _said(*requests: str) -> list[dict[str, Any]]:
    return [_turn(n, text=text) for n, text in enumerate(requests)]


REWORDED: list[tuple[str, list[dict[str, Any]], dict[str, Any], list[tuple[str, list[int]]]]] = [
    ("the same words again", _said("I want to cancel my flight to Boston",
                                   "i want to cancel  my flight to Boston!"), {},
     [("same_request", [1, 2])]),
    ("reworded", _said("I want to cancel my flight to Boston, please.",
                       "What is the weather like today in Paris?",
                       "Please, I want you to cancel my Boston flight"), {},
     [("reworded_request", [1, 3])]),
    ("reworded twice and repeated: one finding", _said(
        "Can you change my seat to a window seat please",
        "Could you change my seat to a window seat?",
        "Can you change my seat to a window seat please",
        "can you please change my seat to a window seat"), {},
     [("reworded_request", [1, 2, 3, 4])]),
    ("alike words, another booking code: a different request", _said(
        "please cancel my reservation ZFA04Y today", "please cancel my reservation XEWRD9 today"),
     {}, []),
    ("alike words, another date", _said("move my flight to May 5 please, thanks",
                                        "move my flight to May 6 please, thanks"), {}, []),
    # Chinese is written without spaces: the booking code, not the whole sentence, is the
    # word with a digit in it
    ("reworded in Chinese, the same booking code", _said(
        "请帮我取消订单ZFA04Y，我今天不需要这个预订了",  # noqa: RUF001
        "我今天不需要这个预订了，请帮我取消订单ZFA04Y"), {},  # noqa: RUF001
     [("reworded_request", [1, 2])]),
    ("alike Chinese words, another booking code: a different request", _said(
        "请帮我取消订单ZFA04Y，我今天不需要这个预订了",  # noqa: RUF001
        "请帮我取消订单XEWRD9，我今天不需要这个预订了"), {}, []),  # noqa: RUF001
    ("different requests", _said("I want to cancel my flight to Boston",
                                         "Add two checked bags to my reservation"), {}, []),
    ("short requests are not compared", _said("yes please", "yes, please!"), {}, []),
    ("a Chinese request of twelve characters is not short", _said(
        "我想取消飞往波士顿的航班", "我想取消飞往波士顿的航班"), {}, [("same_request", [1, 2])]),
    ("the same Chinese words again, a full stop added", _said(
        "我想取消飞往波士顿的航班。", "我想取消飞往波士顿的航班"), {},
     [("same_request", [1, 2])]),
    ("short Chinese requests are not compared", _said("好的谢谢", "好的谢谢"), {}, []),
    ("a rewording past the window is not seen", _said(
        "I want to cancel my flight to Boston", *_OTHER,
        "Please, I want you to cancel my Boston flight"), {"reworded_window": 4}, []),
    ("an equal request past the window still is", _said(
        "I want to cancel my flight to Boston", *_OTHER,
        "I want to cancel my flight to Boston"), {"reworded_window": 4},
     [("same_request", [1, 6])]),
    ("a stricter threshold", _said("I want to cancel my flight to Boston, please.",
                                   "Please, I want you to cancel my Boston flight"),
     {"reworded_request_similarity": 0.9}, []),
    # equal only when equal whole (each was cut to its first 500 characters: the same
    # request); a rewording is read in the first 500, as before, where a log both pasted
    # makes them alike: a limit of the rule, and a warning
    ("a pasted log, then different questions", _said(
        _LOG + "Why does the database refuse connections?",
        _LOG + "Please delete my account and all my data."), {},
     [("reworded_request", [1, 2])]),
    ("a pasted log, then the same question", _said(
        _LOG + "Why does the database refuse connections?",
        _LOG + "why does the database refuse connections"), {}, [("same_request", [1, 2])]),
    ("three turns asked for", _said("I want to cancel my flight to Boston",
                                    "I want to cancel my flight to Boston"),
     {"repeated_request_turns": 3}, []),
]


def _replied(*said: tuple[str, str]) -> list[dict[str, Any]]:
    """Turns of (the user's request, the agent's reply)."""
    return [{**_turn(n, text=text), "output": reply} for n, (text, reply) in enumerate(said)]


def _proposal(back: str, price: int) -> str:
    return (f"Here are the details: outbound HAT169, return {back}, total ${price}. "
            "Please confirm if you would like to proceed with these changes.")


# tau-bench airline record 94: the user confirmed one proposal, chose another return flight,
# and confirmed the new proposal; the two confirmations name nothing of their own
REWORDED += [
    ("two confirmations of two proposals: two requests", _replied(
        ("Can you book HAT169 out and HAT088 back?", _proposal("HAT088", 350)),
        ("Yes, please proceed with these changes.", "HAT088 is full. HAT212 is free."),
        ("Let's go with Flight HAT212 for the return.", _proposal("HAT212", 325)),
        ("Yes, please go ahead with these changes.", "Done.")), {}, []),
    ("the same confirmation of two proposals: two requests", _replied(
        ("Can you book HAT169 out and HAT088 back?", _proposal("HAT088", 350)),
        ("Yes, please proceed with these changes.", "HAT088 is full. HAT212 is free."),
        ("Let's go with Flight HAT212 for the return.", _proposal("HAT212", 325)),
        ("Yes, please proceed with these changes.", "Done.")), {}, []),
    ("two confirmations of one proposal made twice", _replied(
        ("Can you book HAT169 out and HAT088 back?", _proposal("HAT088", 350)),
        ("Yes, please proceed with these changes.", _proposal("HAT088", 350)),
        ("Yes, please go ahead with these changes.", "Done.")), {},
     [("reworded_request", [2, 3])]),
    ("a request naming its own booking code, whatever came before", _replied(
        ("please cancel my reservation ZFA04Y today", "Reservation ZFA04Y: $120 back."),
        ("please cancel my reservation ZFA04Y, today", "Done.")), {},
     [("reworded_request", [1, 2])]),
]


@pytest.mark.parametrize(("name", "turns", "config", "expected"), REWORDED,
                         ids=[r[0] for r in REWORDED])
def test_the_user_repeating_or_rewording_a_request(
        name: str, turns: list[dict[str, Any]], config: dict[str, Any],
        expected: list[tuple[str, list[int]]]) -> None:
    record = evaluate_session("s", turns, SessionsConfig(**config), "complete")
    found = [f for f in record["findings"] if f["detector"] == "repeated_request"]
    assert [(f["kind"], f["attributes"]["turns"]) for f in found] == expected
    for f in found:  # on the last turn of the group, a warning: the verdict still passes
        assert f["trace_id"] == turns[f["attributes"]["turns"][-1] - 1]["trace_id"]
        assert f["severity"] == "warning"
    assert record["verdict"]["passed"] is True


def test_a_session_total_past_the_largest_float_is_strict_json() -> None:
    """Each turn's cost is a finite number (a span may record any), but their sum may not be:
    two turns of 1e308 USD made the session_cost finding's value inf, and the record went out
    as JSON with a bare ``Infinity`` token (``GET /v1/sessions``, ``eval --format jsonl``, the
    stored record), which strict parsers (JavaScript's, Go's, Jackson) refuse: the whole page
    of sessions unreadable. Now the record holds only finite numbers, a non-finite one as the
    string the protobuf JSON mapping uses, as the trace results do (``base.jsontext``)."""
    turns = [_turn(0, cost=1e308), _turn(1, cost=1e308)]
    record = evaluate_session("s", turns, SessionsConfig(session_cost_usd=1.0), "complete")
    text = json.dumps(record, allow_nan=False)  # raised ValueError on inf
    (finding,) = [f for f in json.loads(text)["findings"] if f["kind"] == "session_cost"]
    assert finding["attributes"]["value"] == "Infinity"
