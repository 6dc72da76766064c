#!/usr/bin/env bash
# Fuzzes the request decoder and the amount parser with libFuzzer (docs/benchmarks.md, "Fuzzing").
#
#   scripts/fuzz.sh [SECONDS] [TARGET…]    SECONDS per target (default 30); targets: request amount (default both)
#
# Builds swift-log's Logging (from SwiftPM's checkout), AnnounceCore and each target in Fuzz/ with swiftc
# -sanitize=fuzzer,address into .build-fuzz/ (apart from SwiftPM's .build, so `swift build` never sees libFuzzer's
# main), rebuilding only when the sources change.
# Each run starts from the committed seeds (Fuzz/corpus/TARGET) plus what earlier runs found
# (.build-fuzz/corpus/TARGET). A crash, a sanitizer report or a failed check exits non-zero and leaves the
# input in out/fuzz/ (replay it: .build-fuzz/fuzz-TARGET out/fuzz/crash-…).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-30}"
shift || true
targets=("$@")
((${#targets[@]})) || targets=(request amount)

build=.build-fuzz
mkdir -p "$build" out/fuzz
flags=(-parse-as-library -swift-version 6 -O -g -sanitize=fuzzer,address)
# AnnounceCore logs through swift-log: its Logging module is built from the checkout SwiftPM resolved.
logging=.build/checkouts/swift-log/Sources/Logging
[[ -d "$logging" ]] || swift package resolve
mapfile -t logging_sources < <(find "$logging" -name '*.swift' | sort)
stamp=$(cat Sources/AnnounceCore/*/*.swift Sources/AnnounceCore/*.swift Sources/CPthread/* "${logging_sources[@]}" Fuzz/*.swift "$0" \
    | sha256sum | cut -c1-16)
if [[ "$(cat "$build/stamp" 2>/dev/null)" != "$stamp" ]]; then
    echo "fuzz: building AnnounceCore and the targets (libFuzzer + AddressSanitizer)"
    started=$(date +%s)
    swiftc "${flags[@]}" -module-name Logging -package-name swift_log -emit-library -static -emit-module \
        -emit-module-path "$build/Logging.swiftmodule" -o "$build/libLogging.a" "${logging_sources[@]}"
    # (-I Sources/CPthread: the one C header AnnounceCore imports, glibc's pthread_cond_clockwait.)
    swiftc "${flags[@]}" -I "$build" -I Sources/CPthread -module-name AnnounceCore -emit-library -static -emit-module \
        -emit-module-path "$build/AnnounceCore.swiftmodule" -o "$build/libAnnounceCore.a" \
        Sources/AnnounceCore/*.swift Sources/AnnounceCore/*/*.swift
    for file in Fuzz/*.swift; do
        name=$(basename "$file" .swift)
        swiftc "${flags[@]}" -use-ld=lld -I "$build" -I Sources/CPthread -L "$build" -lAnnounceCore -lLogging "$file" \
            -o "$build/fuzz-$name"
    done
    echo "$stamp" > "$build/stamp"
    echo "fuzz: built in $(($(date +%s) - started)) s"
fi

declare -A source=([request]=RequestDecoder [amount]=AmountParser)
declare -A maxlen=([request]=4096 [amount]=128)
status=0
for target in "${targets[@]}"; do
    name=${source[$target]:?unknown target $target (request, amount)}
    corpus="$build/corpus/$target"
    mkdir -p "$corpus"
    log="out/fuzz/$target.log"
    echo "fuzz: $target for $seconds s"
    if SWIFT_BACKTRACE=enable=no "$build/fuzz-$name" "$corpus" "Fuzz/corpus/$target" -dict="Fuzz/$target.dict" \
        -max_total_time="$seconds" -max_len="${maxlen[$target]}" -timeout=10 -rss_limit_mb=4096 \
        -print_final_stats=1 -artifact_prefix="out/fuzz/$target-" > "$log" 2>&1; then
        runs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
        echo "fuzz: $target: $runs inputs, no finding ($cov, corpus $(ls "$corpus" | wc -l) files)"
    else
        status=1
        echo "fuzz: $target FOUND A PROBLEM (log: $log):"
        grep -E 'ERROR|Fatal error|Precondition|SUMMARY|Test unit written' "$log" | head -20
    fi
done
exit "$status"
