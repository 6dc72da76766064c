#!/usr/bin/env bash
# Runs the system test in a VM with a real kernel, real ALSA drivers and real systemd (docs/deployment.md): builds
# the release packages for the guest's architecture and a second version of them for the upgrade
# (scripts/package.sh), gets the cached trixie image (scripts/vm/image.sh), boots it under qemu with the checkout
# shared read-only over 9p, lets the guest install the packages with dpkg and run
# scripts/vm/guest/system-test.sh, and waits for it to power off.
#
#   scripts/vm/run.sh [--arch amd64|arm64] OUT     results in OUT: facts/STEP/…, guest.log, console.log, journal.txt
#   ANNOUNCE_VM_STEPS="install pipewire" scripts/vm/run.sh OUT     only those steps (while working on them)
#
# amd64 runs every step; arm64 (qemu-system-aarch64, a Cortex-A72 under software emulation) the packages' own:
# install, say heard on the loopback, volume raised and put back, upgrade, purge. Exits 0 when the guest ran its
# test to the end (the checks on its facts are Tests/SystemTests), non-zero when the packages or the VM could not be
# built or booted, or the guest did not finish within ANNOUNCE_VM_TIMEOUT seconds.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

arch=amd64
if [[ "${1:-}" == --arch ]]; then
    arch="${2:?--arch amd64|arm64}"
    shift 2
fi
out="${1:?usage: scripts/vm/run.sh [--arch amd64|arm64] OUT}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
find "$out" -mindepth 1 -delete
timeout_seconds="${ANNOUNCE_VM_TIMEOUT:-900}"
# While working on a step: ANNOUNCE_VM_STEPS="install pipewire …" runs only those (the guest reads out/steps).
[[ -z "${ANNOUNCE_VM_STEPS:-}" ]] || echo "$ANNOUNCE_VM_STEPS" > "$out/steps"

log() { echo "vm: $*"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

started=$(now)
# The packages as a terminal gets them, and the same build as the next version, for the upgrade. Each
# architecture in its own folder: the guest installs exactly these (the checkout is shared with it).
packages="out/vm-packages/$arch"
if [[ "${ANNOUNCE_VM_PACKAGES_READY:-}" == 1 && -d "$packages/current" && -d "$packages/upgrade" ]]; then
    log "the $arch packages and their +upgrade1 version, as the test command's background stage built them"
    cp "$packages"/package*.log "$out/" 2> /dev/null || true
else
    log "building the $arch packages (scripts/package.sh), and version +upgrade1 of them"
    scripts/vm/packages.sh "$arch" "$out"
fi
echo "$packages" > "$out/packages"  # relative to the checkout, as the guest sees it
built=$(now)

image=$(scripts/vm/image.sh --arch "$arch")
imaged=$(now)

# The "music" the guest plays through the Music softvol while announcements are ducked: a steady 6 kHz tone
# (above the voice packs' speech energy, so its level can be read in the capture while someone speaks).
sox -q -n -r 16000 -c 1 -b 16 -e signed-integer "$out/music.wav" synth 60 sine 6000 vol 0.5

log "booting $(cat "$image/kernel-release") under qemu (TCG), at most $timeout_seconds s"
# KVM exists on these machines but cannot boot a guest (nested, paravirtual): software emulation (TCG).
case "$arch" in
    # A host thread per vCPU (multi-threaded TCG). Not thread=single: its round robin gives a vCPU the host thread
    # for up to 100 ms at a time while the other is busy, long enough for the daemon's audio thread to underrun
    # behind dmix (a clean-clone run heard a gap after the first period of the alert replayed after a kill -9).
    amd64) qemu=(qemu-system-x86_64 -accel tcg -cpu max) console_device=ttyS0 ;;
    # No pointer authentication to emulate (-cpu max would): a Cortex-A72 is an ARMv8.0 core like a terminal's.
    # An arm64 kernel patches one aligned instruction at a time, which concurrent execution may see either way.
    arm64) qemu=(qemu-system-aarch64 -M virt -accel tcg,thread=multi -cpu cortex-a72) console_device=ttyAMA0 ;;
esac
# amd64: the power cut (the guest's power_cut step). The VM boots from a writable sparse copy of the image, made
# for this run and removed after it; when the guest writes out/cut-now, qemu is killed with SIGKILL — the power
# pulled: what the guest kernel held in its page cache is lost, what it had written to its disk stays (qemu writes
# through to this machine's page cache) — then the same disk is booted again (out/power-cut says so to the guest,
# which resumes after that step). arm64 has no such step and boots the cached image with snapshot=on.
if [[ "$arch" == amd64 ]]; then
    disk_dir=$(mktemp -d "${TMPDIR:-/var/tmp}/announce-vm-disk.XXXXXX")
    trap 'rm -rf "$disk_dir"' EXIT
    cp --sparse=always "$image/root.img" "$disk_dir/root.img"
    # cache=unsafe: a guest's flush returns once qemu has handed the data to this machine's page cache, which is all
    # a killed qemu keeps anyway (only this machine's own crash would lose more); its journal commits then do not wait
    # for this machine's disk, which has nothing to do with a terminal's.
    drive="file=$disk_dir/root.img,format=raw,if=none,id=root,cache=unsafe"
