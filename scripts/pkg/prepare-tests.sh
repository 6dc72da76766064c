#!/usr/bin/env bash
# What the arm64 and package stages of scripts/test.sh need, built ahead: scripts/test.sh starts this in the
# background at idle priority right after the host build, so that it uses the CPU the sound-rig tests leave
# idle (they wait on real-time audio), and waits for it before those stages.
#   1. the toolchain chroot and the arm64 sysroot (scripts/pkg/toolchain.sh, sysroot.sh)
#   2. the arm64 packages the VM installs, and their +upgrade1 version (scripts/vm/packages.sh arm64:
#      scripts/package.sh, Debian's Swift 6.2.3, release, warning-free)
#   3. the arm64 test build (debug, every test target) that scripts/test.sh runs under qemu-user
#   4. the amd64 packages, the same two versions (this machine's Swift 6.3.1)
#   5. both VM images (scripts/vm/image.sh --arch amd64|arm64)
# Each step's time goes to out/ci/prepare-timings; a failing step stops it (its log says why).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p out/ci
: > out/ci/prepare-timings
started=$(date +%s)
step() {
    local name="$1" status=0
    shift
    echo "prepare: $name: $*" >&2
    "$@" || status=$?
    echo "$name $(($(date +%s) - started)) s status $status" >> out/ci/prepare-timings
    ((status == 0)) || { echo "prepare: $name failed (exit $status)" >&2; exit "$status"; }
}
# warning_free LOG COMMAND…: runs COMMAND with its output in LOG; a compiler warning in it is a failure (both
# toolchains must build the project warning-free; the linker's note on mktemp in Foundation's archive is not ours).
warning_free() {
    local log="$1" status=0
    shift
    "$@" > "$log" 2>&1 || status=$?
    if grep -E '(^|: )warning: ' "$log" | grep -v mktemp; then
        echo "prepare: warnings above (log: $log)" >&2
        return 1
    fi
    return "$status"
}
step toolchain scripts/pkg/toolchain.sh
step sysroot scripts/pkg/sysroot.sh
step arm64-packages scripts/vm/packages.sh arm64
# Debian's swiftlang ships the _Testing_Foundation overlay's module but not its library; nothing here uses it, so
# its autolink entry (Testing and Foundation imported together) is dropped.
step arm64-tests warning_free out/ci/arm64-tests-build.log \
    scripts/pkg/swift.sh arm64 build --build-tests --scratch-path .build-arm64-tests \
    -Xswiftc -Xfrontend -Xswiftc -disable-autolink-library -Xswiftc -Xfrontend -Xswiftc _Testing_Foundation
step amd64-packages scripts/vm/packages.sh amd64
step amd64-image scripts/vm/image.sh --arch amd64
step arm64-image scripts/vm/image.sh --arch arm64
echo "prepare: done in $(($(date +%s) - started)) s" >&2
