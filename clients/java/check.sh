#!/usr/bin/env bash
# Everything the Java client is checked by, from a fresh Debian machine (no Maven Central):
#   installs what is missing from Debian (default-jdk-headless when javac is missing;
#   libjackson2-databind-java, junit5, libpostgresql-jdbc-java for the jars in /usr/share/java;
#   redis-server, redis-tools and postgresql for the tests' real parts),
#   builds with `javac -Xlint:all -Werror` (build.sh), then runs the JUnit 5 tests: unit tests,
#   the contract and fencing tests, and the conformance table against the real service binary
#   (embedded store and a private redis-server).
#
# The service binary comes from LEASEHOLD_BIN (default: <repo>/target/debug/leasehold; build it
# with `cargo build --bin leasehold`). Exits non-zero if any step fails.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export LEASEHOLD_BIN="${LEASEHOLD_BIN:-$root/target/debug/leasehold}"
jars=/usr/share/java
started=$SECONDS

step() { printf '\n== %s\n' "$*"; }

step "system packages"
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
missing=()
command -v javac >/dev/null || missing+=(default-jdk-headless)
[ -f "$jars/jackson-databind.jar" ] || missing+=(libjackson2-databind-java)
[ -f "$jars/junit-platform-console-standalone.jar" ] || missing+=(junit5)
[ -f "$jars/postgresql.jar" ] || missing+=(libpostgresql-jdbc-java)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-cli >/dev/null || missing+=(redis-tools)
pg_bin="${LEASEHOLD_PG_BIN:-}"
if [ -z "$pg_bin" ]; then
    pg_bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
fi
if [ -z "$pg_bin" ] || [ ! -x "$pg_bin/initdb" ]; then missing+=(postgresql); fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    $sudo apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq -o DPkg::Lock::Timeout=300 "${missing[@]}" >/dev/null ||
        { echo "apt-get install ${missing[*]} failed"; exit 1; }
    pg_bin="${LEASEHOLD_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}"
else
    echo "all present (PostgreSQL: $pg_bin)"
fi
export LEASEHOLD_PG_BIN="$pg_bin"
javac -version 2>&1
release="$(javac -version 2>&1 | sed -E 's/^javac ([0-9]+).*/\1/')"
if [ "${release:-0}" -lt 17 ]; then echo "javac $release is older than 17"; exit 1; fi

step "the service binary"
if [ ! -x "$LEASEHOLD_BIN" ]; then
    echo "missing: $LEASEHOLD_BIN"
    echo "build it with \`cargo build --bin leasehold\` in $root, or set LEASEHOLD_BIN"
    exit 1
fi
echo "$LEASEHOLD_BIN"

step "javac -Xlint:all -Werror (library and tests)"
bash "$here/build.sh" || { echo "build failed"; exit 1; }
ls -l "$here/build/leasehold-client.jar"

step "JUnit 5: unit, contract, fencing (PostgreSQL) and the conformance table"
cp="$(cat "$here/build/classpath")"
cd "$here" || exit 1
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
java -Dleasehold.test.classpath="$cp" -Dleasehold.repo="$root" \
    -cp "$cp:$jars/junit-platform-console-standalone.jar" org.junit.platform.console.ConsoleLauncher \
    --disable-banner --disable-ansi-colors --details=tree --fail-if-no-tests \
    --scan-classpath "$here/build/test-classes" >"$out" 2>&1
status=$?
grep -E '^(reply_lost|store_frozen|renewal_refused|holder_killed|resign)[a-z_]* \[|✘|tests (successful|failed|found)' "$out"
if [ "$status" -ne 0 ]; then
    echo "tests failed (exit $status); full output:" >&2
    grep -v '^\s*\(at \|java\.base/\|org\.junit\)' "$out" | tail -n 150 >&2
    exit "$status"
fi

printf '\n== done in %d s: all checks passed\n' $((SECONDS - started))
