"""The Helm chart, rendered by a real helm: lint, Kubernetes schema validation of every manifest
(default values and every example), and the behaviour that could silently break: the mode's
workload and storage, the rendered otel-eval config loading with the pod's environment, ports,
probes, Kafka worker indexes, secrets as env, the PrometheusRule equal to Grafana's rules."""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from deploy_files import (
    CHART,
    CHART_RULES,
    EXAMPLES,
    GRAFANA_RULES,
    NAMESPACE,
    SIDECAR,
    VALUES_FILES,
    Helm,
    dockerfile_stages,
    docs_of_kind,
    main_container,
    one,
    pod_config,
    pod_spec,
    sidecar_config,
    sidecar_container,
    sidecar_docs,
    values_args,
    workload,
)

from otel_eval.app.config import Config, check_exposure
from otel_eval.base.configcheck import parse_endpoint

# The chart's kubeVersion floor and helm's own client version: fields must exist in both.
KUBE_VERSIONS = ("1.28.0", "1.35.0")
CRDS = {"ServiceMonitor", "PrometheusRule"}
VALUES = [None, *VALUES_FILES]
VALUES_IDS = ["defaults", *(p.stem for p in VALUES_FILES)]


def _defaults() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return loaded


def _default_ports() -> dict[str, int]:
    c = Config()
    return {"otlp-grpc": parse_endpoint(c.receiver.grpc_endpoint)[1],
            "otlp-http": parse_endpoint(c.receiver.http_endpoint)[1],
            "admin": parse_endpoint(c.admin.endpoint)[1]}


def _validate(doc: dict[str, Any]) -> None:
    for version in KUBE_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            where = "/".join(str(p) for p in e.path)
            raise AssertionError(f"{doc['kind']} {doc['metadata'].get('name')} invalid for "
                                 f"Kubernetes {version} at {where}: {e.message}") from None


@pytest.mark.parametrize("values", VALUES, ids=VALUES_IDS)
def test_helm_lint(helm: Helm, values: Path | None) -> None:
    r = helm.run("lint", "--strict", str(CHART), *values_args(values))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("values", VALUES, ids=VALUES_IDS)
def test_manifests_match_kubernetes_schemas(helm: Helm, values: Path | None) -> None:
    docs = helm.template(*values_args(values))
    for doc in docs:
        assert doc["metadata"]["name"].startswith("otel-eval"), doc["metadata"]
        if doc["kind"] in CRDS:
            assert doc["apiVersion"] == "monitoring.coreos.com/v1", doc["apiVersion"]
            continue  # structure checked below (no schema shipped for CRDs)
        _validate(doc)


