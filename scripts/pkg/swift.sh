#!/usr/bin/env bash
# Runs Debian's Swift (sid's swiftlang 6.2.3, in the toolchain chroot) on this checkout, for amd64 or, across,
# for arm64 against the arm64 sysroot (a Swift SDK bundle naming it). The checkout is bound at /src, the Swift
# package mirrors at /opt/swift-packages (read-only), the sysroot at /sysroot (read-only).
#
#   scripts/pkg/swift.sh ARCH SWIFT-ARGUMENTS…     e.g. scripts/pkg/swift.sh arm64 build -c release
#
# Give every build its own --scratch-path (.build-ARCH…): a scratch folder of this machine's Swift 6.3.1 is not
# one for 6.2.3.
set -euo pipefail
cd "$(dirname "$0")/../.."
PKG_LOG_NAME=swift
# shellcheck source=scripts/pkg/common.sh
source scripts/pkg/common.sh
arch="${1:?usage: scripts/pkg/swift.sh amd64|arm64 SWIFT-ARGUMENTS…}"
shift
[[ "$arch" == amd64 || "$arch" == arm64 ]] || pkg_die "unknown architecture $arch (amd64 or arm64)"

toolchain=$(scripts/pkg/toolchain.sh)
PKG_CHROOT_BINDS=("$PWD:/src" "/opt/swift-packages:/opt/swift-packages:ro")
environment=(CI="${CI:-}")
if [[ "$arch" == arm64 ]]; then
    sysroot=$(scripts/pkg/sysroot.sh)
    PKG_CHROOT_BINDS+=("$sysroot:/sysroot:ro")
    # The Swift SDK: the target, the sysroot, the runtime's resource folders (the static one for
    # --static-swift-stdlib), and lld (Debian's, beside its Swift). -sdk goes to swiftc as well: SwiftPM would give
    # the sysroot to clang only, and the Glibc module would then be looked for on the build machine.
    sdk="$toolchain/announce-sdk/arm64.artifactbundle"
    mkdir -p "$sdk/arm64"
    cat > "$sdk/info.json" << 'JSON'
{ "schemaVersion": "1.0",
  "artifacts": { "announce-arm64": { "type": "swiftSDK", "version": "1", "variants": [ { "path": "arm64" } ] } } }
JSON
    cat > "$sdk/arm64/swift-sdk.json" << 'JSON'
{ "schemaVersion": "4.0",
  "targetTriples": { "aarch64-unknown-linux-gnu": {
    "sdkRootPath": "/sysroot",
    "swiftResourcesPath": "/sysroot/usr/lib/swift",
    "swiftStaticResourcesPath": "/sysroot/usr/lib/swift_static",
    "toolsetPaths": [ "toolset.json" ] } } }
JSON
    cat > "$sdk/arm64/toolset.json" << 'JSON'
{ "schemaVersion": "1.0",
  "swiftCompiler": { "extraCLIOptions": [ "-sdk", "/sysroot", "-use-ld=lld" ] },
  "cCompiler": { "extraCLIOptions": [ "--sysroot=/sysroot" ] },
  "linker": { "path": "/usr/libexec/swift/bin/ld.lld" } }
JSON
    # pkg-config, if anything asks it, reads the sysroot's .pc files and never the build machine's.
    environment+=(PKG_CONFIG_SYSROOT_DIR=/sysroot PKG_CONFIG_PATH=/sysroot/usr/lib/aarch64-linux-gnu/pkgconfig:/sysroot/usr/share/pkgconfig
        PKG_CONFIG_LIBDIR=/sysroot/usr/lib/aarch64-linux-gnu/pkgconfig:/sysroot/usr/share/pkgconfig)
    set -- "$@" --swift-sdks-path /announce-sdk --swift-sdk announce-arm64
fi
pkg_chroot "$toolchain" /usr/bin/env "${environment[@]}" sh -c 'cd /src && exec swift "$@"' swift "$@"
