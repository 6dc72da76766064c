#!/bin/bash
# The in-guest half of the system test: runs inside the VM as root (started by announce-vm-runner under
# systemd), with the checkout shared read-only at SRC and results written to OUT.
#
#   system-test.sh SRC OUT
#
# It only acts and records: every step writes what a person would look at (command output and status,
# unit states, PIDs, raw captures from hw:Loopback,1,0, the offline render of the same amount) under
# OUT/facts/STEP/. The assertions live on the host, in Tests/SystemTests/VMSystemTests.swift, one test per
# step, so each check is reported by name. To add a check: write a step_NAME function here, add NAME to
# STEPS, and add the test that reads OUT/facts/NAME/ there.
set -uo pipefail

SRC="$1"
OUT="$2"
FACTS="$OUT/facts"
ARCH=$(dpkg --print-architecture)
# The packages scripts/vm/run.sh built for this guest: current/ and, for the upgrade, upgrade/.
PACKAGES="$SRC/$(cat "$OUT/packages")"
if [[ "$ARCH" == amd64 ]]; then
    # power_cut ends the first boot (the host pulls the power); the host boots the same disk again and the steps
    # after it run there.
    STEPS=(install activation confinement access push reload volume_threshold duck keys today watchdog kill_mid_alert
        kill_at_tail kill_at_tail_shared clock_jump stop_and_reactivate observability
        pipewire pipewire_volume pipewire_duck pipewire_recovery pipewire_stop
        power_cut power_cut_after upgrade purge)
else
    # An emulated arm64 core is slow: the packages' own steps, and the sound and the volume through them.
    STEPS=(install activation volume_threshold upgrade purge)
fi
export PATH=/usr/bin:/usr/sbin:/bin:/sbin
# ANNOUNCE_VM_STEPS on the host (scripts/vm/run.sh): only those steps.
[[ ! -f "$OUT/steps" ]] || read -ra STEPS < "$OUT/steps"
# The boot after the power cut (scripts/vm/run.sh wrote out/power-cut): the steps after power_cut.
if [[ -e "$OUT/power-cut" ]]; then
    for index in "${!STEPS[@]}"; do
        if [[ "${STEPS[$index]}" == power_cut ]]; then
            STEPS=("${STEPS[@]:$((index + 1))}")
            break
        fi
    done
    echo "== the boot after the power cut ($(cat "$OUT/power-cut")): ${STEPS[*]}"
fi

step=""
begin() {
    step="$1"
    mkdir -p "$FACTS/$step"
    echo "== $step"
}
# fact NAME VALUE: one line.
fact() {
    printf '%s\n' "$2" > "$FACTS/$step/$1"
    echo "   $1: $2"
}
# record NAME COMMAND…: the command's output in NAME, its exit status in NAME.status.
record() {
    local name="$1"
    shift
    "$@" > "$FACTS/$step/$name" 2>&1
    local status=$?
    echo "$status" > "$FACTS/$step/$name.status"
    echo "   $name: exit $status ($*)"
    return "$status"
}
# wait_until SECONDS COMMAND…: polls every 0.2 s.
wait_until() {
    local limit="$1"
    shift
    local deadline=$((SECONDS + limit))
    until "$@"; do
        ((SECONDS >= deadline)) && return 1
        sleep 0.2
    done
}
main_pid() { systemctl show -p MainPID --value announced.service; }
restarts() { systemctl show -p NRestarts --value announced.service; }
active() { [[ "$(systemctl is-active announced.service)" == active ]]; }
active_with_new_pid() { active && [[ "$(main_pid)" != "$1" && "$(main_pid)" != 0 ]]; }
# The daemon answers and has nothing playing or waiting.
idle() {
    local status
    status=$(announce-ctl status --json 2>/dev/null) || return 1
    [[ "$status" == *'"waiting":0'* && "$status" != *'"playing":'* ]]
}
substream_running() { grep -q "state: RUNNING" "/proc/asound/Loopback/$1/sub0/status" 2>/dev/null; }
# The daemon is playing a job.
playing() { [[ "$(announce-ctl status --json 2>/dev/null)" == *'"playing":'* ]]; }
# mixer NAME ELEMENT: the softvol control as amixer shows it (card 0 is the loopback, as docs/asound.conf says).
mixer() { record "$1" amixer -c 0 sget "$2"; }
# set_mixer ELEMENT RAW: an owner's setting, in the control's raw steps (softvol: 0…255, -51 dB…0 dB).
set_mixer() { amixer -q -c 0 sset "$1" "$2"; }

# capture_start NAME: records hw:Loopback,1,0 (what the speaker gets) to NAME.raw, 16 kHz mono S16_LE. A 2 s
# buffer, so that an emulated machine holding arecord up (a boot, a busy step) does not make the recording itself
# lose samples (an overrun); 50 ms periods, so that what is still in the buffer when it is stopped is little.
CAPTURE_BUFFER=(--buffer-time=2000000 --period-time=50000)
capture_start() {
    arecord -q -D hw:Loopback,1,0 "${CAPTURE_BUFFER[@]}" -f S16_LE -r 16000 -c 1 -t raw "$FACTS/$step/$1.raw" \
        2> "$FACTS/$step/$1.arecord.log" &
    capture_pid=$!
    wait_until 10 substream_running pcm1c || echo "   capture did not start"
}
capture_stop() {
    sleep 0.5  # the tail of the sound
    kill -INT "$capture_pid" 2>/dev/null
    wait "$capture_pid" 2>/dev/null
}
# render NAME AMOUNT: what the daemon should play for AMOUNT, offline (announce-ctl render).
render() { record "$1.render" announce-ctl render --output "$FACTS/$step/$1.wav" "$2"; }

# debs DIR: the packages of a folder run.sh filled, in the order dpkg may take them in one call.
debs() { ls "$1"/announce-voices_*_all.deb "$1"/announce_*_"$ARCH".deb "$1"/announce-push_*_"$ARCH".deb; }

step_install() {
    # The packages, as a vendor's image or an installer puts them on a terminal (docs/deployment.md, "Packages"):
    # their maintainer scripts make the users, the state folders and enable and start the units.
    record dpkg_install dpkg -i $(debs "$PACKAGES/current")
    record packages dpkg-query -W -f '${Package} ${Version} ${Architecture} ${db:Status-Abbrev}\n' \
        announce announce-push announce-voices
    fact service_enabled "$(systemctl is-enabled announced.service)"
    fact socket_enabled "$(systemctl is-enabled announced.socket)"
    fact push_enabled "$(systemctl is-enabled announce-push.service)"
    fact service_active "$(systemctl is-active announced.service)"
    fact socket_active "$(systemctl is-active announced.socket)"
    record conffiles dpkg-query -W -f '${Conffiles}\n' announce
    record version announce-ctl --version
    record man ls /usr/share/man/man8/announced.8.gz /usr/share/man/man1/announce-ctl.1.gz \
        /usr/share/man/man1/announce-push.1.gz /usr/share/man/man1/announce.1.gz
    fact completions "$(ls /usr/share/bash-completion/completions/ | grep -c '^announce')"
    # The terminal's ALSA configuration is the installed example (docs/asound.conf), unchanged.
    cp /usr/share/doc/announce/examples/asound.conf /etc/asound.conf
    # Read the installed executable once so that the first announcement does not page it in through the emulated
    # disk while it plays (an artefact of TCG, not of the daemon).
    cat /usr/bin/announce > /dev/null
    # softvol creates its control when its PCM is first opened (on a terminal: once, then alsactl store and
    # alsa-restore.service keep it): open "music" (→ Music → Master) for a moment, then set both to 0 dB.
    record create_controls aplay -q -D music -t raw -f S16_LE -r 16000 -c 1 -d 1 /dev/zero
    set_mixer Master 255
    set_mixer Music 255
    record controls amixer -c 0 scontrols
    # The daemon the install started found no asound.conf yet: it goes, the socket starts it again when asked.
    record stop_after_config systemctl stop announced.service
    record id id announce
    record push_id id announce-push
    fact run_dir "$(stat -c '%U %G %a' /run/announce)"
    record cards aplay -l
    record verify systemd-analyze verify announced.service announced.socket announce-push.service
    record security systemd-analyze security --threshold=20 announced.service
    tail -n 1 "$FACTS/$step/security" > "$FACTS/$step/exposure"
    record push_security systemd-analyze security --threshold=20 announce-push.service
    tail -n 1 "$FACTS/$step/push_security" > "$FACTS/$step/push_exposure"
    # The push listener's example (placeholder keys) is documentation, not configuration.
    fact push_example "$(ls /usr/share/doc/announce/examples/push.toml 2>&1)"
    fact push_config "$(ls /etc/announce/push.toml 2>&1)"
    fact etc_announce "$(ls /etc/announce | xargs)"
}

