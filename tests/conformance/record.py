"""Re-record the conformance corpus: real instrumentation stacks, scripted LLM, OTLP capture.

    PYTHONPATH=.:tests python3 tests/conformance/record.py [--stack NAME ...] \
        [--scenario NAME ...] [--cache DIR]

For each stack (``stacks/<name>/stack.yaml``): a venv under the cache dir (default
``~/.cache/otel-eval-conformance/<stack>``) with the stack's pinned packages installed by pip
(or, for ``runtime: node``, ``npm install`` of them into that dir), reinstalled only when the
pins change. For each scenario: start the scripted LLM (``scripted_llm.py``) and the OTLP
capture server (``tests/support/otlp_capture.py``) on loopback port 0, run the stack's agent
program with the OPENAI_* / ANTHROPIC_* / GOOGLE_* / OTEL_* environment pointing at them (plus
the stack's own ``env``), wait for it (bounded), and write
``recordings/<stack>/<scenario>.json``::

    {"stack", "scenario", "packages": {name: installed version}, "llm_requests": n,
     "llm_usage": [[input tokens, output tokens] | null, ...],  # what each answer reported
     "requests": [{"signal": "traces" | "logs", "body": <OTLP JSON, hex ids>}, ...],
     "exit": {"status": n, "error": [last stderr line]}}
                         # max_turns, wrong_tool, wrong_args, length_stop, llm_error: not 0

with the OTLP requests in arrival order, and the paths of this checkout, of the stack's venv and
of the Python installation in them (stack traces in exception events) written as ``<repo>``,
``<venv>`` and ``<python>``, and any other absolute path of this machine as ``machine_paths``
says (``--rescrub`` rewrites the committed recordings by the same rules). A run that fails
(exit code, but in max_turns, wrong_tool, wrong_args, length_stop and llm_error, where a
framework may raise at its cap, at a tool it does not have, at arguments it refuses, at an
answer cut off or at the API's error; timeout, a request the scripted LLM or
the capture server refused) is reported and writes nothing. Progress goes to
stderr; the paths written go to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import scenarios
import yaml
from machine_paths import scrub
from scripted_llm import ScriptedLLM
from support.otlp_capture import Capture

HERE = Path(__file__).resolve().parent

REPO = HERE.parents[1]
STACKS = HERE / "stacks"
RECORDINGS = HERE / "recordings"
RUN_TIMEOUT_S = 180
INSTALL_TIMEOUT_S = 1800
_VERSIONS = ("import importlib.metadata as m, json, sys; "
             "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))")


def stack_names() -> list[str]:
    return sorted(p.parent.name for p in STACKS.glob("*/stack.yaml"))


def load_stack(name: str) -> dict[str, Any]:
    data = yaml.safe_load((STACKS / name / "stack.yaml").read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("packages"), dict):
        raise SystemExit(f"stacks/{name}/stack.yaml: needs a 'packages' mapping")
    return data


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _prepared(env_dir: Path, pins: dict[str, str]) -> bool:
    stamp = env_dir / ".conformance-pins.json"
    return stamp.is_file() and json.loads(stamp.read_text()) == pins


def _install_python(env_dir: Path, pins: dict[str, str]) -> None:
    if env_dir.exists():
        shutil.rmtree(env_dir)
    venv.EnvBuilder(with_pip=True).create(env_dir)
    specs = [f"{n}=={v}" for n, v in pins.items()]
    out = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q",
                          *specs], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    if out.returncode != 0:
        raise SystemExit(f"pip install {' '.join(specs)} failed:\n{out.stderr[-4000:]}")


def _install_node(env_dir: Path, pins: dict[str, str]) -> None:
    env_dir.mkdir(parents=True, exist_ok=True)
    (env_dir / "package.json").write_text(json.dumps(
        {"name": "conformance-stack", "private": True, "dependencies": pins}, indent=1))
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--save-exact"], cwd=env_dir,
                   check=True, timeout=INSTALL_TIMEOUT_S, stdout=sys.stderr)


def prepare(name: str, stack: dict[str, Any], cache: Path) -> Path:
    """The stack's environment dir, (re)installed when its pins changed."""
    pins = {str(k): str(v) for k, v in stack["packages"].items()}
    env_dir = cache / name
    if not _prepared(env_dir, pins):
        _log(f"[{name}] installing {len(pins)} pinned packages into {env_dir}")
        if stack.get("runtime", "python") == "node":
            _install_node(env_dir, pins)
        else:
            _install_python(env_dir, pins)
        (env_dir / ".conformance-pins.json").write_text(json.dumps(pins))
    return env_dir


def installed(stack: dict[str, Any], env_dir: Path) -> dict[str, str]:
    names = [str(n) for n in stack["packages"]]
    if stack.get("runtime", "python") == "node":
        return {n: json.loads((env_dir / "node_modules" / n / "package.json").read_text())
                ["version"] for n in names}
    out = subprocess.run([str(env_dir / "bin" / "python"), "-c", _VERSIONS, *names],
                         check=True, capture_output=True, text=True, timeout=120)
    return dict(json.loads(out.stdout))


def _command(name: str, stack: dict[str, Any], env_dir: Path, scenario: str) -> list[str]:
    if stack.get("runtime", "python") == "node":
        # ESM resolves packages from the importing file's dir: run copies beside node_modules.
        for f in (STACKS / name).iterdir():
            if f.suffix in (".js", ".mjs", ".cjs"):
                shutil.copy(f, env_dir / f.name)
        return ["node", str(env_dir / stack.get("entry", "agent.mjs")), scenario]
    return [str(env_dir / "bin" / "python"), str(STACKS / name / "agent.py"), scenario]


