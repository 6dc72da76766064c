#!/usr/bin/env bash
# The host sound test rig: a private PulseAudio with a null sink "speaker" (16 kHz mono S16), reached
# through real libasound and its "pulse" plugin, with the sink's monitor captured to see exactly what
# was played. Two remap sinks on top, "music" and "announce", give separate streams with their own
# volume (ALSA PCM and control pulse:music / pulse:announce) for ducking tests.
# How the tests use it, its facts and pitfalls: docs/testing.md.
#
#   scripts/rig.sh start DIR              start a rig whose state lives in DIR; writes DIR/env to source
#   scripts/rig.sh stop DIR               stop it (and any capture)
#   scripts/rig.sh capture-start DIR FILE record the speaker's monitor to FILE (raw s16le 16 kHz mono)
#   scripts/rig.sh capture-stop DIR       stop recording
#   scripts/rig.sh restart DIR [DOWN]     kill the sound server (-9, a crash) and start a new one DOWN seconds
#                                         later (default 0: the sound device is gone meanwhile); a running
#                                         capture goes on into the same FILE once the new server is up
#   scripts/rig.sh status DIR             is it running
#
# Nothing touches the machine's own PulseAudio state: HOME, XDG_RUNTIME_DIR and the server socket are
# all inside DIR. Processes are stopped by PID from the files in DIR.
#
# Two sockets: the rig's own tools (pacer, capture) use run/rig.sock; clients under test use run/pulse.sock
# (the PULSE_SERVER in DIR/env), which is opened only once the pacer and any capture are running, so after
# a restart nothing under test can play before the capture records again.
#
# ALSA PCMs for tests besides pulse, pulse:music, pulse:announce (DIR/home/.asoundrc):
#   float_only   takes FLOAT_LE only (lfloat, plug, pulse): a device that refuses S16
set -euo pipefail

command="${1:-}"
dir="${2:-}"
[[ -n "$command" && -n "$dir" ]] || { sed -n '2,27p' "$0" >&2; exit 64; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
rate=16000

# The rig's own tools talk to the server through its control socket.
environment() {
    export HOME="$dir/home"
    export XDG_RUNTIME_DIR="$dir/run"
    export PULSE_SERVER="unix:$dir/run/rig.sock"
    export PULSE_RUNTIME_PATH="$dir/run/pulse"
    export PULSE_STATE_PATH="$dir/state"
}

# A process that exited but was not reaped (its parent shell is gone) counts as dead.
running() { [[ -r "/proc/$1/stat" ]] && [[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != "Z" ]]; }

alive() { [[ -f "$1" ]] && running "$(cat "$1")"; }

stop_pid() {
    local file="$1"
    if [[ -f "$file" ]]; then
        local pid
        pid=$(cat "$file")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do running "$pid" || break; sleep 0.02; done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$file"
    fi
}

# Starts the server on the control socket only, and the pacer; returns when the sink runs in real time.
start_server() {
    pulseaudio -n -F "$dir/rig.pa" --daemonize=no --exit-idle-time=-1 --disallow-exit --use-pid-file=no \
        --disable-shm=yes --log-target="file:$dir/pulseaudio.log" --log-level=notice </dev/null >/dev/null 2>&1 &
    echo $! > "$dir/pulseaudio.pid"
    for _ in $(seq 100); do pactl info >/dev/null 2>&1 && break; sleep 0.05; done
    pactl info >/dev/null 2>&1 || { echo "rig: PulseAudio did not start; see $dir/pulseaudio.log" >&2; exit 1; }
    # An idle null sink sleeps in 2 s blocks; a low-latency reader on the monitor keeps it paced in real time.
    parec -d speaker.monitor --latency-msec=20 --raw </dev/null >/dev/null 2>"$dir/pacer.log" &
    echo $! > "$dir/pacer.pid"
    for _ in $(seq 100); do
        latency=$(pactl list sinks 2>/dev/null | awk '/Name: speaker$/{s=1} s&&/Latency:/{print $2; exit}')
        [[ -n "$latency" ]] && ((latency < 100000)) && break
        sleep 0.05
    done
}

# Records the speaker's monitor, appending to FILE; returns once recording has begun.
start_capture() {
    local file="$1" size
    size=$(stat -c %s "$file" 2>/dev/null || echo 0)
    parec -d speaker.monitor --raw --format=s16le --rate="$rate" --channels=1 --latency-msec=20 </dev/null \
        >>"$file" 2>>"$dir/capture.log" &
    echo $! > "$dir/capture.pid"
    echo "$file" > "$dir/capture.file"
    # Recording has begun once the file starts to grow.
    for _ in $(seq 200); do (($(stat -c %s "$file" 2>/dev/null || echo 0) > size)) && break; sleep 0.01; done
}

# Opens the socket the clients under test use.
open_public_socket() {
    pactl load-module module-native-protocol-unix auth-anonymous=1 socket="$dir/run/pulse.sock" >/dev/null
}

case "$command" in
start)
    if alive "$dir/pulseaudio.pid"; then echo "rig: already running in $dir"; exit 0; fi
    environment
    mkdir -p "$HOME/.config/pulse" "$XDG_RUNTIME_DIR/pulse" "$PULSE_STATE_PATH"
    chmod 700 "$XDG_RUNTIME_DIR"
    cat > "$HOME/.config/pulse/daemon.conf" <<EOF
