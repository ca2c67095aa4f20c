#!/usr/bin/env bash
# Fuzzes every parser of the public API (fuzz/fuzz_targets/*.rs) with
# cargo-fuzz, each target for a given time:
#
#   ./scripts/fuzz.sh            # every target, 60 s each
#   ./scripts/fuzz.sh 600        # every target, 10 min each
#   ./scripts/fuzz.sh 30 digest  # only the named targets
#
# Needs the nightly toolchain (`rustup toolchain install nightly`) and
# cargo-fuzz (`cargo install cargo-fuzz`). A target that finds a failing
# input stops the run with a non-zero exit and leaves the input in
# fuzz/artifacts/<target>/; make it a case in tests/it/parsers_prop.rs
# (module `regressions`). Corpora grow in fuzz/corpus/ (not committed).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT/fuzz"

seconds="${1:-60}"
shift || true

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz.sh: the nightly toolchain is missing: rustup toolchain install nightly" >&2
  exit 2
fi
if ! cargo +nightly fuzz --help >/dev/null 2>&1; then
  echo "fuzz.sh: cargo-fuzz is missing: cargo install cargo-fuzz" >&2
  exit 2
fi

if [[ $# -gt 0 ]]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo +nightly fuzz list)
fi

# Seeds: one valid input per target, so the fuzzer starts at the edge of
# each rule instead of having to find "v1." + 64 hex digits by chance.
seed() {
  local dir="corpus/$1"
  mkdir -p "$dir"
  [[ -e "$dir/seed" ]] || printf '%b' "$2" >"$dir/seed"
}
seed purpose 'invoice-export-2'
seed digest 'v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'
seed operation_id 'job-1.retry_2~x'
seed owner_token 'Q2hhbmdlTWVOb3RBUmVhbFRva2VuMTIz'
seed attempt_headers '\x07Q2hhbmdlTWVOb3RBUmVhbFRva2VuMTIz\xffjob-1'
seed json_bodies '\x00{"ttlMs": 30000, "waitMs": 5000}'
seed list_query 'aW52b2ljZS1leHBvcnQvcy8wLzAxMjM0NTY3ODlhYmNkZWYvMTcvdjEuMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMA'

cargo +nightly fuzz build -O
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
for target in "${targets[@]}"; do
  echo "==> $target: ${seconds} s"
  status=0
  cargo +nightly fuzz run -O "$target" -- -max_total_time="$seconds" -print_final_stats=1 \
    >"$logs/$target.log" 2>&1 || status=$?
  grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' "$logs/$target.log" || true
  if [[ $status -ne 0 ]]; then
    tail -n 40 "$logs/$target.log" >&2
    echo "fuzz.sh: $target failed (exit $status); the input is in fuzz/artifacts/$target/" >&2
    exit "$status"
  fi
done
echo "fuzz.sh: ${#targets[@]} targets, ${seconds} s each, nothing found"
