#!/usr/bin/env bash
# Measures the push path on this machine: a payment signed and published with `announce-push publish` → a real
# mosquitto on loopback → announce-push → announced (ALSA "null" PCM, so audio does not pace it) → accepted.
# Reports created_at → accepted (the daemon's acceptedAt) over N payments, published one after another.
# Needs a build (swift build) and the voice packs (scripts/setup.sh). Results go in docs/push.md.
#
#   scripts/bench-push.sh [N]        default N = 50
set -euo pipefail
cd "$(dirname "$0")/.."
count="${1:-50}"
bin=$(swift build --show-bin-path)
scripts/program-links.sh "$bin"  # the programs: links to the one executable
work=$(mktemp -d /tmp/ann-bench-push-XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$work/mosquitto.conf" <<EOF
listener $port 127.0.0.1
allow_anonymous true
user root
persistence false
EOF
mosquitto -c "$work/mosquitto.conf" > "$work/mosquitto.log" 2>&1 & pids+=($!)
"$bin/announced" --socket "$work/s.sock" --device null --state-dir "$work/state" --voices out/voices \
    > "$work/announced.log" 2>&1 & pids+=($!)
for _ in $(seq 100); do [[ -S "$work/s.sock" ]] && break; sleep 0.1; done
cat > "$work/push.toml" <<EOF
device = "BENCH"
socket = "$work/s.sock"
[broker]
url = "mqtt://127.0.0.1:$port"
[keys]
k1 = "hex:$(openssl rand -hex 32)"
[prompts]
enabled = false
EOF
"$bin/announce-push" run --config "$work/push.toml" --log-level debug > "$work/push.log" 2>&1 & pids+=($!)
for _ in $(seq 100); do grep -q subscribed "$work/push.log" && break; sleep 0.1; done

: > "$work/created"
for i in $(seq "$count"); do
    created=$(date +%s%3N)
    echo "B$i $created" >> "$work/created"
    "$bin/announce-push" publish --config "$work/push.toml" --order "B$i" --created-at "$created" 1.00 > /dev/null
done
for _ in $(seq 100); do
    [[ $(grep -c "payment forwarded" "$work/push.log") -ge "$count" ]] && break
    sleep 0.1
done
python3 - "$work" <<'EOF'
import datetime, json, socket, statistics, sys
work = sys.argv[1]
created = dict(line.split() for line in open(f"{work}/created"))
s = socket.socket(socket.AF_UNIX)
s.connect(f"{work}/s.sock")
s.sendall(json.dumps({"op": "history", "limit": 1000}).encode() + b"\n")
jobs = json.loads(s.makefile().readline())["jobs"]
orders = [job.get("order") for job in jobs if job.get("order") in created]
ms = []
for job in jobs:
    if job.get("order") in created:
        accepted = datetime.datetime.fromisoformat(job["acceptedAt"].replace("Z", "+00:00")).timestamp() * 1000
        ms.append(accepted - int(created[job["order"]]))
ms.sort()
print(f"payments: {len(set(orders))} of {len(created)} accepted; jobs per order: {len(orders) / max(1, len(set(orders)))}")
print(f"created_at -> accepted by the daemon, ms: median {statistics.median(ms):.1f}, "
      f"p90 {ms[int(len(ms) * 0.9) - 1]:.1f}, min {ms[0]:.1f}, max {ms[-1]:.1f}")
EOF
