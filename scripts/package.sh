#!/usr/bin/env bash
# Builds the release packages for Debian 13 "trixie" into out/packages/ (docs/deployment.md, "Packages"):
#   announce_VERSION_ARCH.deb          the one executable (announced, announce-ctl), the daemon's units,
#                                      sysusers.d, tmpfiles.d, /etc/announce/announced.toml, man pages, completions
#   announce-push_VERSION_ARCH.deb     the push listener's link, unit, man page and completions
#   announce-voices_VERSION_all.deb    the default voice packs (zh, en)
#   announce-dbgsym_VERSION_ARCH.ddeb  the executable's debug information (dh_strip)
#
#   scripts/package.sh --arch arm64|amd64 [--version VERSION] [--out DIR]
#
# arm64 is built with Debian's own Swift (sid's swiftlang 6.2.3) across, in a cached chroot, against a sysroot of
# trixie's arm64 libraries; amd64 with this machine's Swift 6.3.1. Both link Swift's runtime in (no Swift package
# on the terminal) and need no newer glibc than trixie's 2.41. The packages are assembled by debhelper
# (debian/) in the chroot and checked with lintian (no errors) and against trixie's archive (every dependency
# resolves there). --version makes packages of another version from the same build (the upgrade tests).
# Needs root, debootstrap and Debian's archive (ANNOUNCE_DEBIAN_MIRROR); the cache: scripts/pkg/common.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PKG_LOG_NAME=package
# shellcheck source=scripts/pkg/common.sh
source scripts/pkg/common.sh

usage() { sed -n '2,18p' "$0" >&2; exit 64; }
arch="" version="" out="out/packages"
while (($#)); do
    case "$1" in
        --arch) arch="${2:?--arch needs amd64 or arm64}"; shift 2 ;;
        --version) version="${2:?--version needs a Debian version}"; shift 2 ;;
        --out) out="${2:?--out needs a folder}"; shift 2 ;;
        -h | --help) usage ;;
        *) pkg_log "unknown argument: $1"; usage ;;
    esac
done
case "$arch" in
    arm64) triple=aarch64-unknown-linux-gnu ;;
    amd64) triple=x86_64-unknown-linux-gnu ;;
    *) pkg_log "--arch amd64 or --arch arm64"; usage ;;
esac
pkg_preflight
if [[ "$arch" == arm64 ]] && ! command -v qemu-aarch64-static > /dev/null; then
    pkg_die "missing qemu-aarch64-static, which runs the arm64 executable to write its man pages and completions (apt-get install qemu-user-static, or run scripts/setup.sh --tests)"
fi
[[ -f out/voices/zh/manifest.json && -f out/voices/en/manifest.json ]] \
    || pkg_die "no default voice packs in out/voices: run scripts/setup.sh (it builds them)"
started=$(date +%s)
timing() { echo "$1 $(($(date +%s) - started))" >> "$work/timings"; }

work="out/package-build/$arch"
mkdir -p "$work" "$out"
: > "$work/timings"
toolchain=$(scripts/pkg/toolchain.sh)
timing toolchain
[[ "$arch" == arm64 ]] && sysroot=$(scripts/pkg/sysroot.sh) && timing sysroot

