#!/usr/bin/env bash
# Builds (or finds in the cache) a system-test VM for amd64 or arm64: Debian 13 "trixie"'s own kernel, a busybox
# initramfs and an mmdebstrap'd trixie root with systemd, udev, dbus, ALSA, the snd-dummy/snd-aloop drivers and
# every library the project's packages depend on (the guest has no network: `dpkg -i` of our packages must find
# their dependencies installed). Facts behind the recipe: ../shared/RIGS.md ("Rig 2"), ../shared/ARM.md.
#
#   scripts/vm/image.sh [--arch amd64|arm64]     prints the cache folder holding vmlinuz, initrd.img and root.img
#
# The cache ($ANNOUNCE_VM_CACHE, default ~/.cache/announce-vm/ARCH) is keyed on a hash of the recipe: this
# script, everything under scripts/vm/guest-image/, the kernel package and the mirror. A missing or incomplete
# entry is rebuilt from scratch; other keys' entries are removed so old images do not pile up. The arm64 root's
# maintainer scripts run under qemu-user (binfmt_misc, registered here if it is not).
set -euo pipefail
cd "$(dirname "$0")/../.."
# Standard output carries only the result (the cache folder); everything else goes to standard error.
exec 3>&1 1>&2
PKG_LOG_NAME=vm-image
# shellcheck source=scripts/pkg/common.sh
source scripts/pkg/common.sh

arch=amd64
[[ "${1:-}" == --arch ]] && arch="${2:?--arch amd64|arm64}"
case "$arch" in
    amd64) debian_triplet=x86_64-linux-gnu ;;
    arm64) debian_triplet=aarch64-linux-gnu ;;
    *) pkg_die "unknown architecture $arch (amd64 or arm64)" ;;
esac
CACHE_ROOT="${ANNOUNCE_VM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/var/tmp}/.cache}/announce-vm}/$arch"
SUITE=$TARGET_SUITE
# The guest's packages: init and device manager, D-Bus (systemctl/systemd-run need it), module loading, ALSA tools,
# the libraries the packages depend on (debian/control: libasound2t64, libsndfile1, libsoxr0, libebur128-1,
# libespeak-ng1, libsqlite3-0, libsystemd0 from systemd; announce-push: libmosquitto1, libcurl4t64), procps for ps;
# and for the steps only amd64 runs (arm64's maintainer scripts run emulated, so its root gets only what its steps
# use): mosquitto, a real broker for the push listener's check; evemu-tools, a virtual USB keypad through
# /dev/uinput for the keys; the third sound stack, PipeWire, WirePlumber 0.5 and pipewire-alsa (the ALSA pcm and
# ctl plugins), started only by the PipeWire steps (the units are the project's examples).
GUEST_PACKAGES=systemd-sysv,udev,dbus,kmod,alsa-utils,libasound2t64,libsndfile1,libsoxr0,libebur128-1
GUEST_PACKAGES+=,libespeak-ng1,libsqlite3-0,libstdc++6,procps,libmosquitto1,libcurl4t64
if [[ "$arch" == amd64 ]]; then
    GUEST_PACKAGES+=,mosquitto,evemu-tools,pipewire,pipewire-bin,wireplumber,pipewire-alsa
fi
# Kernel modules: in the initramfs to reach the root disk; in the root for sound, the host share, and input devices
# (evdev: /dev/input/event*; uinput: the virtual keypad).
INITRAMFS_MODULES=(virtio_pci virtio_blk ext4)
ROOT_MODULES=(snd-dummy snd-aloop 9p 9pnet_virtio evdev uinput)
# Debian's arm64 kernel has no snd-dummy (nor uinput); the arm64 guest's steps need neither (no keypad there).
[[ "$arch" == arm64 ]] && ROOT_MODULES=(snd-aloop 9p 9pnet_virtio evdev)

log() { pkg_log "$*"; }

