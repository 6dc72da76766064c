#!/usr/bin/env bash
# Every benchmark of docs/benchmarks.md in one run, side by side, as Markdown on standard output: the
# executable's size and what each library costs in it, the daemon's own costs (start, memory, round trips,
# journal commit, request → first sample over 1000 jobs), exec → first sample heard on the sound rig for
# `announce-ctl say` against `spd-say` (speech-dispatcher + espeak-ng) and `aplay` of the same announcement
# pre-rendered to WAV, step by step, the CPU per announcement against aplay's, a burst from 10 clients, idle
# wake-ups, and the voice pack build. Release build. Never part of the tests (TEAM.md: no timing assertions).
#
#   scripts/bench.sh [--rounds N] [--jobs N] [--long] [--only SECTIONS]
#     --rounds N   exec → first sample rounds per variant (default 20)
#     --jobs N     sequential jobs for request → first sample, at most 1000 (default 1000)
#     --long       also 1000 back-to-back announcements on the rig with the other core saturated (≈ 20 min)
#     --only S     comma-separated sections: size, packs, daemon, burst, rig, load, arm64 (default all but
#                  load and arm64; --long: also load)
#
# arm64: instruction counts of the arm64 executable under qemu-user (scripts/qemu-instructions.py; time means
# nothing there): announce-ctl's start, the daemon's start and each announcement on ALSA's null PCM. Needs the
# arm64 build of scripts/package.sh --arch arm64 (ANNOUNCE_ARM64_BIN: its folder) and its sysroot.
#
# ANNOUNCE_BIN_DIR: use the binaries there instead of building (no size section then). Installs speech-dispatcher
# and its espeak-ng module (the anchors; not needed by the tests) and valgrind (instruction counts) if missing.
# Needs the voice packs (scripts/setup.sh). Details of each measurement: docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=20
jobs=1000
long=false
only=""
while (($#)); do
    case "$1" in
        --rounds) rounds="$2"; shift 2 ;;
        --jobs) jobs="$2"; shift 2 ;;
        --long) long=true; shift ;;
        --only) only="$2"; shift 2 ;;
        *) sed -n '2,18p' "$0" >&2; exit 64 ;;
    esac
done

if [[ -z "$only" ]]; then
    only=size,packs,daemon,burst,rig
    [[ "$long" == false ]] || only+=,load
fi
want() { [[ ",$only," == *",$1,"* ]]; }

anchors=(speech-dispatcher speech-dispatcher-espeak-ng valgrind)
for package in "${anchors[@]}"; do
    if [[ "$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null)" != "install ok installed" ]]; then
        echo "bench: installing the anchors: ${anchors[*]}" >&2
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${anchors[@]}" >&2
        break
    fi
done

if [[ -n "${ANNOUNCE_BIN_DIR:-}" ]]; then  # binaries built elsewhere (say so in the results)
    bin="$ANNOUNCE_BIN_DIR"
else
    echo "bench: release build by \`make\` (static Swift stdlib, without full Foundation)" >&2
    make build >&2  # also makes announced, announce-ctl: links to the one executable, as installed
    bin=$(swift build -c release --show-bin-path)
fi
# A freshly linked executable's pages are dirty in the page cache until written back, and smaps counts dirty
# pages a process maps as its Private_Dirty: right after a build the idle daemon showed 14.8 MiB "private"
# against 5.3 once written back. Write it back first.
sync "$(readlink -f "$bin/announce")"
probe="python3 $PWD/scripts/bench-probe.py"
export ANNOUNCE_VOICES="$PWD/out/voices"
work=$(mktemp -d /tmp/ann-bench-XXXXXX)
pids=()
rig=""
busy=""
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
    [[ -n "$busy" ]] && kill "$busy" 2>/dev/null
    [[ -n "$rig" ]] && scripts/rig.sh stop "$rig" >/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

now() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
p95() { sort -n | awk '{a[NR]=$1} END {i=int(NR*0.95); if (i<1) i=1; print a[i]}'; }
ms() { awk -v ns="$1" 'BEGIN {printf "%.2f", ns / 1e6}'; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

daemon_pid=""
start_daemon() {  # name, device, extra arguments…; sets daemon_pid and startup (ns from exec to the first answer)
    local name="$1" device="$2" started
    shift 2
    started=$(now)
    "$bin/announced" --socket "$work/$name.sock" --state-dir "$work/$name" --voices "$PWD/out/voices" \
        --device "$device" "$@" </dev/null >/dev/null 2>"$work/$name.log" &
    daemon_pid=$!
    pids+=("$daemon_pid")
    until "$bin/announce-ctl" ping --socket "$work/$name.sock" >/dev/null 2>&1; do sleep 0.002; done
    startup=$(($(now) - started))
}

stop_daemon() {  # pid
    kill "$1"
    wait "$1" 2>/dev/null || true
}

rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
# Memory that is the process's own and cannot be dropped: Private_Dirty of every mapping (heap, stacks, written
# data), kB. File pages only this process maps (Private_Clean) are left out: the kernel can drop and reread them,
# and a second daemon or any announce-ctl would share them.
private_kb() { awk '/^Private_Dirty:/ {n += $2} END {print n}' "/proc/$1/smaps_rollup"; }
# RSS by mapping, as "kB NAME" lines, largest first: the executable by segment (code, read-only, data), the
# anonymous memory (heap, stacks), each library.
rss_by_mapping() {
    awk -v exe="$(readlink -f "/proc/$1/exe")" '
        /^[0-9a-f]+-[0-9a-f]+ / {
            name = ($6 == "" ? "anonymous (heap, stacks)" : $6)
            if ($6 == exe) name = "the executable, " ($2 ~ /x/ ? "code" : $2 ~ /w/ ? "data (relocated: private)" : "read-only")
            sub(/.*\//, "", name)
        }
        /^Rss:/ { rss[name] += $2 }
        END { for (name in rss) if (rss[name] > 0) print rss[name], name }' "/proc/$1/smaps" | sort -k1,1nr
}
# Times each thread was put on a CPU (/proc/PID/task/TID/schedstat, 3rd field), as "TID NAME COUNT": wake-ups.
wakeup_threads() {
    for task in /proc/"$1"/task/*; do
        echo "$(basename "$task") $(tr ' ' '_' < "$task/comm") $(awk '{print $3}' "$task/schedstat" 2>/dev/null || echo 0)"
    done | sort
}
# Wake-ups of PID over SECONDS, by thread: threads alive at both ends, plus any that started meanwhile (all theirs).
wakeups_by_thread() {  # pid, seconds
    local before after
    before=$(wakeup_threads "$1"); sleep "$2"; after=$(wakeup_threads "$1")
    join -a 2 -e 0 -o 0,2.2,1.3,2.3 <(echo "$before") <(echo "$after") | awk '{print $2, $4 - $3}'
}

# Histogram mean from `announce-ctl metrics`, in milliseconds.
histogram_mean() {  # socket, metric
    "$bin/announce-ctl" metrics --socket "$1" | awk -v m="$2" '
        $1 == m "_sum" {sum = $2} $1 == m "_count" {count = $2}
        END {if (count > 0) printf "%.2f (n=%d)", sum / count * 1000, count; else print "-"}'
}

echo "Run on $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs),"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg). Binaries: $bin. \`scripts/bench.sh --rounds $rounds --jobs $jobs --only $only\`"
echo

# ---------------------------------------------------------------------------------------------------------------
if want size && [[ -z "${ANNOUNCE_BIN_DIR:-}" ]]; then
echo "### Size: the one executable (announced, announce-ctl, announce-push are links to it)"
echo
mkdir -p "$work/size"
python3 scripts/size-report.py .build "$work/size"
echo

fi
# ---------------------------------------------------------------------------------------------------------------
if want packs; then
echo "### Voice packs"
echo
echo "| pack | build time | size | clips |"
echo "|---|---|---|---|"
for lang in zh en; do
    s=$(now)
    scripts/build-voice-pack.sh --lang "$lang" --out "$work/voices/$lang" >/dev/null 2>&1
    took=$(($(now) - s))
    echo "| $lang | $(ms "$took") ms | $(du -sk "$work/voices/$lang" | cut -f1) KiB | $(find "$work/voices/$lang" -type f ! -name 'manifest.json' | wc -l) |"
done
echo

fi
# ---------------------------------------------------------------------------------------------------------------
if want daemon; then
echo "### The daemon on ALSA's null PCM (no sound server; the daemon's own costs)"
echo
# The first start decodes and prepares the packs' clips into its state folder (prepared/); every later start
# with the same packs maps them and decodes nothing (docs/voice-packs.md, "Prepared clips").
for i in $(seq 5); do
    start_daemon "first$i" null
    echo "$startup"
    stop_daemon "$daemon_pid"
done > "$work/startup-first"
for i in $(seq 10); do
    start_daemon first1 null
    echo "$startup"
    stop_daemon "$daemon_pid"
done > "$work/startup"
start_daemon null null
stop_daemon "$daemon_pid"
start_daemon null null  # a start like every one after the first
sleep 8  # libdispatch's start-up worker threads retire after about 5 s idle
idle_rss=$(rss_kb "$daemon_pid")
idle_private=$(private_kb "$daemon_pid")
rss_by_mapping "$daemon_pid" > "$work/idle-maps"
wakeups_by_thread "$daemon_pid" 20 > "$work/idle-wakeups"
idle_wakeups=$(awk '{n += $2} END {printf "%.2f", n / 20}' "$work/idle-wakeups")
echo "| measurement | median | p95 | notes |"
echo "|---|---|---|---|"
echo "| exec → first \`ping\` answered (start-up to ready) | $(ms "$(median < "$work/startup")") ms | $(ms "$(p95 < "$work/startup")") ms | 10 starts, zh + en packs mapped (prepared by an earlier start), journal open |"
echo "| … the first start (decodes and prepares the packs) | $(ms "$(median < "$work/startup-first")") ms | $(ms "$(p95 < "$work/startup-first")") ms | 5 starts, each with an empty state folder |"
echo "| memory, idle after start | $(awk -v k="$idle_private" 'BEGIN {printf "%.1f", k / 1024}') MiB private, $(awk -v k="$idle_rss" 'BEGIN {printf "%.1f", k / 1024}') MiB RSS | | private: /proc/PID/smaps_rollup Private_Dirty; RSS: VmRSS (shared file pages of the executable and libraries included) |"
echo "| wake-ups while idle | $idle_wakeups /s | | all threads, 20 s from 8 s after start, /proc/PID/task/*/schedstat |"
for _ in $(seq 200); do
    s=$(now); "$bin/announce-ctl" ping --socket "$work/null.sock" >/dev/null; echo $(($(now) - s))
done > "$work/ping"
echo "| \`announce-ctl ping\` (process start included) | $(ms "$(median < "$work/ping")") ms | $(ms "$(p95 < "$work/ping")") ms | 200 runs |"
for i in $(seq 200); do
    s=$(now); "$bin/announce-ctl" say --socket "$work/null.sock" --order "B$i" "$i.00" >/dev/null; echo $(($(now) - s))
done > "$work/say"
echo "| \`announce-ctl say\` → accepted | $(ms "$(median < "$work/say")") ms | $(ms "$(p95 < "$work/say")") ms | journal commit (fsync) included |"
grep -o 'journal_ms=[0-9.]*' "$work/null.log" | cut -d= -f2 | awk '{printf "%d\n", $1 * 1e6}' > "$work/journal"
echo "| journal commit before \"accepted\" | $(ms "$(median < "$work/journal")") ms | $(ms "$(p95 < "$work/journal")") ms | WAL, synchronous=FULL |"
latency=$($probe latency "$work/null.sock" "$jobs" "$work/null.log")
echo "| request received → first sample handed to ALSA | $(json <<<"$latency" "'%.2f ms' % d['p50_ms']") | $(json <<<"$latency" "'%.2f ms' % d['p95_ms']") | $(json <<<"$latency" "'p99 %.2f ms, max %.2f ms, n=%d' % (d['p99_ms'], d['max_ms'], d['n'])"): one job after another, the daemon's own timestamps (history firstSampleMs) |"
echo "| … of which the journal commit (fsync) | $(json <<<"$latency" "'%.2f ms' % d['journal_p50_ms']") | | $(json <<<"$latency" "'p99 %.2f ms, max %.2f ms' % (d['journal_p99_ms'], d['journal_max_ms'])"): the same jobs, from the daemon's log |"
echo "| … and all the rest (compose, queue, audio thread, PCM open) | $(json <<<"$latency" "'%.2f ms' % d['without_journal_p50_ms']") | | $(json <<<"$latency" "'p99 %.2f ms, max %.2f ms' % (d['without_journal_p99_ms'], d['without_journal_max_ms'])") |"
stop_daemon "$daemon_pid"
echo
echo "Idle wake-ups by thread (name, times scheduled in those 20 s):"
echo
echo '```'
sort -k2 -n -r "$work/idle-wakeups" | awk '{printf "%-24s %6d\n", $1, $2}' | head -12
echo '```'
echo
echo "Idle RSS by mapping (kB; libpulse and the X11 and D-Bus libraries it brings come here with ALSA's pulse"
echo "plugin, this host's sound server: a terminal without one loads them only with libespeak-ng, at a first text):"
echo
echo '```'
awk '$1 >= 100 {printf "%8d  %s\n", $1, substr($0, index($0, " ") + 1)} $1 < 100 {rest += $1; n++}
    END {printf "%8d  %d more mappings under 100 kB each\n", rest, n}' "$work/idle-maps"
echo '```'
echo

fi
# ---------------------------------------------------------------------------------------------------------------
if want burst; then
echo "### Burst: 10 clients × 100 payments at once (null PCM, default queue capacity)"
echo
start_daemon burst null
burst=$($probe burst "$work/burst.sock" 10 100)
stop_daemon "$daemon_pid"
echo "| requests | accepted | refused | ids unique | each client's order kept | spoken | accept throughput |"
echo "|---|---|---|---|---|---|---|"
echo "| $(json <<<"$burst" "d['requests']") | $(json <<<"$burst" "d['accepted']") | $(json <<<"$burst" "d['refused'] or 0") | $(json <<<"$burst" "d['unique_ids']") | $(json <<<"$burst" "d['per_client_order_kept']") | $(json <<<"$burst" "d['spoken']") | $(json <<<"$burst" "'%.0f /s (%.2f s)' % (d['accept_per_second'], d['accept_seconds'])") |"
echo

fi
# ---------------------------------------------------------------------------------------------------------------
if want rig || want load; then
rig="$work/rig"
scripts/rig.sh start "$rig" >/dev/null
# shellcheck disable=SC1091
source "$rig/env"
start_daemon rig pulse
rig_pid=$daemon_pid
start_daemon open pulse --keep-open
open_pid=$daemon_pid
# The default plays audio.lead_in_ms (50) of silence before a burst, to wake a sleeping amplifier: a shop hears
# it as part of the onset. Without it, the path's own latency, which is what aplay (no lead-in) is compared to.
start_daemon bare pulse --lead-in-ms 0
# And kept open without it: the PCM is already open when a request comes, so the path is the client, the
# journal and a write.
start_daemon bareopen pulse --keep-open --lead-in-ms 0
lead_in_ms=$("$bin/announced" --check-config --voices "$PWD/out/voices" --device pulse 2>/dev/null \
    | awk -F' = ' '/^lead_in_ms/ {print $2}')
amount=123.45
"$bin/announce-ctl" render --output "$work/announcement.wav" "$amount" >/dev/null
# What the default daemon writes to ALSA, sample for sample: the same announcement after its lead-in.
"$bin/announce-ctl" render --lead-in-ms "$lead_in_ms" --output "$work/announcement-lead-in.wav" "$amount" >/dev/null
text=$("$bin/announce-ctl" words "$amount" | cut -f2)
espeak-ng -v cmn-latn-pinyin -w "$work/espeak.wav" "$text"
lead() {  # leading silence of a WAV, ms (first sample above the probe's threshold)
    python3 - "$1" <<'PY'
import sys, wave
w = wave.open(sys.argv[1])
data = memoryview(w.readframes(w.getnframes())).cast("h")
print(f"{next(i for i, s in enumerate(data) if abs(s) > 300) * 1000 / w.getframerate():.0f}")
PY
}
fi

if want rig; then
echo "### On the sound rig (ALSA pulse plugin → PulseAudio null sink): exec → first sample heard"
echo
voice="Chinese (Mandarin, latin as Pinyin)"
spd_dir="$XDG_RUNTIME_DIR/speech-dispatcher"
speech-dispatcher -s -t 0 >/dev/null 2>&1 &
spd_pid=$!
pids+=("$spd_pid")
for _ in $(seq 200); do [[ -S "$spd_dir/speechd.sock" ]] && break; sleep 0.05; done
spd-say -o espeak-ng -y "$voice" -w "$text" >/dev/null  # the module loaded before the first measured round
warm=$($probe onset "$rounds" \
    "announce-ctl say=$bin/announce-ctl say --socket $work/rig.sock $amount" \
    "announce-ctl say, --keep-open=$bin/announce-ctl say --socket $work/open.sock $amount" \
    "announce-ctl say, no lead-in=$bin/announce-ctl say --socket $work/bare.sock $amount" \
    "announce-ctl say, kept open, no lead-in=$bin/announce-ctl say --socket $work/bareopen.sock $amount" \
    "aplay WAV=aplay -q -D pulse $work/announcement.wav" \
    "aplay WAV, lead-in included=aplay -q -D pulse $work/announcement-lead-in.wav" \
    "spd-say, running server=spd-say -o espeak-ng -y '$voice' -w '$text'")
kill "$spd_pid"; wait "$spd_pid" 2>/dev/null || true
# Cold: no server; spd-say starts one, which is stopped by PID after each round (it outlives its client).
cold=$($probe onset 5 \
    "spd-say, cold server=spd-say -o espeak-ng -y '$voice' -w '$text'; sleep 0.2; kill \$(cat $spd_dir/pid/speech-dispatcher.pid 2>/dev/null) 2>/dev/null")
spd=$(json <<<"$warm" "d['spd-say, running server']['median_ms']")
row() {  # name, json, leading silence
    local median
    median=$(json <<<"$2" "d['$1']['median_ms']")
    echo "| $1 | $(printf %.1f "$median") ms | $(json <<<"$2" "'%.1f–%.1f ms' % (d['$1']['p10_ms'], d['$1']['p90_ms'])") | $(json <<<"$2" "d['$1']['n']") | $3 ms | $(awk -v a="$spd" -v b="$median" 'BEGIN {printf "%.1f×", a / b}') |"
}
echo "| variant | median | p10–p90 | n | leading silence in the audio | spd-say (running) ÷ variant |"
echo "|---|---|---|---|---|---|"
row "announce-ctl say" "$warm" "$(lead "$work/announcement.wav")"
row "announce-ctl say, --keep-open" "$warm" "$(lead "$work/announcement.wav")"
row "announce-ctl say, no lead-in" "$warm" "$(lead "$work/announcement.wav")"
row "announce-ctl say, kept open, no lead-in" "$warm" "$(lead "$work/announcement.wav")"
row "aplay WAV" "$warm" "$(lead "$work/announcement.wav")"
row "aplay WAV, lead-in included" "$warm" "$(lead "$work/announcement-lead-in.wav")"
row "spd-say, running server" "$warm" "≈ $(lead "$work/espeak.wav")"
row "spd-say, cold server" "$cold" "≈ $(lead "$work/espeak.wav")"
echo
echo "The same announcement ($amount: $text) everywhere; spd-say speaks it with espeak-ng's Mandarin voice."
echo "The first two include the daemon's lead-in ($lead_in_ms ms of silence before a burst, audio.lead_in_ms, to"
echo "wake a sleeping amplifier); \"no lead-in\" is a daemon started with --lead-in-ms 0 (and --keep-open)."
echo "In-daemon request → first sample on the rig (mean of the daemon's histogram, these rounds):"
echo "default $(histogram_mean "$work/rig.sock" announce_first_sample_seconds) ms,"
echo "--keep-open $(histogram_mean "$work/open.sock" announce_first_sample_seconds) ms."
echo
echo "The replay window (docs/protocol.md, \"Durability\"): last sample out of the device → the job on disk as"
echo "spoken, mean over these rounds: default $(histogram_mean "$work/rig.sock" announce_heard_record_seconds) ms,"
echo "--keep-open $(histogram_mean "$work/open.sock" announce_heard_record_seconds) ms; plus the end being noticed"
echo "(at most 2 ms after it was played: the audio thread waits for it, not for a period)."
echo

# ---------------------------------------------------------------------------------------------------------------
echo "### announce-ctl say, step by step"
echo
request=$($probe request "$rounds" "$bin/announce-ctl say --socket {socket} $amount")
heard_default=$(json <<<"$warm" "d['announce-ctl say']['median_ms']")
heard_open=$(json <<<"$warm" "d['announce-ctl say, --keep-open']['median_ms']")
heard_aplay=$(json <<<"$warm" "d['aplay WAV']['median_ms']")
heard_bare=$(json <<<"$warm" "d['announce-ctl say, no lead-in']['median_ms']")
heard_bareopen=$(json <<<"$warm" "d['announce-ctl say, kept open, no lead-in']['median_ms']")
heard_aplay_lead=$(json <<<"$warm" "d['aplay WAV, lead-in included']['median_ms']")
first_default=$(histogram_mean "$work/rig.sock" announce_first_sample_seconds | cut -d' ' -f1)
first_open=$(histogram_mean "$work/open.sock" announce_first_sample_seconds | cut -d' ' -f1)
first_bare=$(histogram_mean "$work/bare.sock" announce_first_sample_seconds | cut -d' ' -f1)
first_bareopen=$(histogram_mean "$work/bareopen.sock" announce_first_sample_seconds | cut -d' ' -f1)
sent=$(json <<<"$request" "d['median_ms']")
rest() { awk -v h="$1" -v s="$sent" -v f="$2" -v l="$3" 'BEGIN {printf "%.2f", h - s - f - l}'; }
ratio() { awk -v a="$1" -v b="${2:-$heard_aplay}" 'BEGIN {printf "%.2f", a / b}'; }
echo "| step | default | --keep-open | no lead-in | kept open, no lead-in |"
echo "|---|---|---|---|---|"
echo "| exec → request line received by the socket (a stand-in server, median of $rounds; fastest $(json <<<"$request" "'%.2f' % d['min_ms']") ms) | $(printf %.2f "$sent") ms | same | same | same |"
echo "| daemon: request read → first sample written to ALSA, lead-in aside (mean of the rounds above) | $first_default ms | $first_open ms | $first_bare ms | $first_bareopen ms |"
echo "| the lead-in's silence (audio.lead_in_ms) | $lead_in_ms ms | $lead_in_ms ms | 0 ms | 0 ms |"
echo "| first sample written → heard on the monitor (the rest of the median onset) | $(rest "$heard_default" "$first_default" "$lead_in_ms") ms | $(rest "$heard_open" "$first_open" "$lead_in_ms") ms | $(rest "$heard_bare" "$first_bare" 0) ms | $(rest "$heard_bareopen" "$first_bareopen" 0) ms |"
echo "| **exec → heard** (median onset, above) | $(printf %.1f "$heard_default") ms | $(printf %.1f "$heard_open") ms | $(printf %.1f "$heard_bare") ms | $(printf %.1f "$heard_bareopen") ms |"
echo "| aplay of the same samples: exec → heard | $(printf %.1f "$heard_aplay") ms | | | |"
echo "| **onset ratio** announce-ctl say ÷ aplay | **$(ratio "$heard_default")** | **$(ratio "$heard_open")** | **$(ratio "$heard_bare")** | **$(ratio "$heard_bareopen")** |"
echo "| aplay of what the daemon writes, the lead-in included: exec → heard | $(printf %.1f "$heard_aplay_lead") ms | | | |"
echo "| **onset ratio, the same samples** (the daemon's with its lead-in ÷ aplay of them) | **$(ratio "$heard_default" "$heard_aplay_lead")** | **$(ratio "$heard_open" "$heard_aplay_lead")** | **$(ratio "$heard_bare")** | **$(ratio "$heard_bareopen")** |"
echo
callgrind() {  # instructions a command executes (valgrind's callgrind: exact, the machine's load aside)
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 >/dev/null | awk '/Collected/ {print $4}'
}
# Valgrind cannot read the debug information of a Swift release build: a stripped copy, called by its name.
mkdir -p "$work/stripped"
objcopy --strip-all "$bin/announce" "$work/stripped/announce"
ln -sf announce "$work/stripped/announce-ctl"
echo "Instructions (callgrind), whole processes: \`announce-ctl say --socket MISSING 1\` (start, parse, the connect"
echo "that fails, the message) $(callgrind "$work/stripped/announce-ctl" say --socket "$work/missing.sock" 1);"
echo "\`aplay --version\` (start only) $(callgrind aplay --version); \`aplay -D null\` of the WAV $(callgrind aplay -q -D null "$work/announcement.wav")."
echo

# ---------------------------------------------------------------------------------------------------------------
echo "### CPU per announcement, against aplay of the same samples on the same device"
echo
cpu=$($probe cpu "$rounds" "$amount" "$work/announcement.wav" "default=$work/rig.sock:$rig_pid" "--keep-open=$work/open.sock:$open_pid")
echo "| who | CPU per announcement (median) | min | wake-ups (median) | request → heard |"
echo "|---|---|---|---|---|"
for who in default --keep-open aplay; do
    echo "| $who | $(json <<<"$cpu" "'%.2f ms' % d['$who']['cpu_ms']") | $(json <<<"$cpu" "'%.2f ms' % d['$who']['cpu_min_ms']") | $(json <<<"$cpu" "'%.0f' % d['$who']['wakeups']") | $(json <<<"$cpu" "'%.0f ms' % d['$who']['heard_ms']") |"
done
echo
echo "The daemon: its whole process's CPU clock (every thread, ended ones included) from sending \`say --wait\` to the"
echo "reply that it was heard, $rounds rounds, $amount ($(json <<<"$cpu" "'%.1f s' % (d['aplay']['heard_ms'] / 1000)") of audio); wake-ups: its living threads' schedstat."
echo "aplay (\`-D pulse\`, process start included): rusage of the child; wake-ups: its context switches."
echo

echo "### Speaking: memory (rig, 20 announcements back to back)"
echo
$probe sustain "$work/rig.sock" 20 > "$work/sustain" &
sustain=$!
peak=0
while kill -0 "$sustain" 2>/dev/null; do
    r=$(rss_kb "$rig_pid"); ((r > peak)) && peak=$r
    sleep 0.05
done
wait "$sustain"
echo "| RSS while speaking (peak VmRSS) | private memory after | announcements |"
echo "|---|---|---|"
echo "| $((peak / 1024)) MiB | $(awk -v k="$(private_kb "$rig_pid")" 'BEGIN {printf "%.1f", k / 1024}') MiB | 20 ($(json < "$work/sustain" "'%.1f s' % d['seconds']")) |"
echo

echo "### The replay window (docs/protocol.md, \"Durability\")"
echo
# Every job the rig daemon spoke in this run logs record_ms: from the moment the device said its last sample had
# left to its spoken being committed to the journal. The audio thread's wait is bounded by the device's delay to
# that end (docs/audio.md, "When a job counts as heard"): in whole milliseconds rounded up, plus one, so the end
# is noticed at most 2 ms after it was played (and a thread's wake-up), whatever the period.
notice_ms=2
grep -o 'record_ms=[0-9.]*' "$work/rig.log" | cut -d= -f2 | sort -n > "$work/record_ms"
echo "| jobs | journal commit after heard: median | p95 | max | end noticed within | window at most |"
echo "|---|---|---|---|---|---|"
awk -v p="$notice_ms" '{a[NR] = $1} END {
    if (NR == 0) { print "| 0 | - | - | - | " p " ms | - |"; exit }
    median = a[int((NR + 1) / 2)]
    i95 = int(NR * 0.95 + 0.5); if (i95 < 1) i95 = 1
    printf "| %d | %.2f ms | %.2f ms | %.2f ms | %s ms | %.1f ms |\n", NR, median, a[i95], a[NR], p, a[NR] + p }' "$work/record_ms"
echo

fi
if want arm64; then
    arm64_bin=${ANNOUNCE_ARM64_BIN:-.build-arm64/aarch64-unknown-linux-gnu/release}
    [[ -x "$arm64_bin/announce" ]] || { echo "bench: no $arm64_bin/announce; run scripts/package.sh --arch arm64" >&2; exit 1; }
    sysroot=$(scripts/pkg/sysroot.sh)
    count=scripts/qemu-instructions.py
    mkdir -p "$work/arm64"
    cp "$arm64_bin/announce" "$work/arm64/announce"
    for program in announced announce-ctl; do ln -sf announce "$work/arm64/$program"; done
    echo "### arm64 under qemu-user: instructions executed"
    echo
    ctl_missing=$($count "$sysroot" "$work/arm64/announce-ctl" say --socket "$work/missing.sock" 1 2>/dev/null || true)
    ctl_words=$($count "$sysroot" "$work/arm64/announce-ctl" words 123.45 2>/dev/null)
    # The daemon under the counter (slow: every block it runs is logged), marked once it answers: sets counter
    # and started (instructions from exec to ready). Output in $work/NAME, the counter's marks in $work/NAME-err.
    counted_daemon() {
        $count "$sysroot" "$work/arm64/announced" --socket "$work/arm64.sock" --state-dir "$work/arm64-state" \
            --voices "$PWD/out/voices" --device null > "$work/$1" 2> "$work/$1-err" &
        counter=$!
        pids+=("$counter")
        until "$bin/announce-ctl" ping --socket "$work/arm64.sock" >/dev/null 2>&1; do sleep 0.1; done
        kill -USR1 "$counter"
        until grep -q '^mark' "$work/$1-err"; do sleep 0.1; done
        started=$(grep '^mark' "$work/$1-err" | tail -1 | cut -d' ' -f2)
    }
    # A first start alone (it prepares the packs into arm64-state/prepared), then the counted run: a later start.
    counted_daemon arm64-first
    first_started=$started
    kill -TERM "$counter"
    wait "$counter" 2>/dev/null || true
    counted_daemon arm64-count
    "$bin/announce-ctl" say --wait --socket "$work/arm64.sock" 1.00 >/dev/null  # first-use costs, not counted
    kill -USR1 "$counter"
    until (($(grep -c '^mark' "$work/arm64-count-err") >= 2)); do sleep 0.1; done
    before=$(grep '^mark' "$work/arm64-count-err" | tail -1 | cut -d' ' -f2)
    arm64_jobs=5
    for i in $(seq "$arm64_jobs"); do "$bin/announce-ctl" say --wait --socket "$work/arm64.sock" "12$i.45" >/dev/null; done
    kill -USR1 "$counter"
    until (($(grep -c '^mark' "$work/arm64-count-err") >= 3)); do sleep 0.1; done
    after=$(grep '^mark' "$work/arm64-count-err" | tail -1 | cut -d' ' -f2)
    "$bin/announce-ctl" ping --socket "$work/arm64.sock" >/dev/null
    kill -TERM "$counter"  # it stops the daemon and prints the count of everything
    wait "$counter" 2>/dev/null || true
    millions() { awk -v n="$1" 'BEGIN {printf "%.2f M", n / 1e6}'; }
    echo "| what | instructions |"
    echo "|---|---|"
    echo "| \`announce-ctl say --socket MISSING 1\` (start, parse, the connect that fails, the message) | $(millions "$ctl_missing") |"
    echo "| \`announce-ctl words 123.45\` (start, the reading, no daemon) | $(millions "$ctl_words") |"
    echo "| the daemon: exec → ready (zh + en packs mapped, prepared by the first start; journal opened) | $(millions "$started") |"
    echo "| the daemon's first start: exec → ready (zh + en packs decoded and prepared) | $(millions "$first_started") |"
    echo "| the daemon: one announcement, request → heard (mean of $arm64_jobs, 12x.45, ALSA null PCM; all threads) | $(millions "$(((after - before) / arm64_jobs))") |"
    echo "| the daemon: its stop after them (SIGTERM → exit) | $(millions "$(($(tail -1 "$work/arm64-count") - after))") |"
    echo
    echo "qemu-aarch64 $(qemu-aarch64-static --version | head -1 | awk '{print $3}'), the arm64 build in $arm64_bin; counted from qemu's"
    echo "translation log (scripts/qemu-instructions.py)."
    echo
fi
if want load; then
    echo "### Playback under load: 1000 announcements back to back, the other core saturated"
    echo
    echo "Short amounts (1–9 元, about 1 s each) so that 1000 fit in about 20 minutes; a busy loop holds one core."
    echo
    sh -c 'while :; do :; done' &
    busy=$!
    x0=$("$bin/announce-ctl" status --json --socket "$work/rig.sock" | json "d['status']['audio'].get('xruns', 'n/a')")
    sustained=$($probe sustain "$work/rig.sock" 1000 short)
    x1=$("$bin/announce-ctl" status --json --socket "$work/rig.sock" | json "d['status']['audio'].get('xruns', 'n/a')")
    kill "$busy"; busy=""
    echo "| announcements | took | states (last 1000) | queue_full answers (client waited, sent again) | xruns |"
    echo "|---|---|---|---|---|"
    echo "| 1000 | $(json <<<"$sustained" "'%.0f s' % d['seconds']") | $(json <<<"$sustained" "d['states_of_last_1000']") | $(json <<<"$sustained" "d['queue_full']") | $x0 → $x1 |"
    echo
fi
if want rig || want load; then
    stop_daemon "$rig_pid"
    stop_daemon "$open_pid"
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