step_activation() {
    # Nothing runs until the first client connects to the socket systemd holds.
    fact service_before "$(systemctl is-active announced.service)"
    fact socket_unit "$(systemctl is-active announced.socket)"
    fact socket_file "$(stat -c '%U %G %a' /run/announce/announce.sock)"
    capture_start heard
    record say announce-ctl say --wait 100.00
    capture_stop
    render expected 100.00
    fact service_after "$(systemctl is-active announced.service)"
    fact status_text "$(systemctl show -p StatusText --value announced.service)"
    # The installed daemon's memory on this board-like machine (no sound server: what a terminal has), idle
    # after its first announcement, at its first start and at the next: figures for docs/benchmarks.md, not checks.
    wait_until 10 idle
    memory "$(main_pid)" memory_first
    # The first start prepared the packs' clips in the state folder. The next start (the terminal's next boot)
    # maps them and decodes nothing: no decoder library enters the daemon, and it speaks the same.
    fact prepared "$(ls /var/lib/announce/prepared | xargs)"
    record restart systemctl restart announced.service
    capture_start heard_again
    record say_again announce-ctl say --wait 100.00
    capture_stop
    fact decoders_after_restart "$(grep -cE 'libsndfile|libsoxr|libebur128' "/proc/$(main_pid)/maps")"
    fact prepared_mapped "$(grep -c ' /var/lib/announce/prepared/.*\.clips$' "/proc/$(main_pid)/maps")"
    wait_until 10 idle
    memory "$(main_pid)" memory
}

# memory PID NAME: the process's RSS, what of it is private, and each mapping's share (kB), into the step's facts
# NAME_status, NAME_private and NAME_mappings.
memory() {
    record "$2_status" grep -E '^(VmRSS|RssAnon|RssFile|RssShmem)' "/proc/$1/status"
    record "$2_private" awk '/^Private_Dirty:/ { n += $2 } END { print "Private_Dirty: " n " kB" }' \
        "/proc/$1/smaps_rollup"
    # The executable by segment: code (r-x), read-only data and metadata (r--), relocated data (rw-).
    record "$2_mappings" awk '/^[0-9a-f]+-[0-9a-f]+ / {
            name = ($6 == "" ? "[anonymous]" : $6)
            if ($6 ~ /\/announce$/) name = $6 " " $2
        }
        /^Rss:/ { rss[name] += $2 } END { for (name in rss) if (rss[name] > 0) print rss[name], name }' \
        "/proc/$1/smaps"
}

step_confinement() {
    local pid
    pid=$(main_pid)
    ((pid > 0)) || { fact credentials "no daemon running"; return; }
    fact credentials "$(ps -o user=,group=,supgrp= -p "$pid" | xargs)"
    fact no_new_privs "$(awk '/^NoNewPrivs:/ { print $2 }' "/proc/$pid/status")"
    fact effective_capabilities "$(awk '/^CapEff:/ { print $2 }' "/proc/$pid/status")"
    fact seccomp "$(awk '/^Seccomp:/ { print $2 }' "/proc/$pid/status")"
    fact state_dir "$(stat -c '%U %G %a' /var/lib/announce)"
    # The audio thread's nice value (per thread on Linux); it asks for audio.thread_nice = -10 as it starts.
    fact audio_thread_nice "$(ps -L -o comm=,nice= -p "$pid" | awk '$1 == "announce-audio" { print $2 }')"
    fact log_priority_refused "$(journalctl -b -u announced.service -o cat | grep -c 'keeps the process.s CPU priority')"
}

step_access() {
    # Who may talk to the daemon, as deployed: the push listener's user (group announce, and
    # submit_users in the example config) may make it speak, but not cancel; a user outside the group cannot
    # connect.
    # (A non-root announce-ctl looks for $XDG_RUNTIME_DIR/announce.sock unless told: name the socket.)
    local socket=/run/announce/announce.sock
    record push_user_say setpriv --reuid=announce-push --regid=announce-push --init-groups \
        announce-ctl say --socket "$socket" --wait 0.05
    record push_user_cancel setpriv --reuid=announce-push --regid=announce-push --init-groups \
        announce-ctl cancel --socket "$socket" --all
    record stranger_ping setpriv --reuid=nobody --regid=nogroup --clear-groups announce-ctl ping --socket "$socket"
    # Staff (user clerk) in group announce may connect and read, but not make it speak (not in submit_users).
    useradd --no-create-home --groups announce clerk
    record staff_say setpriv --reuid=clerk --regid=clerk --init-groups announce-ctl say --socket "$socket" 0.06
    record staff_status setpriv --reuid=clerk --regid=clerk --init-groups announce-ctl status --socket "$socket"
}

step_push() {
    # The push listener under its own unit, against a real mosquitto broker in the guest.
    local unit=announce-push.service
    # 1. No /etc/announce/push.toml: the unit is skipped (ConditionPathExists), not failed.
    record start_unconfigured systemctl start "$unit"
    record unconfigured systemctl show -p ActiveState -p Result -p ConditionResult -p NRestarts "$unit"
    # 2. The example as shipped (placeholder keys): exit 2, and no restart loop (RestartPreventExitStatus).
    install -m 0640 -g announce-push /usr/share/doc/announce/examples/push.toml /etc/announce/push.toml
    record start_placeholder systemctl start "$unit"
    failed() { systemctl is-failed -q "$unit"; }
    wait_until 30 failed || echo "   $unit did not fail"
    sleep 5  # two RestartSec= periods: a restart would have happened by now
    record placeholder systemctl show -p ActiveState -p Result -p ExecMainStatus -p NRestarts "$unit"
    journalctl -b -u "$unit" --no-pager > "$FACTS/$step/placeholder_journal"
    systemctl reset-failed "$unit"
    # 3. A configured terminal: its device id, a key, the broker on loopback (no status prompts, so that
    #    exactly the payment is heard).
    local key
    key="hex:$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"
    cat > /etc/announce/push.toml <<TOML
device = "VM0001"
[broker]
url = "mqtt://127.0.0.1:1883"
keepalive = "30s"
[keys]
k1 = "$key"
[prompts]
enabled = false
TOML
    chgrp announce-push /etc/announce/push.toml
    chmod 0640 /etc/announce/push.toml
    record broker systemctl start mosquitto.service
    record start systemctl start "$unit"
    connected() { journalctl -b -u "$unit" --no-pager | grep -q "connected to the broker"; }
    if wait_until 60 connected; then fact connected yes; else fact connected no; fi
    fact credentials "$(ps -o user:32=,group:32=,supgrp:64= -p "$(systemctl show -p MainPID --value "$unit")" | xargs)"
    wait_until 20 idle || echo "   not idle"
    capture_start heard
    record publish announce-push publish --config /etc/announce/push.toml --order VM-PUSH-1 100.00
    forwarded() { journalctl -b -u "$unit" --no-pager | grep -q "payment forwarded"; }
    wait_until 60 forwarded || echo "   VM-PUSH-1 not forwarded within 60 s"
    wait_until 30 idle
    # The same order again (a replay, or a second delivery channel): refused by the daemon as a duplicate.
    record publish_again announce-push publish --config /etc/announce/push.toml --order VM-PUSH-1 100.00
    duplicate() { journalctl -b -u "$unit" --no-pager | grep -q "duplicate"; }
    if wait_until 30 duplicate; then fact duplicate_logged yes; else fact duplicate_logged no; fi
    wait_until 20 idle
    capture_stop
    render expected 100.00
    record history announce-ctl history --json -n 20
    fact service "$(systemctl is-active "$unit")"
    journalctl -b -u "$unit" --no-pager > "$FACTS/$step/journal"
    record stop systemctl stop "$unit"
}

