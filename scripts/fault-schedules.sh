#!/usr/bin/env bash
# Runs many seeded fault schedules (Tests/IntegrationTests/FaultScheduleTests.swift) against real daemons on the
# sound rig, and sums them up: payments, faults injected, and every way the promise could break — lost, cut off
# for good, heard twice. CI runs three seeds; this runs as many as you like (about 25 s each).
#
#   scripts/fault-schedules.sh 1-100          seeds 1 to 100
#   scripts/fault-schedules.sh 7,9,300        those seeds
#
# The result goes to standard output and out/fault-schedules.txt; docs/benchmarks.md keeps the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="${1:-1-100}"
scripts/setup.sh --tests >/dev/null
swift build --build-tests >/dev/null
mkdir -p out
log=out/fault-schedules.log
status=0
ANNOUNCE_BIN_DIR=$(swift build --show-bin-path) ANNOUNCE_VOICES="$PWD/out/voices" ANNOUNCE_FAULT_SEEDS="$seeds" \
    swift test --skip-build --no-parallel --filter 'FaultScheduleTests' >"$log" 2>&1 || status=$?
grep '^fault schedule ' "$log" | tee out/fault-schedules.txt
python3 - "$log" <<'PY'
import re, sys, collections
faults = collections.Counter()
schedules = payments = heard = window = fragments = cancelled = expired = problems = 0
for line in open(sys.argv[1], encoding="utf-8"):
    m = re.match(r"fault schedule (\d+): (\d+) payments, faults \[(.*)\] — heard once (\d+) \((\d+) of them again "
                 r"after a kill in the window\), cancelled (\d+), expired (\d+), fragments (\d+), problems (\d+)", line)
    if not m:
        continue
    schedules += 1
    payments += int(m[2])
    for item in re.findall(r'"([^"]+) (\d+)"', m[3]):
        faults[item[0]] += int(item[1])
    heard += int(m[4]); window += int(m[5]); cancelled += int(m[6]); expired += int(m[7]); fragments += int(m[8])
    problems += int(m[9])
issues = sum(1 for line in open(sys.argv[1], encoding="utf-8") if "seed " in line and ": " in line and line.startswith("↳ seed"))
print(f"{schedules} schedules, {payments} payments, faults {dict(sorted(faults.items()))}, "
      f"{sum(faults.values())} in all")
print(f"heard once in full: {heard} (of them heard whole again after a kill in the documented window: {window}); "
      f"cancelled by request: {cancelled}; expired by their ttl, never heard whole: {expired}; "
      f"fragments then heard in full: {fragments}; "
      f"problems (lost, cut off for good, heard twice, unknown sound): {problems}")
PY
grep -E '^↳ seed' "$log" || true
exit "$status"
