import gzip
import json
from pathlib import Path

import pytest
from issue_fixtures import evaluation, window

from otel_eval.app.config import build
from otel_eval.base.configcheck import ConfigError
from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.embed import minilm_available
from otel_eval.outputs.issues.files import EvaluationFileError, issues_from_paths, read_evaluations
from otel_eval.outputs.issues.result import Issue, IssuesResult, top_issue_gauge_samples
from otel_eval.outputs.issues.tracker import issues_offline
from otel_eval.telemetry.labels import MAX_LABEL_CHARS


def _issue(issue_id: str, node: str, share: float, traces: set[str],
           level: str = "node") -> Issue:
    return Issue(issue_id, level, node, f"title {issue_id}", "d", share, None, 1, len(traces),
                 (), (), 0.0, True, tuple(sorted(traces)))


def _shares(result: IssuesResult, top_k: int,
            max_issues: int) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.share) for s in top_issue_gauge_samples(result, top_k, max_issues)]


def test_gauge_samples_keep_top_k_per_node_and_aggregate_the_rest() -> None:
    issues = (_issue("a", "n1", 0.5, {"t1", "t2"}), _issue("b", "n1", 0.25, {"t2"}),
              _issue("c", "n1", 0.25, {"t3"}), _issue("d", "n2", 0.25, {"t4"}))
    result = IssuesResult(1.0, 60.0, "tfidf", 4, 5, 0, issues, ())
    assert _shares(result, top_k=1, max_issues=10) == [
        ({"level": "node", "node": "n1", "issue_id": "a", "title": "title a"}, 0.5),
        ({"level": "node", "node": "n1", "issue_id": "_other", "title": "other issues"}, 0.5),
        ({"level": "node", "node": "n2", "issue_id": "d", "title": "title d"}, 0.25),
    ]


def test_gauge_samples_show_the_largest_issues_over_all_nodes_the_rest_as_node_other() -> None:
    """max_issues bounds the samples over all (level, node) groups: groups with no issue
    among the largest are one node="_other" sample per level, whatever their number."""
    issues = (_issue("a", "n1", 0.5, {"t1", "t2"}), _issue("b", "n1", 0.25, {"t3"}),
              _issue("c", "n2", 0.25, {"t4"}), _issue("d", "n3", 0.25, {"t1"}),
              _issue("e", "", 0.25, {"t2"}, level="system"))
    result = IssuesResult(1.0, 60.0, "tfidf", 4, 6, 0, issues, ())
    assert _shares(result, top_k=10, max_issues=2) == [
        ({"level": "node", "node": "n1", "issue_id": "a", "title": "title a"}, 0.5),
        ({"level": "node", "node": "n1", "issue_id": "b", "title": "title b"}, 0.25),
        ({"level": "node", "node": "_other", "issue_id": "_other", "title": "other issues"},
         0.5),  # c and d: t4, t1
        ({"level": "system", "node": "_other", "issue_id": "_other",
          "title": "other issues"}, 0.25),
    ]
    # a group whose issues are not all shown keeps its own "_other"; a real node named
    # "_other" shares the overflow's one sample (no duplicate label set)
    issues = (*issues, _issue("f", "_other", 0.75, {"t1", "t2", "t3"}),
              _issue("g", "_other", 0.25, {"t4"}))
    result = IssuesResult(1.0, 60.0, "tfidf", 4, 8, 0, issues, ())
    assert _shares(result, top_k=10, max_issues=2) == [
        ({"level": "node", "node": "_other", "issue_id": "f", "title": "title f"}, 0.75),
        ({"level": "node", "node": "n1", "issue_id": "a", "title": "title a"}, 0.5),
        ({"level": "node", "node": "n1", "issue_id": "_other", "title": "other issues"}, 0.25),
        ({"level": "node", "node": "_other", "issue_id": "_other", "title": "other issues"},
         0.5),  # g, c, d: t4, t1
        ({"level": "system", "node": "_other", "issue_id": "_other",
          "title": "other issues"}, 0.25),
    ]


