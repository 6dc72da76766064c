#!/usr/bin/env bash
# Makes announced, announce-ctl and announce-push next to a built `announce` executable, as links to it — the
# layout `make install` gives /usr/bin — so that a build folder can be used like an installed one. Idempotent.
#
#   scripts/program-links.sh DIR        (DIR: the build folder, e.g. "$(swift build --show-bin-path)")
set -euo pipefail
(($# == 1)) || { sed -n '2,5p' "$0" >&2; exit 64; }
[[ -x "$1/announce" ]] || { echo "program-links: $1/announce missing; build first" >&2; exit 1; }
for program in announced announce-ctl announce-push; do
    ln -sfn announce "$1/$program"
done
