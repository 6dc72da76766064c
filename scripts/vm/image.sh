#!/usr/bin/env bash
# Builds (or finds in the cache) the system-test VM: Debian's own kernel, a busybox initramfs and a
# debootstrap'd Debian 12 root with systemd, udev, dbus, ALSA and the snd-dummy/snd-aloop drivers.
# Facts behind the recipe: ../shared/RIGS.md ("Rig 2").
#
#   scripts/vm/image.sh          prints the cache folder holding vmlinuz, initrd.img and root.img
#
# The cache ($ANNOUNCE_VM_CACHE, default ~/.cache/announce-vm) is keyed on a hash of the recipe: this
# script, everything under scripts/vm/guest-image/, the kernel package version and the mirror. A missing or
# incomplete entry is rebuilt from scratch; other keys' entries are removed so old images do not pile up.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Standard output carries only the result (the cache folder); everything else goes to standard error.
exec 3>&1 1>&2

CACHE_ROOT="${ANNOUNCE_VM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/var/tmp}/.cache}/announce-vm}"
SUITE=bookworm
# The guest's packages: init and device manager, D-Bus (systemctl/systemd-run need it), module loading,
# ALSA tools and libraries, what the daemon links (ldd of the static-stdlib binaries: libasound2,
# libsndfile1, libsoxr0, libebur128-1, libespeak-ng1 for free text, libsqlite3-0 for the journal,
# libsystemd0 from systemd, libstdc++6, libgcc-s1, libc6; announce-push: libmosquitto1), make for the project's
# install, procps for ps, mosquitto: a real broker for the push listener's check, evemu-tools: a virtual USB keypad
# through /dev/uinput for the hardware keys.
GUEST_PACKAGES=systemd-sysv,udev,dbus,kmod,alsa-utils,libasound2,libsndfile1,libsoxr0,libebur128-1
GUEST_PACKAGES+=,libespeak-ng1,libsqlite3-0,libstdc++6,make,procps,libmosquitto1,mosquitto,evemu-tools
# Kernel modules: in the initramfs to reach the root disk; in the root for sound, the host share, and input devices
# (evdev: /dev/input/event*; uinput: the virtual keypad).
INITRAMFS_MODULES=(virtio_pci virtio_blk ext4)
ROOT_MODULES=(snd-dummy snd-aloop 9p 9pnet_virtio evdev uinput)

log() { echo "vm-image: $*"; }

resolve_kernel() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }'; }
kernel_package=$(resolve_kernel)
if [[ -z "$kernel_package" ]]; then
    log "apt knows no linux-image-amd64 yet: apt-get update"
    apt-get update -qq
    kernel_package=$(resolve_kernel)
fi
[[ -n "$kernel_package" ]] || { log "cannot resolve linux-image-amd64 from apt's sources"; exit 1; }
mirror=$(apt-cache policy | awk -v s="$SUITE/main" '$3 == s && $2 ~ /^https?:/ { print $2; exit }')
[[ -n "$mirror" ]] || { log "no $SUITE mirror in apt's sources (run apt-get update)"; exit 1; }
kernel_version=$(apt-cache policy "$kernel_package" | awk '/Candidate:/ { print $2 }')
key=$(cat "$0" $(find scripts/vm/guest-image -type f | sort) <(echo "$mirror $kernel_package $kernel_version $GUEST_PACKAGES") \
    | sha256sum | cut -c1-16)
cache="$CACHE_ROOT/$key"
if [[ -f "$cache/complete" ]]; then
    echo "$cache" >&3
    exit 0
fi

log "building $cache ($kernel_package $kernel_version, $SUITE from $mirror)"
started=$(date +%s)
mkdir -p "$CACHE_ROOT"
find "$CACHE_ROOT" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -exec rm -rf {} +
rm -rf "$cache"
work="$cache/work"
mkdir -p "$work"

# Kernel: the .deb ships no modules.dep, so depmod it.
(cd "$work" && apt-get download -q "$kernel_package" >"$work/download.log" 2>&1) || { cat "$work/download.log"; exit 1; }
dpkg -x "$work"/linux-image-*.deb "$work/kernel"
release=$(ls "$work/kernel/lib/modules")
depmod -b "$work/kernel" "$release"
cp "$work/kernel/boot/vmlinuz-$release" "$cache/vmlinuz"

# Module files (with their dependencies, in load order) for a list of module names, relative to the kernel
# package's root (/lib/modules/…).
module_files() {
    local name
    for name in "$@"; do
        modprobe -d "$work/kernel" -S "$release" --show-depends "$name" | awk '$1 == "insmod" { print $2 }'
    done | awk '!seen[$0]++' | sed "s|^$work/kernel||"
}

# Root file system.
log "debootstrap ($GUEST_PACKAGES)"
root="$work/root"
debootstrap --variant=minbase --include="$GUEST_PACKAGES" "$SUITE" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log"; exit 1; }
module_files "${ROOT_MODULES[@]}" | while read -r file; do
    mkdir -p "$root$(dirname "$file")"
    cp "$work/kernel$file" "$root$file"
done
cp "$work/kernel/lib/modules/$release"/modules.{order,builtin,builtin.modinfo} "$root/lib/modules/$release/"
depmod -b "$root" "$release"
cp -a scripts/vm/guest-image/rootfs/. "$root/"
chmod 0755 "$root/usr/local/sbin/"*
printf '%s\n' "${ROOT_MODULES[@]}" > "$root/etc/modules-load.d/announce-vm.conf"
# The loopback is card 0, the terminal's first card, so docs/asound.conf (hw:0,0, card 0) is installed as is.
printf 'options snd-aloop index=0\noptions snd-dummy index=1\n' > "$root/etc/modprobe.d/announce-vm.conf"
echo announce-vm > "$root/etc/hostname"
echo "/dev/vda / ext4 rw,noatime 0 0" > "$root/etc/fstab"
: > "$root/etc/machine-id"
chroot "$root" systemctl enable announce-vm-runner.service >/dev/null 2>&1
# Nothing logs in: no gettys. No clock sync, no periodic jobs in a throw-away guest.
chroot "$root" systemctl mask getty@tty1.service serial-getty@ttyS0.service >/dev/null 2>&1
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
mkfs.ext4 -q -F -L announce-root -d "$root" "$work/root.img" 2G
mv "$work/root.img" "$cache/root.img"

# Initramfs: busybox, the modules to reach /dev/vda, and an init that switches to systemd.
initramfs="$work/initramfs"
mkdir -p "$initramfs"/{bin,dev,proc,sys,newroot,modules}
cp /bin/busybox "$initramfs/bin/busybox"
cp scripts/vm/guest-image/init "$initramfs/init"
chmod 0755 "$initramfs/init"
module_files "${INITRAMFS_MODULES[@]}" | while read -r file; do
    cp "$work/kernel$file" "$initramfs/modules/"
    basename "$file" >> "$initramfs/modules/order"
done
(cd "$initramfs" && find . | cpio -o -H newc --quiet | gzip -1) > "$cache/initrd.img"

rm -rf "$work"
echo "$release" > "$cache/kernel-release"
echo "$(( $(date +%s) - started ))" > "$cache/build-seconds"
touch "$cache/complete"
log "built in $(cat "$cache/build-seconds") s"
echo "$cache" >&3
