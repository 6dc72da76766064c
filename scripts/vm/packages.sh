#!/usr/bin/env bash
# Builds what the system-test VM installs: the release packages for ARCH (scripts/package.sh) and the same build as
# the next version (+upgrade1), for the upgrade step, into out/vm-packages/ARCH/{current,upgrade}; the logs go to
# LOG-FOLDER (default: that folder). scripts/vm/run.sh calls it, or — when the test command's background stage has
# already run it (ANNOUNCE_VM_PACKAGES_READY=1) — uses what it made.
#
#   scripts/vm/packages.sh amd64|arm64 [LOG-FOLDER]
set -euo pipefail
cd "$(dirname "$0")/../.."
arch="${1:?usage: scripts/vm/packages.sh amd64|arm64 [LOG-FOLDER]}"
packages="out/vm-packages/$arch"
logs="${2:-$packages}"
rm -rf "$packages"
mkdir -p "$packages/current" "$packages/upgrade" "$logs"
scripts/package.sh --arch "$arch" --out "$packages/current" > "$logs/package.log" 2>&1 \
    || { tail -30 "$logs/package.log"; exit 1; }
version=$(sed -n '1s/^announce (\([^)]*\)).*/\1/p' debian/changelog)
scripts/package.sh --arch "$arch" --version "$version+upgrade1" --out "$packages/upgrade" \
    > "$logs/package-upgrade.log" 2>&1 || { tail -30 "$logs/package-upgrade.log"; exit 1; }
