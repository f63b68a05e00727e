"""Paths and readers shared by the deployment tests: the chart, the Dockerfile, helm runs."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_eval.app import cli
from otel_eval.app.config import Config

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
CONFIG_PATH = "/etc/otel-eval/config.yaml"
# Secrets that hold more than a token (what pod_environ puts in the pod's environment).
SECRET_SHAPES = {"OTEL_EVAL_STORE_URL": "postgresql://otel-eval:secret-{}@postgresql:5432/otel_eval"}


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


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = workload(docs)["spec"]["template"]["spec"]
    return spec


def main_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (c,) = pod_spec(docs)["containers"]
    return c


def pod_environ(container: dict[str, Any], worker_index: int = 0) -> dict[str, str]:
    """What the pod's environment would hold: literal values, secrets as placeholders, the
    StatefulSet pod-index label as the given ordinal. Nothing else: the config must not need
    a variable the pod does not set."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        source = var.get("valueFrom", {})
        if "value" in var:
            env[var["name"]] = var["value"]
        elif "secretKeyRef" in source:  # the Secret's value, shaped as the Secret holds it
            env[var["name"]] = SECRET_SHAPES.get(var["name"], "secret-{}").format(
                var["name"].lower())
        elif source.get("fieldRef", {}).get("fieldPath") == \
                "metadata.labels['apps.kubernetes.io/pod-index']":
            env[var["name"]] = str(worker_index)
        else:
            raise AssertionError(f"unexpected env source {var}")
    return env


def pod_config(docs: list[dict[str, Any]], tmp_path: Path, worker_index: int = 0) -> Config:
    """The config `otel-eval serve` would run with: the container's argv through the real
    command line (flags over file), the ConfigMap's file read with only the pod's environment."""
    container = main_container(docs)
    argv = [*container["command"], *container["args"]]
    assert argv[:2] == ["otel-eval", "serve"], argv
    args = cli.build_parser().parse_args(argv[1:])
    assert args.config == [CONFIG_PATH]
    overrides = {k: v for k, v in vars(args).items()
                 if k in ("grpc_endpoint", "http_endpoint", "admin_endpoint", "store")
                 and v is not None}
    assert not overrides, f"flags would override the config file: {overrides}"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volume = next(v for v in pod_spec(docs)["volumes"] if v["name"] == mounts["/etc/otel-eval"])
    configmap = one(docs, "ConfigMap")
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    config = tmp_path / f"config-{worker_index}.yaml"
    config.write_text(configmap["data"]["config.yaml"])
    args.config = [config]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "environ", pod_environ(container, worker_index))
        return cli.config_from_args(args)


def sidecar_docs() -> list[dict[str, Any]]:
    """The sidecar example's manifests: the Pod and what it mounts."""
    return [d for d in yaml.safe_load_all(SIDECAR.read_text()) if d]


def sidecar_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The otel-eval native sidecar of the example's Pod."""
    (c,) = [c for c in one(docs, "Pod")["spec"]["initContainers"] if c["name"] == "otel-eval"]
    return c


def sidecar_config(docs: list[dict[str, Any]], tmp_path: Path) -> Config:
    """The config the sidecar's `otel-eval serve` runs with: the image's entrypoint and the
    container's args through the real command line, a `--config` under a ConfigMap's mount
    read from that ConfigMap (in the example's manifests)."""
    sidecar = sidecar_container(docs)
    volumes = {v["name"]: v for v in one(docs, "Pod")["spec"]["volumes"]}
    maps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    files: dict[str, str] = {}
    for m in sidecar["volumeMounts"]:
        if "configMap" in volumes[m["name"]]:
            for key, text in maps[volumes[m["name"]]["configMap"]["name"]].items():
                files[f"{m['mountPath']}/{key}"] = text
    argv = entrypoint_argv(*sidecar["args"])
    for i, arg in enumerate(argv):
        if arg in files:
            argv[i] = str(tmp_path / Path(arg).name)
            Path(argv[i]).write_text(files[arg])
    return cli.config_from_args(cli.build_parser().parse_args(argv[1:]))
