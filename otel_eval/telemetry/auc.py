"""The success predictor's rolling AUC, as plain computation (no Prometheus here): the
defaults ``PredictionConfig`` takes, and what ``telemetry.prediction`` publishes. Kept apart
so the config (which a worker process loads) does not import the metrics client."""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

# Defaults of prediction.auc_window and prediction.auc_min_per_class (PredictionConfig).
AUC_WINDOW, AUC_MIN_PER_CLASS = 1000, 10


class AucSettings(Protocol):
    """The rolling AUC's window (``PredictionConfig`` is one)."""

    @property
    def auc_window(self) -> int: ...

    @property
    def auc_min_per_class(self) -> int: ...


def auc(scores: list[float], labels: list[bool]) -> float | None:
    """Area under the ROC curve (ties count half); None without both classes."""
    positives = sum(labels)
    negatives = len(labels) - positives
    if not positives or not negatives:
        return None
    order = sorted(range(len(scores)), key=scores.__getitem__)
    rank_sum, i = 0.0, 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        mid_rank = (i + j) / 2 + 1  # ranks i+1 .. j+1, averaged over the tie
        rank_sum += mid_rank * sum(labels[order[k]] for k in range(i, j + 1))
        i = j + 1
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


class RollingAuc:
    """The last ``window`` labelled predictions of one agent, by trace id. Not thread-safe:
    ``PredictionMetrics`` holds its lock around every call."""

    def __init__(self, window: int, min_per_class: int) -> None:
        self.window, self.min_per_class = window, min_per_class
        self._items: OrderedDict[str, tuple[float, bool]] = OrderedDict()
        self._value: float | None = None
        self._dirty = False

    def add(self, trace_id: str, p: float, success: bool) -> bool:
        """Record a labelled prediction (replacing an earlier one of the same trace); whether
        it is a new label: the trace was not in the window, or held the other outcome."""
        before = self._items.pop(trace_id, None)
        self._items[trace_id] = (p, success)
        while len(self._items) > self.window:
            self._items.popitem(last=False)
        self._dirty = True
        return before is None or before[1] != success

    def remove(self, trace_id: str) -> bool | None:
        """Take a trace's entry out (its evaluation was superseded under another pair); the
        outcome it held (True: success), None when it held none."""
        found = self._items.pop(trace_id, None)
        if found is None:
            return None
        self._dirty = True
        return found[1]

    def value(self) -> float | None:
        """The AUC of the window (None: fewer than ``min_per_class`` of a class)."""
        if self._dirty:
            labels = [y for _, y in self._items.values()]
            successes = sum(labels)
            self._value = None if min(successes, len(labels) - successes) < \
                self.min_per_class else auc([p for p, _ in self._items.values()], labels)
            self._dirty = False
        return self._value

    def __len__(self) -> int:
        return len(self._items)
