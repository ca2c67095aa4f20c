#!/usr/bin/env bash
# Builds the previous release's `leasehold` binary for the upgrade test
# (tests/it/upgrade.rs) and prints its path:
#
#   LEASEHOLD_PREVIOUS_BIN=$(scripts/build-previous-release.sh) \
#     cargo test --all-features --test it upgrade:: -- --nocapture
#
# The previous release is the last commit before this release's first
# storage change (PREVIOUS_RELEASE below, or the first argument). Its source
# is exported with `git archive` (no worktree to register or clean up) into
# target/previous-release/<commit>/src and built there, server only
# (`--no-default-features`: no client, the fastest build that serves), debug,
# with its own CARGO_TARGET_DIR so it never invalidates the main build. The
# binary is cached at target/previous-release/<commit>/leasehold, with that
# commit's lua/ beside it; a second run only prints the path.
#
# Progress goes to stderr; stdout is the path alone.
set -euo pipefail

PREVIOUS_RELEASE="${1:-adc9ce5}"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if ! commit="$(git rev-parse --verify --quiet "${PREVIOUS_RELEASE}^{commit}")"; then
  cat >&2 <<EOF
build-previous-release.sh: commit ${PREVIOUS_RELEASE} (the previous release) is not in
this clone ($ROOT). The upgrade test needs it: fetch the full history
(\`git fetch --unshallow\`, or clone without --depth) and run again.
EOF
  exit 1
fi
short="${commit:0:7}"

DIR="$ROOT/target/previous-release/$short"
BIN="$DIR/leasehold"
if [[ -x "$BIN" && -d "$DIR/lua" ]]; then
  echo "$BIN"
  exit 0
fi

echo "build-previous-release.sh: building leasehold at $short into $BIN" >&2
SRC="$DIR/src"
rm -rf "$SRC"
mkdir -p "$SRC"
git archive --format=tar "$commit" | tar -x -C "$SRC"

# Its own target dir (shared by every previous release built here, so
# their dependencies are compiled once).
(
  cd "$SRC"
  CARGO_TARGET_DIR="$ROOT/target/previous-release/cargo-target" \
    cargo build --locked --bin leasehold --no-default-features >&2
)
# Copied under a temporary name, then renamed: an interrupted run leaves no
# half-written binary behind the cache check above.
# Its Lua scripts beside it: a test that watches Redis traffic knows its
# scripts by their SHA1, which Redis computes from the source: each script
# as that release runs it (`leasehold scripts --dump`, which splices the
# includes of lua/lib/; a release older than that subcommand has whole
# scripts in lua/).
rm -rf "$DIR/lua"
if grep -q '^--#include ' "$SRC/lua/acquire.lua"; then
  "$ROOT/target/previous-release/cargo-target/debug/leasehold" scripts --dump "$DIR/lua" >&2
else
  cp -r "$SRC/lua" "$DIR/lua"
fi
cp "$ROOT/target/previous-release/cargo-target/debug/leasehold" "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
rm -rf "$SRC"
echo "$BIN"
