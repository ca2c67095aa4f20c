#!/usr/bin/env bash
# Redis' instructions per uncontended acquire script run, this tree's
# lua/acquire.lua (assembled: its includes spliced in, as
# `leasehold scripts --dump` writes it) against the previous release's (git
# revision, default 9a030ef, storage v1; a storage v2 revision is called
# with v2's arguments; a revision whose scripts include lua/lib/ is
# refused: dump its scripts with its own binary), measured the same way.
#
# Each script is run by a redis-server under callgrind on a free loopback
# port, called by redis-benchmark with 5 000 and then 25 000 EVALSHA on
# random resources (free, never held: the uncontended path, as the bench's
# `acquire` scenario calls it); the difference of the two totals divided by
# 20 000 removes start-up and shutdown. Deterministic: neighbours on the
# cores do not move it.
#
#   benches/redis-script-cost.sh [REVISION]
#
# Needs valgrind, redis-server, redis-cli and redis-benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-9a030ef}
for tool in valgrind redis-server redis-cli redis-benchmark; do
  command -v "$tool" >/dev/null || {
    echo "missing $tool: apt-get install valgrind redis-server redis-tools" >&2
    exit 1
  }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
owner=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA

# total_instructions SCRIPT CALLS ARGS...: redis-server's instruction total
# for start-up, CALLS script runs with ARGS, and shutdown.
total_instructions() {
  local script=$1 calls=$2 port sha pid
  shift 2
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1 200); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  sha=$(redis-cli -p "$port" script load "$(cat "$script")")
  redis-benchmark -p "$port" -n "$calls" -c 4 -r 100000000 EVALSHA "$sha" "$@" >/dev/null
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" || true
  awk '/^(summary|totals):/ { print $2; exit }' "$work/cg.out"
}

# per_call SCRIPT ARGS...: instructions per script run.
per_call() {
  local script=$1 small large
  shift
  small=$(total_instructions "$script" 5000 "$@")
  large=$(total_instructions "$script" 25000 "$@")
  echo $(((large - small) / 20000))
}

git show "$rev:lua/acquire.lua" >"$work/old.lua"
if grep -q '^--#include ' "$work/old.lua"; then
  echo "$rev's lua/acquire.lua includes lua/lib/: measure its dump (leasehold scripts --dump)" >&2
  exit 1
fi
cargo run --quiet --locked -- scripts --dump "$work/new"
# The same uncontended call in each script's own arguments: storage v2's
# (this tree's, and any revision whose script reads a sequence key) or v1's.
v2_args=(2 'ns:lease:v2:{p:__rand_int__}' 'ns:seq:v2:{p:__rand_int__}'
  "$owner" op-123456 30000 '' '' 100 604800000 '' 12345)
if grep -q 'seq:v2' "$work/old.lua"; then
  old=$(per_call "$work/old.lua" "${v2_args[@]}")
else
  old=$(per_call "$work/old.lua" 2 'ns:lease:v1:{p:__rand_int__}' 'ns:fence:v1:{p:__rand_int__}' \
    "$owner" op-123456 30000 604800000 12345)
fi
new=$(per_call "$work/new/acquire.lua" "${v2_args[@]}")
echo "Redis instructions per uncontended acquire: $rev $old, this tree $new" \
  "($(python3 -c "print(f'{($new / $old - 1) * 100:+.1f} %')"))"
