#!/usr/bin/env bash
# Runs the system test in a VM with a real kernel, real ALSA drivers and real systemd (docs/deployment.md):
# builds the binaries for the guest (static Swift stdlib, scratch path .build-vm), gets the cached image
# (scripts/vm/image.sh), boots it under qemu with the checkout shared read-only over 9p, lets the guest run
# scripts/vm/guest/system-test.sh, and waits for it to power off.
#
#   scripts/vm/run.sh OUT       results in OUT: facts/STEP/…, guest.log, console.log, journal.txt, timings
#
# Exits 0 when the guest ran its test to the end (the checks on its facts are Tests/SystemTests), non-zero
# when the VM could not be built or booted, or the guest did not finish within ANNOUNCE_VM_TIMEOUT seconds.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

out="${1:?usage: scripts/vm/run.sh OUT}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
find "$out" -mindepth 1 -delete
timeout_seconds="${ANNOUNCE_VM_TIMEOUT:-900}"

log() { echo "vm: $*"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

started=$(now)
log "building the guest executable as make builds it (release, static Swift stdlib, no full Foundation, .build-vm)"
# The Makefile's own flags, so that the guest runs the executable `make install` and the packages ship (a link
# that still needs full Foundation fails here, not on a terminal); `make build` records the commit too.
make build BUILD_DIR=.build-vm/release \
    SWIFT_FLAGS='-c release --static-swift-stdlib --scratch-path .build-vm $(WITHOUT_FULL_FOUNDATION)' \
    > "$out/build-announce.log" 2>&1 || { tail -30 "$out/build-announce.log"; exit 1; }
built=$(now)

image=$(scripts/vm/image.sh)
imaged=$(now)

# The "music" the guest plays through the Music softvol while announcements are ducked: a steady 6 kHz tone
# (above the voice packs' speech energy, so its level can be read in the capture while someone speaks).
sox -q -n -r 16000 -c 1 -b 16 -e signed-integer "$out/music.wav" synth 40 sine 6000 vol 0.5

log "booting $(cat "$image/kernel-release") under qemu (TCG), at most $timeout_seconds s"
# KVM exists on these machines but cannot boot a guest (nested, paravirtual): software emulation (TCG).
status=0
timeout --kill-after=10 "$timeout_seconds" qemu-system-x86_64 \
    -accel tcg -cpu max -smp 2 -m 2048 \
    -nodefaults -no-reboot -display none -monitor none -serial "file:$out/console.log" \
    -kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
    -append "console=ttyS0 root=/dev/vda rw panic=-1 loglevel=4 systemd.show_status=false" \
    -drive "file=$image/root.img,format=raw,if=virtio,snapshot=on" \
    -virtfs "local,path=$root,mount_tag=src,security_model=none,readonly=on,multidevs=remap" \
    -virtfs "local,path=$out,mount_tag=out,security_model=none,multidevs=remap" \
    -nic none || status=$?
finished=$(now)

{
    echo "binaries_seconds $(elapsed "$started" "$built")"
    echo "image_seconds $(elapsed "$built" "$imaged")"
    echo "image_build_seconds $(cat "$image/build-seconds")"
    echo "vm_seconds $(elapsed "$imaged" "$finished")"
    echo "boot_seconds $(cat "$out/boot-seconds" 2>/dev/null || echo unknown)"
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
