#!/usr/bin/env bash
# Everything the Go client is checked by, from a fresh Debian machine:
#   installs what is missing (apt: golang-go, golang-github-lib-pq-dev,
#   postgresql, redis-server, redis-tools), then gofmt, go vet, the build, and
#   go test -race for the client (unit tests, the verbs, and the conformance
#   table against the real service, embedded and Redis) and for its test-only
#   module fencingtest (the database/sql guard against a private PostgreSQL
#   through Debian's lib/pq); finally it builds dist/mixed-worker for the mixed
#   checked history (tests/it/mixed_history.rs).
#
# The service binary: LEASEHOLD_BIN, else <repo>/target/debug/leasehold (built
# with `cargo build --bin leasehold` when missing and cargo exists). No module
# proxy is used (GOPROXY=off): the client needs the standard library only.
# Exits non-zero on any failure.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
started=$SECONDS
failed=()
step() { printf '\n== %s (%ss)\n' "$*" $((SECONDS - started)); }
run() { # run NAME CMD...: runs it, records a failure, goes on
    local name=$1
    shift
    if ! "$@"; then
        failed+=("$name")
        printf '!! %s failed\n' "$name"
    fi
}

step "system packages"
pq=/usr/share/gocode/src/github.com/lib/pq
missing=()
command -v go >/dev/null || missing+=(golang-go)
[ -f "$pq/go.mod" ] || missing+=(golang-github-lib-pq-dev)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-cli >/dev/null || missing+=(redis-tools)
pg_bin="${LEASEHOLD_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}"
if [ -z "$pg_bin" ] || [ ! -x "$pg_bin/initdb" ]; then missing+=(postgresql); fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq -o DPkg::Lock::Timeout=300 "${missing[@]}" >/dev/null ||
        { echo "apt-get install ${missing[*]} failed"; exit 1; }
    pg_bin="${LEASEHOLD_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}"
fi
export LEASEHOLD_PG_BIN="$pg_bin"
export GOPROXY=off GOFLAGS=-mod=mod GO111MODULE=on
echo "$(go version), lib/pq in $pq, PostgreSQL in $pg_bin"

step "the service binary"
export LEASEHOLD_BIN="${LEASEHOLD_BIN:-$root/target/debug/leasehold}"
if [ ! -x "$LEASEHOLD_BIN" ]; then
    if command -v cargo >/dev/null; then
        (cd "$root" && cargo build --bin leasehold) || { echo "cargo build failed"; exit 1; }
    else
        echo "no leasehold binary at $LEASEHOLD_BIN: run \`cargo build --bin leasehold\` at $root, or set LEASEHOLD_BIN"
        exit 1
    fi
fi
echo "$LEASEHOLD_BIN"

cd "$here" || exit 1
step "the client's go.mod requires nothing"
no_requires() {
    if grep -qE '^\s*(require|replace)' go.mod; then
        echo "clients/go/go.mod must stay free of requirements (standard library only):"
        cat go.mod
        return 1
    fi
}
run "go.mod" no_requires

step "gofmt -l"
fmt_clean() {
    local out
    out="$(gofmt -l .)"
    [ -z "$out" ] || { echo "not gofmt-ed:"; echo "$out"; return 1; }
}
run "gofmt" fmt_clean

step "go vet (client, fencingtest)"
run "go vet" go vet ./...
run "go vet fencingtest" bash -c 'cd fencingtest && go vet ./...'

step "go build, and a user's module that imports the client by its path"
run "go build" go build ./...
user_module() {
    local tmp
    tmp="$(mktemp -d)"
    cat >"$tmp/go.mod" <<MOD
module example.com/user

go 1.19

require github.com/leasehold/leasehold/clients/go v0.0.0

replace github.com/leasehold/leasehold/clients/go => $here
MOD
    cat >"$tmp/main.go" <<'SRC'
package main

import (
	"fmt"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

func main() { fmt.Println(leasehold.Digest("order-42")) }
SRC
    (cd "$tmp" && go run .) | grep -qx 'v1.3bf8b157c4238eefe5ae4a66eca81c6b887d4dcedb58dd674271859f4dc2edfd'
    local status=$?
    rm -rf "$tmp"
    return $status
}
run "user module" user_module

step "go test -race (unit tests, verbs, conformance table)"
run "go test" go test -race -count=1 ./...

step "go test -race fencingtest (PostgreSQL through lib/pq)"
run "go test fencingtest" bash -c 'cd fencingtest && go test -race -count=1 ./...'

step "dist/mixed-worker (for tests/it/mixed_history.rs)"
run "mixed worker" go build -o dist/mixed-worker ./internal/cmd/mixed-worker

printf '\n== done in %d s\n' $((SECONDS - started))
if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED: ${failed[*]}"
    exit 1
fi
echo "all checks passed"
