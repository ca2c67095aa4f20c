#!/usr/bin/env bash
# Checks @leasehold/client from a fresh clone: installs what is missing
# (Debian: redis-server, postgresql, nodejs/npm), then npm ci, tsc --strict,
# the build, the tests against the real service binary, and npm pack.
#
#   clients/typescript/check.sh
#
# The service binary: LEASEHOLD_BIN, else <repo>/target/debug/leasehold
# (built with `cargo build --bin leasehold` when missing and cargo exists).
# Exits non-zero on any failure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$here"
start=$(date +%s)
step() { printf '\n== %s (%ss)\n' "$*" "$(( $(date +%s) - start ))"; }

step "prerequisites"
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-cli >/dev/null || missing+=(redis-tools)
pg_bin="${PG_BIN:-}"
if [ -z "$pg_bin" ]; then
  pg_bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)"
fi
[ -n "$pg_bin" ] && [ -x "$pg_bin/initdb" ] || missing+=(postgresql)
if ! command -v node >/dev/null || ! node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>18||(a===18&&b>=18)?0:1)'; then
  missing+=(nodejs)
fi
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  pg_bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)"
fi
export PG_BIN="$pg_bin"
echo "node $(node --version), npm $(npm --version), $(redis-server --version | cut -d' ' -f1-3), PostgreSQL in $PG_BIN"

export LEASEHOLD_BIN="${LEASEHOLD_BIN:-$root/target/debug/leasehold}"
if [ ! -x "$LEASEHOLD_BIN" ]; then
  if command -v cargo >/dev/null; then
    step "cargo build --bin leasehold (no binary at $LEASEHOLD_BIN)"
    (cd "$root" && cargo build --bin leasehold)
  else
    echo "no leasehold binary at $LEASEHOLD_BIN: run \`cargo build --bin leasehold\` at $root, or set LEASEHOLD_BIN" >&2
    exit 1
  fi
fi
echo "service binary: $LEASEHOLD_BIN"

step "npm ci"
npm ci --no-audit --no-fund

step "tsc --strict --noEmit (sources and tests)"
npx tsc -p tsconfig.test.json --strict --noEmit

step "build"
rm -rf dist dist-test
npm run --silent build
npm run --silent build:test

step "node --test"
# `{ grep || true; }` as the last stage: PIPESTATUS[0] is node's own status
# (with `… | grep … || true` it was the `true`'s, and a failing test passed).
node --test dist-test/test/*.test.js 2>&1 | tee /tmp/leasehold-ts-test.$$ | { grep -E '^(not ok|# (tests|suites|pass|fail|cancelled|skipped|todo|duration_ms) |\s*# (holds|signalled|state|next leader|history))' || true; }
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ]; then
  echo "tests failed (exit $status); full output:" >&2
  grep -v '^\s*at ' /tmp/leasehold-ts-test.$$ | tail -n 200 >&2
  rm -f /tmp/leasehold-ts-test.$$
  exit "$status"
fi
rm -f /tmp/leasehold-ts-test.$$

step "npm pack, then install the tarball into an empty project and import it"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
npm pack --pack-destination "$tmp" >/dev/null 2>&1
tarball="$(ls "$tmp"/*.tgz)"
listing="$(tar -tzf "$tarball" | sort)"
echo "$listing"
for f in package/dist/index.js package/dist/index.d.ts package/dist/fencing.js package/dist/fencing.d.ts package/README.md; do
  grep -qx "$f" <<<"$listing" || { echo "missing from the tarball: $f" >&2; exit 1; }
done
mkdir "$tmp/app"
(cd "$tmp/app" && npm init -y >/dev/null && npm install --offline --no-audit --no-fund "$tarball" >/dev/null \
  && node --input-type=module -e '
    const m = await import("@leasehold/client");
    const f = await import("@leasehold/client/fencing");
    if (m.digestOf("order-42") !== "v1.3bf8b157c4238eefe5ae4a66eca81c6b887d4dcedb58dd674271859f4dc2edfd") throw new Error("digest");
    if (typeof f.fence !== "function" || !f.FENCE_TABLE_DDL.includes("leasehold_fence")) throw new Error("fencing");
    console.log("installed tarball imports: " + Object.keys(m).length + " exports, fencing ok");
  ')

step "ok: all checks passed"