step_reload() {
    # systemctl reload: SIGHUP re-reads the configuration and voice packs in the same process.
    local pid
    pid=$(main_pid)
    fact pid_before "$pid"
    record reload systemctl reload announced.service
    reloaded() { journalctl -b -u announced.service _PID="$pid" --no-pager | grep -q "SIGHUP: reloading"; }
    if wait_until 20 reloaded; then fact logged yes; else fact logged no; fi
    fact pid_after "$(main_pid)"
    fact service_after "$(systemctl is-active announced.service)"
    record say announce-ctl say --wait 0.50
}

step_volume_threshold() {
    # The owner turned Master down below the threshold (60% in examples/announced.toml): raised for the
    # alert, put back exactly after. Read with amixer, and heard in the capture.
    set_mixer Master 76   # -35.8 dB
    record master_tlv amixer -c 0 cget name='Master Playback Volume'
    mixer master_before Master
    capture_start heard
    record say announce-ctl say 98765.43
    wait_until 20 playing || echo "   not playing"
    sleep 1
    mixer master_during Master
    record status_during announce-ctl status --json
    wait_until 30 idle || echo "   not idle"
    sleep 0.5
    mixer master_after Master
    capture_stop
    render expected 98765.43
    set_mixer Master 255
}

step_duck() {
    # Music plays through the Music softvol (dmix mixes it with the daemon's stream), as another user in group
    # audio: lowered while the announcement plays, back after. Master stays at 0 dB (above the threshold).
    set_mixer Master 255
    set_mixer Music 255
    capture_start heard
    setpriv --reuid=nobody --regid=audio --clear-groups aplay -q -D music "$OUT/music.wav" \
        2> "$FACTS/$step/music.log" &
    local music=$!
    sleep 2
    mixer music_before Music
    record say announce-ctl say 98765.43
    wait_until 20 playing || echo "   not playing"
    sleep 1
    mixer music_during Music
    mixer master_during Master
    wait_until 30 idle || echo "   not idle"
    sleep 2
    mixer music_after Music
    kill "$music" 2>/dev/null
    wait "$music" 2>/dev/null
    capture_stop
    render expected 98765.43
}

# The daemon answers, nothing plays or waits, and no alert holds the volume raised: the burst is over.
settled() {
    local status
    status=$(announce-ctl status --json 2>/dev/null) || return 1
    [[ "$status" == *'"waiting":0'* && "$status" != *'"playing":'* && "$status" != *'"raised":true'* ]]
}
# journal_count TEXT: lines of the daemon's journal (this boot) containing TEXT.
journal_count() { journalctl -b -u announced.service --no-pager -o cat | grep -c -- "$1"; }
# wait_slowly SECONDS COMMAND…: as wait_until, every 0.5 s — for checks that run journalctl, which costs the emulated
# CPU enough to hold the daemon's audio thread up if it ran five times a second while an announcement plays.
wait_slowly() {
    local limit="$1"
    shift
    local deadline=$((SECONDS + limit))
    until "$@"; do
        ((SECONDS >= deadline)) && return 1
        sleep 0.5
    done
}
# Key actions since note_keys, from the journal after the cursor it noted (only the new lines are read).
note_keys() {
    keys_cursor=$(journalctl -u announced.service -n 1 --show-cursor --no-pager -o cat | sed -n 's/^-- cursor: //p')
}
new_count() { journalctl -u announced.service --after-cursor="$keys_cursor" --no-pager -o cat | grep -c -- "$1"; }
more_keys() { (( $(new_count "key action") >= $1 )); }
# Every key action the reader passed on since note_keys is done (its job queued), and the jobs have played.
keys_done() { (( $(new_count "key action") == $(new_count "key done") )) && settled; }
# after_keys MORE: waits until MORE key actions came since note_keys and are done.
after_keys() {
    wait_slowly 30 more_keys "$1" || echo "   fewer than $1 key actions"
    wait_slowly 90 keys_done || echo "   key actions not done"
}
# key NODE CODE VALUE: one key event on the virtual keypad, as the kernel would get it from a USB keypad.
key() { evemu-event "$1" --type EV_KEY --code "$2" --value "$3" --sync; }
tap() { key "$1" "$2" 1 && key "$1" "$2" 0; }
# keypad NAME FILE: plugs in a uinput device made from an evemu description; prints its /dev/input/eventN.
keypad() {
    local file="$FACTS/$step/$1.device"
    evemu-device "$2" > "$file" 2>&1 &
    echo $! > "$FACTS/$step/$1.pid"
    found() { grep -q '/dev/input/event' "$file"; }
    wait_until 20 found || { echo "   $1: no device node" >&2; return 1; }
    grep -o '/dev/input/event[0-9]*' "$file" | head -n 1
}

