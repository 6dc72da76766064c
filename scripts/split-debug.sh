#!/usr/bin/env bash
# Splits an executable's debug information off: the executable is stripped and linked (.gnu_debuglink) to
# DEBUGDIR/.build-id/XX/YYYY.debug, named by its build id, where gdb and debuginfod-style tools look for it.
# What dh_strip does for a -dbgsym package; `make install-strip` uses it for a terminal without one.
#
#   scripts/split-debug.sh EXECUTABLE DEBUGDIR      (OBJCOPY=llvm-objcopy for another architecture's file)
set -euo pipefail
(($# == 2)) || { sed -n '2,6p' "$0" >&2; exit 64; }
executable="$1"
debugdir="$2"
objcopy="${OBJCOPY:-objcopy}"
id=$(readelf -n "$executable" | awk '/Build ID/ {print $3}')
[[ -n "$id" ]] || { echo "split-debug: $executable has no build id" >&2; exit 1; }
debug="$debugdir/.build-id/${id:0:2}/${id:2}.debug"
mkdir -p "$(dirname "$debug")"
"$objcopy" --only-keep-debug --compress-debug-sections=zlib "$executable" "$debug"
chmod 0644 "$debug"
"$objcopy" --strip-all --add-gnu-debuglink="$debug" "$executable"
echo "split-debug: $executable $(stat -c %s "$executable") bytes, debug information in $debug ($(stat -c %s "$debug") bytes)"