def test_schema_validation_is_strict(helm: Helm) -> None:
    """A misspelt field fails validation, so the check above is not vacuous."""
    bad = copy.deepcopy(workload(helm.template()))
    bad["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(AssertionError, match="livenesProbe"):
        _validate(bad)


def _keys_exist(example: dict[str, Any], defaults: dict[str, Any], path: str) -> None:
    for key, value in example.items():
        assert key in defaults, f"{path}{key} is not a chart value (typo?)"
        default = defaults[key]
        if isinstance(value, dict) and isinstance(default, dict) and default \
                and key != "config":  # config keys are checked by the otel-eval loader
            _keys_exist(value, default, f"{path}{key}.")


def test_examples_use_only_chart_values() -> None:
    """Helm ignores unknown values silently; a misspelt key in an example would do nothing."""
    assert {p.name for p in EXAMPLES.iterdir()} == {SIDECAR.name, *(p.name for p in VALUES_FILES)}
    modes = set()
    for path in VALUES_FILES:
        example = yaml.safe_load(path.read_text())
        _keys_exist(example, _defaults(), f"{path.name}: ")
        modes.add(example.get("mode", "evaluator"))
    assert modes == {"evaluator", "receiver"}


@pytest.mark.parametrize("values", VALUES, ids=VALUES_IDS)
def test_config_loads_and_ports_agree(helm: Helm, values: Path | None, tmp_path: Path) -> None:
    docs = helm.template(*values_args(values))
    cfg = pod_config(docs, tmp_path)
    endpoints = {"otlp-grpc": cfg.receiver.grpc_endpoint, "otlp-http": cfg.receiver.http_endpoint,
                 "admin": cfg.admin.endpoint}
    bound = {name: parse_endpoint(ep) for name, ep in endpoints.items()}
    assert bound == {name: ("0.0.0.0", port) for name, port in _default_ports().items()}
    container = {p["name"]: p["containerPort"] for p in main_container(docs)["ports"]}
    assert container == _default_ports()
    for service in docs_of_kind(docs, "Service"):
        ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
        assert ports == {n: (port, n) for n, port in _default_ports().items()}, service
    mounted = [m["mountPath"] for m in main_container(docs)["volumeMounts"]]
    assert str(Path(cfg.store.path).parent) in mounted, (cfg.store.path, mounted)


@pytest.mark.parametrize("values", VALUES, ids=VALUES_IDS)
def test_probes_hit_admin_health_paths(helm: Helm, values: Path | None) -> None:
    container = main_container(helm.template(*values_args(values)))
    admin = {p["name"]: p["containerPort"] for p in container["ports"]}["admin"]
    assert admin == _default_ports()["admin"]
    expected = {"livenessProbe": "/healthz", "readinessProbe": "/readyz",
                "startupProbe": "/healthz"}
    for probe, path in expected.items():
        get = container[probe]["httpGet"]
        assert (get["path"], get["port"]) == (path, "admin"), (probe, get)


def test_evaluator_default_is_a_statefulset_with_a_volume_claim(helm: Helm,
                                                                 tmp_path: Path) -> None:
    docs = helm.template()
    sts = one(docs, "StatefulSet")
    assert not docs_of_kind(docs, "Deployment")
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    mount = next(m for m in main_container(docs)["volumeMounts"]
                 if m["name"] == claim["metadata"]["name"])
    assert Path(pod_config(docs, tmp_path).store.path).parent == Path(mount["mountPath"])
    assert claim["spec"]["resources"]["requests"]["storage"] == _defaults()["persistence"]["size"]
    # The data volume is the claim, not an emptyDir shadowing it.
    assert claim["metadata"]["name"] not in {v["name"] for v in pod_spec(docs)["volumes"]}
    headless = [s for s in docs_of_kind(docs, "Service") if s["spec"].get("clusterIP") == "None"]
    assert [s["metadata"]["name"] for s in headless] == [sts["spec"]["serviceName"]]
    assert "--kafka-publish" not in main_container(docs)["args"]
    ctx = pod_spec(docs)["securityContext"]
    assert ctx["runAsNonRoot"] and ctx["fsGroup"] == ctx["runAsUser"] != 0


def test_readme_says_where_a_scaled_down_pods_runs_in_flight_wait(helm: Helm,
                                                                   tmp_path: Path) -> None:
    """A scale-down's SIGTERM is no verdict (a pod cannot tell it from a restart): the removed
    pod's runs in flight stay unjudged in its spool, which nothing reads until a scale-up
    brings that ordinal back. The README promised only that they are "resumed by the next
    start"; it now says where they wait and what keeps them, and that must be what the chart
    renders: the spool on the volume claim, the claim kept on a scale-down."""
    readme = (CHART / "README.md").read_text()
    assert "## Scaling down" in readme, "helm/otel-eval/README.md says nothing of scale-down"
    section = " ".join(readme.split("## Scaling down", 1)[1].split("\n## ", 1)[0].split())
    kept = _defaults()["persistence"]["retentionPolicy"]["whenScaled"]
    assert f"`persistence.retentionPolicy.whenScaled: {kept}`, the default" in section
    docs = helm.template()
    sts = one(docs, "StatefulSet")
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] == kept == "Retain"
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    mount = next(m for m in main_container(docs)["volumeMounts"]
                 if m["name"] == claim["metadata"]["name"])
    spool = Path(pod_config(docs, tmp_path).store.spool_file() or "")
    assert spool.parent == Path(mount["mountPath"])  # what the scale-up's start replays
    row = next(line for line in readme.splitlines()
               if line.startswith("| `terminationGracePeriodSeconds` |"))
    assert "(#scaling-down)" in row


