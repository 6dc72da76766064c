#!/usr/bin/env bash
# Writes scripts/hot-symbols.txt: the functions of the executable that the programs actually run — the daemon's
# start, a payment, a prompt, a text, the commands of announce-ctl, announce-push's start and a push — for the
# linker to put side by side at the head of .text (the Makefile's LAYOUT_FLAGS: --symbol-ordering-file).
#
# Why: the kernel maps an executable's pages 64 kB at a time around each page a program runs (fault-around). The
# 2.5 MiB of code these programs run was scattered over 16 MB of .text, so the idle daemon kept 17 MB of the
# executable resident; packed, 12.5 MB (docs/benchmarks.md, "The daemon: memory and start-up").
#
#   scripts/hot-symbols.sh [EXECUTABLE]           profile (default: .build/release/announce, as `make` builds
#                                                 it) and write the list; then `make` links with it
#   scripts/hot-symbols.sh --check EXECUTABLE     fail unless the listed functions the executable has all lie
#                                                 in the first 60 % of its .text (a build that lost the layout
#                                                 has 77 % there); scripts/package.sh runs it on each build
#
# The names are the symbols' own (mangled), so one list serves both architectures; a name the next build no
# longer has is passed over (--no-warn-symbol-ordering), and a new function is only left out of the head until
# this runs again: run it when the code has changed much. Runs each program under valgrind's callgrind (installed
# if missing), under a minute. Needs the voice packs (scripts/setup.sh) and mosquitto (the tests' broker).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == --check ]]; then
    exec python3 - "${2:?--check EXECUTABLE}" scripts/hot-symbols.txt << 'EOF'
import subprocess, sys
executable, listing = sys.argv[1], sys.argv[2]
address = {}
for line in subprocess.run(["nm", "--defined-only", executable], capture_output=True, text=True, check=True).stdout.splitlines():
    fields = line.split()
    if len(fields) == 3 and fields[1] in "tTwW":
        address[fields[2]] = int(fields[0], 16)
for line in subprocess.run(["readelf", "-SW", executable], capture_output=True, text=True, check=True).stdout.splitlines():
    if " .text " in line:
        fields = line.split("]")[1].split()
        start, size = int(fields[2], 16), int(fields[4], 16)
offsets = [address[name] - start for name in open(listing).read().split() if name in address]
inside = sum(offset < 0.6 * size for offset in offsets) / max(1, len(offsets))
print(f"hot-symbols: {len(offsets)} listed functions in {executable}, {inside:.1%} of them in the first 60 % of .text")
if len(offsets) < 1000 or inside < 0.99:
    sys.exit("hot-symbols: the executable was not linked in the listed order (Makefile, LAYOUT_FLAGS)")
EOF
fi
executable=${1:-.build/release/announce}
[[ -x "$executable" ]] || { echo "hot-symbols: $executable missing; run make first" >&2; exit 1; }
[[ -f out/voices/zh/manifest.json ]] || { echo "hot-symbols: no voice packs in out/voices; run scripts/setup.sh" >&2; exit 1; }
if ! command -v valgrind > /dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind
fi

work=$(mktemp -d /tmp/ann-hot-XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null || true; done
    [[ -n "${HOT_KEEP:-}" ]] || rm -rf "$work"
}
trap cleanup EXIT
# valgrind 3.19 cannot read the DWARF 5 the toolchain writes: profile a copy without the debug sections (the
# symbol table stays).
strip --strip-debug -o "$work/announce" "$executable"
ann="$work/announce"
export ANNOUNCE_VOICES="$PWD/out/voices"
grind() {  # NAME PROGRAM ARGS...: one run under callgrind, its profile kept as $work/profile.NAME. It execs:
    local name=$1   # call it in a subshell, ( grind … ) or grind … &, whose PID is then valgrind's own
    shift
    exec valgrind --tool=callgrind --demangle=no --dump-instr=no --compress-strings=no --compress-pos=no \
        --callgrind-out-file="$work/profile.$name" --log-file="$work/valgrind.$name" "$ann" "$@"
}
wait_for() {  # PATH: wait until the socket is there (valgrind starts slowly)
    for _ in $(seq 600); do [[ -S "$1" ]] && return; sleep 0.1; done
    echo "hot-symbols: $1 did not appear" >&2; exit 1
}

