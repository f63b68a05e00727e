"""Loop rule (f), reworded repeats: near-duplicate calls of one tool that brought nothing new."""

from __future__ import annotations

import json

import pytest
from detector_factory import bash, kinds, tool, traj

from otel_eval.base.steps import Step
from otel_eval.evaluate.detectors import loop
from otel_eval.evaluate.detectors.calls import Context
from otel_eval.evaluate.detectors.config import DetectorsConfig, LoopConfig
from otel_eval.evaluate.detectors.reworded import MAX_ARGUMENT_CHARS, request, trigrams

PAGE = "Address: google: {q}\nA Google search for '{q}' found 0 results.\nNo results found."
NEW_RESULTS = ["1. [Stargate SG-1 Teal'c quotes](https://example.org/tealc) fan wiki",
               "1. [Episode transcript, season 4](https://tv.example.net/sg1/s04) full text",
               "1. [Video 1htKBjuUWec on YouTube](https://youtube.example/v) 2:13 clip"]
OTHER = ["population of Paris in 2020", "boiling point of ethanol at sea level",
         "author of the 1990 Odyssey translation", "tallest mountain in the Alps",
         "speed of sound in water", "capital city of Australia"]


def search(query: str, result: str | None = None) -> Step:
    return tool("web_search", {"query": query}, PAGE.format(q=query) if result is None
                else result)


VIDEO = ["youtube video 1htKBjuUWec transcript teal'c isn't that hot",
         "transcript of youtube video 1htKBjuUWec teal'c isn't that hot",
         "1htKBjuUWec youtube transcript teal'c response isn't that hot",
         "teal'c isn't that hot youtube 1htKBjuUWec video transcript"]

ZH_PAGE = "地址：谷歌：{q}\n谷歌搜索“{q}”找到0个结果。\n未找到结果。"  # noqa: RUF001
ZH_VIDEO = ["油管视频1htKBjuUWec的字幕里蒂尔克说那不热吗",
            "油管视频1htKBjuUWec字幕中蒂尔克说那不热吗",
            "蒂尔克说那不热吗 油管视频1htKBjuUWec的字幕"]
ZH_OTHER = ["巴黎2020年的人口是多少", "乙醇在海平面的沸点是多少", "1990年奥德赛译本的译者是谁",
            "阿尔卑斯山最高的山峰是哪座", "声音在水中的传播速度是多少", "澳大利亚的首都是哪个城市"]

CASES: list[tuple[str, list[Step], list[str]]] = [
    ("three reworded searches, each with nothing found",
     [search(q) for q in VIDEO[:3]], ["loop/reworded_repeat"]),
    ("two reworded searches: one retry is not a loop",
     [search(q) for q in VIDEO[:2]], []),
    ("reworded searches whose results are new each time",
     [search(q, r) for q, r in zip(VIDEO, NEW_RESULTS, strict=False)], []),
    ("different questions are not rewordings", [search(q) for q in OTHER], []),
    ("identical calls are rules (a)/(b), not (f)",
     [search(VIDEO[0]), search(VIDEO[0]), search(VIDEO[0])], ["loop/repeated_call"]),
    ("failed calls brought nothing new",
     [tool("inspect_file_as_text", {"file_path": "a.pdf", "question": q}, None,
           error="could not open") for q in VIDEO[:3]], ["loop/reworded_repeat"]),
    ("a changed identifier is a different request",
     [tool("inspect_file_as_text", {"file_path": f"{i}.pdf", "question": q}, "")
      for i, q in enumerate(VIDEO[:3])], []),
    ("a state change between: the question may rightly be asked again",
     [search(VIDEO[0]), tool("write_file", {"path": "notes.md", "text": "x"}),
      search(VIDEO[1]), tool("write_file", {"path": "notes.md", "text": "y"}),
      search(VIDEO[2])], []),
    ("read-only calls between do not break the chain",
     [search(VIDEO[0]), tool("visit_page", {"url": "u1"}, "page"), search(VIDEO[1]),
      tool("visit_page", {"url": "u2"}, "page"), search(VIDEO[2])],
     ["loop/reworded_repeat"]),
    ("results not recorded: unknown, not nothing",
     [tool("web_search", {"query": q}, None) for q in VIDEO[:3]], []),
    # Chinese is written without spaces: a question of twenty characters is text, not an id
    ("three reworded searches in Chinese, each with nothing found",
     [search(q, ZH_PAGE.format(q=q)) for q in ZH_VIDEO], ["loop/reworded_repeat"]),
    ("different questions in Chinese are not rewordings",
     [search(q, ZH_PAGE.format(q=q)) for q in ZH_OTHER], []),
    ("a changed short Chinese name is a different request",
     [tool("lookup", {"name": n, "question": "这个人的电话号码和住址是什么"}, "未找到结果。")
      for n in ("王小明", "李小明", "张小明")], []),
    ("shell actions are left to (a)-(c): similar command lines ask different things",
     [bash(f'grep -n "class {c}" django/db/models/lookups.py',
           "<returncode>0</returncode>\n<output>\n</output>") for c in ("A", "B", "C")], []),
]