# 1. The executable, as `make` builds it (release, Swift's runtime linked in, no full Foundation), each
# architecture in its own scratch folder.
scratch=".build-$arch"
if [[ "$arch" == arm64 ]]; then
    # libstdc++ linked in (Makefile, STATIC_CXX): the sysroot's archive, as the build chroot sees it.
    cxx=$(cd "$sysroot" && ls -d usr/lib/gcc/aarch64-linux-gnu/*/libstdc++.a | sort -V | tail -1)
    [[ -n "$cxx" ]] || pkg_die "no libstdc++.a in the arm64 sysroot $sysroot"
    make --no-print-directory build SWIFT="scripts/pkg/swift.sh arm64" BUILD_DIR="$scratch/$triple/release" \
        STATIC_CXX="/sysroot/$cxx" STATIC_CXX_DIR="$scratch/static-libstdc++" \
        STATIC_CXX_LINK_DIR="/src/$scratch/static-libstdc++" \
        SWIFT_FLAGS="-c release --static-swift-stdlib --scratch-path $scratch \$(WITHOUT_FULL_FOUNDATION)" \
        > "$work/build.log" 2>&1 || { tail -40 "$work/build.log" >&2; pkg_die "the arm64 build failed (log: $work/build.log)"; }
    run() { qemu-aarch64-static -L "$sysroot" "$@"; }
else
    make --no-print-directory build BUILD_DIR="$scratch/release" \
        SWIFT_FLAGS="-c release --static-swift-stdlib --scratch-path $scratch \$(WITHOUT_FULL_FOUNDATION)" \
        > "$work/build.log" 2>&1 || { tail -40 "$work/build.log" >&2; pkg_die "the amd64 build failed (log: $work/build.log)"; }
    run() { "$@"; }
fi
timing build
bin="$scratch/$triple/release"
[[ -d "$bin" ]] || bin="$scratch/release"
executable="$bin/announce"
# A warning in the build is a failure: both toolchains must build the project warning-free.
if grep -E '(^|: )warning: ' "$work/build.log" | grep -v 'mktemp' > "$work/warnings.txt"; then
    cat "$work/warnings.txt" >&2
    pkg_die "the $arch build printed warnings (above; log: $work/build.log)"
fi

# 2. What a terminal needs of it: no newer glibc than trixie's, no Swift runtime library, the right machine.
glibc=$(readelf -VW "$executable" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)
[[ "$(printf '%s\n2.41\n' "$glibc" | sort -V | tail -1)" == 2.41 ]] \
    || pkg_die "$executable needs glibc $glibc; trixie has 2.41"
needed=$(readelf -dW "$executable" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
if grep -qE 'swift|Foundation|dispatch|BlocksRuntime' <<< "$needed"; then
    pkg_die "$executable needs Swift's runtime as shared libraries ($needed): it must be linked in"
fi
if grep -q 'libstdc++' <<< "$needed"; then
    pkg_die "$executable loads libstdc++.so ($needed): it must be linked in (Makefile, STATIC_CXX)"
fi
machine=$(readelf -hW "$executable" | awk -F: '/Machine:/ { gsub(/^ +/, "", $2); print $2 }')
pkg_log "$executable: $machine, glibc $glibc at most, needs $needed"
run "$executable" announce-ctl --version > "$work/version.txt" \
    || pkg_die "the $arch executable does not run (under qemu for arm64)"
pkg_log "runs: $(cat "$work/version.txt")"

# 3. Man pages and bash/zsh/fish completions, written from the executable's own help (scripts/manuals.sh, as
# `make` does; under qemu for arm64), laid out as under /usr/share: `make install MANUALS=…` installs them.
generated="$work/generated"
runner=()
[[ "$arch" == arm64 ]] && runner=(qemu-aarch64-static -L "$sysroot")
ANNOUNCE_PARSER_CHECKOUT="$scratch/checkouts/swift-argument-parser" \
    scripts/manuals.sh "$executable" "$generated" "${runner[@]}" > "$work/manuals.log" 2>&1 \
    || { cat "$work/manuals.log" >&2; pkg_die "the man pages and completions could not be written"; }
timing generated

# 4. The packages: debian/ in a copy of what `make install` reads, built by dpkg-buildpackage in the chroot.
source_version=$(sed -n '1s/^announce (\([^)]*\)).*/\1/p' debian/changelog)
version="${version:-$source_version}"
tree="$work/announce-${version%-*}"
rm -rf "$work"/announce-* "$work"/*.deb "$work"/*.ddeb "$work"/*.changes "$work"/*.buildinfo
mkdir -p "$tree/scripts" "$tree/docs"
cp -a Makefile README.md debian systemd examples "$tree/"
cp -a docs/deployment.md docs/configuration.md docs/push.md docs/asound.conf "$tree/docs/"
if [[ "$version" != "$source_version" ]]; then
    { printf 'announce (%s) unstable; urgency=medium\n\n  * Built by scripts/package.sh --version %s.\n\n' "$version" "$version"
      printf ' -- announce maintainers <maintainers@users.noreply.a-seed-c2e9b086.example>  %s\n\n' "$(date -uR)"
      cat debian/changelog; } > "$tree/debian/changelog"
fi
PKG_CHROOT_BINDS=("$PWD:/src")
pkg_chroot "$toolchain" /usr/bin/env ANNOUNCE_BUILD_DIR="/src/$bin" ANNOUNCE_GENERATED="/src/$generated" \
    ANNOUNCE_VOICES=/src/out/voices sh -c "cd /src/$tree && dpkg-buildpackage -b --host-arch $arch -d -us -uc" \
    > "$work/dpkg-buildpackage.log" 2>&1 \
    || { tail -40 "$work/dpkg-buildpackage.log" >&2; pkg_die "dpkg-buildpackage failed (log: $work/dpkg-buildpackage.log)"; }
timing dpkg-buildpackage
changes=$(ls "$work"/announce_*_"$arch".changes)

# 5. lintian: no errors (warnings and notes are listed in the log and in docs/deployment.md).
pkg_chroot "$toolchain" sh -c "cd /src/$work && lintian --fail-on error --info --display-level '>=warning' $(basename "$changes")" \
    > "$work/lintian.log" 2>&1 || { cat "$work/lintian.log" >&2; pkg_die "lintian found errors (above)"; }
timing lintian
grep -E '^[EW]: ' "$work/lintian.log" | sed 's/^/lintian: /' >&2 || true

# 6. Installable on trixie: every dependency resolves in trixie's archive for this architecture.
pkg_apt_update
debs=$(ls "$work"/*.deb)
# shellcheck disable=SC2046
pkg_apt_get -o APT::Architecture="$arch" -s install $(printf './%s ' $debs) > "$work/trixie-install.txt" 2>&1 \
    || { cat "$work/trixie-install.txt" >&2; pkg_die "the packages do not install on $TARGET_SUITE/$arch (above)"; }
if grep -E '^Inst ' "$work/trixie-install.txt" | grep -v "^Inst announce" | grep -vq "Debian:13"; then
    grep -E '^Inst ' "$work/trixie-install.txt" | grep -v "^Inst announce" | grep -v "Debian:13" >&2
    pkg_die "installing the packages would take the packages above from outside $TARGET_SUITE"
fi
timing trixie-check

cp "$work"/*.deb "$work"/*.ddeb "$out/" 2> /dev/null || cp "$work"/*.deb "$out/"
for deb in "$work"/*.deb "$work"/*.ddeb; do
    [[ -f "$deb" ]] || continue
    printf '%s: %s KiB installed, %s KiB file\n' "$(basename "$deb")" \
        "$(dpkg-deb -f "$deb" Installed-Size)" "$(($(stat -c %s "$deb") / 1024))"
done | tee "$work/sizes.txt" | sed 's/^/package: /' >&2
pkg_log "done in $(($(date +%s) - started)) s: $out/ ($(tr '\n' ' ' < "$work/timings"))"
