#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine:
#
#   ./scripts/test.sh
#
# Installs what is missing (redis-server, redis-tools, luacheck, openssl,
# chromium and nodejs for the console test, and the validators the check
# scripts pull from apt/PyPI/npm), then runs:
# rustfmt, clippy, luacheck, every cargo test (the contract suite against the
# embedded store and real redis-server processes it starts itself), the
# deployment checks against a live scrape, the API checks (when present), the
# Python, TypeScript and Java clients' checks, and the mixed checked history.
# Ends with one line "summary: N passed, N failed".
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf '\n==> %s\n' "$*"; }

SUDO=()
if [[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null 2>&1; then SUDO=(sudo); fi

# ------------------------------------------------------------------ set-up --
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v luacheck >/dev/null 2>&1 || need+=(lua-check)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v curl >/dev/null 2>&1 || need+=(curl)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
# The console test (tests/it/console/) drives Debian's chromium from Node.
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]] || need+=(fonts-dejavu-core)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm) # axe-core for the console test (npm ci)
if [[ ${#need[@]} -gt 0 ]]; then
  log "apt-get install ${need[*]}"
  "${SUDO[@]}" apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi
# Debian starts a redis-server service on :6379 when it installs the package;
# the tests never use it (they start their own on free ports).

PASSED=0
FAILED=0
FAILURES=()
record() { # name status
  if [[ $2 -eq 0 ]]; then PASSED=$((PASSED + 1)); else FAILED=$((FAILED + 1)); FAILURES+=("$1"); fi
}
stage() { # name cmd...
  local name=$1; shift
  log "$name"
  local rc=0
  "$@" || rc=$?
  record "$name" "$rc"
}

# ------------------------------------------------------------ static checks --
stage "cargo fmt --check" cargo fmt --all -- --check
stage "cargo clippy -D warnings" cargo clippy --all-targets --all-features --locked -- -D warnings
stage "layout: no import circle, layers point down, files under 600 lines (scripts/check_layout.py)" python3 scripts/check_layout.py
stage "layout check's own test (scripts/test_check_layout.py)" python3 scripts/test_check_layout.py
stage "cargo doc without warnings" env RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features --locked
# luacheck reads each script as Redis runs it: its includes (lua/lib/,
# lua/<script>/) spliced in, as `leasehold scripts --dump` writes them.
luacheck_scripts() {
  local dir rc=0
  dir=$(mktemp -d)
  cargo run --quiet --locked --all-features -- scripts --dump "$dir" &&
    luacheck --no-color --std lua51 --read-globals redis KEYS ARGV -- "$dir"/*.lua || rc=$?
  rm -rf "$dir"
  return "$rc"
}
stage "luacheck lua/ (the assembled scripts)" luacheck_scripts

# ------------------------------------------------------------------- tests --
# The upgrade test (tests/it/upgrade.rs) runs the previous release's binary
# beside this one; built once, cached under target/previous-release/.
log "previous release for the upgrade test (scripts/build-previous-release.sh)"
prev_rc=0
LEASEHOLD_PREVIOUS_BIN="$(bash scripts/build-previous-release.sh)" || prev_rc=$?
record "build the previous release (scripts/build-previous-release.sh)" "$prev_rc"
export LEASEHOLD_PREVIOUS_BIN

log "cargo test (all features)"
TEST_OUT="$(mktemp)"
rc=0
cargo test --all-features --locked --no-fail-fast 2>&1 | tee "$TEST_OUT" || rc=$?
# Count individual tests from cargo's own result lines.
read -r tp tf < <(awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed;?$/) p += $(i-1); if ($(i) ~ /^failed;?$/) f += $(i-1) } } END { print p+0, f+0 }' "$TEST_OUT")
PASSED=$((PASSED + tp))
FAILED=$((FAILED + tf))
if [[ $rc -ne 0 && $tf -eq 0 ]]; then FAILED=$((FAILED + 1)); FAILURES+=("cargo test exited $rc"); fi
[[ $tf -gt 0 ]] && FAILURES+=("$tf cargo tests")
# A failed test's own output (its panic message), kept for the end of the
# run: a long log may be cut in the middle, and the end is what is read.
CARGO_FAILURES="$(awk '/^failures:$/ { on = 1 } on { print } /^test result:/ { on = 0 }' "$TEST_OUT" | cut -c1-2000 | head -n 300 || true)"
rm -f "$TEST_OUT"

# The upgrade test again against the release-3 tip (89886ae, issue 39): the
# run above used the default previous release (adc9ce5, the last commit
# before release 3's first storage change); grant and claim storage changed
# since the tip, and a rolling deploy from it must hold too. Built once into
# its own cache directory (target/previous-release/89886ae/, sharing the
# dependencies compiled for adc9ce5); about 85 s the first time here.
log "release-3 tip for the upgrade test (scripts/build-previous-release.sh 89886ae)"
tip_rc=0
RELEASE3_TIP_BIN="$(bash scripts/build-previous-release.sh 89886ae)" || tip_rc=$?
record "build the release-3 tip (scripts/build-previous-release.sh 89886ae)" "$tip_rc"
if [[ $tip_rc -eq 0 ]]; then
  stage "upgrade test from the release-3 tip (89886ae)" \
    env LEASEHOLD_PREVIOUS_BIN="$RELEASE3_TIP_BIN" cargo test --all-features --locked --test it -- upgrade::
fi

# The hand-written HTTP paths off (issue 39): hyper and the router serve every
# request; the differential suite, the keep-alive tests and the lease
# contract again that way (the run above had them on, the default), and the
# sessions' keep-alive streams as hyper writes them.
stage "HTTP fast paths off: differential suite, keep-alive, lease contract, sessions" \
  env LEASEHOLD_HTTP_FAST_PATHS=false cargo test --all-features --locked --test it -- \
  http_diff:: keep_alive:: contract:: sessions::memory::

# A killed holder's 1 000 session leases held by waiters on another instance
# within 1 s (tests/it/session_kill.rs, docs/design.md §19): a timing bound,
# ignored in the parallel run above and run here alone.
stage "killed session holder frees 1 000 leases within 1 s (tests/it/session_kill.rs)" \
  cargo test --all-features --locked --test it session_kill:: -- --ignored --test-threads 1

# ---------------------------------------------------- live scrape + deploy --
log "live scrape for the deployment checks"
SCRAPE="$(mktemp)"
scrape_rc=0
bash scripts/live-scrape.sh "$SCRAPE" || scrape_rc=$?
record "live scrape after a lease cycle on Redis" "$scrape_rc"
if [[ $scrape_rc -eq 0 ]]; then
  stage "deployment checks (scripts/check-deploy.sh)" bash scripts/check-deploy.sh "$SCRAPE"
else
  stage "deployment checks (scripts/check-deploy.sh)" bash scripts/check-deploy.sh
fi
rm -f "$SCRAPE"

if [[ -f scripts/check-api.sh ]]; then
  stage "API checks (scripts/check-api.sh)" bash scripts/check-api.sh
fi

# ------------------------------------------------ Python and TypeScript clients --
# Each installs what it needs (venv / npm ci, PostgreSQL for the fencing
# guard) and runs its type checks, lints and tests against the service
# binary `cargo test` just built.
export LEASEHOLD_BIN="$ROOT/target/debug/leasehold"
stage "Python client (clients/python/check.sh)" bash clients/python/check.sh
stage "TypeScript client (clients/typescript/check.sh)" bash clients/typescript/check.sh
# Java: Debian's JDK and jars (no Maven Central), javac -Xlint:all -Werror,
# JUnit 5 and the conformance table; its build is what the mixed history runs.
stage "Java client (clients/java/check.sh)" bash clients/java/check.sh
# Go (standard library only; apt's golang-go, lib/pq for the guard's tests);
# it also builds clients/go/dist/mixed-worker for the mixed history.
stage "Go client (clients/go/check.sh)" bash clients/go/check.sh
# The mixed checked history (tests/it/mixed_history.rs, ignored in the run
# above): Rust, Python, TypeScript, Java and Go workers on shared resources. It
# runs the venv, the TypeScript, Java and Go builds the checks just made.
stage "mixed checked history (tests/it/mixed_history.rs)" \
  cargo test --all-features --locked --test it mixed_history:: -- --ignored

echo
if [[ -n ${CARGO_FAILURES:-} ]]; then
  echo "==> the failed cargo tests' output (again)"
  printf '%s\n' "$CARGO_FAILURES"
  echo
fi
for f in "${FAILURES[@]}"; do echo "FAILED: $f"; done
echo "summary: ${PASSED} passed, ${FAILED} failed"
[[ $FAILED -eq 0 ]]
