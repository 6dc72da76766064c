#!/usr/bin/env bash
# Lets this machine run arm64 programs (a chroot of an arm64 root: debootstrap's second stage of the arm64 VM
# image) through qemu-user: registers qemu-aarch64-static with binfmt_misc unless an entry for it exists.
# Flag F: the kernel opens the emulator now, so it works inside a chroot that does not contain it. (Our own
# arm64 executables are always run as `qemu-aarch64-static -L SYSROOT …`, never through binfmt:
# ../shared/ARM.md.)
set -euo pipefail
qemu=$(command -v qemu-aarch64-static) || { echo "binfmt: missing qemu-aarch64-static (apt-get install qemu-user-static)" >&2; exit 1; }
dir=/proc/sys/fs/binfmt_misc
[[ -e "$dir/register" ]] || mount -t binfmt_misc binfmt_misc "$dir" \
    || { echo "binfmt: cannot mount binfmt_misc on $dir" >&2; exit 1; }
for entry in "$dir"/qemu-aarch64*; do
    [[ -e "$entry" ]] || continue
    # An entry with the P flag (preserve argv[0], as Debian's binfmt-support registers it) hands a Swift arm64
    # program no arguments at all (../shared/ARM.md): replaced by ours.
    if grep -q '^flags:.*P' "$entry"; then
        echo -1 > "$entry"
        echo "binfmt: removed $(basename "$entry") (flag P)" >&2
        continue
    fi
    grep -q '^enabled' "$entry" && exit 0
done
# The ELF header of an aarch64 executable (qemu's own scripts/qemu-binfmt-conf.sh).
magic='\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
echo ":qemu-aarch64:M::$magic:$mask:$qemu:F" > "$dir/register"
echo "binfmt: registered $qemu for arm64 executables" >&2