exit-idle-time = -1
flat-volumes = no
enable-memfd = no
default-sample-rate = $rate
alternate-sample-rate = $rate
default-sample-format = s16le
default-sample-channels = 1
avoid-resampling = yes
EOF
    cat > "$dir/rig.pa" <<EOF
load-module module-native-protocol-unix auth-anonymous=1 socket=$dir/run/rig.sock
load-module module-null-sink sink_name=speaker rate=$rate channels=1 format=s16le sink_properties=device.description=speaker
load-module module-remap-sink sink_name=music master=speaker channels=1 remix=no sink_properties=device.description=music
load-module module-remap-sink sink_name=announce master=speaker channels=1 remix=no sink_properties=device.description=announce
set-default-sink speaker
EOF
    cat > "$HOME/.asoundrc" <<EOF
# A device that refuses S16 and takes only float samples (converted back to S16 for the pulse PCM behind it).
pcm.float_only {
    type lfloat
    slave { pcm { type plug slave.pcm "pulse" } format S16_LE }
}
EOF
    start_server
    open_public_socket
    cat > "$dir/env" <<EOF
# Source this to talk to the rig: ALSA's "pulse" PCM/ctl and pactl then reach it.
export HOME='$dir/home'
export XDG_RUNTIME_DIR='$dir/run'
export PULSE_SERVER='unix:$dir/run/pulse.sock'
export PULSE_RUNTIME_PATH='$dir/run/pulse'
export PULSE_STATE_PATH='$dir/state'
EOF
    echo "rig: PulseAudio null sink \"speaker\" ($rate Hz mono) running in $dir; ALSA PCM \"pulse\""
    ;;
restart)
    environment
    [[ -f "$dir/pulseaudio.pid" ]] || { echo "rig: not running in $dir" >&2; exit 1; }
    pid=$(cat "$dir/pulseaudio.pid")
    kill -9 "$pid" 2>/dev/null || true
    for _ in $(seq 250); do running "$pid" || break; sleep 0.02; done
    # The pacer and the capture lose their server with it.
    stop_pid "$dir/pacer.pid"
    capture=""
    if [[ -f "$dir/capture.file" ]]; then capture=$(cat "$dir/capture.file"); stop_pid "$dir/capture.pid"; fi
    sleep "${3:-0}"
    start_server
    if [[ -n "$capture" ]]; then start_capture "$capture"; fi
    open_public_socket
    echo "rig: sound server restarted in $dir"
    ;;
stop)
    stop_pid "$dir/capture.pid"
    stop_pid "$dir/pacer.pid"
    stop_pid "$dir/pulseaudio.pid"
    echo "rig: stopped"
    ;;
capture-start)
    file="${3:?capture-start needs a FILE}"
    environment
    stop_pid "$dir/capture.pid"
    : > "$file"
    start_capture "$file"
    ;;
capture-stop)
    stop_pid "$dir/capture.pid"
    rm -f "$dir/capture.file"
    ;;
status)
    if alive "$dir/pulseaudio.pid"; then echo "rig: running in $dir"; else echo "rig: not running"; exit 1; fi
    ;;
*)
    sed -n '2,27p' "$0" >&2
    exit 64
    ;;
esac
