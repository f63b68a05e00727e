"""Call keys: the memory the repeated-call detector's keys take for issue 21's hostile trace
(``bounded_results.hostile_trace``: code blocks passing a 48 kB literal of control characters
to a tool 64 times), against the clean trace of the same shape, in the same run.

Measured with tracemalloc around ``calls()`` alone (the trajectory already built): the peak
while the keys are computed and what the list of calls still holds afterwards. Run it once per
checkout to compare code (``PYTHONPATH=CHECKOUT python bench/call_keys.py``).

With ``--datasets DIR`` (the shared datasets: tau-bench airline, TRAIL GAIA, SWE-bench) it
also times the key of every top-level call there, the bounded key (``arguments_key``) against
the whole canonical text it replaces (``canonical_arguments``), best of 5, same run.

    python bench/call_keys.py [--spans 16] [--datasets DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bounded_results import hostile_trace


def measure(spans: int, clean: bool) -> tuple[int, int, int]:
    from otel_eval.evaluate.config import TrajectoryConfig
    from otel_eval.evaluate.detectors.calls import calls
    from otel_eval.evaluate.detectors.config import DetectorsConfig
    from otel_eval.evaluate.trajectory import build_trajectory

    trace, _ = hostile_trace(spans, clean)
    trajectory = build_trajectory(trace, TrajectoryConfig())
    cfg = DetectorsConfig()
    tracemalloc.start()
    try:
        held = calls(trajectory, cfg.loop, cfg.tool_call)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return len(held), peak, kept


def key_times(root: Path) -> str:
    from otel_eval.evaluate.config import TrajectoryConfig
    from otel_eval.evaluate.detectors.calls import top_level_tool_steps
    from otel_eval.evaluate.detectors.canonical import arguments_key, canonical_arguments
    from otel_eval.evaluate.trajectory import build_trajectory
    from otel_eval.receive.loaders import load_path

    tc = TrajectoryConfig()
    args = []
    for sub in ("tau-bench/airline", "trail/GAIA/traces", "swe-bench-mini-swe-agent/trajs"):
        for trace in load_path(root / sub, config=tc):
            args += [s.arguments for s in top_level_tool_steps(build_trajectory(trace, tc))]

    def best(f):  # type: ignore[no-untyped-def]
        times = []
        for _ in range(5):
            start = time.perf_counter()
            for a in args:
                f(a)
            times.append(time.perf_counter() - start)
        return min(times) / len(args) * 1e6

    whole, bounded = best(canonical_arguments), best(arguments_key)
    return (f"{len(args)} dataset calls: whole canonical text {whole:.1f} us a call, bounded "
            f"key {bounded:.1f} us ({bounded / whole:.2f}x)")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--spans", type=int, default=16)
    p.add_argument("--datasets", type=Path)
    a = p.parse_args()
    if a.datasets is not None:
        print(key_times(a.datasets))
    n_clean, peak_clean, kept_clean = measure(a.spans, True)
    n, peak, kept = measure(a.spans, False)
    print(f"{a.spans} LLM spans, {n} calls (clean: {n_clean}): calls() peak "
          f"{peak / 1e6:.2f} MB, held {kept / 1e6:.2f} MB; clean baseline peak "
          f"{peak_clean / 1e6:.2f} MB, held {kept_clean / 1e6:.2f} MB; ratio peak "
          f"{peak / peak_clean:.1f}x, held {kept / kept_clean:.1f}x")


if __name__ == "__main__":
    main()
