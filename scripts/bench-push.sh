#!/usr/bin/env bash
# Measures the push path on this machine: a payment signed and published with `announce-push publish` → a real
# mosquitto on loopback → announce-push → announced (ALSA "null" PCM, so audio does not pace it) → accepted.
# Reports created_at → accepted (the daemon's acceptedAt) over N payments, published one after another (a publisher
# process each). Then N payments and N combination broadcasts over one publisher connection kept open: push → first
# sample, p50 and p99, beside mosquitto's own delivery to a subscriber.
# Then a corpus push of every clip of the default packs (out/voices/zh and en: ~105 clips, ~2.3 MB) served over
# HTTPS on loopback (openssl s_server, a CA made here): its size and the time from publishing to installed and
# loaded by the daemon (the listener's "corpus push done").
# Needs a build (swift build) and the voice packs (scripts/setup.sh). Results go in docs/push.md and
# docs/benchmarks.md.
#
#   scripts/bench-push.sh [N]        default N = 50
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in mosquitto mosquitto_pub mosquitto_sub openssl; do
    command -v "$tool" > /dev/null || { echo "bench-push: needs $tool (apt-get install mosquitto mosquitto-clients openssl)" >&2; exit 1; }
done
count="${1:-50}"
bin=$(swift build --show-bin-path)
scripts/program-links.sh "$bin"  # the programs: links to the one executable
work=$(mktemp -d /tmp/ann-bench-push-XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    [[ -n "${KEEP:-}" ]] || rm -rf "$work"
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
    --corpus "$work/corpus" \
    > "$work/announced.log" 2>&1 & pids+=($!)
for _ in $(seq 100); do [[ -S "$work/s.sock" ]] && break; sleep 0.1; done
cat > "$work/push.toml" <<EOF
device = "BENCH"
socket = "$work/s.sock"
state_dir = "$work/push-state"
[broker]
url = "mqtt://127.0.0.1:$port"
[keys]
k1 = "hex:$(openssl rand -hex 32)"
[prompts]
enabled = false
[corpus]
directory = "$work/corpus"
ca_file = "$work/tls/ca.pem"
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

# A signed push -> first sample, over a connection the publisher keeps open (one `mosquitto_pub -l`, a message per
# line), beside mosquitto's own delivery to a subscriber on the same broker (`mosquitto_sub`, its arrival time).
# N payments then N combination broadcasts (new-order and a pickup number), 200 ms apart, each signed in advance
# with the created_at it is to be published at; every time counts from the moment the line is handed to the
# publisher. First sample = the daemon's acceptedAt + firstSampleMs (request received -> first sample handed to ALSA).
python3 - "$work" "$bin" "$count" "$port" <<'EOF'
import datetime, json, socket, subprocess, sys, time
work, bin, count, port = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
topic = "announce/BENCH/payments"
sub = subprocess.Popen(["mosquitto_sub", "-p", port, "-t", topic, "-F", "%U %p"], stdout=subprocess.PIPE, text=True)
plan = []
start = int(time.time() * 1000) + 3000 + 100 * count  # after the signing below
for i in range(count * 2):
    at = start + 200 * i
    order, what = (f"K{i}", ["1.00"]) if i < count else (f"C{i}", ["--part", "new-order", "--part", "{#0423}"])
    payload = subprocess.run(
        [f"{bin}/announce-push", "sign", "--config", f"{work}/push.toml", "--order", order, "--created-at", str(at)]
        + what, check=True, capture_output=True, text=True).stdout.strip()
    plan.append((order, at, payload))
pub = subprocess.Popen(["mosquitto_pub", "-p", port, "-t", topic, "-q", "1", "-l"], stdin=subprocess.PIPE, text=True)
written = {}
for order, at, payload in plan:
    time.sleep(max(0, at / 1000 - time.time()))
    written[order] = time.time() * 1000  # the moment it is handed to the publisher: what every time counts from
    pub.stdin.write(payload + "\n")
    pub.stdin.flush()
time.sleep(2)
pub.stdin.close()
pub.wait()
sub.terminate()
arrived = {}
for line in sub.stdout:
    stamp, payload = line.split(" ", 1)
    arrived[json.loads(payload)["order"]] = float(stamp) * 1000
s = socket.socket(socket.AF_UNIX)
s.connect(f"{work}/s.sock")
s.sendall(json.dumps({"op": "history", "limit": 1000}).encode() + b"\n")
jobs = {job.get("order"): job for job in json.loads(s.makefile().readline())["jobs"]}
def iso(text): return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000
def q(values, p): return values[min(len(values) - 1, int(len(values) * p))]
def report(name, orders):
    first = sorted(iso(jobs[o]["acceptedAt"]) + jobs[o]["firstSampleMs"] - written[o] for o, _, _ in orders if o in jobs)
    broker = sorted(arrived[o] - written[o] for o, _, _ in orders if o in arrived)
    print(f"{name}: {len(first)} of {len(orders)} spoken; push -> first sample, ms: p50 {q(first, 0.5):.2f}, "
          f"p99 {q(first, 0.99):.2f}, max {first[-1]:.2f}; mosquitto's own delivery to a subscriber, ms: p50 "
          f"{q(broker, 0.5):.2f}, p99 {q(broker, 0.99):.2f}")
report("payments", plan[:count])
report("combination broadcasts", plan[count:])
EOF

# The corpus push: every clip of the default packs, each under "<lang>-<name>", from an HTTPS server on loopback.
mkdir -p "$work/tls" "$work/www"
(
    cd "$work/tls"
    key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1" 2>/dev/null; }
    key ca.key && openssl req -x509 -new -key ca.key -out ca.pem -days 2 -subj /CN=bench-ca 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\n' > server.ext
    key server.key && openssl req -new -key server.key -out server.csr -subj /CN=127.0.0.1 2>/dev/null
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 \
        -extfile server.ext 2>/dev/null
)
https_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
arguments=()
for lang in zh en; do
    for file in out/voices/$lang/clips/*.wav; do
        name="$lang-$(basename "$file")"
        cp "$file" "$work/www/$name"
        arguments+=(--clip "${name%.wav}" "$work/www/$name" "https://127.0.0.1:$https_port/$name")
    done
done
(cd "$work/www" && exec openssl s_server -quiet -WWW -accept "$https_port" -cert "$work/tls/server.pem" \
    -key "$work/tls/server.key") > "$work/https.log" 2>&1 & pids+=($!)
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$https_port") 2>/dev/null && break; sleep 0.1; done
started=$(date +%s%3N)
"$bin/announce-push" corpus --config "$work/push.toml" --task BENCH-CORPUS "${arguments[@]}" > /dev/null
for _ in $(seq 1200); do grep -q "corpus push \(not \)\?done" "$work/push.log" && break; sleep 0.05; done
python3 - "$work" "$started" <<'EOF'
import datetime, json, socket, sys
work, started = sys.argv[1], int(sys.argv[2])
def at(text):
    line = next(l for l in open(f"{work}/push.log") if text in l)
    return datetime.datetime.fromisoformat(line.split()[0].replace("Z", "+00:00")).timestamp() * 1000
noted = at("corpus push noted")
done = at("corpus push done")
s = socket.socket(socket.AF_UNIX)
s.connect(f"{work}/s.sock")
s.sendall(json.dumps({"op": "status"}).encode() + b"\n")
corpus = json.loads(s.makefile().readline())["status"]["corpus"]
manifest = json.load(open(f"{work}/corpus/current/corpus.json"))
size = sum(clip["size"] for clip in manifest["clips"].values())
print(f"corpus push: {len(manifest['clips'])} clips, {size / 1e6:.2f} MB; publish -> installed and loaded by the "
      f"daemon: {done - started:.0f} ms ({noted - started:.0f} ms to the listener's noting it, the rest downloading, "
      f"checking, installing, the daemon loading); the daemon lists {len(corpus['clips'])} clips, "
      f"{sum(c['ms'] for c in corpus['clips']) / 1000:.1f} s of audio")
EOF