else
    drive="file=$image/root.img,format=raw,if=none,id=root,snapshot=on"
fi
deadline=$((SECONDS + timeout_seconds))

# boot_once CONSOLE: runs the VM until it powers off, the run's time is up (status 124), or the guest asks for its
# power to be pulled (amd64: out/power-cut written, status 137).
boot_once() {
    local console="$1" pid status=0
    "${qemu[@]}" -smp 2 -m 2048 \
        -nodefaults -no-reboot -display none -monitor none -serial "file:$out/$console" \
        -kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
        -append "console=$console_device root=/dev/vda rw panic=-1 loglevel=4 systemd.show_status=false" \
        -drive "$drive" -device virtio-blk-pci,drive=root \
        -virtfs "local,path=$root,mount_tag=src,security_model=none,readonly=on,multidevs=remap" \
        -virtfs "local,path=$out,mount_tag=out,security_model=none,multidevs=remap" \
        -nic none &
    pid=$!
    # Polled every 20 ms: the guest's request reaches this machine's file system through 9p as it is written.
    while kill -0 "$pid" 2> /dev/null; do
        if [[ "$arch" == amd64 && -e "$out/cut-now" && ! -e "$out/power-cut" ]]; then
            kill -KILL "$pid"
            wait "$pid" 2> /dev/null
            # When, on this machine's clock (the guest's request has its own: out/cut-requested).
            echo "cut $(now)" > "$out/power-cut"
            return 137
        fi
        if ((SECONDS >= deadline)); then
            kill -TERM "$pid" 2> /dev/null
            sleep 10
            kill -KILL "$pid" 2> /dev/null
            wait "$pid" 2> /dev/null
            return 124
        fi
        sleep 0.02
    done
    wait "$pid" || status=$?
    return "$status"
}

# boot MARKER CONSOLE: one boot; booted once more if the guest kernel died before the runner wrote MARKER. Such a
# kernel has run none of the project's code: that is the emulator's fault, said in the log and in the timings
# (boot_attempts). A clean-clone run saw one: the amd64 kernel panicked 1.4 s into boot, at an instruction
# boundary in neither the old nor the new text of code it was patching (jump labels) while the other vCPU ran it —
# multi-threaded TCG and cross-modifying code. A crash after the runner started is the test's result and is never
# retried.
boot() {
    local marker="$1" console="$2"
    attempts=0
    while :; do
        attempts=$((attempts + 1))
        status=0
        boot_once "$console" || status=$?
        if ((status != 124 && status != 137)) && [[ ! -e "$out/$marker" ]] && grep -q "Kernel panic" "$out/$console"; then
            log "the guest kernel panicked before the runner started (attempt $attempts); its console is in" \
                "${console%.log}-attempt$attempts.log; booting again"
            grep -m 1 -B 2 -A 8 -E "BUG:|Oops|invalid opcode|general protection" "$out/$console" || true
            mv "$out/$console" "$out/${console%.log}-attempt$attempts.log"
            continue
        fi
        break
    done
}
boot boot-seconds console.log
boot_attempts=$attempts
if ((status == 137)); then
    log "power pulled at the guest's request ($(cat "$out/power-cut")); booting the same disk again"
    boot boot2-seconds console-boot2.log
    boot2_attempts=$attempts
fi
finished=$(now)

{
    echo "packages_seconds $(elapsed "$started" "$built")"
    echo "image_seconds $(elapsed "$built" "$imaged")"
    echo "image_build_seconds $(cat "$image/build-seconds")"
    echo "vm_seconds $(elapsed "$imaged" "$finished")"
    echo "boot_seconds $(cat "$out/boot-seconds" 2>/dev/null || echo unknown)"
    echo "boot_attempts $boot_attempts"
    if [[ -e "$out/power-cut" ]]; then
        echo "boot2_seconds $(cat "$out/boot2-seconds" 2>/dev/null || echo unknown)"
        echo "boot2_attempts ${boot2_attempts:-0}"
    fi
} > "$out/timings"
log "$(tr '\n' ';' < "$out/timings")"

if ((status != 0)); then
    log "qemu exited with status $status (124: timed out); last console lines:"
    tail -n 30 "$out/console.log" || true
    exit 1
fi
if [[ ! -f "$out/exit-status" ]]; then
    log "the guest did not finish its test; last console lines:"
    tail -n 30 "$out/console.log" || true
    exit 1
fi
guest_status=$(cat "$out/exit-status")
log "guest test exited $guest_status; facts in $out/facts"
((guest_status == 0))
