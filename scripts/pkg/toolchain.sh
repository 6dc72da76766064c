#!/usr/bin/env bash
# The build chroot: Debian sid (amd64) with Debian's own Swift (swiftlang 6.2.3, the only Swift for arm64
# here: ../shared/ARM.md), debhelper, lintian and the cross binutils for arm64. Cached under
# $ANNOUNCE_PKG_CACHE/toolchain, keyed by this recipe; an entry not marked complete is rebuilt, never trusted.
#
#   scripts/pkg/toolchain.sh        prints the chroot's folder
set -euo pipefail
cd "$(dirname "$0")/../.."
PKG_LOG_NAME=toolchain
# shellcheck source=scripts/pkg/common.sh
source scripts/pkg/common.sh
exec 3>&1 1>&2

# swiftlang: the compiler, its runtime for amd64 and the driver; debhelper, dpkg-dev, lintian: the packages;
# binutils-aarch64-linux-gnu: dh_strip of arm64 executables; pkg-config, git, make: SwiftPM and the Makefile.
PACKAGES=swiftlang,debhelper,dpkg-dev,lintian,binutils-aarch64-linux-gnu,pkg-config,git,make,ca-certificates,file
PACKAGES+=,libc6-dev,libstdc++-15-dev
pkg_lock toolchain
entry=$(pkg_cache_entry toolchain "$(cat "$0") $DEBIAN_MIRROR $SWIFT_SUITE $PACKAGES")
root="$entry/root"
if [[ -f "$entry/complete" ]]; then
    echo "$root" >&3
    exit 0
fi
mkdir -p "$entry"
log="$entry/build.log"
started=$(date +%s)
pkg_log "debootstrap $SWIFT_SUITE into $root (swiftlang is a 565 MB download)"
mkdir -p "$PKG_CACHE/debs/$SWIFT_SUITE-amd64"
debootstrap --variant=minbase --arch=amd64 --cache-dir="$PKG_CACHE/debs/$SWIFT_SUITE-amd64" \
    --keyring="$DEBIAN_KEYRING" "$SWIFT_SUITE" "$root" "$DEBIAN_MIRROR" > "$log" 2>&1 \
    || { tail -20 "$log"; pkg_die "debootstrap of $SWIFT_SUITE failed (log: $log)"; }
# The .debs apt fetches inside are kept beside debootstrap's, for the next build of the chroot.
PKG_CHROOT_BINDS=("$PKG_CACHE/debs/$SWIFT_SUITE-amd64:/var/cache/apt/archives")
pkg_chroot "$root" apt-get "${APT_NO_VALID_UNTIL[@]}" update -qq >> "$log" 2>&1
pkg_chroot "$root" apt-get "${APT_NO_VALID_UNTIL[@]}" install -y -qq --no-install-recommends ${PACKAGES//,/ } >> "$log" 2>&1 \
    || { tail -20 "$log"; pkg_die "installing the toolchain in the chroot failed (log: $log)"; }
# arm64's C runtime as a foreign architecture (multiarch): dh_shlibdeps reads its symbols files to name the
# versions of libc6, libgcc-s1 and libstdc++6 the arm64 executable needs. (It is linked against the sysroot's
# trixie libraries, never these.)
pkg_chroot "$root" dpkg --add-architecture arm64
pkg_chroot "$root" apt-get "${APT_NO_VALID_UNTIL[@]}" update -qq >> "$log" 2>&1
pkg_chroot "$root" apt-get "${APT_NO_VALID_UNTIL[@]}" install -y -qq --no-install-recommends \
    libc6:arm64 libgcc-s1:arm64 libstdc++6:arm64 >> "$log" 2>&1 \
    || { tail -20 "$log"; pkg_die "installing arm64's C runtime in the chroot failed (log: $log)"; }
version=$(pkg_chroot "$root" swift --version 2>&1 | head -1)
[[ "$version" == *"Swift version 6.2"* ]] || pkg_die "the chroot's Swift is not 6.2: $version"
echo "$version" > "$entry/swift-version"
# SwiftPM resolves the project's dependencies from this machine's mirrors (/opt/swift-packages), bound in at
# the same path; git finds them through the machine's url.*.insteadOf settings.
git config --system --get-regexp '^url\.' > /dev/null 2>&1 \
    && git config --system --get-regexp '^url\.' | while read -r key value; do
        chroot "$root" git config --system --add "$key" "$value"
    done
touch "$entry/complete"
pkg_log "ready in $(($(date +%s) - started)) s: $version"
echo "$root" >&3
