#!/usr/bin/env bash
# The arm64 sysroot the cross-build compiles and links against, and the root qemu-user runs the arm64 tests in:
# trixie's arm64 C libraries and headers (what a terminal has: glibc 2.41), and the arm64 target parts of
# sid's swiftlang 6.2.3 (its runtime, static and shared, Foundation, XCTest and Swift Testing). Nothing of it
# is installed or run: the .debs are unpacked (dpkg -x). Cached under $ANNOUNCE_PKG_CACHE/sysroot, keyed by
# this recipe; an entry not marked complete is rebuilt.
#
#   scripts/pkg/sysroot.sh          prints the sysroot's folder
set -euo pipefail
cd "$(dirname "$0")/../.."
PKG_LOG_NAME=sysroot
# shellcheck source=scripts/pkg/common.sh
source scripts/pkg/common.sh
exec 3>&1 1>&2

# The C side: the toolchain's own (glibc, libgcc, libstdc++, kernel headers) and every C library the project
# uses (their headers for the module maps; their shared objects for the tests, which load them as the daemon does).
DEV_PACKAGES=(libc6-dev linux-libc-dev libgcc-14-dev libstdc++-14-dev libasound2-dev libsndfile1-dev
    libsoxr-dev libebur128-dev libespeak-ng-dev libsqlite3-dev libsystemd-dev libmosquitto-dev
    libasound2-plugins zlib1g-dev libcurl4-openssl-dev libssl-dev libxml2-dev uuid-dev)
# The Swift side, from sid: the compiler package carries the target's runtime and modules.
SWIFT_PACKAGES=(swiftlang libswiftlang)

pkg_apt_update
swift_version=$(pkg_apt_cache madison swiftlang:arm64 | awk -F' [|] ' -v s="$SWIFT_SUITE/main arm64" 'index($3, s) { print $2; exit }')
[[ -n "$swift_version" ]] || pkg_die "no swiftlang for arm64 in $SWIFT_SUITE"
pkg_lock sysroot
entry=$(pkg_cache_entry sysroot "$(cat "$0") $DEBIAN_MIRROR ${DEV_PACKAGES[*]} $swift_version")
sysroot="$entry/root"
if [[ -f "$entry/complete" ]]; then
    echo "$sysroot" >&3
    exit 0
fi
mkdir -p "$entry" "$sysroot"
started=$(date +%s)

debs="$PKG_CACHE/debs/$TARGET_SUITE-arm64"
mkdir -p "$debs/partial"
pkg_log "downloading trixie's arm64 libraries and sid's swiftlang:arm64 (about 600 MB the first time)"
# The whole dependency closure of the -dev packages, as a fresh arm64 system would install it (the empty status
# file: nothing is installed), from trixie (pinned).
pkg_apt_get -o APT::Architecture=arm64 -o Dir::Cache::archives="$debs" -qq -y --download-only \
    install "${DEV_PACKAGES[@]/%/:arm64}" > "$entry/download.log" 2>&1 \
    || { tail -20 "$entry/download.log"; pkg_die "downloading the arm64 libraries failed"; }
(cd "$debs" && pkg_apt_get -qq download "${SWIFT_PACKAGES[@]/%/:arm64=$swift_version}") >> "$entry/download.log" 2>&1 \
    || { tail -20 "$entry/download.log"; pkg_die "downloading swiftlang:arm64 from $SWIFT_SUITE failed"; }

# Unpack exactly the closure apt resolved (the cache folder may hold older versions): a simulated install lists
# each package as "Inst NAME (VERSION SUITE [ARCH])" (sometimes followed by " []"), and apt names the file NAME_VERSION_ARCH.deb (an epoch's
# colon written %3a).
pkg_log "unpacking into $sysroot"
pkg_apt_get -o APT::Architecture=arm64 -s -qq install "${DEV_PACKAGES[@]/%/:arm64}" \
    | sed -nE 's/^Inst ([^ :]+)(:[a-z0-9]+)? (\[[^]]*\] )?\(([^ ]+) [^[]*\[([a-z0-9]+)\]\).*/\1_\4_\5.deb/p' \
    | sed 's/:/%3a/' > "$entry/debs.txt"
[[ -s "$entry/debs.txt" ]] || pkg_die "apt resolved no packages for the sysroot"
for deb in $(cat "$entry/debs.txt") "${SWIFT_PACKAGES[@]/%/_${swift_version/:/%3a}_arm64.deb}"; do
    [[ -f "$debs/$deb" ]] || pkg_die "expected $debs/$deb after the download"
    dpkg-deb -x "$debs/$deb" "$sysroot"
done

# Of swiftlang:arm64 only the target's runtime and modules are needed (lib/swift, lib/swift_static): its arm64
# compiler, debugger and their libraries (2 GB) go.
rm -rf "$sysroot/usr/libexec/swift/bin" "$sysroot/usr/libexec/swift/libexec" "$sysroot/usr/libexec/swift/share"
find "$sysroot/usr/libexec/swift/lib" -maxdepth 1 -name '*.so*' -delete

# Merged /usr, as on trixie: the dynamic loader is /lib/ld-linux-aarch64.so.1.
for dir in bin sbin lib; do
    [[ -e "$sysroot/$dir" ]] || ln -s "usr/$dir" "$sysroot/$dir"
done
# Debian keeps Swift under /usr/libexec/swift; the driver and the linker look for the runtime under
# SYSROOT/usr/lib/swift{,_static} (swiftrt.o among it).
for dir in swift swift_static; do
    [[ -e "$sysroot/usr/lib/$dir" ]] || ln -s "../libexec/swift/lib/$dir" "$sysroot/usr/lib/$dir"
done
[[ -f "$sysroot/usr/libexec/swift/lib/swift_static/linux/static-stdlib-args.lnk" ]] \
    || pkg_die "swiftlang:arm64 has no static runtime where expected (usr/libexec/swift/lib/swift_static/linux)"
[[ -d "$sysroot/usr/libexec/swift/lib/swift/linux/aarch64" ]] \
    || pkg_die "swiftlang:arm64 has no aarch64 modules where expected (usr/libexec/swift/lib/swift/linux/aarch64)"
glibc=$(ls "$sysroot"/usr/lib/aarch64-linux-gnu/libc.so.6 > /dev/null && dpkg-deb -f "$debs"/libc6_*_arm64.deb Version | sort -V | tail -1)
echo "$glibc" > "$entry/glibc-version"
touch "$entry/complete"
pkg_log "ready in $(($(date +%s) - started)) s (glibc $glibc, $(du -sh "$sysroot" | cut -f1))"
echo "$sysroot" >&3
