"""Recurring issues in critiques written in other scripts than English: their words are terms
(``embed.terms_of``), and an English critique's terms, so its issue ids, are what they were."""

from __future__ import annotations

import re

from issue_fixtures import AUTH, FORMAT, LOOP, evaluation

from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.embed import TfidfEmbedder, terms_of
from otel_eval.outputs.issues.normalize import normalize
from otel_eval.outputs.issues.tracker import issues_offline

CFG = IssuesConfig(age_out_s=1000.0, share_jump=0.2)

# The hand-made failures of issue_fixtures, as a judge writing Chinese words them.
LOOP_ZH = ["工具 'web_search' 被以相同的参数重复调用了 {n} 次",
           "智能体又用同样的参数调用了 web_search {n} 次",
           "重复的相同工具调用：search 以相同参数被调用了 {n} 次"]  # noqa: RUF001
FORMAT_ZH = ["最终答案缺少所需的单位，答案格式错误",  # noqa: RUF001
             "答案格式错误：最终答案没有单位",  # noqa: RUF001
             "最终答案格式错误，缺少单位（{n} 位数字）"]  # noqa: RUF001
AUTH_ZH = ["认证失败：API 密钥被拒绝，HTTP 401，https://api.x.io/v{n}",  # noqa: RUF001
           "API 密钥被拒绝，认证失败 (401)，https://api.y.io/{n}",  # noqa: RUF001
           "认证失败，因为 API 密钥被拒绝 ({n})"]  # noqa: RUF001


def _window(n_traces: int) -> list[dict[str, object]]:
    out = []
    for i in range(n_traces):
        node = [("searcher", LOOP_ZH[i % 3].format(n=i + 3))]
        if i % 3 == 0:
            node.append(("searcher", AUTH_ZH[(i // 3) % 3].format(n=i)))
        system = [FORMAT_ZH[i % 3].format(n=i)] if i % 2 == 0 else []
        out.append(evaluation(f"{i:032x}", node, system))
    return out


def test_chinese_critiques_of_one_failure_are_one_recurring_issue() -> None:
    result = issues_offline(_window(12), CFG, now=100.0)
    found = sorted((i.level, i.node, i.traces) for i in result.issues)
    # the format failure has no ASCII word: each wording was an issue of its own
    assert found == [("node", "searcher", 4), ("node", "searcher", 12), ("system", "", 6)]


def test_words_of_every_script_are_terms() -> None:
    assert terms_of("ошибка инструмента: в ответе") == ["ошибка", "инструмента", "ответе"]
    assert terms_of("答案格式错误。") == ["答", "案", "格", "式", "错", "误"]
    assert terms_of("l'agent a appelé «search» 3 fois") == ["agent", "appelé", "search",
                                                          "fois"]
    x, names = TfidfEmbedder().embed(["答案格式错误", "答案格式错误了"])
    assert "答 案" in names  # the word analyzer's bigrams (titles' terms) read them too
    assert x.shape == (2, len(names))


def test_an_english_critiques_terms_are_what_they_were() -> None:
    old = re.compile(r"(?u)\b[a-z][a-z_]+\b")  # the terms English critiques were keyed by
    texts = [normalize(t.format(n=7)) for t in (*LOOP, *FORMAT, *AUTH)]
    texts += ["don't re-run the tool_call; use v2 or x1y instead", "a b cc_dd __x _y e-mail"]
    for text in texts:
        assert terms_of(text) == old.findall(text)



def test_chinese_terms_shown_as_a_title_are_written_without_spaces() -> None:
    """The word analyser reads each Chinese character as a word, so its bigram terms are
    "答 案"; a title made of terms (and the drafts the synthesizing judge reads) showed them
    so. They are written as a reader writes them now; English terms unchanged."""
    from otel_eval.outputs.issues.naming import deterministic_name

    assert deterministic_name(["答 案", "格 式 错", "api 密 钥"], "").title == \
        "答案, 格式错, api 密钥"
    assert deterministic_name(["tool call", "loop"], "").title == "tool call, loop"
    assert deterministic_name(["ошибка инструмента"], "").title == "ошибка инструмента"
    assert deterministic_name(["格 式"], "答案格式错误").title == "答案格式错误"  # its phrase