def test_gauge_samples_are_bounded_whatever_the_number_and_length_of_nodes() -> None:
    n, cap = 3000, 7
    issues = tuple(Issue(f"iss_{i:010x}", "node", f"node-{i}-" + "x" * 250, "t" * 300, "d",
                         1 / n, None, 1, 1, (), (), 0.0, True, (f"{i:032x}",))
                   for i in range(n))
    samples = top_issue_gauge_samples(IssuesResult(1.0, 60.0, "tfidf", n, n, 0, issues, ()),
                                      top_k=10, max_issues=cap)
    assert len(samples) == cap + 1 <= 2 * cap + 2
    assert max(len(s.labels["node"]) for s in samples) == MAX_LABEL_CHARS
    assert max(len(s.labels["title"]) for s in samples) == 80
    (other,) = [s for s in samples if s.labels["node"] == "_other"]
    assert other.traces == n - cap and other.share == pytest.approx((n - cap) / n)
    # two nodes cut to one label value are one group (no duplicate series)
    twins = tuple(Issue(f"iss_{i}", "node", "n" * 200 + str(i), "t", "d", 0.5, None, 1, 1,
                        (), (), 0.0, True, (str(i),)) for i in range(2))
    samples = top_issue_gauge_samples(IssuesResult(1.0, 60.0, "tfidf", 2, 2, 0, twins, ()),
                                      top_k=1, max_issues=cap)
    assert [s.labels["issue_id"] for s in samples] == ["iss_0", "_other"]


def test_reads_jsonl_json_and_gzip(tmp_path: Path) -> None:
    evs = window(6)
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(e) for e in evs[:3]) + "\n\n")
    (tmp_path / "b.json").write_text(json.dumps(evs[3:5], indent=2))
    with gzip.open(tmp_path / "c.jsonl.gz", "wt") as f:
        f.write(json.dumps(evs[5]) + "\n")
    paths = [tmp_path / "a.jsonl", tmp_path / "b.json", tmp_path / "c.jsonl.gz"]
    assert list(read_evaluations(paths)) == evs
    result = issues_from_paths(paths, now=1.0)
    assert result.traces == 6 and len(result.issues) == 3


def test_bad_line_is_reported_with_its_place(tmp_path: Path) -> None:
    (tmp_path / "x.jsonl").write_text(json.dumps(window(1)[0]) + "\n{broken\n")
    with pytest.raises(EvaluationFileError, match=r"x.jsonl:2"):
        list(read_evaluations([tmp_path / "x.jsonl"]))


def test_config_builds_from_yaml_data_and_rejects_bad_values() -> None:
    cfg = build(IssuesConfig, {"interval_s": 300, "embedding": "tfidf", "grafana": {
        "url": "http://g:3000", "token": "t", "dashboard_uid": "u", "tags": ["a"]}})
    assert cfg.grafana.tags == ("a",) and cfg.interval_s == 300.0
    with pytest.raises(ConfigError) as e:
        build(IssuesConfig, {"embedding": "bert", "distance_threshold": 3})
    assert any("embedding" in err for err in e.value.errors)


@pytest.mark.skipif(not minilm_available(), reason="embeddings extra not installed")
def test_minilm_embedding_clusters_paraphrases() -> None:
    evs = [evaluation(f"{i:032x}", [], [text]) for i, text in enumerate([
        "The agent gave up before finishing the task",
        "The agent stopped early without completing the task",
        "Wrong currency conversion rate was used",
        "The exchange rate used for the currency was incorrect",
    ])]
    result = issues_offline(evs, IssuesConfig(embedding="minilm", distance_threshold=0.6),
                            now=1.0)
    assert result.embedding == "minilm"
    assert sorted(i.traces for i in result.issues) == [2, 2]
