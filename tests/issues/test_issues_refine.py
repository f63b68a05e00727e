"""Refinement after the cut: centroid merge (complete linkage, no chaining) and straggler
attachment (only within an issue's cohesion), on hand-built unit vectors whose cosines are
known, so each expected label follows from the rule's definition."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from otel_eval.outputs.issues import refine
from otel_eval.outputs.issues.refine import attach_stragglers, centroid_means, merge_clusters


def _unit(*rows: list[float]) -> np.ndarray:
    x = np.asarray(rows, dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _angle(deg: float) -> list[float]:
    r = np.radians(deg)
    return [float(np.cos(r)), float(np.sin(r)), 0.0]


def test_clusters_with_close_centroids_merge_and_far_ones_do_not() -> None:
    # clusters 0 and 1 at 0 and 50 degrees (cos 0.64 >= 0.5), cluster 2 at 90 degrees
    # from cluster 0 (cos 0) and 40 from cluster 1 (cos 0.77), cluster 3 orthogonal to all.
    x = _unit(_angle(0), _angle(0), _angle(50), _angle(50), _angle(90), [0, 0, 1])
    labels = np.array([0, 0, 1, 1, 2, 3])
    merged = merge_clusters(x, labels, 0.5)
    # complete linkage: 0-1 and 1-2 are close, 0-2 is not, so 0, 1, 2 are not one cluster
    # (single linkage would chain them); 3 stays alone
    assert merged[0] == merged[1] and merged[4] != merged[0] and merged[5] not in merged[:5]
    assert merge_clusters(x, labels, 0.99).tolist() == [0, 0, 1, 1, 2, 3]  # 1 merges nothing


def test_merge_is_a_pure_relabelling_of_sparse_input() -> None:
    x = sparse.csr_matrix(_unit([1, 0, 0], [1, 0.1, 0], [0, 1, 0], [0, 0, 1]))
    merged = merge_clusters(x, np.array([3, 7, 5, 9]), 0.5)
    assert merged.tolist() == [0, 0, 1, 2]  # 3 and 7 merge; renumbered by first row


def test_straggler_inside_an_issue_cohesion_is_attached() -> None:
    # the issue: two rows at +-30 degrees, cohesion = |mean| = cos 30 = 0.866
    issue = [_angle(30), _angle(-30)]
    near, far = _angle(20), _angle(40)  # cos to the centroid: 0.94 (in), 0.77 (out)
    x = _unit(*issue, near, far, [0, 0, 1])
    labels = np.array([0, 0, 1, 2, 3])
    out = attach_stragglers(x, labels, np.array([True, False, False, False]))
    assert out.tolist() == [0, 0, 0, 2, 3]


def test_stragglers_pick_their_nearest_issue_and_issues_never_move() -> None:
    # issue 0: 0, 20, 70 degrees (centroid ~30, cohesion ~0.87); issue 1: 80, 100 degrees
    # (centroid 90, cohesion cos 10 = 0.985). Row 2 (70) is nearer issue 1 but is a member.
    x = _unit(_angle(0), _angle(20), _angle(70), _angle(80), _angle(100), _angle(88),
              _angle(45))
    labels = np.array([0, 0, 0, 1, 1, 2, 3])
    out = attach_stragglers(x, labels, np.array([True, True, False, False]))
    # 88: cos 2 degrees to issue 1 (>= 0.985); 45: cos 15 to issue 0 (>= 0.87)
    assert out.tolist() == [0, 0, 0, 1, 1, 1, 0]


def test_no_issue_means_nothing_moves() -> None:
    x = _unit([1, 0], [0, 1])
    labels = np.array([0, 1])
    assert attach_stragglers(x, labels, np.array([False, False])).tolist() == [0, 1]


def test_attachment_is_chunked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(refine, "_CHUNK", 2)  # five stragglers in three chunks
    rows = [_angle(0), _angle(0), *[_angle(0)] * 5, *[_angle(90)] * 2]
    x = _unit(*rows)
    labels = np.array([0, 0, 1, 2, 3, 4, 5, 6, 6])
    out = attach_stragglers(x, labels, np.array([True, False, False, False, False, False,
                                                 True]))
    assert out.tolist() == [0, 0, 0, 0, 0, 0, 0, 6, 6]


def test_centroid_means() -> None:
    x = sparse.csr_matrix(np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]))
    assert centroid_means(x, np.array([0, 0, 1])).tolist() == [[0.5, 0.5], [1.0, 0.0]]