def test_receiver_mode_is_a_stateless_publishing_deployment(helm: Helm, tmp_path: Path) -> None:
    docs = helm.template("-f", str(EXAMPLES / "values-receiver-kafka.yaml"))
    deployment = one(docs, "Deployment")
    assert not docs_of_kind(docs, "StatefulSet")
    assert not docs_of_kind(docs, "PersistentVolumeClaim")
    assert "volumeClaimTemplates" not in deployment["spec"]
    assert all("persistentVolumeClaim" not in v for v in pod_spec(docs)["volumes"])
    assert "--kafka-publish" in main_container(docs)["args"]
    assert deployment["spec"]["replicas"] == 3
    cfg = pod_config(docs, tmp_path)
    assert cfg.kafka.enabled and cfg.kafka.compression == "zstd"
    if "publish" in {f.name for f in dataclasses.fields(cfg.kafka)}:  # kafka.publish (new)
        assert cfg.kafka.publish is True


def test_receiver_mode_without_brokers_is_refused(helm: Helm) -> None:
    r = helm.run("template", "x", str(CHART), "--set", "mode=receiver")
    assert r.returncode != 0 and "set kafka.brokers" in r.stderr, r.stderr


def test_kafka_workers_take_disjoint_partitions_by_ordinal(helm: Helm, tmp_path: Path) -> None:
    example = EXAMPLES / "values-kafka-workers.yaml"
    docs = helm.template("-f", str(example))
    values = yaml.safe_load(example.read_text())
    replicas, partitions = values["replicaCount"], values["kafka"]["partitions"]
    assert one(docs, "StatefulSet")["spec"]["replicas"] == replicas
    owners: dict[int, int] = {}
    for ordinal in range(replicas):
        kafka = pod_config(docs, tmp_path, worker_index=ordinal).kafka
        assert (kafka.assignment, kafka.worker_count, kafka.worker_index) == \
            ("static", replicas, ordinal)
        assert kafka.security.sasl_password == "secret-kafka_sasl_password"
        mine = [p for p in range(partitions) if p % kafka.worker_count == kafka.worker_index]
        assert mine, f"worker {ordinal} would get no partition"
        owners.update({p: ordinal for p in mine})
    assert sorted(owners) == list(range(partitions))
    r = helm.run("template", "x", str(CHART), "-f", str(example),
                 "--set", f"replicaCount={partitions + 1}")
    assert r.returncode != 0 and "exceeds kafka.partitions" in r.stderr, r.stderr


def test_scaling_workers_changes_the_config_checksum(helm: Helm) -> None:
    """worker_count is in the config: scaling must restart every worker (new assignment)."""
    example = ("-f", str(EXAMPLES / "values-kafka-workers.yaml"))
    sums = {workload(helm.template(*example, "--set", f"replicaCount={n}"))["spec"]["template"]
            ["metadata"]["annotations"]["checksum/config"] for n in (2, 3)}
    assert len(sums) == 2


def test_judge_and_grafana_secrets_reach_the_config_as_env(helm: Helm, tmp_path: Path) -> None:
    docs = helm.template("-f", str(EXAMPLES / "values-judge.yaml"))
    env = {e["name"]: e for e in main_container(docs)["env"]}
    assert env["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"] == \
        {"name": "llm-keys", "key": "openai-api-key"}
    assert env["GRAFANA_TOKEN"]["valueFrom"]["secretKeyRef"] == \
        {"name": "grafana-token", "key": "token"}
    cfg = pod_config(docs, tmp_path)
    assert cfg.issues.grafana.token == "secret-grafana_token"
    assert cfg.judge.model == "openai/gpt-4o-mini"
    assert "secret-" not in one(docs, "ConfigMap")["data"]["config.yaml"]
    assert not docs_of_kind(docs, "Secret"), "the chart references Secrets, never creates them"


