# syntax=docker/dockerfile:1
#
# leasehold container image.
#   docker build --build-arg VERSION=$(git describe --tags --always) \
#                --build-arg REVISION=$(git rev-parse HEAD) -t leasehold:dev .
#
# Stages:
#   deps    compiles only the dependency graph, from Cargo.toml + Cargo.lock and
#           stub sources. This layer is reused until the manifest or lock file
#           changes, so a source-only change recompiles just this crate.
#   build   compiles the real sources with the contract command
#           `cargo build --release --locked`.
#   runtime distroless cc (glibc + libgcc + CA certificates), non-root, no shell,
#           no package manager. The binary is the only thing added.

ARG RUST_IMAGE=rust:1.95-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${RUST_IMAGE} AS deps
WORKDIR /build
ENV CARGO_TERM_COLOR=never \
    CARGO_INCREMENTAL=0
COPY scripts/cargo-stub-targets.sh /usr/local/bin/cargo-stub-targets
# build.r[s]: the glob copies build.rs when the crate has one and is a no-op
# otherwise (COPY only fails when every source matches nothing).
COPY Cargo.toml Cargo.lock build.r[s] ./
# Stub every target Cargo.toml declares (cargo rejects a manifest whose
# declared target file is missing), build the dependencies, then drop this
# crate's own stub artifacts with `cargo clean -p` so the real build below
# cannot mistake them for up to date (COPY keeps the sources' old mtimes).
RUN set -eu; \
    for p in src/main.rs src/lib.rs $(sh /usr/local/bin/cargo-stub-targets Cargo.toml); do \
      mkdir -p "$(dirname "$p")"; \
      [ -e "$p" ] || echo 'fn main() {}' > "$p"; \
    done; \
    cargo build --release --locked; \
    cargo clean --release --package leasehold

FROM deps AS build
# The build context is whitelisted by .dockerignore (manifest, src/, lua/, ...),
# so editing docs, manifests or dashboards does not invalidate this layer.
COPY . .
# Smoke test after the build: a leftover stub binary would print no OpenAPI.
RUN set -eu; \
    cargo build --release --locked; \
    install -D -m 0755 target/release/leasehold /out/leasehold; \
    /out/leasehold openapi > /out/openapi.json; \
    test -s /out/openapi.json

FROM ${RUNTIME_IMAGE} AS runtime
# VERSION/REVISION are declared in this stage only, so changing them re-labels
# the image without recompiling anything.
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="leasehold" \
      org.opencontainers.image.description="HTTP/JSON lease service with typed outcomes and fencing tokens (Redis or embedded store)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="gcr.io/distroless/cc-debian12:nonroot"
COPY --from=build /out/leasehold /usr/local/bin/leasehold
# Listen on all interfaces inside the container; metrics on their own port so
# NetworkPolicy can open 9090 to monitoring only. LEASEHOLD_REDIS_URL unset
# means the embedded single-instance store (the binary warns about it).
ENV LEASEHOLD_LISTEN=0.0.0.0:8080 \
    LEASEHOLD_METRICS_LISTEN=0.0.0.0:9090 \
    LEASEHOLD_LOG_FORMAT=json
# Numeric uid:gid (distroless "nonroot") so Kubernetes runAsNonRoot can verify it.
USER 65532:65532
EXPOSE 8080 9090
# Exec form: there is no shell in this image. `leasehold healthcheck` GETs
# http://127.0.0.1:8080/readyz and exits 0 on 2xx (https:// when
# LEASEHOLD_TLS_CERT_FILE is set, accepting exactly that certificate).
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
  CMD ["/usr/local/bin/leasehold", "healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/leasehold"]
CMD ["serve"]