pkg_apt_update
apt_arch=(-o APT::Architecture="$arch")
kernel_package=$(pkg_apt_cache "${apt_arch[@]}" depends "linux-image-$arch" | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
[[ -n "$kernel_package" ]] || pkg_die "cannot resolve linux-image-$arch in $SUITE"
kernel_version=$(pkg_apt_cache "${apt_arch[@]}" policy "$kernel_package" | awk '/Candidate:/ { print $2 }')
mkdir -p "$CACHE_ROOT"
key=$(cat "$0" $(find scripts/vm/guest-image -type f | sort) \
    <(echo "$DEBIAN_MIRROR $SUITE $arch $kernel_package $kernel_version $GUEST_PACKAGES") | sha256sum | cut -c1-16)
cache="$CACHE_ROOT/$key"
if [[ -f "$cache/complete" ]]; then
    echo "$cache" >&3
    exit 0
fi

log "building $cache ($SUITE $arch, $kernel_package $kernel_version)"
started=$(date +%s)
for old in "$CACHE_ROOT"/*; do
    if [[ -e "$old" ]]; then pkg_remove_tree "$old"; fi
done
work="$cache/work"
mkdir -p "$work"

# Kernel and the initramfs's busybox, from trixie for the guest's architecture.
(cd "$work" && pkg_apt_get "${apt_arch[@]}" download "$kernel_package" "busybox-static:$arch" \
    > "$work/download.log" 2>&1) || { cat "$work/download.log"; exit 1; }
dpkg-deb -x "$work"/linux-image-*.deb "$work/kernel"
dpkg-deb -x "$work"/busybox-static_*.deb "$work/busybox"
release=$(ls "$work/kernel/lib/modules" 2> /dev/null || ls "$work/kernel/usr/lib/modules")
modules_root="$work/kernel"
[[ -d "$work/kernel/lib/modules/$release" ]] || { mkdir -p "$work/kernel/lib"; ln -s ../usr/lib/modules "$work/kernel/lib/modules"; }
depmod -b "$modules_root" "$release"
cp "$work/kernel/boot/vmlinuz-$release" "$cache/vmlinuz"

# Module files (with their dependencies, in load order) for a list of module names, relative to the kernel
# package's root (/lib/modules/…).
module_files() {
    local name
    for name in "$@"; do
        modprobe -d "$modules_root" -S "$release" --show-depends "$name" | awk '$1 == "insmod" { print $2 }'
    done | awk '!seen[$0]++' | sed "s|^$modules_root||"
}

# Root file system: mmdebstrap resolves and unpacks with this machine's apt and dpkg, and runs only the maintainer
# scripts inside the root — for arm64 under qemu-user, through binfmt_misc (debootstrap's second stage would run
# its own package parsing emulated too: over ten minutes).
log "mmdebstrap ($GUEST_PACKAGES)"
root="$work/root"
if [[ "$arch" != amd64 ]]; then
    scripts/pkg/binfmt.sh
fi
mmdebstrap --mode=root --variant=minbase --arch="$arch" --include="$GUEST_PACKAGES" --keyring="$DEBIAN_KEYRING" \
    --aptopt='Acquire::Check-Valid-Until "false"' "$SUITE" "$root" "$DEBIAN_MIRROR" > "$work/mmdebstrap.log" 2>&1 \
    || { tail -20 "$work/mmdebstrap.log"; exit 1; }
mkdir -p "$root/lib/modules/$release"
module_files "${ROOT_MODULES[@]}" | while read -r file; do
    mkdir -p "$root$(dirname "$file")"
    cp "$modules_root$file" "$root$file"
done
cp "$modules_root/lib/modules/$release"/modules.{order,builtin,builtin.modinfo} "$root/lib/modules/$release/"
depmod -b "$root" "$release"
cp -a scripts/vm/guest-image/rootfs/. "$root/"
chmod 0755 "$root/usr/local/sbin/"*
printf '%s\n' "${ROOT_MODULES[@]}" > "$root/etc/modules-load.d/announce-vm.conf"
# The loopback is card 0, the terminal's first card, so docs/asound.conf (hw:0,0, card 0) is installed as is.
printf 'options snd-aloop index=0\noptions snd-dummy index=1\n' > "$root/etc/modprobe.d/announce-vm.conf"
echo announce-vm > "$root/etc/hostname"
echo "/dev/vda / ext4 rw,noatime 0 0" > "$root/etc/fstab"
# A persistent journal: the amd64 run's power cut keeps what of the boot before it had reached the disk.
mkdir -p "$root/var/log/journal"
: > "$root/etc/machine-id"
# Unit links are made offline (systemctl --root): nothing of the guest's architecture needs to run for them.
systemctl --root="$root" enable announce-vm-runner.service > /dev/null 2>&1
# Nothing logs in: no gettys. No clock sync, no periodic jobs in a throw-away guest.
systemctl --root="$root" mask getty@tty1.service serial-getty@ttyS0.service serial-getty@ttyAMA0.service \
    > /dev/null 2>&1
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
mkfs.ext4 -q -F -L announce-root -d "$root" "$work/root.img" 2G
mv "$work/root.img" "$cache/root.img"

# Initramfs: busybox (the guest's), the modules to reach /dev/vda, and an init that switches to systemd.
initramfs="$work/initramfs"
mkdir -p "$initramfs"/{bin,dev,proc,sys,newroot,modules}
cp "$work/busybox/bin/busybox" "$initramfs/bin/busybox" 2> /dev/null || cp "$work/busybox/usr/bin/busybox" "$initramfs/bin/busybox"
cp scripts/vm/guest-image/init "$initramfs/init"
chmod 0755 "$initramfs/init"
: > "$initramfs/modules/order"
# Modules may be stored compressed (.ko.xz, .ko.zst): busybox's insmod takes them plain.
module_files "${INITRAMFS_MODULES[@]}" | while read -r file; do
    name=$(basename "$file")
    case "$name" in
        *.xz) xz -dc "$modules_root$file" > "$initramfs/modules/${name%.xz}"; name=${name%.xz} ;;
        *.zst) zstd -qdc "$modules_root$file" > "$initramfs/modules/${name%.zst}"; name=${name%.zst} ;;
        *) cp "$modules_root$file" "$initramfs/modules/" ;;
    esac
    echo "$name" >> "$initramfs/modules/order"
done
(cd "$initramfs" && find . | cpio -o -H newc --quiet | gzip -1) > "$cache/initrd.img"

pkg_remove_tree "$work"
echo "$release" > "$cache/kernel-release"
echo "$arch" > "$cache/arch"
echo "$(( $(date +%s) - started ))" > "$cache/build-seconds"
touch "$cache/complete"
log "built in $(cat "$cache/build-seconds") s"
echo "$cache" >&3
