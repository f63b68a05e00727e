{{/*
Names and labels (the usual `helm create` scheme), the pod template shared by the StatefulSet
(evaluator mode) and the Deployment (receiver mode), and the otel-eval config file.
*/}}

{{- define "otel-eval.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "otel-eval.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "otel-eval.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "otel-eval.selectorLabels" -}}
app.kubernetes.io/name: {{ include "otel-eval.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "otel-eval.labels" -}}
helm.sh/chart: {{ include "otel-eval.chart" . }}
{{ include "otel-eval.selectorLabels" . }}
app.kubernetes.io/component: {{ .Values.mode }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "otel-eval.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "otel-eval.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "otel-eval.adminScheme" -}}
{{- if .Values.security.tls.secretName }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{- define "otel-eval.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Static Kafka assignment: each StatefulSet pod is one worker, indexed by its ordinal. */}}
{{- define "otel-eval.staticKafka" -}}
{{- if and (eq .Values.mode "evaluator") .Values.kafka.brokers (eq .Values.kafka.assignment "static") }}true{{ end }}
{{- end }}

{{/* Evaluator pods keep the spool (and SQLite, without PostgreSQL) on a volume claim:
acknowledged requests outlive the pod. */}}
{{- define "otel-eval.claim" -}}
{{- if and (eq .Values.mode "evaluator") .Values.persistence.enabled }}true{{ end }}
{{- end }}

{{/* Evaluator pods write to the shared PostgreSQL store. */}}
{{- define "otel-eval.postgresql" -}}
{{- if and (eq .Values.mode "evaluator") .Values.postgresql.existingSecret }}true{{ end }}
{{- end }}

{{/* The path of the mounted CA bundle (caBundle), empty without one. */}}
{{- define "otel-eval.caFile" -}}
{{- if or .Values.caBundle.secretName .Values.caBundle.configMapName }}/etc/otel-eval-ca/{{ .Values.caBundle.key }}{{ end }}
{{- end }}

{{/* Refuse values that would render a release that cannot work. */}}
{{- define "otel-eval.validate" -}}
{{- if not (has .Values.mode (list "evaluator" "receiver")) }}
{{- fail (printf "mode must be evaluator or receiver, got %q" .Values.mode) }}
{{- end }}
{{- if not (has .Values.kafka.assignment (list "group" "static")) }}
{{- fail (printf "kafka.assignment must be group or static, got %q" .Values.kafka.assignment) }}
{{- end }}
{{- if and (include "otel-eval.insecure" .) (not .Values.security.allowInsecureNonLoopback) }}
{{- fail "security.allowInsecureNonLoopback is false: set security.tls.secretName, security.receiverToken and an admin token" }}
{{- end }}
{{- if and .Values.security.tls.clientAuth (not .Values.security.tls.secretName) }}
{{- fail "security.tls.clientAuth needs security.tls.secretName (its ca.crt)" }}
{{- end }}
{{- if and .Values.caBundle.secretName .Values.caBundle.configMapName }}
{{- fail "caBundle: set secretName or configMapName, not both" }}
{{- end }}
{{- $timeout := dig "service" "shutdown_timeout_s" 0 (.Values.config | default (dict)) }}
{{- if and $timeout (ge (float64 $timeout) (float64 .Values.terminationGracePeriodSeconds)) }}
{{- fail (printf "config.service.shutdown_timeout_s %v must be below terminationGracePeriodSeconds %v (the pod is killed then)" $timeout .Values.terminationGracePeriodSeconds) }}
{{- end }}
{{- if and (eq .Values.mode "receiver") (not .Values.kafka.brokers) }}
{{- fail "mode receiver publishes to Kafka: set kafka.brokers" }}
{{- end }}
{{- $ck := (.Values.config | default (dict)).kafka | default (dict) }}
{{- if hasKey $ck "brokers" }}
{{- fail "set kafka.brokers, not config.kafka.brokers (the chart derives the mode from it)" }}
{{- end }}
{{- if and (eq .Values.mode "evaluator") .Values.kafka.brokers (gt (int .Values.kafka.partitions) 0) (gt (int .Values.replicaCount) (int .Values.kafka.partitions)) }}
{{- fail (printf "replicaCount %d exceeds kafka.partitions %d: the extra workers would get no partition" (int .Values.replicaCount) (int .Values.kafka.partitions)) }}
{{- end }}
{{- end }}

{{/*
The otel-eval YAML config: .Values.config with the keys the chart owns set from the other
values (endpoints on 0.0.0.0 at .Values.ports, the store under dataDir, Kafka, secrets).
Secrets never appear here: `${VAR}` placeholders are substituted by otel-eval at load time
from env vars that come from Secrets.
*/}}
{{- define "otel-eval.config" -}}
{{- $cfg := deepCopy (.Values.config | default (dict)) }}
{{- $receiver := dict "grpc_endpoint" (printf "0.0.0.0:%d" (int .Values.ports.grpc)) "http_endpoint" (printf "0.0.0.0:%d" (int .Values.ports.http)) }}
{{- $_ := set $cfg "receiver" (merge $receiver (get $cfg "receiver" | default (dict))) }}
{{- $admin := dict "endpoint" (printf "0.0.0.0:%d" (int .Values.ports.admin)) }}
{{- $_ = set $cfg "admin" (merge $admin (get $cfg "admin" | default (dict))) }}
{{- include "otel-eval.securityConfig" (dict "cfg" $cfg "Values" .Values) }}
{{- include "otel-eval.allowedHosts" (dict "cfg" $cfg "root" .) }}
{{- $store := dict "path" (printf "%s/otel-eval.db" (trimSuffix "/" .Values.dataDir)) }}
{{- if include "otel-eval.postgresql" . }}
{{- $_ = set $store "url" "${OTEL_EVAL_STORE_URL}" }}
{{- end }}
{{- $_ = set $cfg "store" (merge $store (get $cfg "store" | default (dict))) }}
{{- include "otel-eval.workers" (dict "cfg" $cfg "Values" .Values) }}
{{- /* the drain after SIGTERM: the pod's grace less 5 s for the process to exit, unless set */}}
{{- $service := get $cfg "service" | default (dict) }}
{{- $grace := int .Values.terminationGracePeriodSeconds }}
{{- $_ = set $cfg "service" (merge $service (dict "shutdown_timeout_s" (max 1 (sub $grace 5)))) }}
{{- if .Values.kafka.brokers }}
{{- $kafka := dict "brokers" .Values.kafka.brokers }}
{{- if eq .Values.mode "evaluator" }}
{{- $_ = set $kafka "assignment" .Values.kafka.assignment }}
{{- if include "otel-eval.staticKafka" . }}
{{- $_ = set $kafka "worker_count" (int .Values.replicaCount) }}
{{- $_ = set $kafka "worker_index" "${OTEL_EVAL_WORKER_INDEX}" }}
{{- end }}
{{- end }}
{{- $security := get (get $cfg "kafka" | default (dict)) "security" | default (dict) }}
{{- if .Values.kafka.saslPasswordSecret.secretName }}
{{- $security = merge (dict "sasl_password" "${KAFKA_SASL_PASSWORD}") $security }}
{{- end }}
{{- if include "otel-eval.caFile" . }}
{{- /* the config's own tls_ca_file wins (merge: the first dict's keys win) */}}
{{- $security = merge $security (dict "tls_ca_file" (include "otel-eval.caFile" .)) }}
{{- end }}
{{- if $security }}
{{- $_ = set $kafka "security" $security }}
{{- end }}
{{- $_ = set $cfg "kafka" (merge $kafka (get $cfg "kafka" | default (dict))) }}
{{- end }}
{{- if .Values.grafanaTokenSecret.secretName }}
{{- $issues := get $cfg "issues" | default (dict) }}
{{- $grafana := merge (dict "token" "${GRAFANA_TOKEN}") (get $issues "grafana" | default (dict)) }}
{{- $_ = set $issues "grafana" $grafana }}
{{- $_ = set $cfg "issues" $issues }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/* evaluation.workers 0 (otel-eval's default) is one worker process per core the process may
use: without a CPU limit, every core of whatever node the pod lands on. Unless config sets it,
or a CPU limit caps it (cgroup quota), it is the cores requested (resources.requests.cpu,
rounded up; at least 1, which evaluates in the serving process). */}}
{{- define "otel-eval.workers" -}}
{{- $ev := get .cfg "evaluation" | default (dict) }}
{{- if and (not (hasKey $ev "workers")) (not (dig "limits" "cpu" "" (.Values.resources | default (dict)))) }}
{{- $cpu := toString (dig "requests" "cpu" "1" (.Values.resources | default (dict))) }}
{{- $cores := 0.0 }}
{{- if hasSuffix "m" $cpu }}
{{- $cores = divf (float64 (trimSuffix "m" $cpu)) 1000 }}
{{- else }}
{{- $cores = float64 $cpu }}
{{- end }}
{{- $_ := set $ev "workers" (max 1 (int (ceil $cores))) }}
{{- $_ = set .cfg "evaluation" $ev }}
{{- end }}
{{- end }}

{{/* TLS from the mounted Secret, tokens as ${VAR} from Secret env vars, the allow flag. */}}
{{- define "otel-eval.securityConfig" -}}
{{- $sec := .Values.security }}
{{- $receiver := get .cfg "receiver" }}
{{- $admin := get .cfg "admin" }}
{{- if $sec.tls.secretName }}
{{- $tls := dict "cert_file" "/etc/otel-eval-tls/tls.crt" "key_file" "/etc/otel-eval-tls/tls.key" }}
{{- $_ := set $admin "tls" (deepCopy $tls) }}
{{- if $sec.tls.clientAuth }}
{{- $_ = set $tls "client_ca_file" "/etc/otel-eval-tls/ca.crt" }}
{{- end }}
{{- $_ = set $receiver "tls" $tls }}
{{- end }}
{{- if $sec.receiverToken.secretName }}
{{- $_ := set $receiver "bearer_tokens" (dict $sec.receiverToken.name "${OTEL_EVAL_RECEIVER_TOKEN}") }}
{{- end }}
{{- if $sec.adminReadToken.secretName }}
{{- $_ := set $admin "read_tokens" (dict $sec.adminReadToken.name "${OTEL_EVAL_ADMIN_READ_TOKEN}") }}
{{- end }}
{{- if $sec.adminWriteToken.secretName }}
{{- $_ := set $admin "write_tokens" (dict $sec.adminWriteToken.name "${OTEL_EVAL_ADMIN_WRITE_TOKEN}") }}
{{- end }}
{{- if not (and $sec.tls.secretName $sec.receiverToken.secretName) }}
{{- $_ := set $receiver "allow_insecure_non_loopback" true }}
{{- end }}
{{- if not (and $sec.tls.secretName (or $sec.adminReadToken.secretName $sec.adminWriteToken.secretName)) }}
{{- $_ := set $admin "allow_insecure_non_loopback" true }}
{{- end }}
{{- end }}

{{/* Without admin tokens the admin port serves localhost, IP addresses (probes, scrapes) and
admin.allowed_hosts only (DNS rebinding): add the Services' names, short and qualified, to what
config.admin.allowed_hosts lists, so in-cluster clients may call http://<release>:8888, and in
evaluator mode each pod's own name under the headless Service (<pod>.<release>-headless), to
read one pod's results, and the host of serviceMonitor.otelEvalUrl. */}}
{{- define "otel-eval.allowedHosts" -}}
{{- $sec := .root.Values.security }}
{{- if not (or $sec.adminReadToken.secretName $sec.adminWriteToken.secretName) }}
{{- $admin := get .cfg "admin" }}
{{- $hosts := list }}
{{- $ns := .root.Release.Namespace }}
{{- $fullname := include "otel-eval.fullname" .root }}
{{- $names := list $fullname (printf "%s-headless" $fullname) }}
{{- if eq .root.Values.mode "evaluator" }}
{{- range $i := until (int .root.Values.replicaCount) }}
{{- $names = append $names (printf "%s-%d.%s-headless" $fullname $i $fullname) }}
{{- end }}
{{- end }}
{{- range $svc := $names }}
{{- $hosts = concat $hosts (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns)) }}
{{- end }}
{{- with .root.Values.serviceMonitor.otelEvalUrl }}
{{- /* the admin URL as browsers reach it: the dashboard's links to the runs go there */}}
{{- $name := (urlParse .).hostname }}
{{- if regexMatch "^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)*$" $name }}
{{- $hosts = append $hosts $name }}
{{- end }}
{{- end }}
{{- $_ := set $admin "allowed_hosts" (concat $hosts (get $admin "allowed_hosts" | default (list)) | uniq) }}
{{- end }}
{{- end }}

{{/* Whether the listeners lack TLS or tokens (then allowInsecureNonLoopback must be true). */}}
{{- define "otel-eval.insecure" -}}
{{- $sec := .Values.security }}
{{- if not (and $sec.tls.secretName $sec.receiverToken.secretName (or $sec.adminReadToken.secretName $sec.adminWriteToken.secretName)) }}true{{ end }}
{{- end }}

{{/* Environment: worker index, secrets as env vars (substituted into the config), extras. */}}
{{- define "otel-eval.env" -}}
{{- if include "otel-eval.staticKafka" . }}
- name: OTEL_EVAL_WORKER_INDEX
  valueFrom:
    fieldRef:
      fieldPath: metadata.labels['apps.kubernetes.io/pod-index']
{{- end }}
{{- if include "otel-eval.postgresql" . }}
- name: OTEL_EVAL_STORE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.postgresql.existingSecret }}
      key: {{ .Values.postgresql.key }}
{{- end }}
{{- with include "otel-eval.caFile" . }}
- name: PGSSLROOTCERT
  value: {{ . | quote }}
{{- end }}
{{- range .Values.judgeSecretEnv }}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secretName }}
      key: {{ .key }}
{{- end }}
{{- with .Values.grafanaTokenSecret }}
{{- if .secretName }}
- name: GRAFANA_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .secretName }}
      key: {{ .key }}
{{- end }}
{{- end }}
{{- with .Values.kafka.saslPasswordSecret }}
{{- if and $.Values.kafka.brokers .secretName }}
- name: KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .secretName }}
      key: {{ .key }}
{{- end }}
{{- end }}
{{- range $var, $ref := dict "OTEL_EVAL_RECEIVER_TOKEN" .Values.security.receiverToken "OTEL_EVAL_ADMIN_READ_TOKEN" .Values.security.adminReadToken "OTEL_EVAL_ADMIN_WRITE_TOKEN" .Values.security.adminWriteToken }}
{{- if $ref.secretName }}
- name: {{ $var }}
  valueFrom:
    secretKeyRef:
      name: {{ $ref.secretName }}
      key: {{ $ref.key }}
{{- end }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "otel-eval.podTemplate" -}}
metadata:
  labels:
    {{- include "otel-eval.selectorLabels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    # Pods roll when the rendered config changes (e.g. worker_count after scaling).
    checksum/config: {{ include "otel-eval.config" . | sha256sum }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "otel-eval.serviceAccountName" . }}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  containers:
    - name: otel-eval
      image: {{ include "otel-eval.image" . | quote }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      # Not the image's entrypoint (its defaults file first): the rendered config is the one
      # source, the endpoints on 0.0.0.0 at .Values.ports included.
      command: ["otel-eval"]
      args:
        - serve
        - --config
        - /etc/otel-eval/config.yaml
        {{- if eq .Values.mode "receiver" }}
        - --kafka-publish
        {{- end }}
      ports:
        - name: otlp-grpc
          containerPort: {{ .Values.ports.grpc }}
          protocol: TCP
        - name: otlp-http
          containerPort: {{ .Values.ports.http }}
          protocol: TCP
        - name: admin
          containerPort: {{ .Values.ports.admin }}
          protocol: TCP
      {{- $env := include "otel-eval.env" . }}
      {{- if $env }}
      env:
        {{- $env | nindent 8 }}
      {{- end }}
      startupProbe:
        httpGet:
          path: /healthz
          port: admin
          scheme: {{ include "otel-eval.adminScheme" . }}
        {{- toYaml .Values.probes.startup | nindent 8 }}
      livenessProbe:
        httpGet:
          path: /healthz
          port: admin
          scheme: {{ include "otel-eval.adminScheme" . }}
        {{- toYaml .Values.probes.liveness | nindent 8 }}
      readinessProbe:
        httpGet:
          path: /readyz
          port: admin
          scheme: {{ include "otel-eval.adminScheme" . }}
        {{- toYaml .Values.probes.readiness | nindent 8 }}
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      volumeMounts:
        - name: config
          mountPath: /etc/otel-eval
          readOnly: true
        - name: data
          mountPath: {{ .Values.dataDir }}
        - name: tmp
          mountPath: /tmp
        {{- if .Values.security.tls.secretName }}
        - name: tls
          mountPath: /etc/otel-eval-tls
          readOnly: true
        {{- end }}
        {{- if include "otel-eval.caFile" . }}
        - name: ca
          mountPath: /etc/otel-eval-ca
          readOnly: true
        {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ include "otel-eval.fullname" . }}
    - name: tmp
      emptyDir: {}
    {{- if .Values.security.tls.secretName }}
    # a Secret volume (not subPath): the kubelet swaps it on rotation and otel-eval reloads
    - name: tls
      secret:
        secretName: {{ .Values.security.tls.secretName }}
    {{- end }}
    {{- with .Values.caBundle.secretName }}
    - name: ca
      secret:
        secretName: {{ . }}
    {{- end }}
    {{- with .Values.caBundle.configMapName }}
    - name: ca
      configMap:
        name: {{ . }}
    {{- end }}
    {{- if not (include "otel-eval.claim" .) }}
    - name: data
      emptyDir: {}
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
