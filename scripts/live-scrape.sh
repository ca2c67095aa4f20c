#!/usr/bin/env bash
# Starts redis-server and leasehold on free loopback ports, runs one lease
# cycle of every verb with curl, and writes the /metrics scrape to $1.
set -euo pipefail
OUT="${1:?usage: live-scrape.sh OUTPUT_FILE}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
command -v redis-server >/dev/null || { echo "live-scrape: redis-server not found: apt-get install redis-server" >&2; exit 1; }

cargo build -q --locked --bin leasehold
BIN="${CARGO_TARGET_DIR:-target}/debug/leasehold"
WORK="$(mktemp -d)"
RPORT="$(free_port)"
LPORT="$(free_port)"
cleanup() {
  [[ -n "${LH_PID:-}" ]] && kill "$LH_PID" 2>/dev/null || true
  [[ -n "${R_PID:-}" ]] && kill "$R_PID" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" >"$WORK/redis.log" 2>&1 &
R_PID=$!
LEASEHOLD_LISTEN="127.0.0.1:$LPORT" LEASEHOLD_REDIS_URL="redis://127.0.0.1:$RPORT" "$BIN" serve >"$WORK/leasehold.log" 2>&1 &
LH_PID=$!

BASE="http://127.0.0.1:$LPORT"
for _ in $(seq 1 100); do
  if curl -sf "$BASE/readyz" >/dev/null 2>&1; then break; fi
  sleep 0.1
done
curl -sf "$BASE/readyz" >/dev/null || { echo "live-scrape: leasehold did not become ready" >&2; cat "$WORK/leasehold.log" >&2; exit 1; }

D="$("$BIN" digest live-scrape-resource)"
TOKEN="$(curl -sf -XPOST "$BASE/attempts" -H 'content-type: application/json' -d '{"operationId":"scrape-1"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["ownerToken"])')"
H=(-H "Lease-Owner-Token: $TOKEN" -H "Lease-Operation-Id: scrape-1" -H 'content-type: application/json')
# A watcher follows the resource through the cycle (watch metrics), and
# the cycle lists the purpose while it holds the lease (list metrics).
curl -sN --max-time 20 "$BASE/leases/scrape/$D/events" >"$WORK/events" 2>/dev/null &
EV_PID=$!
for _ in $(seq 1 200); do grep -q '^event: state' "$WORK/events" 2>/dev/null && break; sleep 0.05; done
# The first acquire asks to wait (it need not: the wait histogram), the
# second replays it; the release ends the hold (the hold histogram).
curl -s -o /dev/null -XPUT "$BASE/leases/scrape/$D" "${H[@]}" -d '{"ttlMs":30000,"waitMs":1000,"holder":"live-scrape"}'
curl -s -o /dev/null -XPUT "$BASE/leases/scrape/$D" "${H[@]}" -d '{"ttlMs":30000,"holder":"live-scrape"}'
curl -s -o /dev/null -XPATCH "$BASE/leases/scrape/$D" "${H[@]}" -d '{"ttlMs":30000}'
curl -s -o /dev/null "$BASE/leases/scrape/$D" "${H[@]}"
curl -s -o /dev/null "$BASE/leases/scrape?limit=10"
curl -s -o /dev/null -XDELETE "$BASE/leases/scrape/$D" "${H[@]}"
for _ in $(seq 1 200); do grep -q '^event: released' "$WORK/events" 2>/dev/null && break; sleep 0.05; done
grep -q '^event: released' "$WORK/events" || { echo "live-scrape: the watcher heard no release" >&2; cat "$WORK/events" >&2; exit 1; }
kill "$EV_PID" 2>/dev/null || true
curl -sf "$BASE/metrics" >"$OUT"
echo "live-scrape: $(grep -c '^leasehold_' "$OUT") samples written to $OUT"
