#!/usr/bin/env bash
# leasehold's user-space instructions and allocations per uncontended
# acquire (issue 25: goal ≤ 45 000 instructions), the callgrind recipe of
# benches/README.md ("Profiling the hot path") in one command.
#
# The service runs under callgrind twice, in the bench's `paced` scenario
# at 100 acquires/s with C = 8, for 20 s and for 5 s; the difference of the
# two totals divided by the difference in acquires (1 500) removes start-up
# and shutdown. quanta's start-up clock calibration (inside the Prometheus
# recorder's set-up) is taken off each total first: it alone moves a total
# by millions from run to run. Allocations: calls to mimalloc's entry
# points, counted the same way. Deterministic; neighbours do not move it,
# though like every figure of this method it holds the service's idle work
# over the 2 × 15 s difference.
#
#   benches/leasehold-acquire-cost.sh [OUT_DIR]    # keeps cg.d20, cg.d5 there
#   callgrind_annotate --auto=no --inclusive=no OUT_DIR/cg.d20 | less
#
# Needs valgrind and redis-server; builds the bench (release) first.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || {
  echo "missing valgrind: apt-get install valgrind" >&2
  exit 1
}
out=${1:-$(mktemp -d)}
mkdir -p "$out"
for d in 20 5; do
  LOAD_WRAP="valgrind --tool=callgrind --callgrind-out-file=$out/cg.d$d" \
    cargo bench --bench load -- --only paced --paced-rate 100 \
    --concurrency 8 --rounds 1 --warmup 1 --duration "$d" \
    --handoffs 0 --poll-handoffs 0 >"$out/bench.d$d.log" 2>&1
done
python3 - "$out/cg.d20" "$out/cg.d5" <<'EOF'
import re
import sys

ACQUIRES = 1500  # 100/s × (20 s − 5 s)
GOAL = 45_000
ALLOC = re.compile(r"^(mi_malloc_aligned|mi_zalloc_aligned|mi_realloc_aligned)$")


def read(path):
    """Total instructions, quanta's calibration (inclusive) and allocations."""
    names, fn, cfn, take = {}, None, None, None
    total = calibration = allocations = 0
    with open(path, errors="replace") as f:
        for line in f:
            if take is not None:
                parts = line.split()
                if take == "calibrate" and len(parts) >= 2 and fn != cfn:
                    calibration += int(parts[1])
                take = None
            elif line.startswith("totals:"):
                total = int(line.split()[1])
            elif line.startswith(("fn=", "cfn=")):
                m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line.strip())
                if m.group(2):
                    names[m.group(1)] = m.group(2)
                if line.startswith("fn="):
                    fn = names.get(m.group(1))
                else:
                    cfn = names.get(m.group(1))
            elif line.startswith("calls="):
                n = int(line.split("=")[1].split()[0])
                if cfn and ALLOC.match(cfn):
                    allocations += n
                if cfn and "quanta::Calibration::calibrate" in cfn and (
                    not fn or "quanta::Calibration::calibrate" not in fn
                ):
                    take = "calibrate"
    return total, calibration, allocations


(t1, c1, a1), (t2, c2, a2) = read(sys.argv[1]), read(sys.argv[2])
per = ((t1 - c1) - (t2 - c2)) / ACQUIRES
print(f"totals {t1} / {t2}, less quanta's calibration {c1} / {c2}")
print(f"instructions per acquire: {per:.0f}")
print(f"allocations per acquire: {(a1 - a2) / ACQUIRES:.1f}")
mark = "met" if per <= GOAL else "MISSED"
print(f"- {mark} leasehold instructions per acquire ≤ {GOAL} (issue 25): {per:.0f}")
EOF
echo "callgrind files: $out/cg.d20 $out/cg.d5"