def test_service_monitor_scrapes_the_main_service_once(helm: Helm) -> None:
    docs = helm.template("-f", str(EXAMPLES / "values-monitoring.yaml"))
    monitor = one(docs, "ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    services = [s for s in docs_of_kind(docs, "Service")
                if selector.items() <= s["metadata"]["labels"].items()]
    assert len(services) == 1 and services[0]["spec"].get("clusterIP") != "None", services
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["port"] in {p["name"] for p in services[0]["spec"]["ports"]}
    assert endpoint["port"] == "admin"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    for key in ("interval", "scrapeTimeout"):
        assert re.fullmatch(r"\d+[smh]", endpoint[key]), endpoint
    # the label the dashboard's otel_eval_url variable reads, as grafana/prometheus.yml sets it
    assert endpoint["relabelings"] == [{"targetLabel": "otel_eval_url",
                                        "replacement": "https://otel-eval.example.com"}]
    # the scraper lives in another namespace: the example admits it to the admin port (the
    # default, pods of the release namespace only, refused its scrapes: OtelEvalDown paged)
    (_, admin) = one(docs, "NetworkPolicy")["spec"]["ingress"]
    assert [p["port"] for p in admin["ports"]] == ["admin"]
    assert {"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "monitoring"}}} in admin["from"]
    assert {"podSelector": {}} in admin["from"]


def test_prometheus_rule_is_the_grafana_rule_file(helm: Helm) -> None:
    assert CHART_RULES.read_bytes() == GRAFANA_RULES.read_bytes(), (
        f"{CHART_RULES} drifted from {GRAFANA_RULES}: copy it over")
    docs = helm.template("-f", str(EXAMPLES / "values-monitoring.yaml"))
    rule = one(docs, "PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(GRAFANA_RULES.read_text())["groups"]
    for group in rule["spec"]["groups"]:
        assert group["name"] and group["rules"]
        for r in group["rules"]:
            assert r["alert"] and r["expr"] and r["labels"]["severity"], r
    assert not docs_of_kind(helm.template(), "PrometheusRule")
    assert not docs_of_kind(helm.template(), "ServiceMonitor")


def test_sidecar_example(tmp_path: Path) -> None:
    docs = sidecar_docs()
    for doc in docs:
        _validate(doc)
    pod = one(docs, "Pod")
    sidecar = sidecar_container(docs)
    assert sidecar.get("restartPolicy") == "Always", "a native sidecar outlives the agent"
    assert "command" not in sidecar, "the example relies on the image's entrypoint"
    # The effective command line: the Dockerfile's ENTRYPOINT followed by the pod's args,
    # its --config read from the example's ConfigMap.
    cfg = sidecar_config(docs, tmp_path)
    ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
    assert ports == {"otlp-grpc": parse_endpoint(cfg.receiver.grpc_endpoint)[1],
                     "otlp-http": parse_endpoint(cfg.receiver.http_endpoint)[1],
                     "admin": parse_endpoint(cfg.admin.endpoint)[1]} == _default_ports()
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert (sidecar[probe]["httpGet"]["path"], sidecar[probe]["httpGet"]["port"]) == \
            (path, "admin")
    mounts = {m["mountPath"] for m in sidecar["volumeMounts"]}
    workdir = [r for k, r in dockerfile_stages()[-1] if k == "WORKDIR"][-1]
    assert str((Path(workdir) / cfg.store.path).parent) in mounts  # relative: the workdir's
    (agent,) = pod["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"http://localhost:{ports['otlp-grpc']}"


@pytest.mark.parametrize("values", VALUES, ids=VALUES_IDS)
def test_evaluation_workers_follow_the_pod_not_the_node(helm: Helm, values: Path | None,
                                                       tmp_path: Path) -> None:
    """evaluation.workers 0 is one worker process per core the process may use: the node's
    cores when the container has no CPU limit (the chart's default). A pod requesting 250m
    then started 64 interpreters on a 64-core node, past its memory limit (OOM-killed at
    start), which values.yaml says config.assembly and config.judge bound. The count must come
    from the pod's spec: a CPU limit (the cgroup quota caps it) or a worker count."""
    docs = helm.template(*values_args(values))
    limits = main_container(docs)["resources"].get("limits", {})
    workers = pod_config(docs, tmp_path).evaluation.workers
    assert workers > 0 or "cpu" in limits, (workers, limits)


@pytest.mark.parametrize(("cpu", "workers"), [("250m", 1), ("1", 1), ("1500m", 2), ("4", 4)])
def test_without_a_cpu_limit_workers_are_the_cores_requested(helm: Helm, tmp_path: Path,
                                                             cpu: str, workers: int) -> None:
    docs = helm.template("--set-string", f"resources.requests.cpu={cpu}")
    assert pod_config(docs, tmp_path).evaluation.workers == workers
    limited = helm.template("--set-string", f"resources.requests.cpu={cpu}",
                            "--set-string", "resources.limits.cpu=2")
    assert pod_config(limited, tmp_path).evaluation.workers == 0  # the quota caps it
    mine = helm.template("--set", "config.evaluation.workers=3")
    assert pod_config(mine, tmp_path).evaluation.workers == 3


def test_sidecar_example_starts_and_keeps_otlp_in_the_pod(tmp_path: Path) -> None:
    """serve refuses to listen beyond the host without TLS and tokens unless allowed
    (check_exposure, exit 2): the example's command line must pass it, or the native sidecar
    crash-loops and the agent never starts. The agent exports to localhost, so OTLP need not
    be reachable from other pods; the admin port must be (kubelet probes reach the pod IP)."""
    docs = sidecar_docs()
    sidecar = sidecar_container(docs)
    cfg = sidecar_config(docs, tmp_path)
    check_exposure(cfg)
    # as the chart's pods: a worker count from the pod, not one per core of the node
    assert cfg.evaluation.workers > 0 or "cpu" in sidecar["resources"].get("limits", {})
    for endpoint in (cfg.receiver.grpc_endpoint, cfg.receiver.http_endpoint):
        assert parse_endpoint(endpoint)[0] in ("localhost", "127.0.0.1", "::1"), endpoint
    assert parse_endpoint(cfg.admin.endpoint)[0] == "0.0.0.0"


def test_evaluator_without_persistence_uses_an_emptydir(helm: Helm, tmp_path: Path) -> None:
    docs = helm.template("--set", "persistence.enabled=false")
    sts = one(docs, "StatefulSet")
    assert "volumeClaimTemplates" not in sts["spec"]
    assert "persistentVolumeClaimRetentionPolicy" not in sts["spec"]
    store_dir = str(Path(pod_config(docs, tmp_path).store.path).parent)
    mount = next(m for m in main_container(docs)["volumeMounts"] if m["mountPath"] == store_dir)
    volume = next(v for v in pod_spec(docs)["volumes"] if v["name"] == mount["name"])
    assert volume == {"name": mount["name"], "emptyDir": {}}
    for doc in docs:
        _validate(doc)


def test_a_postgresql_store_keeps_the_spool_on_a_volume_claim(helm: Helm,
                                                               tmp_path: Path) -> None:
    """Acknowledged means durable: the spool (OTLP requests acknowledged, runs in flight) is on
    the pod's claim with the PostgreSQL store too, so a rolling update resumes those runs."""
    docs = helm.template("--set", "postgresql.existingSecret=pg", "--set", "postgresql.key=u")
    sts = one(docs, "StatefulSet")
    env = {e["name"]: e for e in main_container(docs)["env"]}
    assert env["OTEL_EVAL_STORE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "pg", "key": "u"}
    cfg = pod_config(docs, tmp_path)
    assert cfg.store.url == "postgresql://otel-eval:secret-otel_eval_store_url@postgresql:5432/" \
        "otel_eval"
    assert "secret-" not in one(docs, "ConfigMap")["data"]["config.yaml"]
    spool = cfg.store.spool_file()
    assert spool is not None
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    mount = next(m for m in main_container(docs)["volumeMounts"]
                 if m["name"] == claim["metadata"]["name"])
    assert Path(spool).parent == Path(mount["mountPath"])
    assert claim["metadata"]["name"] not in {v["name"] for v in pod_spec(docs)["volumes"]}
    for doc in docs:
        _validate(doc)
    # persistence.enabled=false: the spool on an emptyDir, lost with the pod
    ephemeral = helm.template("--set", "postgresql.existingSecret=pg",
                              "--set", "persistence.enabled=false")
    assert "volumeClaimTemplates" not in one(ephemeral, "StatefulSet")["spec"]
    # the Kafka workers example shares one store and replays from the topic: no claims;
    # the receiver mode never opens one
    workers = helm.template("-f", str(EXAMPLES / "values-kafka-workers.yaml"))
    assert "volumeClaimTemplates" not in one(workers, "StatefulSet")["spec"]
    assert pod_config(workers, tmp_path).store.url.startswith("postgresql://")
    receiver = helm.template("-f", str(EXAMPLES / "values-receiver-kafka.yaml"),
                             "--set", "postgresql.existingSecret=pg")
    assert "OTEL_EVAL_STORE_URL" not in {e["name"] for e in main_container(receiver).get("env", [])}
    assert pod_config(receiver, tmp_path).store.url == ""


@pytest.mark.parametrize(("setting", "message"), [
    ("mode=collector", "mode must be evaluator or receiver"),
    ("kafka.assignment=sticky", "kafka.assignment must be group or static"),
    ("config.kafka.brokers=k:9092", "set kafka.brokers, not config.kafka.brokers"),
    ("caBundle.secretName=a,caBundle.configMapName=b", "set secretName or configMapName"),
])
def test_invalid_values_are_refused(helm: Helm, setting: str, message: str) -> None:
    r = helm.run("template", "x", str(CHART), "--set", setting)
    assert r.returncode != 0 and message in r.stderr, r.stderr


def test_notes_warn_about_unpartitioned_replicas(helm: Helm) -> None:
    r = helm.run("install", "x", str(CHART), "--dry-run=client", "--namespace", NAMESPACE,
                 "--set", "replicaCount=2", "--set", "persistence.enabled=false")
    assert r.returncode == 0, r.stderr
    notes = r.stdout.split("NOTES:", 1)[1]
    assert f"x-otel-eval.{NAMESPACE}.svc:4317" in notes
    assert "2 evaluator pods behind one Service, without Kafka" in notes
    assert "persistence is disabled" in notes
    r = helm.run("install", "x", str(CHART), "--dry-run=client", "--namespace", NAMESPACE,
                 "-f", str(EXAMPLES / "values-kafka-workers.yaml"))
    assert r.returncode == 0 and "WARNING" not in r.stdout.split("NOTES:", 1)[1], r.stdout


@pytest.mark.parametrize("extra", [(), ("--set", "postgresql.existingSecret=pg")])
def test_notes_say_what_an_emptydir_loses(helm: Helm, extra: tuple[str, ...]) -> None:
    """Without a claim the spool's acknowledged runs in flight go with the pod: the NOTES say
    so, with either store."""
    r = helm.run("install", "x", str(CHART), "--dry-run=client", "--namespace", NAMESPACE,
                 "--set", "persistence.enabled=false", *extra)
    assert r.returncode == 0, r.stderr
    notes = r.stdout.split("NOTES:", 1)[1]
    assert "persistence is disabled" in notes and "spool" in notes, notes


def test_the_drain_after_sigterm_follows_the_pods_grace(helm: Helm, tmp_path: Path) -> None:
    """serve drains for service.shutdown_timeout_s; the chart derives it from
    terminationGracePeriodSeconds, so a longer grace gives the judge that much longer, and
    refuses a configured one the kubelet would cut short."""
    default = pod_config(helm.template(), tmp_path).service.shutdown_timeout_s
    assert 0 < default < _defaults()["terminationGracePeriodSeconds"]
    longer = helm.template("--set", "terminationGracePeriodSeconds=300")
    assert pod_config(longer, tmp_path).service.shutdown_timeout_s == 295
    assert pod_spec(longer)["terminationGracePeriodSeconds"] == 300
    own = helm.template("--set", "config.service.shutdown_timeout_s=40")
    assert pod_config(own, tmp_path).service.shutdown_timeout_s == 40
    r = helm.run("template", "x", str(CHART), "--set", "config.service.shutdown_timeout_s=60")
    assert r.returncode != 0 and "below terminationGracePeriodSeconds" in r.stderr, r.stderr


def test_readme_documents_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    table = {m for row in re.findall(r"^\| (.+?) \|", readme, flags=re.M)
             for m in re.findall(r"`([A-Za-z]+)`", row)}
    missing = set(_defaults()) - table
    assert not missing, f"helm/otel-eval/README.md values table lacks {sorted(missing)}"
    for path in (*VALUES_FILES, SIDECAR):
        assert f"examples/{path.name}" in readme, path.name


def _scrape_job(monitor: dict[str, Any], service: dict[str, Any]) -> str:
    """The `job` label prometheus-operator gives the ServiceMonitor's targets: the Service's
    name, or the value of the Service label named by spec.jobLabel, then the endpoint's
    relabelings (a static replacement into `job`)."""
    job: str = service["metadata"]["name"]
    if "jobLabel" in monitor["spec"]:
        job = service["metadata"]["labels"][monitor["spec"]["jobLabel"]]
    (endpoint,) = monitor["spec"]["endpoints"]
    for relabel in endpoint.get("relabelings", []):
        if relabel.get("targetLabel") == "job":
            assert set(relabel) <= {"targetLabel", "replacement", "action"}, relabel
            job = relabel["replacement"]
    return job


@pytest.mark.parametrize("names", [(), ("--set", "fullnameOverride=agent-evaluator")],
                         ids=["defaults", "fullnameOverride"])
def test_otel_eval_down_selects_the_service_monitors_job(helm: Helm,
                                                         names: tuple[str, ...]) -> None:
    """OtelEvalDown pages on up == 0 of the job it names: the job the chart's ServiceMonitor
    gives the targets must be one it selects, whatever the release's names (a release named
    otherwise than otel-eval was never paged for being down)."""
    docs = helm.template("-f", str(EXAMPLES / "values-monitoring.yaml"), *names)
    monitor = one(docs, "ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    (service,) = [s for s in docs_of_kind(docs, "Service")
                  if selector.items() <= s["metadata"]["labels"].items()]
    rules = {r["alert"]: r for g in one(docs, "PrometheusRule")["spec"]["groups"]
             for r in g["rules"]}
    matcher = re.fullmatch(r'up\{job=~"([^"]+)"\} == 0', rules["OtelEvalDown"]["expr"].strip())
    assert matcher, rules["OtelEvalDown"]["expr"]
    job = _scrape_job(monitor, service)
    assert re.fullmatch(matcher.group(1), job), (job, matcher.group(1))


@pytest.mark.parametrize("source", ["secretName", "configMapName"])
def test_a_private_ca_is_mounted_for_postgresql_and_kafka(helm: Helm, tmp_path: Path,
                                                          source: str) -> None:
    """A PostgreSQL URL with ``sslmode=verify-full`` (values.yaml suggests it) or Kafka over
    SSL/SASL_SSL signed by a private CA needs that CA in the pod: ``caBundle`` mounts it
    read-only, points libpq (``PGSSLROOTCERT``) and ``kafka.security.tls_ca_file`` at it.
    Without it no value could put the file in the pod (read-only root file system)."""
    docs = helm.template("--set", "postgresql.existingSecret=pg", "--set", "kafka.brokers=k:9093",
                         "--set", f"caBundle.{source}=private-ca", "--set", "caBundle.key=ca.pem")
    container, spec = main_container(docs), pod_spec(docs)
    mount = next(m for m in container["volumeMounts"] if m["name"] == "ca")
    assert mount.get("readOnly") is True and "subPath" not in mount  # rotation reaches it
    volume = next(v for v in spec["volumes"] if v["name"] == "ca")
    if source == "secretName":
        assert volume["secret"]["secretName"] == "private-ca"
    else:
        assert volume["configMap"]["name"] == "private-ca"
    ca_file = f"{mount['mountPath']}/ca.pem"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PGSSLROOTCERT"] == ca_file  # libpq's sslrootcert
    cfg = pod_config(docs, tmp_path)
    assert cfg.kafka.security.tls_ca_file == ca_file
    for doc in docs:
        _validate(doc)
    # a tls_ca_file of the config's own wins; no CA bundle: nothing mounted, nothing set
    own = helm.template("--set", "kafka.brokers=k:9093", "--set", "caBundle.secretName=ca",
                        "--set", "config.kafka.security.tls_ca_file=/x/ca.pem")
    assert pod_config(own, tmp_path).kafka.security.tls_ca_file == "/x/ca.pem"
    plain = helm.template("--set", "kafka.brokers=k:9093")
    assert "ca" not in {v["name"] for v in pod_spec(plain)["volumes"]}
    assert pod_config(plain, tmp_path).kafka.security.tls_ca_file == ""
