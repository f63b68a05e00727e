"""Paths and readers shared by the deployment tests: the chart, the Dockerfile, helm runs."""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "otel-eval"
EXAMPLES = CHART / "examples"
VALUES_FILES = sorted(EXAMPLES.glob("values-*.yaml"))
SIDECAR = EXAMPLES / "sidecar-pod.yaml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
GRAFANA_RULES = ROOT / "grafana" / "alerts" / "otel-eval-rules.yaml"
CHART_RULES = CHART / "files" / "otel-eval-rules.yaml"

RELEASE = "otel-eval"
NAMESPACE = "observability"


@dataclass
class Helm:
    exe: Path
    env: dict[str, str]
    _rendered: dict[tuple[str, ...], list[dict[str, Any]]] = field(default_factory=dict)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.exe), *args], capture_output=True, text=True,
                              env=self.env, timeout=120, check=False)

    def template(self, *args: str) -> list[dict[str, Any]]:
        """`helm template` of the chart (extra args: -f FILE, --set K=V); cached per args."""
        if args not in self._rendered:
            r = self.run("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args)
            assert r.returncode == 0, f"helm template {' '.join(args)}:\n{r.stderr}"
            self._rendered[args] = [d for d in yaml.safe_load_all(r.stdout) if d]
        return self._rendered[args]


def values_args(values: Path | None) -> tuple[str, ...]:
    return () if values is None else ("-f", str(values))


def docs_of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = docs_of_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def workload(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The release's single StatefulSet or Deployment."""
    found = [d for d in docs if d["kind"] in ("StatefulSet", "Deployment")]
    assert len(found) == 1, [d["kind"] for d in found]
    return found[0]


def dockerfile_instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(KEYWORD, rest) per instruction, continuation lines joined, comments dropped."""
    lines: list[str] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    return [(kw.upper(), rest.strip()) for kw, _, rest in (ln.partition(" ") for ln in lines)]


def dockerfile_stages(path: Path = DOCKERFILE) -> list[list[tuple[str, str]]]:
    """The instructions of each build stage, each list starting with its FROM."""
    stages: list[list[tuple[str, str]]] = []
    for kw, rest in dockerfile_instructions(path):
        if kw == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((kw, rest))
    return stages


def exec_form(value: str) -> list[str]:
    """A JSON-array (exec form) instruction argument; shell form is refused."""
    assert value.startswith("["), f"expected exec form (JSON array), got {value!r}"
    parsed = json.loads(value)
    assert isinstance(parsed, list) and all(isinstance(x, str) for x in parsed)
    return parsed


def shell_words(value: str) -> list[str]:
    return shlex.split(value)


def image_files() -> dict[str, Path]:
    """Files the image's final stage copies from the build context: path in the image -> its
    source in the repository."""
    files: dict[str, Path] = {}
    for kw, rest in dockerfile_stages()[-1]:
        words = shell_words(rest)
        if kw != "COPY" or any(w.startswith("--from") for w in words):
            continue
        *sources, dest = [w for w in words if not w.startswith("--")]
        for src in sources:
            files[dest + Path(src).name if dest.endswith("/") else dest] = ROOT / src
    return files


def entrypoint_argv(*args: str) -> list[str]:
    """The command ``docker run ... otel-eval ARGS`` runs, the image's own files read from
    the build context."""
    (entrypoint,) = [r for kw, r in dockerfile_stages()[-1] if kw == "ENTRYPOINT"][-1:]
    argv = exec_form(entrypoint)
    assert argv[:2] == ["otel-eval", "serve"], argv
    files = image_files()
    return [str(files.get(a, a)) for a in argv] + list(args)
