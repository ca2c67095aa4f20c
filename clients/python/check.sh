#!/usr/bin/env bash
# Everything the Python client is checked by, from a fresh Debian machine:
#   installs what is missing (apt: python3-venv, redis-server, postgresql, openssl;
#   pip: the package with its `postgres` extra and the dev tools, in a venv under
#   ${LEASEHOLD_TOOLS_DIR:-$HOME/.cache/leasehold-tools}/python-client-venv),
#   checks that `pip install ./clients/python` (a real, non-editable build) works,
#   then runs ruff (lint + format), mypy --strict and pytest against the real service.
#
# The service binary comes from LEASEHOLD_BIN (default: <repo>/target/debug/leasehold;
# build it with `cargo build --bin leasehold`). Exits non-zero if any step fails.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tools="${LEASEHOLD_TOOLS_DIR:-$HOME/.cache/leasehold-tools}"
venv="$tools/python-client-venv"
python="${PYTHON:-python3}"
export LEASEHOLD_BIN="${LEASEHOLD_BIN:-$root/target/debug/leasehold}"
started=$SECONDS
failed=()

step() { printf '\n== %s\n' "$*"; }
run() { # run NAME CMD...: runs it, records a failure, goes on
    local name=$1
    shift
    if ! "$@"; then
        failed+=("$name")
        printf '!! %s failed\n' "$name"
    fi
}

step "system packages"
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
missing=()
command -v "$python" >/dev/null || missing+=(python3)
"$python" -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-cli >/dev/null || missing+=(redis-tools)
command -v openssl >/dev/null || missing+=(openssl)
pg_bin="${LEASEHOLD_PG_BIN:-}"
if [ -z "$pg_bin" ]; then
    pg_bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
fi
if [ -z "$pg_bin" ] || [ ! -x "$pg_bin/initdb" ]; then missing+=(postgresql); fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    $sudo apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null ||
        { echo "apt-get install ${missing[*]} failed"; exit 1; }
    pg_bin="${LEASEHOLD_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}"
else
    echo "all present (PostgreSQL: $pg_bin)"
fi
export LEASEHOLD_PG_BIN="$pg_bin"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 9))' ||
    { echo "$python is older than 3.9"; exit 1; }

step "the service binary"
if [ ! -x "$LEASEHOLD_BIN" ]; then
    echo "missing: $LEASEHOLD_BIN"
    echo "build it with \`cargo build --bin leasehold\` in $root, or set LEASEHOLD_BIN"
    exit 1
fi
echo "$LEASEHOLD_BIN"

step "venv $venv"
if [ ! -x "$venv/bin/python" ]; then
    mkdir -p "$tools" && "$python" -m venv "$venv" || { echo "venv failed"; exit 1; }
fi
"$venv/bin/python" -m pip install -q --upgrade pip >/dev/null &&
    "$venv/bin/python" -m pip install -q -e "$here[postgres,dev]" ||
    { echo "pip install failed"; exit 1; }
"$venv/bin/python" -m pip list 2>/dev/null | grep -Ei '^(leasehold|httpx|psycopg|pytest|mypy|ruff) '

step "pip install ./clients/python (non-editable, a clean venv)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
build_check() {
    "$python" -m venv "$scratch/venv" &&
        (cd "$root" && "$scratch/venv/bin/python" -m pip install -q ./clients/python) &&
        (cd "$scratch" && "$scratch/venv/bin/python" -c '
import leasehold, leasehold.election, leasehold.fencing, pathlib
assert "site-packages" in leasehold.__file__, leasehold.__file__
assert (pathlib.Path(leasehold.__file__).parent / "py.typed").exists()
print("installed", leasehold.__version__, "at", pathlib.Path(leasehold.__file__).parent)')
}
run "pip install" build_check

cd "$here" || exit 1
step "ruff check"
run "ruff check" "$venv/bin/ruff" check .
step "ruff format --check"
run "ruff format" "$venv/bin/ruff" format --check .
step "mypy --strict"
run "mypy" "$venv/bin/mypy" --strict
step "pytest"
run "pytest" "$venv/bin/pytest" -q -p no:cacheprovider

printf '\n== done in %d s\n' $((SECONDS - started))
if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED: ${failed[*]}"
    exit 1
fi
echo "all checks passed"