@pytest.mark.parametrize(("steps", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_reworded_cases(steps: list[Step], expected: list[str]) -> None:
    found = loop.detect(traj(*steps), DetectorsConfig(), Context())
    assert kinds(found) == expected


def test_finding_points_at_the_repeated_calls() -> None:
    t = traj(search(VIDEO[0]), tool("visit_page", {"url": "u"}, "page"),
             *[search(q) for q in VIDEO[1:]])
    (f,) = loop.detect(t, DetectorsConfig(), Context())
    searches = [s for s in t.steps if s.tool_name == "web_search"]
    assert f.span_ids == [s.span_id for s in searches]
    assert f.step_indexes == [s.index for s in searches]
    assert f.attributes["tool"] == "web_search" and f.attributes["count"] == 4
    assert f.severity == "error"


def test_window_bounds_the_comparison() -> None:
    """Rewordings further apart than ``reworded_window`` calls of the tool are not linked."""
    steps = [search(VIDEO[0]), *map(search, OTHER[:3]), search(VIDEO[1]),
             *map(search, OTHER[3:]), search(VIDEO[2])]
    narrow = DetectorsConfig(loop=LoopConfig(reworded_window=2))
    assert kinds(loop.detect(traj(*steps), narrow, Context())) == []
    wide = DetectorsConfig(loop=LoopConfig(reworded_window=4))
    assert kinds(loop.detect(traj(*steps), wide, Context())) == ["loop/reworded_repeat"]


def test_request_keeps_identifiers_apart_and_is_bounded() -> None:
    ids, text = request({"b": "Reservation ZFA04Y", "a": "Please find the flight for me",
                         "n": [1, {"x": 2.5}]})
    assert ids == ("reservation zfa04y", "1", "2.5")
    assert text == "please find the flight for me"
    _, long_text = request({"q": "word " * 100_000})
    assert len(long_text) <= MAX_ARGUMENT_CHARS
    ids, _ = request({f"k{i}": i for i in range(10_000)})
    assert len(ids) <= 64
    assert trigrams("ab") == frozenset() and trigrams("abcd") == {"abc", "bcd"}


def test_undeclared_arguments_do_not_make_calls_different() -> None:
    """Loop keys read the parameters a tool's schema declares: ``page_down`` (no parameters)
    called with ``{"": ""}`` and ``{"": {}}`` scrolls the same page (TRAIL GAIA)."""
    no_params = {"page_down": {"type": "object", "properties": {}},
                 "find": {"type": "object", "properties": {"q": {"type": "string"}}}}
    scrolls = [tool("page_down", {"": ""}), tool("page_down", {"": {}})]
    assert kinds(loop.detect(traj(*scrolls, tools=no_params), DetectorsConfig(),
                             Context())) == ["loop/repeated_call"]
    assert kinds(loop.detect(traj(*scrolls), DetectorsConfig(), Context())) == []  # no schema
    finds = [tool("find", {"q": "a", "x": 1}), tool("find", {"q": "b", "x": 1})]
    assert kinds(loop.detect(traj(*finds, tools=no_params), DetectorsConfig(), Context())) == []


def test_arguments_cut_at_a_length_limit_are_no_rewording() -> None:
    """Requests cut at an attribute length limit (the text of an object never closed) are
    known only in part: alike in their start, they may ask different things past it."""
    cut = [json.dumps({"query": q, "page": 1})[:-12] for q in VIDEO[:3]]  # the page cut off
    steps = [tool("web_search", c, PAGE.format(q="x")) for c in cut]
    assert kinds(loop.detect(traj(*steps), DetectorsConfig(), Context())) == []


def test_results_cut_at_a_length_limit_are_not_nothing_new() -> None:
    """Results cut at an attribute length limit inside their framing (the JSON object never
    closed) are alike in their start: what each brought past it is unknown."""
    head = '{"engine": "google", "region": "us", "safe": true, "results": ['
    steps = [search(q, (head + json.dumps(r))[:64]) for q, r in zip(VIDEO, NEW_RESULTS,
                                                                       strict=False)]
    assert kinds(loop.detect(traj(*steps), DetectorsConfig(), Context())) == []


LONG_QUERY = ("tickets that mention a failed payment, a declined card, a refund the customer "
              "never received, or a duplicate charge on the statement, for customers on the "
              "enterprise plan in the European region opened after the billing migration, ")


def _ticket_page(query: str, page: int, filler: int) -> Step:
    """One page of a ticket search: the same query (its text repeated ``filler`` times), the
    page's offset, and that page's tickets (alike in form, each page its own)."""
    tickets = [{"ticket": f"T-{1000 + 3 * page + i}", "status": "open", "priority": "high"}
               for i in range(3)]
    return tool("search_tickets", {"query": query * filler, "start": 3 * page},
                json.dumps(tickets))


@pytest.mark.parametrize("filler", [1, 3], ids=["short_query", "query_past_the_text_limit"])
def test_pages_of_one_long_query_are_no_rewording(filler: int) -> None:
    """Paginating: the same query, its offset changed, each page new tickets. A changed
    identifier is another request (rule (f)), also after a query longer than the text the
    rule reads (``MAX_ARGUMENT_CHARS``): the offset read after it still tells the pages apart,
    never taken for equal because it was not read."""
    assert len(LONG_QUERY * 3) > MAX_ARGUMENT_CHARS
    steps = [_ticket_page(LONG_QUERY, page, filler) for page in range(4)]
    assert kinds(loop.detect(traj(*steps), DetectorsConfig(), Context())) == []


def test_a_call_with_values_past_the_bound_is_no_rewording() -> None:
    """A call whose values are not all read (past ``MAX_VALUES``) has identifiers known only
    in part: the unread ones may differ, so it is never the same request reworded."""
    filters = [f"region {n} and more" for n in range(70)]
    steps = [tool("search_tickets", {"a": filters, "z_page": page}, "[]") for page in range(4)]
    assert kinds(loop.detect(traj(*steps), DetectorsConfig(), Context())) == []
