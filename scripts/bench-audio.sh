#!/usr/bin/env bash
# Measures the audio engine on the sound test rig (docs/audio.md, "Measured"): request → first sample heard on
# the speaker's monitor with the PCM opened per burst and kept open, and underruns (xruns, as the daemon counts
# them) and gaps in what was heard, for the old buffer (10 ms × 4), the new one (10 ms × 16) and the audio
# thread at nice −10 — on the machine as it is, then with three busy loops besides.
#
#   scripts/bench-audio.sh [N] [SECTIONS]   N announcements per variant (default 20); SECTIONS: "latency load"
#                                          (default, both tables), "latency", or "load"
#
# Needs a build (swift build), the voice packs (scripts/setup.sh) and python3. Prints Markdown tables.
#
# How the first sample is timed: a reader on the speaker's monitor (parec, 5 ms latency) timestamps every
# chunk it gets; the request is sent on an open socket (no process start in the number) and the onset is the
# first sample above the threshold, dated by its chunk's arrival less what followed it in that chunk. So the
# number includes the daemon's work (compose, journal commit, queue, open the PCM), the sound server and the
# monitor's own latency, and the announcement's leading silence (printed below the table) — "seen on the
# monitor", comparable between variants of one run, not an absolute figure (../shared/RIGS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-20}"
sections="${2:-latency load}"
bin="${ANNOUNCE_BIN_DIR:-$(swift build --show-bin-path)}"  # ANNOUNCE_BIN_DIR: binaries built elsewhere
[[ -x "$bin/announced" ]] || scripts/program-links.sh "$bin"  # the programs: links to the one executable
work=$(mktemp -d /tmp/ann-bencha-XXXXXX)
daemon_pid=""
load_pids=()
rig="$work/rig"
cleanup() {
    for pid in "${load_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${load_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [[ -n "$daemon_pid" ]]; then kill "$daemon_pid" 2>/dev/null || true; wait "$daemon_pid" 2>/dev/null || true; fi
    scripts/rig.sh stop "$rig" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

scripts/rig.sh start "$rig" >/dev/null
# shellcheck disable=SC1091
source "$rig/env"

start_daemon() {  # name, then announced flags
    local name="$1"
    shift
    "$bin/announced" --socket "$work/$name.sock" --state-dir "$work/$name" --voices "$PWD/out/voices" \
        --device pulse --mixer none --queue-capacity 1000 "$@" </dev/null >/dev/null 2>"$work/$name.log" &
    daemon_pid=$!
    until "$bin/announce-ctl" ping --socket "$work/$name.sock" >/dev/null 2>&1; do sleep 0.01; done
}

stop_daemon() {
    kill "$daemon_pid"
    wait "$daemon_pid" 2>/dev/null || true
    daemon_pid=""
}

# The measuring client: N announcements, one at a time, each after the speaker has been quiet; prints one
# onset latency (ms) per line. Also saves the whole capture for the gap check.
cat > "$work/onset.py" <<'EOF'
import json, os, select, socket, struct, subprocess, sys, time
sock_path, count, capture_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rate, threshold = 16000, 300
reader = subprocess.Popen(
    ["parec", "-d", "speaker.monitor", "--raw", "--format=s16le", "--rate=16000", "--channels=1",
     "--latency-msec=5"], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
fd = reader.stdout.fileno()
os.set_blocking(fd, False)
capture = open(capture_path, "wb")
pending = b""

def chunks(until):
    """Yields (arrival time, samples) until the monotonic time `until`."""
    global pending
    while time.monotonic() < until:
        ready, _, _ = select.select([fd], [], [], max(0, until - time.monotonic()))
        if not ready:
            continue
        data = os.read(fd, 65536)
        now = time.monotonic()
        if not data:
            raise SystemExit("parec stopped")
        capture.write(data)
        data = pending + data
        usable = len(data) - len(data) % 2
        pending = data[usable:]
        yield now, struct.unpack("<%dh" % (usable // 2), data[:usable])

client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
client.connect(sock_path)
replies = client.makefile("r")
for _ in chunks(time.monotonic() + 1.0):
    pass
for index in range(count):
    # Quiet for 0.5 s first (the last announcement has ended).
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < 0.5:
        for _, samples in chunks(time.monotonic() + 0.05):
            if any(abs(s) > threshold for s in samples):
                quiet_since = time.monotonic()
    request = {"id": str(index), "op": "say", "amount": "%d.00" % (index % 9 + 1), "order": "bench-%d-%d" % (os.getpid(), index)}
    sent = time.monotonic()
    client.sendall((json.dumps(request) + "\n").encode())
    onset = None
    for arrival, samples in chunks(sent + 5.0):
        for position, sample in enumerate(samples):
            if abs(sample) > threshold:
                onset = arrival - (len(samples) - position) / rate
                break
        if onset is not None:
            break
    reply = json.loads(replies.readline())
    if not reply.get("ok"):
        raise SystemExit("say failed: %s" % reply)
    print("%.2f" % ((onset - sent) * 1000) if onset is not None else "nan", flush=True)
for _ in chunks(time.monotonic() + 3.5):
    pass
reader.terminate()
reader.wait()
EOF

# What the daemon plays (the same render the daemon does), for the leading silence every onset includes and for
# the silences inside an announcement (word gaps) that are not gaps in playback.
for amount in 1 2 3 4 5 6 7 8 9; do
    "$bin/announce-ctl" render --voices "$PWD/out/voices" --output "$work/render-$amount.wav" "$amount.00" >/dev/null
done
lead_ms=$(python3 - "$work/render-1.wav" <<'PY'
import sys, wave, struct
w = wave.open(sys.argv[1])
data = struct.unpack("<%dh" % w.getnframes(), w.readframes(w.getnframes()))
first = next(i for i, s in enumerate(data) if abs(s) > 300)
print("%.1f" % (first * 1000 / w.getframerate()))
PY
)

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
p95() { sort -n | awk '{a[NR]=$1} END {i=int(NR*0.95+0.5); if (i<1) i=1; if (i>NR) i=NR; print a[i]}'; }
status_field() {  # socket, python expression over the status reply
    "$bin/announce-ctl" status --json --socket "$1" 2>/dev/null | python3 -c "import json,sys; s=json.load(sys.stdin); print($2)"
}

# Gaps: runs of digital silence inside an announcement longer than any in the rendered announcements themselves
# (their word gaps), and shorter than the quiet between two announcements — the sound of an underrun.
cat > "$work/gaps.py" <<'EOF'
import glob, struct, sys, wave
def runs(xs):
    out, run = [], 0
    for x in xs:
        if x == 0:
            run += 1
        else:
            if run:
                out.append(run)
            run = 0
    return out
own = 0
for path in glob.glob(sys.argv[2] + "/render-*.wav"):
    w = wave.open(path)
    ref = struct.unpack("<%dh" % w.getnframes(), w.readframes(w.getnframes()))
    ref = ref[next(i for i, x in enumerate(ref) if x != 0):]
    own = max([own] + runs(ref))
data = open(sys.argv[1], "rb").read()
samples = struct.unpack("<%dh" % (len(data) // 2), data[: len(data) - len(data) % 2])
gaps = [r for r in runs(samples) if own < r < 4000]  # below 0.25 s: inside an announcement, not between two
print(len(gaps), own)
EOF

run_variant() {  # label, then announced flags
    local label="$1"
    shift
    start_daemon v "$@"
    python3 "$work/onset.py" "$work/v.sock" "$n" "$work/capture.raw" > "$work/onsets"
    local xruns period buffer
    xruns=$(status_field "$work/v.sock" "s['status']['audio']['engine']['sink']['xruns']")
    period=$(status_field "$work/v.sock" "s['status']['audio']['engine']['sink']['periodFrames']")
    buffer=$(status_field "$work/v.sock" "s['status']['audio']['engine']['sink']['bufferFrames']")
    local gaps
    gaps=$(python3 "$work/gaps.py" "$work/capture.raw" "$work" | cut -d' ' -f1)
    echo "| $label | $period / $buffer | $(median < "$work/onsets") ms | $(p95 < "$work/onsets") ms | $xruns | $gaps |"
    stop_daemon
    rm -rf "$work/v" "$work/v.sock"
}

if [[ " $sections " == *" latency "* ]]; then
    echo "Request → first sample on the rig's monitor, $n announcements each, machine as it is" \
        "(load $(cut -d' ' -f1-3 /proc/loadavg)):"
    echo
    echo "| variant | period / buffer (frames) | median | p95 | xruns | gaps |"
    echo "|---|---|---|---|---|---|"
    run_variant "open per burst, 10 ms × 4, nice 0 (the old default)" --periods 4 --audio-nice 0
    run_variant "open per burst, 10 ms × 16, nice 0" --periods 16 --audio-nice 0
    run_variant "open per burst, 10 ms × 16, nice −10 (default)"
    run_variant "kept open, 10 ms × 16, nice −10" --keep-open
    echo
    echo "(each onset includes the announcement's own leading silence: $lead_ms ms)"
    echo
fi

if [[ " $sections " == *" load "* ]]; then
    # Three busy loops at normal priority besides whatever the machine runs.
    for _ in 1 2 3; do (while :; do :; done) & load_pids+=($!); done
    echo "The same with three CPU-bound busy loops running besides ($(nproc) cores):"
    echo
    echo "| variant | period / buffer (frames) | median | p95 | xruns | gaps |"
    echo "|---|---|---|---|---|---|"
    run_variant "open per burst, 10 ms × 4, nice 0 (the old default)" --periods 4 --audio-nice 0
    run_variant "open per burst, 10 ms × 16, nice 0" --periods 16 --audio-nice 0
    run_variant "open per burst, 10 ms × 16, nice −10 (default)"
fi
