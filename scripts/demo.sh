#!/usr/bin/env bash
# The main job, from a fresh machine: set up, build, start the daemon, speak an amount.
# On a machine without a sound card it plays into the project's sound test rig (scripts/rig.sh)
# and saves what was heard as a WAV file.
#
#   scripts/demo.sh [AMOUNT] [announce-ctl say options…]    e.g. scripts/demo.sh 100.00 --channel alipay
#   scripts/demo.sh --keep [AMOUNT] [options…]              the same, and the speaker stays: the daemon (and the
#                                                           rig) keep running, for README's "Using it"
#   scripts/demo.sh --env                                   what to eval to use the speaker kept: PATH (the
#                                                           programs), ANNOUNCE_SOCKET, ANNOUNCE_VOICES
#   scripts/demo.sh --stop                                  stop the speaker kept
#
# ANNOUNCE_BIN_DIR: a build to use instead of building one (the README's test runs CI's build so).
# ANNOUNCE_DEMO_DIR: where the demo keeps its daemon's state, log, socket and rig (default out/demo).
set -euo pipefail
cd "$(dirname "$0")/.."
checkout="$PWD"
work="${ANNOUNCE_DEMO_DIR:-$checkout/out/demo}"
mkdir -p "$work"
work=$(cd "$work" && pwd)
rig="$work/rig"
# The socket lives with the demo unless that path is too long for a Unix socket (107 bytes).
socket="$work/announce.sock"
((${#socket} < 100)) || socket="/tmp/announce-demo-$(echo "$work" | sha256sum | cut -c1-12).sock"

# A process that exited but was not reaped (the shell that started it is gone) counts as stopped.
running() { [[ -r "/proc/$1/stat" ]] && [[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != "Z" ]]; }

# Stops the speaker a --keep left (daemon, then rig); says nothing when there is none.
stop_kept() {
    local pid stopped=false
    if [[ -f "$work/announced.pid" ]]; then
        pid=$(cat "$work/announced.pid")
        if running "$pid"; then
            kill "$pid" 2>/dev/null || true
            # SIGTERM lets the announcement playing finish (limits.shutdown_timeout, 10 s); then it is cut.
            for _ in $(seq 300); do running "$pid" || break; sleep 0.05; done
            running "$pid" && kill -9 "$pid" 2>/dev/null
            stopped=true
        fi
        rm -f "$work/announced.pid"
    fi
    if [[ -f "$rig/pulseaudio.pid" ]]; then scripts/rig.sh stop "$rig" > /dev/null; stopped=true; fi
    rm -f "$work/env" "$socket"
    $stopped && echo "demo: stopped the speaker kept in $work"
    return 0
}

case "${1:-}" in
--stop)
    stop_kept
    exit 0
    ;;
--env)
    if [[ ! -f "$work/env" ]] || ! running "$(cat "$work/announced.pid" 2>/dev/null || echo 0)"; then
        echo "demo: no speaker kept running in $work; start one with scripts/demo.sh --keep" >&2
        exit 1
    fi
    cat "$work/env"
    exit 0
    ;;
--keep)
    keep=true
    shift
    ;;
*) keep=false ;;
esac
amount="${1:-100.00}"
shift || true

scripts/swift-check.sh
scripts/setup.sh
if [[ -n "${ANNOUNCE_BIN_DIR:-}" ]]; then
    bin="$ANNOUNCE_BIN_DIR"
    echo "demo: using the build in $bin"
else
    echo "demo: building"
    scripts/build-info.sh  # the commit, for --version and status
    if ! swift build > "$work/build.log" 2>&1; then
        # The compiler's errors, not only SwiftPM's last line; the whole log stays.
        grep -E '(^|: )error: ' "$work/build.log" >&2 || tail -n 40 "$work/build.log" >&2
        echo "demo: the build failed (the whole log: $work/build.log)" >&2
        exit 1
    fi
    tail -n 1 "$work/build.log"
    bin=$(swift build --show-bin-path)
fi
scripts/program-links.sh "$bin"  # announced, announce-ctl: links to the one executable, as installed
bin=$(cd "$bin" && pwd)

# One speaker per demo folder: a kept one is replaced.
stop_kept
device="default"
using_rig=false
daemon_pid=""
cleanup() {
    [[ -n "$daemon_pid" ]] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
    $using_rig && scripts/rig.sh stop "$rig" > /dev/null
    rm -f "$socket" "$work/announced.pid"
}
trap cleanup EXIT

if ! grep -q '^ *[0-9]' /proc/asound/cards 2>/dev/null; then
    echo "demo: no sound card here; starting the sound test rig (PulseAudio null sink) in $rig"
    scripts/rig.sh start "$rig"
    using_rig=true
    device="pulse"
    scripts/rig.sh capture-start "$rig" "$work/heard.raw"
fi

# The rig's variables for the daemon only (they move HOME and XDG_RUNTIME_DIR into the rig).
(
    if $using_rig; then
        # shellcheck disable=SC1091
        source "$rig/env"
    fi
    exec "$bin/announced" --socket "$socket" --device "$device" --state-dir "$work/state" \
        --voices "$checkout/out/voices" > "$work/announced.log" 2>&1
) &
daemon_pid=$!
echo "$daemon_pid" > "$work/announced.pid"
# Ready when it answers (a first start prepares the voice packs: seconds on a slow machine).
for ((tries = 0; ; tries++)); do
    "$bin/announce-ctl" ping --socket "$socket" > /dev/null 2>&1 && break
    if ! running "$daemon_pid" || ((tries == 1200)); then
        tail -n 20 "$work/announced.log" >&2
        echo "demo: announced did not start within a minute (its log: $work/announced.log)" >&2
        exit 1
    fi
    sleep 0.05
done

echo "demo: announce-ctl say --wait $amount $*"
status=0
"$bin/announce-ctl" say --socket "$socket" --wait "$@" "$amount" || status=$?

if $using_rig; then
    sleep 0.3  # the tail of the sound reaches the monitor
    scripts/rig.sh capture-stop "$rig"
    sox -t raw -r 16000 -e signed -b 16 -c 1 "$work/heard.raw" "$work/heard.wav"
    rm -f "$work/heard.raw"
    echo "demo: the sound went to the rig's null sink; what it played is in $work/heard.wav"
    sox "$work/heard.wav" -n stat 2>&1 | grep -E 'Length|RMS +amplitude|Maximum amplitude' | sed 's/^/demo:   /'
fi
echo "demo: daemon log in $work/announced.log"

if $keep; then
    {
        echo "# The speaker scripts/demo.sh --keep left running (scripts/demo.sh --stop ends it)."
        echo "export PATH='$bin':\"\$PATH\""
        echo "export ANNOUNCE_SOCKET='$socket'"
        echo "export ANNOUNCE_VOICES='$checkout/out/voices'"
    } > "$work/env"
    trap - EXIT
    echo "demo: the speaker keeps running: announced (pid $daemon_pid) on $socket, device $device"
    if $using_rig; then
        echo "demo:   playing into the sound test rig in $rig; a daemon of your own plays there with"
        echo "demo:   (. $rig/env && announced --device pulse --socket …), as this one does"
    fi
    echo "demo: to use it from this shell (announce-ctl on PATH, its socket and the voice packs):"
    echo "  eval \"\$(scripts/demo.sh --env)\"     # or: . $work/env"
    echo "demo: to stop it: scripts/demo.sh --stop"
fi
exit "$status"
