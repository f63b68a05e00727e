# otel-eval: the streaming evaluator (`otel-eval serve`) as a container image.
#
#   docker build -t otel-eval .
#   docker run --stop-timeout 35 -p 4317:4317 -p 4318:4318 -p 8888:8888 \
#       -v otel-eval:/var/lib/otel-eval -v ./certs:/certs:ro -e OTLP_TOKEN=... \
#       otel-eval --config /certs/otel-eval.yaml
#
# --stop-timeout: on `docker stop` serve drains for up to service.shutdown_timeout_s (30 s:
# stores the runs that ended, drains the judge, flushes the exporters), and Docker sends
# SIGKILL after 10 s unless told otherwise (here, `docker stop --time`, compose's
# stop_grace_period). Give it the drain and 5 s more, or lower shutdown_timeout_s. A
# Dockerfile cannot set it (its default STOPSIGNAL, SIGTERM, is what serve drains on).
#
# The listeners bind 0.0.0.0 (a container is reached through its interfaces), so otel-eval
# refuses to start until the config gives them TLS (receiver.tls, admin.tls) and bearer
# tokens (receiver.bearer_tokens, admin.read_tokens / write_tokens, `${OTLP_TOKEN}` from the
# environment), or until you accept plain text explicitly on a network you control:
#   docker run ... otel-eval --allow-insecure-non-loopback
#
# Two stages: the build stage installs the dependencies into a virtualenv from the lock file
# requirements/service.txt (exact versions, every download checked against its sha256 with
# --require-hashes; refreshed by scripts/lock, described by the SBOM scripts/sbom writes), then
# the package itself without dependencies, built by the locked setuptools
# (requirements/build.txt) rather than one fetched unpinned. Wheels only (--only-binary): no
# dependency's build code runs, and no compiler is needed (each ships manylinux wheels). The
# runtime stage copies only that virtualenv. The service runs as an unprivileged numeric user,
# so Kubernetes' `runAsNonRoot` can verify it without resolving a name. Arguments given to
# `docker run` (or a pod's `args`) are appended to the entrypoint. The image's endpoints
# (0.0.0.0:4317, 4318, 8888) are defaults, in the file docker/otel-eval.yaml the entrypoint
# reads first: `--config FILE` is read over it key by key, so the file's receiver.*_endpoint
# and admin.endpoint win (`grpc_endpoint: ""` turns gRPC off) and what it leaves out stays
# the image's; a flag (`--grpc-endpoint 0.0.0.0:14317`) wins over both. No endpoint flags
# here: they would win over the file. The store is the configuration's: by default
# `otel-eval.db` in the working directory, the /var/lib/otel-eval volume (no `--store` here,
# which would win over a file's store.path and store.url: a fleet configured for PostgreSQL
# kept SQLite).

ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/otel-eval
WORKDIR /src
# Only what the build reads (see .dockerignore): the locks, metadata, readme, the package.
COPY requirements/service.txt requirements/build.txt ./requirements/
RUN /opt/otel-eval/bin/pip install --no-cache-dir --require-hashes --only-binary :all: --no-deps \
        -r requirements/service.txt -r requirements/build.txt
COPY pyproject.toml README.md ./
COPY otel_eval ./otel_eval
RUN /opt/otel-eval/bin/pip install --no-cache-dir --no-deps --no-build-isolation .

FROM python:${PYTHON_VERSION}-slim-bookworm
LABEL org.opencontainers.image.title="otel-eval" \
      org.opencontainers.image.description="OTLP receiver that evaluates LLM-agent traces as trajectories" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/otel-eval/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
# uid/gid 10001: outside the range of system and default login users.
RUN groupadd --system --gid 10001 otel-eval \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin otel-eval \
    && mkdir -p /var/lib/otel-eval \
    && chown 10001:10001 /var/lib/otel-eval
COPY --from=build /opt/otel-eval /opt/otel-eval
COPY docker/otel-eval.yaml /usr/share/otel-eval/image.yaml
WORKDIR /var/lib/otel-eval
VOLUME ["/var/lib/otel-eval"]
USER 10001:10001
# OTLP/gRPC, OTLP/HTTP, admin (/metrics, /healthz, /readyz, results API).
EXPOSE 4317 4318 8888
# GET /healthz on the admin endpoint serve (PID 1) was configured with: its command line read
# as serve reads it, so a --config file's admin.endpoint and admin.tls (HTTPS, the certificate
# not verified: it only asks the local process whether it is alive) are the probe's too.
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
    CMD ["python", "-m", "otel_eval.app.healthcheck"]
ENTRYPOINT ["otel-eval", "serve", "--config", "/usr/share/otel-eval/image.yaml"]
