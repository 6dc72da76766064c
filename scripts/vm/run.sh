#!/usr/bin/env bash
# Runs the system test in a VM with a real kernel, real ALSA drivers and real systemd (docs/deployment.md): builds
# the release packages for the guest's architecture and a second version of them for the upgrade
# (scripts/package.sh), gets the cached trixie image (scripts/vm/image.sh), boots it under qemu with the checkout
# shared read-only over 9p, lets the guest install the packages with dpkg and run
# scripts/vm/guest/system-test.sh, and waits for it to power off.
#
#   scripts/vm/run.sh [--arch amd64|arm64] OUT     results in OUT: facts/STEP/…, guest.log, console.log, journal.txt
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

log() { echo "vm: $*"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

started=$(now)
# The packages as a terminal gets them, and the same build as the next version, for the upgrade. Each
# architecture in its own folder: the guest installs exactly these (the checkout is shared with it).
packages="out/vm-packages/$arch"
log "building the $arch packages (scripts/package.sh), and version +upgrade1 of them"
rm -rf "$packages"
mkdir -p "$packages/current" "$packages/upgrade"
scripts/package.sh --arch "$arch" --out "$packages/current" > "$out/package.log" 2>&1 \
    || { tail -30 "$out/package.log"; exit 1; }
version=$(sed -n '1s/^announce (\([^)]*\)).*/\1/p' debian/changelog)
scripts/package.sh --arch "$arch" --version "$version+upgrade1" --out "$packages/upgrade" > "$out/package-upgrade.log" 2>&1 \
    || { tail -30 "$out/package-upgrade.log"; exit 1; }
echo "$packages" > "$out/packages"  # relative to the checkout, as the guest sees it
built=$(now)

image=$(scripts/vm/image.sh --arch "$arch")
imaged=$(now)

# The "music" the guest plays through the Music softvol while announcements are ducked: a steady 6 kHz tone
# (above the voice packs' speech energy, so its level can be read in the capture while someone speaks).
sox -q -n -r 16000 -c 1 -b 16 -e signed-integer "$out/music.wav" synth 40 sine 6000 vol 0.5

log "booting $(cat "$image/kernel-release") under qemu (TCG), at most $timeout_seconds s"
# KVM exists on these machines but cannot boot a guest (nested, paravirtual): software emulation (TCG).
case "$arch" in
    # A host thread per vCPU (multi-threaded TCG). Not thread=single: its round robin gives a vCPU the host thread
    # for up to 100 ms at a time while the other is busy, long enough for the daemon's audio thread to underrun
    # behind dmix (a clean-clone run heard a gap after the first period of the alert replayed after a kill -9).
    amd64) qemu=(qemu-system-x86_64 -accel tcg -cpu max) console=ttyS0 ;;
    # No pointer authentication to emulate (-cpu max would): a Cortex-A72 is an ARMv8.0 core like a terminal's.
    # An arm64 kernel patches one aligned instruction at a time, which concurrent execution may see either way.
    arm64) qemu=(qemu-system-aarch64 -M virt -accel tcg,thread=multi -cpu cortex-a72) console=ttyAMA0 ;;
esac
# A guest kernel that dies before userspace starts the runner (no boot-seconds yet) has run none of the
# project's code: that is the emulator's fault, and the VM is booted once more, said in the log and in the
# timings (boot_attempts). A clean-clone run saw one: the amd64 kernel panicked 1.4 s into boot, at an
# instruction boundary in neither the old nor the new text of code it was patching (jump labels) while the other
# vCPU ran it — multi-threaded TCG and cross-modifying code. A crash after the runner started is the test's
# result and is never retried.
attempts=0
while :; do
    attempts=$((attempts + 1))
    status=0
    timeout --kill-after=10 "$timeout_seconds" "${qemu[@]}" -smp 2 -m 2048 \
        -nodefaults -no-reboot -display none -monitor none -serial "file:$out/console.log" \
        -kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
        -append "console=$console root=/dev/vda rw panic=-1 loglevel=4 systemd.show_status=false" \
        -drive "file=$image/root.img,format=raw,if=none,id=root,snapshot=on" -device virtio-blk-pci,drive=root \
        -virtfs "local,path=$root,mount_tag=src,security_model=none,readonly=on,multidevs=remap" \
        -virtfs "local,path=$out,mount_tag=out,security_model=none,multidevs=remap" \
        -nic none || status=$?
    if ((attempts < 2)) && [[ ! -e "$out/boot-seconds" ]] && grep -q "Kernel panic" "$out/console.log"; then
        log "the guest kernel panicked before the runner started (attempt $attempts); its console is in" \
            "console-attempt$attempts.log; booting again"
        grep -m 1 -B 2 -A 8 -E "BUG:|Oops|invalid opcode|general protection" "$out/console.log" || true
        mv "$out/console.log" "$out/console-attempt$attempts.log"
        continue
    fi
    break
done
finished=$(now)

{
    echo "packages_seconds $(elapsed "$started" "$built")"
    echo "image_seconds $(elapsed "$built" "$imaged")"
    echo "image_build_seconds $(cat "$image/build-seconds")"
    echo "vm_seconds $(elapsed "$imaged" "$finished")"
    echo "boot_seconds $(cat "$out/boot-seconds" 2>/dev/null || echo unknown)"
    echo "boot_attempts $attempts"
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