def _environment(name: str, stack: dict[str, Any], llm: ScriptedLLM,
                 cap: Capture) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "OPENAI_", "ANTHROPIC_", "TRACELOOP_", "PYTHON",
                                "VIRTUAL_ENV", "GOOGLE_", "GEMINI_"))}
    env.update(OPENAI_BASE_URL=llm.base_url, OPENAI_API_BASE=llm.base_url,
               OPENAI_API_KEY="sk-conformance", ANTHROPIC_BASE_URL=llm.root_url,
               ANTHROPIC_API_KEY="sk-ant-conformance", OTEL_EXPORTER_OTLP_ENDPOINT=cap.endpoint,
               # google-genai: the Gemini API's root (it appends /v1beta/models/...)
               GOOGLE_GEMINI_BASE_URL=llm.root_url, GOOGLE_API_KEY="conformance",
               OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
               OTEL_SERVICE_NAME=f"conformance-{name}",
               # the agents' shared code (stacks/common.py) and the scenarios it scripts
               PYTHONPATH=os.pathsep.join((str(STACKS), str(HERE))))
    env.update({str(k): str(v) for k, v in (stack.get("env") or {}).items()})
    return env


def record(name: str, stack: dict[str, Any], env_dir: Path, scenario: str) -> dict[str, Any]:
    """Run one scenario of one stack; its recording, or RuntimeError with the reason."""
    llm, cap = ScriptedLLM().start(), Capture().start()
    try:
        proc = subprocess.run(_command(name, stack, env_dir, scenario),
                              env=_environment(name, stack, llm, cap), cwd=env_dir,
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    finally:
        llm.stop()
        cap.stop()
    # max_turns, wrong_tool, wrong_args, length_stop, llm_error: a framework that raises at
    # its cap, at a call of a tool it does not have or with arguments it refuses, at an answer
    # cut off, or at the API's error, ends the program with that exception, as
    # it ends a user's program that does not catch it (its spans are still exported)
    failed = proc.returncode != 0 and scenario not in (
        "max_turns", "wrong_tool", "wrong_args", "length_stop", "empty_answer", "llm_error")
    if failed or llm.errors or cap.errors:
        raise RuntimeError(f"exit {proc.returncode}; llm errors {llm.errors}; capture errors "
                           f"{cap.errors}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    if not cap.arrivals:
        raise RuntimeError(f"no OTLP request was exported\n{proc.stderr[-4000:]}")
    out = {"stack": name, "scenario": scenario, "packages": installed(stack, env_dir),
           "llm_requests": llm.requests, "llm_usage": llm.usage,
           "requests": _scrubbed(cap.recorded(), env_dir)}
    if proc.returncode != 0:  # the framework's exception (max_turns, wrong_tool), last line
        out["exit"] = {"status": proc.returncode,
                       "error": _scrubbed(proc.stderr.strip().splitlines()[-1:], env_dir)}
    return out


def _scrubbed(requests: list[Any], env_dir: Path) -> list[Any]:
    """The requests with this machine's paths (in stack traces) replaced by placeholders."""
    text = json.dumps(requests, ensure_ascii=False)
    for path, name in ((env_dir.resolve(), "<venv>"), (REPO, "<repo>"),
                       (Path(sys.base_prefix).resolve(), "<python>")):
        text = text.replace(str(path), name)
    return list(json.loads(scrub(text)))


def rescrub() -> int:
    """Rewrite the committed recordings through ``scrub``; prints the paths it changed."""
    for path in sorted(RECORDINGS.glob("*/*.json")):
        text = path.read_text(encoding="utf-8")
        if scrub(text) != text:
            path.write_text(scrub(text), encoding="utf-8")
            print(path)
    return 0


def write(rec: dict[str, Any]) -> Path:
    path = RECORDINGS / rec["stack"] / f"{rec['scenario']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    # One line per OTLP request: small files whose diffs still show which request changed.
    head = json.dumps({k: v for k, v in rec.items() if k != "requests"}, ensure_ascii=False)
    lines = [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in rec["requests"]]
    path.write_text(head[:-1] + ', "requests": [\n' + ",\n".join(lines) + "\n]}\n",
                    encoding="utf-8")
    return path


def default_scenarios(stack: dict[str, Any]) -> list[str]:
    """The scenarios recorded when none is named: all but ``conversation`` unless the stack
    says where it carries the conversation id (``conversation:``)."""
    unsupported = stack.get("unsupported") or {}
    return [s for s in scenarios.SCENARIOS if (s != "conversation" or stack.get("conversation"))
            and s not in unsupported]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stack", action="append", choices=stack_names(),
                    help="a stack to record (repeatable; default all)")
    ap.add_argument("--scenario", action="append", choices=scenarios.SCENARIOS,
                    help="a scenario to record (repeatable; default all)")
    ap.add_argument("--cache", type=Path,
                    default=Path.home() / ".cache" / "otel-eval-conformance",
                    help="where the stacks' venvs / node_modules live")
    ap.add_argument("--rescrub", action="store_true",
                    help="only rewrite the committed recordings' machine paths, record nothing")
    args = ap.parse_args(argv)
    if args.rescrub:
        return rescrub()
    failed = 0
    for name in args.stack or stack_names():
        stack = load_stack(name)
        env_dir = prepare(name, stack, args.cache)
        for scenario in args.scenario or default_scenarios(stack):
            try:
                print(write(record(name, stack, env_dir, scenario)))
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                failed += 1
                _log(f"[{name}/{scenario}] FAILED: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