step_keys() {
    # The speaker's keys, as an installer enables them (docs/deployment.md): the drop-in that gives the daemon
    # group input, and [keys] enabled. The devices named: the keypad by its name, and — bad input that must only
    # be logged — a mouse (no key of ours) and a by-id path that does not exist.
    fact uinput "$(ls -l /dev/uinput 2>&1)"
    install -D -m 0644 /usr/share/doc/announce/examples/announced-keys.conf \
        /etc/systemd/system/announced.service.d/keys.conf
    sed -i -e 's/^enabled = false/enabled = true/' \
        -e 's|^devices = \[\]|devices = ["name:Announce Test Keypad", "name:Announce Test Mouse", "/dev/input/by-id/usb-missing-keypad-event-kbd"]|' \
        /etc/announce/announced.toml
    record keys_config grep -A4 '^\[keys\]' /etc/announce/announced.toml
    record daemon_reload systemctl daemon-reload
    record restart systemctl restart announced.service
    wait_until 30 idle || echo "   not answering after the restart"
    fact daemon_groups "$(ps -o supgrp= -p "$(main_pid)" | xargs)"
    local mouse node
    mouse=$(keypad mouse "$SRC/scripts/vm/guest/mouse.evemu")
    node=$(keypad keypad "$SRC/scripts/vm/guest/keypad.evemu")
    fact keypad_node "$node"
    fact mouse_node "$mouse"
    opened() { (( $(journal_count "input device opened") >= $1 )); }
    wait_slowly 30 opened 1 || echo "   the keypad was not opened"
    refused() { (( $(journal_count "has none of the configured keys") >= 1 )); }
    wait_slowly 30 refused || echo "   the mouse was not refused"

    # An everyday level of 70 %, then volume up: 80 %, and 音量八 heard.
    record level_70 announce-ctl volume --level 70
    wait_until 30 settled
    mixer master_70 Master
    capture_start up
    note_keys
    tap "$node" KEY_VOLUMEUP
    after_keys 1
    capture_stop
    mixer master_up Master
    record volume_up announce-ctl volume

    # Held down for 1.4 s: a step at once, then one every repeat_interval — not the kernel's 30 a second.
    note_keys
    key "$node" KEY_VOLUMEDOWN 1
    sleep 1.4  # the owner holding the key down: this is the input, not a wait for the daemon
    key "$node" KEY_VOLUMEDOWN 0
    after_keys 1
    fact held_steps "$(new_count "key action")"
    mixer master_held Master
    record volume_held announce-ctl volume

    # Mute: docs/asound.conf's Master (a softvol) has no switch, so the volume goes to its minimum, and a payment is
    # not played (mute policy respect); again: the level it had, and 已取消静音.
    note_keys
    tap "$node" KEY_MUTE
    after_keys 1
    mixer master_muted Master
    record volume_muted announce-ctl volume
    record say_muted announce-ctl say --wait 1.00
    capture_start unmuted
    note_keys
    tap "$node" KEY_MUTE
    after_keys 1
    capture_stop
    mixer master_unmuted Master

    # A short press of play/pause: the last payment again.
    record say_paid announce-ctl say --wait 6.60
    capture_start replay
    note_keys
    tap "$node" KEY_PLAYPAUSE
    after_keys 1
    capture_stop
    record replay_history announce-ctl history --json -n 2

    # While a notice repeats, the same key acknowledges it: the repeat ends `acknowledged`, nothing is replayed.
    record repeat_started announce-ctl repeat -o KEY-R --every 3600 --times 5 new-order
    wait_until 30 idle || echo "   the repeat's first time did not end"
    note_keys
    tap "$node" KEY_PLAYPAUSE
    after_keys 1
    record repeat_acknowledged announce-ctl --json repeat --stop KEY-R
    record repeat_history announce-ctl history --json -n 1

    # Unplugged, and plugged in again (a new device node): used again at once.
    kill "$(cat "$FACTS/$step/keypad.pid")"
    gone() { (( $(journal_count "input device gone") >= 1 )); }
    wait_slowly 30 gone || echo "   the unplugged keypad was not noticed"
    node=$(keypad keypad2 "$SRC/scripts/vm/guest/keypad.evemu")
    fact keypad2_node "$node"
    wait_slowly 30 opened 2 || echo "   the keypad plugged in again was not opened"
    mixer master_before_replug Master
    note_keys
    tap "$node" KEY_VOLUMEUP
    after_keys 1
    mixer master_after_replug Master
    fact opened_count "$(journal_count "input device opened")"
    fact gone_count "$(journal_count "input device gone")"
    journalctl -b -u announced.service --no-pager -o cat | grep -i -e 'input' -e 'key' > "$FACTS/$step/journal"
    fact service "$(systemctl is-active announced.service)"
    fact restarts "$(restarts)"
    record ping announce-ctl ping
    echo "$node" > "$FACTS/$step/node"
}

