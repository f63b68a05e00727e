"""The issues job's read of its window: peak memory of reading N stored evaluations of ~47 kB
whole (``Store.since``) against reading them in chunks keeping only the fields clustering
reads (``since(keep=critique_fields)``), each in its own child process (``ru_maxrss``), with
a child that only opens the store as the baseline. The critiques extracted must be equal.

    python bench/issues_window.py [--n 2000]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path


def fill(path: str, n: int) -> int:
    from otel_eval.base.results import Evaluation, Finding, Verdict
    from otel_eval.base.steps import Step, Trajectory
    from otel_eval.store import open_store

    store = open_store(path)
    size = 0
    for start in range(0, n, 200):
        batch = []
        for i in range(start, min(n, start + 200)):
            steps = [Step(k, f"{k + 1:016x}", None, "tool", "search", node="agent",
                          tool_name="search", arguments={"q": f"query {i} {k}"},
                          result=f"result {i} {k} " + "lorem ipsum " * 330)
                     for k in range(11)]
            traj = Trajectory(f"{i + 1:032x}", "otlp", "complete", steps,
                              service="svc", agent="agent")
            findings = [Finding("loop", "repeated_call", "warning",
                                f"search called 3 times with the same arguments ({i % 7})",
                                [steps[2].span_id], [2])]
            ev = Evaluation(traj, findings, Verdict(False, ["x"]),
                            evaluated_at_ns=10**18 + i)
            size += len(ev.to_json_text())
            batch.append(ev)
        store.put_many(batch)
    store.close()
    return size // n


def child(path: str, mode: str) -> None:
    from otel_eval.outputs.issues.critiques import extract
    from otel_eval.store import open_store

    store = open_store(path)
    critiques = 0
    if mode == "kept":
        from otel_eval.outputs.issues.critiques import critique_fields
        window = store.since(0, keep=critique_fields).rows
        critiques = len(extract(window, 0.5).critiques)
    elif mode == "whole":  # as the job read it before (and still can, on an older version)
        window = store.since(0).rows
        critiques = len(extract(window, 0.5).critiques)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"mode": mode, "peak_rss_bytes": rss, "critiques": critiques}))


def run(path: str, mode: str) -> dict:  # type: ignore[type-arg]
    out = subprocess.run([sys.executable, __file__, "--child", path, mode], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--child", nargs=2)
    a = p.parse_args()
    if a.child:
        child(*a.child)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "store.db")
        body = fill(path, a.n)
        base, whole, kept = (run(path, m) for m in ("baseline", "whole", "kept"))
        assert whole["critiques"] == kept["critiques"] == a.n
        mb = 1e6
        print(f"{a.n} evaluations of {body / 1e3:.0f} kB: peak RSS reading whole "
              f"{whole['peak_rss_bytes'] / mb:.0f} MB, kept fields "
              f"{kept['peak_rss_bytes'] / mb:.0f} MB (baseline {base['peak_rss_bytes'] / mb:.0f}"
              f" MB; above it: {(whole['peak_rss_bytes'] - base['peak_rss_bytes']) / mb:.0f}"
              f" vs {(kept['peak_rss_bytes'] - base['peak_rss_bytes']) / mb:.0f} MB)")


if __name__ == "__main__":
    main()
