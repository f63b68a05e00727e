"""Every script under bench/ still imports: a name moved in the package (a module split, a
function renamed) breaks a bench that nothing else runs. One fresh interpreter imports them
all, as ``python bench/NAME.py`` would find its neighbours (bench/ first on the path)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"

_IMPORT_ALL = """
import importlib, sys, traceback
failed = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException:
        failed.append(name + ": " + traceback.format_exc(limit=1).strip().splitlines()[-1])
print("\\n".join(failed))
"""


def test_every_bench_script_imports() -> None:
    names = sorted(p.stem for p in BENCH.glob("*.py"))
    assert len(names) >= 20
    done = subprocess.run([sys.executable, "-c", _IMPORT_ALL, *names], cwd=BENCH,
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": f"{BENCH}:{ROOT}", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", done.stdout