step_today() {
    # A long press of play/pause on the keypad plugged in again in step_keys: the day's total, heard.
    local node
    node=$(cat "$FACTS/keys/node")
    record today_before announce-ctl today --json
    capture_start total
    note_keys
    key "$node" KEY_PLAYPAUSE 1
    sleep 2.5  # held longer than keys.long_press (1.5 s): the input
    key "$node" KEY_PLAYPAUSE 0
    after_keys 1
    capture_stop
    fact actions "$(new_count "key action")"
    record history announce-ctl history --json -n 3
    record today_printed announce-ctl today
    # Keys while a payment plays: no key but mute cuts it; a replay and the day's total come after it. (Not the
    # volume keys: they change the level at once, which is what they are for, and a gain change mid-way would
    # hide a cut from the comparison.)
    wait_until 30 settled || echo "   not settled before the keys-during-a-payment check"
    capture_start during
    note_keys
    record say_during announce-ctl say 98765.43
    wait_until 20 playing || echo "   not playing"
    tap "$node" KEY_PLAYPAUSE
    key "$node" KEY_PLAYPAUSE 1
    sleep 2.0  # held longer than keys.long_press: the input
    key "$node" KEY_PLAYPAUSE 0
    after_keys 2
    capture_stop
    render payment 98765.43
    record history_during announce-ctl history --json -n 3
    # For the steps after: the everyday level back to full, the keypads unplugged.
    announce-ctl volume --level 100 > /dev/null
    for pid in "$FACTS"/keys/*.pid; do kill "$(cat "$pid")" 2>/dev/null; done
}

step_watchdog() {
    # A hung daemon: stopped, it cannot ping; systemd's watchdog must kill and restart it.
    local pid
    pid=$(main_pid)
    fact watchdog_usec "$(systemctl show -p WatchdogUSec --value announced.service)"
    fact pid_before "$pid"
    fact restarts_before "$(restarts)"
    # Never signal PID 0 (that would be this script's own process group) when no daemon runs.
    ((pid > 0)) && kill -STOP "$pid"
    fact stopped_at "$SECONDS"
    wait_until 120 active_with_new_pid "$pid" || echo "   no restart within 120 s"
    fact restarted_at "$SECONDS"
    fact pid_after "$(main_pid)"
    fact restarts_after "$(restarts)"
    fact watchdog_timeouts "$(journalctl -b -u announced.service --no-pager | grep -c 'Watchdog timeout')"
    capture_start heard
    record say announce-ctl say --wait 8.50
    capture_stop
    render expected 8.50
}

step_kill_mid_alert() {
    # SIGKILL while an alert plays (the loopback's playback substream runs) with two more queued: systemd
    # restarts the daemon, which speaks the queued ones from its journal, once each; the cut-off one is not
    # replayed.
    local pid
    pid=$(main_pid)
    fact pid_before "$pid"
    fact restarts_before "$(restarts)"
    # Below the threshold: the alert raises Master; the kill leaves it raised; the new daemon puts it back.
    set_mixer Master 76
    mixer master_before Master
    capture_start heard
    record say_first announce-ctl say 12345.67
    record say_queued_1 announce-ctl say 2.00
    record say_queued_2 announce-ctl say 3.00
    if wait_until 20 substream_running pcm0p; then fact playing_when_killed yes; else fact playing_when_killed no; fi
    # Half a second into the 4.5 s alert: its start is in the journal (written within milliseconds).
    sleep 0.5
    mixer master_during Master
    mixer music_during Music
    record kill systemctl kill -s KILL announced.service
    wait_until 60 active_with_new_pid "$pid" || echo "   no restart within 60 s"
    fact pid_after "$(main_pid)"
    fact restarts_after "$(restarts)"
    wait_until 60 idle || echo "   not idle within 60 s"
    sleep 0.5
    capture_stop
    mixer master_after Master
    mixer music_after Music
    fact restored_logged "$(journalctl -b -u announced.service --no-pager | grep -c 'restored a mixer setting')"
    record status_after announce-ctl status --json
    record history announce-ctl history --json -n 10
    render first 12345.67
    render queued_1 2.00
    render queued_2 3.00
}

# journal_cursor: where the daemon's journal ends now; what comes after it is new.
journal_cursor() { journalctl -u announced.service -n 1 --show-cursor --no-pager -o cat | sed -n 's/^-- cursor: //p'; }
# logged_since CURSOR TEXT: lines of the daemon's journal after CURSOR containing TEXT.
logged_since() { journalctl -u announced.service --after-cursor="$1" --no-pager -o cat | grep -c -- "$2"; }
# pause SECONDS: sleeps without a fork (bash's read on a pipe nothing writes to), for the timed kill and cut.
pause() { read -r -t "$1" -u "$sleeper"; }
exec {sleeper}<> <(:)
# now_us: sets $now to this moment in microseconds (bash's own clock: no fork, no subshell).
now_us() { local t=$EPOCHREALTIME; now=${t/./}; }
# first_sound FILE SKIP: the sample frame (16-bit mono) of FILE's first sound after SKIP bytes (a WAV's header: 44),
# or nothing while it holds only silence.
first_sound() {
    local differ
    differ=$(cmp -i "$2:0" "$1" /dev/zero 2> /dev/null) || true
    [[ "$differ" =~ (byte|char)\ ([0-9]+) ]] && echo $(((BASH_REMATCH[2] - 1) / 2))
    return 0
}
# pause_until MICROSECONDS: sleeps until that moment (at once if it is past).
pause_until() {
    local left seconds
    now_us
    left=$(($1 - now))
    ((left > 0)) || return 0
    printf -v seconds '%d.%06d' $((left / 1000000)) $((left % 1000000))
    pause "$seconds"
}
# job_id FILE: the job id in announce-ctl say's answer ("job 12 queued …").
job_id() { sed -n 's/^job \([0-9]*\) .*/\1/p' "$1" | head -n 1; }

step_kill_at_tail() {
    # dmix stops the card with its last client: a daemon killed (SIGKILL) while a payment's tail — its last sample
    # already written — is in dmix's ring is not heard to its end, so it must not count as heard; the restarted
    # daemon speaks it again from its start (docs/protocol.md, "Durability"). The kill lands in the tail, 128 ms
    # before the announcement's end, timed from the moment the card starts (dmix's buffer is 256 ms, and the daemon
    # writes ahead as far as the buffer allows: the last sample is in the ring from about 192 ms before the end).
    local pid cursor frames end state=""
    render expected 100.00
    frames=$((($(stat -c %s "$FACTS/$step/expected.wav") - 44) / 2))
    wait_until 30 settled || echo "   not settled"
    closed() { ! substream_running pcm0p; }
    wait_until 10 closed || echo "   the card is still running"
    pid=$(main_pid)
    fact pid_before "$pid"
    fact restarts_before "$(restarts)"
    capture_start heard
    cursor=$(journal_cursor)
    announce-ctl say --order VM-TAIL-1 100.00 > "$FACTS/$step/say" 2>&1 &
    local say=$!
    # The card's start, read without a fork (the status file's first line).
    until [[ "$state" == "state: RUNNING" ]]; do
        read -r state < /proc/asound/Loopback/pcm0p/sub0/status
        pause 0.001
    done
    now_us
    # The announcement ends after the 50 ms lead-in and its own frames; the kill 128 ms before that.
    end=$((now + 50000 + frames * 1000000 / 16000))
    pause_until $((end - 128000))
    ((pid > 0)) && kill -9 "$pid"
    now_us
    fact killed_before_end_ms $(((end - now) / 1000))
    wait "$say"
    wait_until 60 active_with_new_pid "$pid" || echo "   no restart within 60 s"
    fact pid_after "$(main_pid)"
    fact restarts_after "$(restarts)"
    wait_until 60 settled || echo "   not settled within 60 s"
    capture_stop
    record history announce-ctl history --json -n 5
    journalctl -u announced.service --after-cursor="$cursor" --no-pager -o short-monotonic > "$FACTS/$step/journal"
}

step_kill_at_tail_shared() {
    # As kill_at_tail, with another client holding the card: a player on the music PCM (playing silence, so that
    # the capture holds the payment only), which keeps dmix's ring playing after the daemon dies. On such a ring the
    # daemon writes a job's end at most audio.end_ahead_ms ahead of the speaker — a period and a third of it with the
    # shipped dmix's 64 ms periods: 85 ms (docs/protocol.md, "Durability"). Here dmix's ring and the daemon's buffer
    # are made 1 s long (16 periods instead of the shipped 4), so that the kill can be placed with room on both sides: 400 ms before the
    # end, the end is not written yet — the payment is heard cut short, then whole once — while with the whole
    # buffer written ahead (the end in the ring from 960 ms before it is heard) the ring would play on, and the
    # payment would be heard whole twice. The kill is placed by what the speaker got, in the capture's own frames:
    # the end is where the payment's first sound was heard plus the rest of its render, and the kill comes once the
    # capture has reached 400 ms before that (the capture lags the speaker: the kill lands nearer the end, by up to
    # a few periods on an emulated machine). Reckoned by the clock, from the request or the reply, and within the
    # shipped ring's 85–256 ms, an emulated machine's delays (over 100 ms from the request to the first sample, the
    # reply tens of ms after it) made it land anywhere in the window it had to tell apart.
    local pid frames end player onset start size
    cp /etc/asound.conf "$FACTS/$step/asound.conf.shipped"
    sed -i 's|^\( *buffer_size\) 4096$|\1 16384|' /etc/asound.conf
    record ring grep -E '^ *(period|buffer)_size' /etc/asound.conf
    cp /etc/announce/announced.toml "$FACTS/$step/announced.toml.before"
    sed -i 's|^\[audio\]|[audio]\nperiods = 16|' /etc/announce/announced.toml
    systemctl restart announced.service
    wait_until 30 idle || echo "   not answering after the restart"
    render expected 100.00
    frames=$((($(stat -c %s "$FACTS/$step/expected.wav") - 44) / 2))
    wait_until 30 settled || echo "   not settled"
    setpriv --reuid=nobody --regid=audio --clear-groups \
        aplay -q -D music -t raw -f S16_LE -r 16000 -c 1 /dev/zero 2> "$FACTS/$step/player.log" &
    player=$!
    running() { substream_running pcm0p; }
    wait_until 10 running || echo "   the player did not start the card"
    pid=$(main_pid)
    fact pid_before "$pid"
    fact restarts_before "$(restarts)"
    capture_start heard
    start=$(first_sound "$FACTS/$step/expected.wav" 44)
    record say announce-ctl say --order VM-TAIL-2 100.00
    sounding() { onset=$(first_sound "$FACTS/$step/heard.raw" 0) && [[ -n "$onset" ]]; }
    wait_until 10 sounding || echo "   the payment was not heard"
    end=$((onset - start + frames))
    fact end_frame "$end"
    size=0
    until ((size / 2 >= end - 400 * 16)); do
        size=$(stat -c %s "$FACTS/$step/heard.raw")
        pause 0.002
    done
    ((pid > 0)) && kill -9 "$pid"
    fact killed_before_end_ms $(((end - size / 2) / 16))
    wait_until 60 active_with_new_pid "$pid" || echo "   no restart within 60 s"
    fact pid_after "$(main_pid)"
    fact restarts_after "$(restarts)"
    wait_until 60 settled || echo "   not settled within 60 s"
    record status announce-ctl status --json
    capture_stop
    # The other client played on throughout (its log as it was before it is stopped: stopping it interrupts a write).
    if kill -0 "$player" 2> /dev/null; then fact player_alive yes; else fact player_alive no; fi
    cp "$FACTS/$step/player.log" "$FACTS/$step/player_before_stop.log"
    kill "$player" 2> /dev/null
    wait "$player" 2> /dev/null
    record history announce-ctl history --json -n 5
    # The shipped ring and periods again, for the steps after this one.
    cp "$FACTS/$step/asound.conf.shipped" /etc/asound.conf
    cp "$FACTS/$step/announced.toml.before" /etc/announce/announced.toml
    systemctl restart announced.service
    wait_until 30 idle || echo "   not answering after the restart"
}

step_clock_jump() {
    # The wall clock set two days ahead, then three days back, as NTP sets a terminal without a battery-backed
    # clock: an order id stays remembered (its age counts on the boot clock), across restarts of the daemon, and
    # nothing is purged (docs/protocol.md, "Time"). The clock is put back at the end.
    local cursor
    cursor=$(journal_cursor)
    record say announce-ctl say --wait --order VM-CLOCK-1 1.00
    fact date_before "$(date -u +%FT%TZ)"
    record forward date -s "+2 days"
    record say_forward announce-ctl say --order VM-CLOCK-1 1.00
    record restart_forward systemctl restart announced.service
    wait_until 30 idle || echo "   not answering after the restart"
    record say_forward_restarted announce-ctl say --order VM-CLOCK-1 1.00
    record history_forward announce-ctl history --json -n 10
    record back date -s "-3 days"
    record restart_back systemctl restart announced.service
    wait_until 30 idle || echo "   not answering after the restart"
    record say_back_restarted announce-ctl say --order VM-CLOCK-1 1.00
    record history_back announce-ctl history --json -n 10
    fact purged "$(logged_since "$cursor" "journal purged")"
    record put_back date -s "+1 day"
    fact date_after "$(date -u +%FT%TZ)"
}

step_stop_and_reactivate() {
    # systemctl stop: STOPPING, clean exit; the socket stays and the next client starts the daemon again.
    record stop systemctl stop announced.service
    fact result "$(systemctl show -p Result --value announced.service)"
    fact service_stopped "$(systemctl is-active announced.service)"
    fact socket_unit "$(systemctl is-active announced.socket)"
    record ping announce-ctl ping
    fact service_after_ping "$(systemctl is-active announced.service)"
}

# scrape ADDRESS PORT: GET /metrics over bash's /dev/tcp (the guest has no curl), the whole HTTP answer.
scrape() (
    exec 5<>"/dev/tcp/$1/$2" || exit 1
    printf 'GET /metrics HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$1" >&5
    answer=$(timeout 10 cat <&5)
    printf '%s\n' "$answer"
    [[ "$answer" == *"announce_build_info"* ]]
)
# A payment's journal entries, by its order id (the daemon's own field, not text in a line).
order_logged() { (( $(journalctl -b ORDER_ID="$1" EVENT=spoken --no-pager -o cat | wc -l) >= 1 )); }

step_observability() {
    # The journal: a payment's entries are found by its order id, with its job's fields (docs/deployment.md, "Logs").
    record say announce-ctl say --wait --order VM-JOURNAL-1 -c alipay 8.50
    wait_slowly 30 order_logged VM-JOURNAL-1 || echo "   no spoken entry for ORDER_ID=VM-JOURNAL-1"
    record journal_order journalctl -b ORDER_ID=VM-JOURNAL-1 -o json --no-pager \
        --output-fields=MESSAGE,MESSAGE_ID,PRIORITY,SYSLOG_IDENTIFIER,ORDER_ID,JOB_ID,CHANNEL,AMOUNT_FEN,STATE,EVENT,_SYSTEMD_UNIT
    record journal_other journalctl -b ORDER_ID=VM-NO-SUCH-ORDER -o cat --no-pager
    # Metrics over HTTP, as an installer enables them (docs/deployment.md): without the drop-in the unit forbids IP
    # and the daemon says so and speaks on; with it, the endpoint is scraped on loopback.
    cp /etc/announce/announced.toml "$FACTS/$step/announced.toml.before"
    printf '\n[metrics]\nlisten = "127.0.0.1:9464"\n' >> /etc/announce/announced.toml
    systemctl restart announced.service
    wait_until 30 idle || echo "   the daemon did not come back"
    record status_no_dropin announce-ctl status
    record say_no_dropin announce-ctl say --wait 1.00
    record scrape_no_dropin scrape 127.0.0.1 9464
    fact unavailable_logged "$(journalctl -b -u announced.service EVENT=metrics-unavailable -o cat --no-pager | tail -n 1)"
    install -D -m 0644 /usr/share/doc/announce/examples/announced-metrics.conf \
        /etc/systemd/system/announced.service.d/metrics.conf
    systemctl daemon-reload
    systemctl restart announced.service
    wait_until 30 idle || echo "   the daemon did not come back"
    wait_until 30 scrape 127.0.0.1 9464 > /dev/null || echo "   the metrics endpoint did not answer"
    record scrape scrape 127.0.0.1 9464
    record status announce-ctl status
    # Put the terminal back as it was.
    rm -f /etc/systemd/system/announced.service.d/metrics.conf
    cp "$FACTS/$step/announced.toml.before" /etc/announce/announced.toml
    systemctl daemon-reload
    systemctl restart announced.service
}

# The PipeWire steps: the third sound stack, as a terminal with PipeWire runs it (docs/audio.md, "PipeWire"; the
# package's examples/pipewire/). One phase: pipewire starts the system-wide PipeWire and WirePlumber and moves the
# daemon onto them, pipewire_stop puts the daemon back on dmix and stops them. PipeWire holds hw:0,0,0 meanwhile.
PW_EXAMPLES=/usr/share/doc/announce/examples/pipewire
# PipeWire and WirePlumber are up: the speaker is the default sink, both role loopbacks are there.
pw_ready() {
    local nodes
    nodes=$(pw-cli ls Node 2> /dev/null) || return 1
    [[ "$nodes" == *loopback.sink.role.announcement* && "$nodes" == *loopback.sink.role.multimedia* ]] &&
        [[ "$(pw-metadata 0 default.audio.sink 2> /dev/null)" == *'"speaker"'* ]]
}
# pw_device DEVICE: announced.toml's [audio] for PipeWire, as examples/pipewire/announced-pipewire.conf says, playing
# on DEVICE; the daemon restarted (the device is read at start).
pw_device() {
    sed -i -e "s|^device = .*|device = \"$1\"|" -e 's|^mixer = .*|mixer = "pipewire/Master"|' \
        -e 's|^duck_controls = .*|duck_controls = []|' -e 's|^duck_db = .*|duck_db = 0|' /etc/announce/announced.toml
    grep -q '^tail_ms = ' /etc/announce/announced.toml || sed -i 's|^\[audio\]|[audio]\ntail_ms = 250|' /etc/announce/announced.toml
    systemctl restart announced.service
    wait_until 30 idle || echo "   not answering after the restart"
}
# pw_master NAME: the pipewire ALSA ctl's Master (the default sink's volume and mute), as amixer shows it.
pw_master() { record "$1" amixer -D pipewire sget Master; }

step_pipewire() {
    # Installed as examples/pipewire/ says: the system-wide units and their user, WirePlumber's role policy, the
    # daemon's drop-in and [audio]. The VM adds its speaker node (scripts/vm/guest/pipewire-vm.conf: snd-aloop's
    # hw:0,0,0 at 16 kHz) and turns WirePlumber's ALSA monitor off (wireplumber-vm.conf). Then 100.00, heard whole.
    export PIPEWIRE_RUNTIME_DIR=/run/pipewire
    cp /etc/announce/announced.toml "$FACTS/$step/announced.toml.before"
    record examples ls "$PW_EXAMPLES"
    record versions dpkg-query -W -f '${Package} ${Version}\n' pipewire wireplumber pipewire-alsa
    install -m 0644 "$PW_EXAMPLES/pipewire.socket" "$PW_EXAMPLES/pipewire.service" "$PW_EXAMPLES/wireplumber.service" \
        /etc/systemd/system/
    install -D -m 0644 "$PW_EXAMPLES/pipewire.sysusers" /etc/sysusers.d/pipewire-system.conf
    record sysusers systemd-sysusers
    record pipewire_id id pipewire
    install -D -m 0644 "$PW_EXAMPLES/wireplumber-announce.conf" /etc/wireplumber/wireplumber.conf.d/50-announce.conf
    install -D -m 0644 "$PW_EXAMPLES/announced-pipewire.conf" /etc/systemd/system/announced.service.d/pipewire.conf
    install -D -m 0644 "$SRC/scripts/vm/guest/pipewire-vm.conf" /etc/pipewire/pipewire.conf.d/60-announce-vm.conf
    install -D -m 0644 "$SRC/scripts/vm/guest/wireplumber-vm.conf" \
        /etc/wireplumber/wireplumber.conf.d/90-announce-vm.conf
    record verify systemd-analyze verify pipewire.socket pipewire.service wireplumber.service
    record enable systemctl enable --now pipewire.socket pipewire.service wireplumber.service
    if wait_until 60 pw_ready; then fact ready yes; else fact ready no; fi
    fact ready_at "$SECONDS"
    record nodes pw-cli ls Node
    record credentials ps -o user=,group=,supgrp=,comm= -C pipewire,wireplumber
    pw_device "pipewire:ROLE=Announcement"
    record config grep -E '^(device|mixer|duck_controls|duck_db|tail_ms) ' /etc/announce/announced.toml
    fact daemon_groups "$(ps -o supgrp= -p "$(main_pid)" | xargs)"
    record owner_volume amixer -D pipewire sset Master 100% unmute
    capture_start heard
    record say announce-ctl say --wait 100.00
    capture_stop
    render expected 100.00
    record status announce-ctl status --json
}

step_pipewire_volume() {
    # The owner's volume below the threshold, through the pipewire ALSA ctl (mixer = "pipewire/Master"): raised for
    # the alert, put back exactly. Muted: respected (mute_policy = "respect"), then overridden ("override", a
    # restart): played and muted again after.
    record owner_volume amixer -D pipewire sset Master 20% unmute
    pw_master master_before
    # The owner's change reaches PipeWire's clients as an event (the ctl's thread, two round trips): seen by the
    # daemon's own status before the payment comes, as it would be long before one in a shop.
    seen() { [[ "$(announce-ctl status --json 2> /dev/null)" == *'"volume":20,'* ]]; }
    wait_until 20 seen || echo "   the daemon does not see the owner's volume"
    record volume_seen announce-ctl volume
    capture_start heard
    record say announce-ctl say 98765.43
    wait_until 20 playing || echo "   not playing"
    sleep 1
    pw_master master_during
    record status_during announce-ctl status --json
    wait_until 30 settled || echo "   not settled"
    pw_master master_after
    capture_stop
    render expected 98765.43
    record mute amixer -D pipewire sset Master mute
    record say_muted announce-ctl say --wait 1.00
    pw_master master_muted
    sed -i 's/^mute_policy = .*/mute_policy = "override"/' /etc/announce/announced.toml
    record restart_override systemctl restart announced.service
    wait_until 30 idle || echo "   not answering after the restart"
    capture_start override
    record say_override announce-ctl say --wait 1.00
    wait_until 30 settled || echo "   not settled"
    capture_stop
    render override 1.00
    pw_master master_after_override
    sed -i 's/^mute_policy = .*/mute_policy = "respect"/' /etc/announce/announced.toml
    record owner_volume_back amixer -D pipewire sset Master 100% unmute
    systemctl restart announced.service
    wait_until 30 idle || echo "   not answering after the restart"
}

step_pipewire_duck() {
    # Music on a Music-role stream (pw-play, as a player in the shop's session: another user, group pipewire) while
    # announced speaks with its role: WirePlumber's role policy (examples/pipewire/wireplumber-announce.conf) lowers
    # it while the announcement's stream plays and brings it back after — the daemon touches no control. Then the
    # daemon with no role (device "pipewire": mix): the music stays as it is.
    setpriv --reuid=nobody --regid=pipewire --clear-groups pw-play --media-role=Music "$OUT/music.wav" \
        > "$FACTS/$step/music.log" 2>&1 &
    local music=$!
    capture_start heard
    sleep 2  # music alone before the announcement: the input
    record say announce-ctl say 98765.43
    wait_until 20 playing || echo "   not playing"
    sleep 1
    record graph_during pw-dump
    wait_until 30 settled || echo "   not settled"
    sleep 2  # music alone after it
    capture_stop
    pw_device pipewire
    capture_start heard_mix
    sleep 2
    record say_mix announce-ctl say 98765.43
    wait_until 20 playing || echo "   not playing"
    sleep 1
    record graph_mix pw-dump
    wait_until 30 settled || echo "   not settled"
    sleep 2
    capture_stop
    kill "$music" 2> /dev/null
    wait "$music" 2> /dev/null
    render expected 98765.43
}

step_pipewire_recovery() {
    # The sound server restarted mid-announcement (systemctl restart pipewire; WirePlumber goes and comes with it),
    # two payments queued behind: as on the other stacks, every job not heard yet is played again from its start.
    local cursor
    cursor=$(journal_cursor)
    capture_start heard
    record say_first announce-ctl say 12345.67
    record say_queued_1 announce-ctl say 2.00
    record say_queued_2 announce-ctl say 3.00
    if wait_until 20 playing; then fact playing_when_restarted yes; else fact playing_when_restarted no; fi
    sleep 0.7  # well into the 4.5 s announcement
    fact pipewire_pid_before "$(systemctl show -p MainPID --value pipewire.service)"
    record restart systemctl restart pipewire.service
    fact pipewire_pid_after "$(systemctl show -p MainPID --value pipewire.service)"
    wait_until 60 pw_ready || echo "   PipeWire not back"
    fact wireplumber "$(systemctl is-active wireplumber.service)"
    wait_until 90 settled || echo "   not settled"
    capture_stop
    record status_after announce-ctl status --json
    record history announce-ctl history --json -n 3
    fact failed_logged "$(logged_since "$cursor" "audio device failed")"
    fact works_logged "$(logged_since "$cursor" "audio device works again")"
    render first 12345.67
    render queued_1 2.00
    render queued_2 3.00
}

step_pipewire_stop() {
    # The end of the phase: the daemon's configuration and drop-in as before, PipeWire stopped and disabled; the
    # daemon plays through dmix again.
    cp "$FACTS/pipewire/announced.toml.before" /etc/announce/announced.toml
    rm -f /etc/systemd/system/announced.service.d/pipewire.conf
    record disable systemctl disable --now wireplumber.service pipewire.service pipewire.socket
    systemctl daemon-reload
    record restart systemctl restart announced.service
    wait_until 30 idle || echo "   not answering after the restart"
    fact pipewire "$(systemctl is-active pipewire.service)"
    capture_start heard
    record say announce-ctl say --wait 0.50
    capture_stop
    render expected 0.50
    unset PIPEWIRE_RUNTIME_DIR
}

# The payments of the power cut: PC-1 … PC-8, amounts 1.00 … 8.00 (each its own words, so each is told apart in
# the captures).
POWER_CUT_PAYMENTS=8

step_power_cut() {
    # The power pulled (scripts/vm/run.sh kills qemu when this step writes out/cut-now) while payments are being
    # accepted and one is playing — at the moment worst for dmix: a payment's last sample handed over and its tail
    # still in the ring, which dies with the machine. The payments are sent one after another in the background;
    # each acknowledged one (announce-ctl say exit 0: journaled) leaves a file in acknowledged/. The boot after
    # the cut resumes with power_cut_after.
    local last
    # The owner's volume below the threshold, stored as an installer stores it (alsactl store; alsa-restore.service
    # sets it at boot: a power cut stores nothing).
    set_mixer Master 76
    set_mixer Music 255
    mixer master_owner Master
    record store alsactl store
    # The next boot's capture, from before the daemon can play: announced.service is ordered after this unit, which
    # is started once arecord runs. It records to the guest's disk; power_cut_after copies it here.
    cat > /usr/local/sbin/announce-vm-capture <<'SCRIPT'
#!/bin/bash
# What the speaker gets from boot on (scripts/vm/guest/system-test.sh, power_cut): started before announced.
mkdir -p /var/lib/announce-vm
amixer -c 0 sget Master > /var/lib/announce-vm/master-at-boot 2>&1
cut -d ' ' -f 1 /proc/uptime > /var/lib/announce-vm/started-at
arecord -q -D hw:Loopback,1,0 --buffer-time=2000000 --period-time=50000 -f S16_LE -r 16000 -c 1 -t raw \
    /var/lib/announce-vm/heard.raw \
    2> /var/lib/announce-vm/arecord.log &
echo $! > /run/announce-vm-capture.pid
for _ in $(seq 400); do
    grep -q "state: RUNNING" /proc/asound/Loopback/pcm1c/sub0/status 2> /dev/null && exit 0
    sleep 0.05
done
exit 1
SCRIPT
    chmod 0755 /usr/local/sbin/announce-vm-capture
    cat > /etc/systemd/system/announce-vm-capture.service <<'UNIT'
[Unit]
Description=announce system test: capture what the speaker gets, from before announced can play
After=systemd-modules-load.service alsa-restore.service
Before=announced.service

[Service]
Type=forking
ExecStart=/usr/local/sbin/announce-vm-capture
PIDFile=/run/announce-vm-capture.pid
KillSignal=SIGINT
SuccessExitStatus=1

[Install]
WantedBy=multi-user.target
UNIT
    record enable systemctl enable announce-vm-capture.service
    # All of the above on the disk before the power goes.
    sync
    mkdir -p "$FACTS/$step/sent" "$FACTS/$step/acknowledged"
    capture_start heard
    (
        for ((i = 1; i <= POWER_CUT_PAYMENTS; i++)); do
            date +%s.%N > "$FACTS/$step/sent/PC-$i"
            if announce-ctl say --order "PC-$i" "$i.00" > "$FACTS/$step/sent/PC-$i.say" 2>&1; then
                date +%s.%N > "$FACTS/$step/acknowledged/PC-$i"
            fi
            sleep 0.6  # the next payment comes 0.6 s later
        done
    ) &
    # The cut: 0.4 s into the payment acknowledged third, which two others were ahead of, while more are being sent.
    acknowledged() { (( $(ls "$FACTS/$step/acknowledged" | wc -l) >= 3 )); }
    wait_until 60 acknowledged || echo "   fewer than three payments acknowledged"
    last=$(ls "$FACTS/$step/acknowledged" | sort -t - -k 2 -n | tail -n 1)
    fact target "$last"
    playing_target() { [[ "$(announce-ctl status --json 2> /dev/null)" == *"\"playing\":$(job_id "$FACTS/$step/sent/$last.say")"[,}]* ]]; }
    wait_until 60 playing_target || echo "   $last did not play"
    pause 0.4
    # The host acts on the name (bash's own redirection: no fork); the guest's time follows, for the facts.
    : > "$OUT/cut-now"
    date +%s.%N > "$OUT/cut-requested"
    # The host pulls the power now; what follows runs only if it did not.
    sleep 60
    fact not_cut "the power was not pulled within 60 s"
}

