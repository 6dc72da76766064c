#!/usr/bin/env bash
# The main job, from a fresh machine: set up, build, start the daemon, speak an amount.
# On a machine without a sound card it plays into the project's sound test rig (scripts/rig.sh)
# and saves what was heard as a WAV file.
#
#   scripts/demo.sh [AMOUNT] [announce-ctl say options…]      e.g. scripts/demo.sh 100.00 --channel alipay
set -euo pipefail
cd "$(dirname "$0")/.."
amount="${1:-100.00}"
shift || true

scripts/setup.sh
echo "demo: building"
swift build 2>&1 | tail -n 1
bin=$(swift build --show-bin-path)
scripts/program-links.sh "$bin"  # announced, announce-ctl: links to the one executable, as installed

work="$PWD/out/demo"
mkdir -p "$work"
socket="/tmp/announce-demo-$$.sock"
device="default"
rig=""
cleanup() {
    [[ -n "${daemon_pid:-}" ]] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
    [[ -n "$rig" ]] && scripts/rig.sh stop "$rig" >/dev/null
    rm -f "$socket"
}
trap cleanup EXIT

if ! grep -q '^ *[0-9]' /proc/asound/cards 2>/dev/null; then
    rig="$work/rig"
    echo "demo: no sound card here; starting the sound test rig (PulseAudio null sink) in $rig"
    scripts/rig.sh start "$rig"
    # shellcheck disable=SC1091
    source "$rig/env"
    device="pulse"
    scripts/rig.sh capture-start "$rig" "$work/heard.raw"
fi

"$bin/announced" --socket "$socket" --device "$device" --state-dir "$work/state" --voices "$PWD/out/voices" \
    2> "$work/announced.log" &
daemon_pid=$!
for _ in $(seq 100); do
    "$bin/announce-ctl" ping --socket "$socket" >/dev/null 2>&1 && break
    sleep 0.05
done

echo "demo: announce-ctl say --wait $amount $*"
"$bin/announce-ctl" say --socket "$socket" --wait "$@" "$amount"

if [[ -n "$rig" ]]; then
    sleep 0.3
    scripts/rig.sh capture-stop "$rig"
    sox -t raw -r 16000 -e signed -b 16 -c 1 "$work/heard.raw" "$work/heard.wav"
    rm -f "$work/heard.raw"
    echo "demo: the sound went to the rig's null sink; what it played is in $work/heard.wav"
    sox "$work/heard.wav" -n stat 2>&1 | grep -E 'Length|RMS +amplitude|Maximum amplitude' | sed 's/^/demo:   /'
fi
echo "demo: daemon log in $work/announced.log"