: > "$work/announced.toml"
socket="$work/announce.sock"
grind daemon announced --device null --state-dir "$work/state" --socket "$socket" --voices out/voices \
    --config "$work/announced.toml" > "$work/daemon.log" 2>&1 &
daemon=$!
pids+=("$daemon")
wait_for "$socket"
runs=0
ctl() {
    runs=$((runs + 1))
    (grind "ctl-$runs" announce-ctl "$@" -s "$socket") > /dev/null 2>&1 || true
}
ctl ping
ctl say -w 12.34
ctl say -w 3.00 --order hot-1
ctl say -w 3.00 --order hot-1  # a duplicate, refused
ctl say --lang en -w 5.50
ctl prompt -w network-lost
ctl text -w 你好
ctl status
ctl queue
ctl history
ctl volume
ctl today
ctl metrics
ctl replay
ctl cancel --all
(grind words announce-ctl words 12.34) > /dev/null 2>&1 || true
(grind render announce-ctl render --output "$work/render.wav" 12.34) > /dev/null 2>&1 || true
(grind help announce-ctl --help) > /dev/null 2>&1 || true
(grind usage announce-ctl say --bogus) > /dev/null 2>&1 || true

# announce-push: its start, one signed payment through the broker to the daemon, its receipt and status.
port=$((20000 + RANDOM % 20000))
mosquitto -p "$port" > "$work/mosquitto.log" 2>&1 &
pids+=("$!")
cat > "$work/push.toml" << EOF
device = "HOT1"
socket = "$socket"
state_dir = "$work/push-state"
[broker]
url = "mqtt://127.0.0.1:$port"
[keys]
k1 = "hex:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
EOF
grind push announce-push run --config "$work/push.toml" > "$work/push.log" 2>&1 &
push=$!
pids+=("$push")
for _ in $(seq 300); do grep -q "event=broker-connected" "$work/push.log" 2> /dev/null && break; sleep 0.1; done
(grind publish announce-push publish --config "$work/push.toml" 8.88) > /dev/null 2>&1 || true
for _ in $(seq 300); do grep -q "event=push-forwarded" "$work/push.log" 2> /dev/null && break; sleep 0.1; done
kill -TERM "$push" 2> /dev/null || true
wait "$push" 2> /dev/null || true

kill -TERM "$daemon"
wait "$daemon" 2> /dev/null || true

# Functions of the executable (callgrind's ob= line names the object of the fn= lines that follow), per run.
for file in "$work"/profile.*; do
    awk -v exe="$ann" '/^ob=/ { ob = substr($0, 4) } /^fn=/ && ob == exe && $0 !~ /^fn=0x/ { print substr($0, 4) }' \
        "$file" | sort -u > "$file.functions"
done
# The order. The daemon and the push listener stay resident, so each one's functions must lie side by side: the
# kernel maps 64 kB around each page run, and ordered only by how many runs used a function, the daemon's
# 1.9 MB of code touched 137 such windows (8.8 MB resident). The command line comes and goes and gets what is
# left. By who ran a function, D (the daemon), P (the push listener), C (any short-lived command):
#   D only | D+C | D+C+P | D+P | P only | P+C | C only
# keeps D and P each in one stretch and C in two. Within a group, functions more runs used come first.
python3 - "$work" > scripts/hot-symbols.txt << 'EOF'
import collections, pathlib, sys
runs = collections.defaultdict(set)
for listing in pathlib.Path(sys.argv[1]).glob("profile.*.functions"):
    run = listing.name[len("profile."):-len(".functions")]
    for name in listing.read_text().split():
        runs[name].add(run)
groups = [(True, False, False), (True, False, True), (True, True, True), (True, True, False),
          (False, True, False), (False, True, True), (False, False, True)]
def place(name):
    who = runs[name]
    return groups.index(("daemon" in who, "push" in who, bool(who - {"daemon", "push"}))), -len(who), name
print("\n".join(sorted(runs, key=place)))
EOF
echo "hot-symbols: $(wc -l < scripts/hot-symbols.txt) functions from $(ls "$work"/profile.*.functions | wc -l) runs → scripts/hot-symbols.txt" >&2