step_power_cut_after() {
    # The boot after the cut: announce-vm-capture.service recorded from before announced started; announced found
    # the payments its journal held unheard and spoke them. Once idle: the capture, the journal's account, the
    # owner's volume.
    local i
    fact cut "$(cat "$OUT/power-cut")"
    fact boot_seconds "$(cat "$OUT/boot2-seconds")"
    record capture_unit systemctl show -p ActiveState -p Result announce-vm-capture.service
    fact capture_started "$(cat /var/lib/announce-vm/started-at)"
    fact daemon_started "$(systemctl show -p ExecMainStartTimestampMonotonic --value announced.service)"
    wait_until 120 settled || echo "   not settled within 120 s"
    sleep 0.5  # the tail of the sound
    record capture_stop systemctl stop announce-vm-capture.service
    cp /var/lib/announce-vm/heard.raw "$FACTS/$step/heard.raw"
    cp /var/lib/announce-vm/arecord.log "$FACTS/$step/heard.arecord.log"
    record master_at_boot cat /var/lib/announce-vm/master-at-boot
    mixer master_after Master
    record history announce-ctl history --json -n 30
    record status announce-ctl status --json
    journalctl -b -u announced.service --no-pager -o short-monotonic > "$FACTS/$step/journal"
    for ((i = 1; i <= POWER_CUT_PAYMENTS; i++)); do render "pc$i" "$i.00"; done
    record disable systemctl disable announce-vm-capture.service
}

