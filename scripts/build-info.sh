#!/usr/bin/env bash
# Records the commit being built for `--version`, `status` and the metrics (Sources/CBuildInfo): writes
# Sources/CBuildInfo/build-commit.h, which is not in git (a clean checkout builds without it and reports
# "unknown"). Run before `swift build` (make, scripts/test.sh and scripts/vm/run.sh do).
#
#   scripts/build-info.sh                  the checkout's commit, "-dirty" if it has uncommitted changes
#   ANNOUNCE_COMMIT=1a2b3c scripts/build-info.sh    a source tree without git (a package build) names it
#
# The header is rewritten only when the commit changed, and then build-info.c is touched: the compiler's
# dependency file does not know a header that did not exist at the previous build.
set -euo pipefail
cd "$(dirname "$0")/.."

commit="${ANNOUNCE_COMMIT:-}"
if [[ -z "$commit" ]] && git rev-parse --git-dir > /dev/null 2>&1; then
    commit=$(git rev-parse --short=12 HEAD)
    # Tracked files changed since the commit: the build is not that commit.
    git diff --quiet HEAD -- 2> /dev/null || commit="$commit-dirty"
fi
commit="${commit:-unknown}"
# A C string literal: nothing but what a commit name needs.
if [[ ! "$commit" =~ ^[A-Za-z0-9._+-]{1,64}$ ]]; then
    echo "build-info: not a commit name: $commit" >&2
    exit 64
fi

header=Sources/CBuildInfo/build-commit.h
text="#define ANNOUNCE_BUILD_COMMIT \"$commit\""
if [[ "$(cat "$header" 2> /dev/null)" != "$text" ]]; then
    echo "$text" > "$header"
    touch Sources/CBuildInfo/build-info.c
fi
echo "build-info: $commit"
