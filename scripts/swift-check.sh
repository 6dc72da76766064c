#!/usr/bin/env bash
# The one thing the project's scripts do not install: a Swift 6.2 or newer toolchain on PATH (swift.org's, or
# Debian's `swiftlang` package where the release has one: not Debian 12). Checked first by scripts/demo.sh,
# scripts/test.sh and `make`, so that a machine without it is told in one line what to install, instead of
# meeting `swift: command not found` (or a manifest error from an older Swift) after minutes of apt-get.
#
#   scripts/swift-check.sh          checks $SWIFT (default: swift); prints nothing when it is fine
set -euo pipefail
swift="${SWIFT:-swift}"
minimum=6.2
advice="install Swift $minimum or newer (https://www.swift.org/install/linux/, or apt-get install swiftlang"
advice+=" where Debian has it) and put its usr/bin on PATH"
if ! command -v "${swift%% *}" > /dev/null; then
    echo "announce: no Swift toolchain ($swift is not on PATH): $advice" >&2
    exit 1
fi
# "Swift version 6.3.1 (swift-6.3.1-RELEASE)", Debian's "Debian Swift version 6.2.3 …".
version=$($swift --version 2> /dev/null | grep -oE 'Swift version [0-9]+\.[0-9]+' | head -1 | awk '{print $3}' || true)
if [[ -z "$version" ]]; then
    echo "announce: $swift --version does not say which Swift it is: $advice" >&2
    exit 1
fi
if [[ "$(printf '%s\n%s\n' "$minimum" "$version" | sort -V | head -1)" != "$minimum" ]]; then
    echo "announce: Swift $version is too old (the project needs $minimum or newer): $advice" >&2
    exit 1
fi