step_upgrade() {
    # The next version over this one, as apt would install it: the operator's edit of the conffile and the journal
    # (history, order ids, the day's totals) stay; the daemon is restarted on the new executable.
    echo "# kept across upgrades: an operator's line" >> /etc/announce/announced.toml
    record history_before announce-ctl history --json -n 200
    record dpkg_upgrade dpkg -i $(debs "$PACKAGES/upgrade")
    record packages dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\n' announce announce-push announce-voices
    record conffile_tail tail -n 1 /etc/announce/announced.toml
    fact etc_announce "$(ls /etc/announce | xargs)"
    wait_until 60 idle || echo "   the daemon does not answer after the upgrade"
    record history_after announce-ctl history --json -n 200
    capture_start heard
    record say announce-ctl say --wait 2.00
    capture_stop
    render expected 2.00
    fact service "$(systemctl is-active announced.service)"
}

step_purge() {
    # Purge removes what the packages and the daemon made; the system users stay (debian/announce.postrm).
    record purge dpkg --purge announce-push announce announce-voices
    fact packages_left "$(dpkg-query -W -f '${Package} ${db:Status-Abbrev}\n' 'announce*' 2>/dev/null | awk '$2 != "un" && $2 != "pn"' | xargs)"
    fact state_dir "$(ls -d /var/lib/announce 2>&1)"
    fact push_state_dir "$(ls -d /var/lib/announce-push 2>&1)"
    fact etc_announce "$(ls -d /etc/announce 2>&1)"
    fact run_dir "$(ls -d /run/announce 2>&1)"
    fact executables "$(ls /usr/bin | grep -c '^announce')"
    fact unit_files "$(ls /usr/lib/systemd/system | grep -c '^announce')"
    fact enable_links "$(find /etc/systemd/system -type l \( -name 'announced.*' -o -name 'announce-push.*' \) | wc -l)"
    fact socket_unit "$(systemctl is-active announced.socket)"
    fact daemon_processes "$(pgrep -c -x announced || true)"
    fact users "$(getent passwd announce announce-push | cut -d: -f1 | xargs)"
}

mkdir -p "$FACTS"
for name in "${STEPS[@]}"; do
    begin "$name"
    started=$SECONDS
    "step_$name"
    echo "   ($((SECONDS - started)) s)"
done
journalctl -b -u announced.service -u announced.socket -u announce-push.service --no-pager -o short-monotonic \
    > "$OUT/announced-journal.txt"
echo "== done"
