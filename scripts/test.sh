#!/usr/bin/env bash
# Runs every test: installs what is missing (scripts/setup.sh --tests), builds the tests and the programs with
# AddressSanitizer, runs the unit tests and the integration tests under it, a short fuzz run, the thread-safety
# stage, the unit tests again as arm64 executables under qemu-user, then the system tests. The integration tests
# start their own sound rigs (scripts/rig.sh) and daemons; the system tests install the release packages
# (scripts/package.sh) in two VMs, amd64 and arm64 (scripts/vm/run.sh: images cached in ~/.cache/announce-vm,
# results in out/system-test*). The arm64 build (Debian's Swift 6.2.3 in a chroot), the packages and the VM images
# are made in the background while the rig tests run (scripts/pkg/prepare-tests.sh). What each stage costs:
# docs/benchmarks.md ("CI stages").
#
#   scripts/test.sh
#
# ANNOUNCE_THREAD_SANITIZER=0 skips the ThreadSanitizer stage (local runs only: CI runs it). ANNOUNCE_FUZZ_SECONDS
# (default 10 per target: a smoke run; `scripts/fuzz.sh 600` fuzzes for real) sets the fuzz run's length.
set -euo pipefail
cd "$(dirname "$0")/.."
unset ANNOUNCE_VM_REUSE ANNOUNCE_VM_STEPS  # the system tests always boot the VM here, and run every step

stage_started=$(date +%s)
stage_name=setup
stage() {  # prints how long the previous stage took, then the next stage's name
    local now
    now=$(date +%s)
    echo "test: [$((now - stage_started)) s] $*"
    stage_started=$now
    stage_name="$*"
}
# A stage of tests that fails does not stop the others (a build that fails does): the run reports every failed
# stage at its end, and fails.
failed_stages=()
failed() { failed_stages+=("$stage_name"); echo "test: FAILED: $stage_name" >&2; }

# A hung test must fail the run with its name, not eat CI's 90 minutes: every long step runs under `timeout`,
# bounded by its own limit (several times its usual length: docs/benchmarks.md, "CI stages") and by what is
# left of ANNOUNCE_TEST_BUDGET_MINUTES (default 80) for the whole run.
run_started=$(date +%s)
budget_seconds=$(( ${ANNOUNCE_TEST_BUDGET_MINUTES:-80} * 60 ))
bounded() {  # bounded MINUTES COMMAND...: runs COMMAND for at most MINUTES (and never past the run's budget)
    local limit=$(( $1 * 60 )) left status=0
    shift
    left=$(( run_started + budget_seconds - $(date +%s) ))
    (( left < limit )) && limit=$left
    if (( limit <= 0 )); then
        echo "test: the run's budget of ${ANNOUNCE_TEST_BUDGET_MINUTES:-80} minutes is spent before: $*" >&2
        exit 1
    fi
    timeout --kill-after=30 "$limit" "$@" || status=$?
    if (( status == 124 || status == 137 )); then
        echo "test: stopped after $limit s (a hang?): $*" >&2
        pkill -f "$PWD/.build.*announcePackageTests.xctest" 2>/dev/null || true
    fi
    return "$status"
}

scripts/swift-check.sh
scripts/setup.sh --tests
stage "building (debug, with AddressSanitizer: every host test runs under it)"

scripts/build-info.sh  # the commit --version, status and the metrics report
# One build for every host test: the test runner and the announced, announce-ctl and announce-push it starts are
# built with AddressSanitizer (.build-asan), so that the unit tests, the integration tests on the sound rigs (the
# playback path included: ASan's slowdown is small enough for 16 kHz audio) and the system tests' host part all
# run under it. Warning-free with this machine's Swift 6.3.1, as with Debian's 6.2.3 (scripts/package.sh checks
# that build). Leak checking is off: the Swift runtime's and Foundation's process-lifetime caches read as leaks.
# Swift's own crash backtracer is off too: the sanitizer prints the report, and a backtracer symbolising a
# sanitized daemon for minutes keeps that daemon, and its socket, alive meanwhile.
asan=(--sanitize=address --scratch-path .build-asan)
export ASAN_OPTIONS="detect_leaks=0 abort_on_error=1" SWIFT_BACKTRACE=enable=no
mkdir -p out/ci
bounded 30 swift build --build-tests "${asan[@]}" 2>&1 | tee out/ci/build.log
# (gold's notes on the sanitizer runtime's own local symbols, as it links the test bundle, are not ours.)
if grep -E '(^|: )warning: ' out/ci/build.log | grep -v "ld.gold: warning: Cannot export local symbol '__asan"; then
    echo "test: the build printed warnings (above)" >&2
    exit 1
fi
export ANNOUNCE_BIN_DIR
ANNOUNCE_BIN_DIR=$(swift build "${asan[@]}" --show-bin-path)
scripts/program-links.sh "$ANNOUNCE_BIN_DIR"  # the programs: links to the one executable, as installed
export ANNOUNCE_VOICES="$PWD/out/voices"

# The arm64 build, the packages and the VM images, in the background at idle priority (SCHED_IDLE: only CPU time
# no test wants; the rig tests spend most of theirs waiting on real-time audio). Each stage that uses one of its
# steps waits for that step only (wait_prepared), so that what is made first is used first; its log is
# out/ci/prepare.log, each step's end in out/ci/prepare-timings.
chrt --idle 0 ionice -c 3 timeout --kill-after=30 $((70 * 60)) scripts/pkg/prepare-tests.sh \
    > out/ci/prepare.log 2>&1 &
prepare_pid=$!
trap 'kill -- "$prepare_pid" 2> /dev/null || true' EXIT
prepare_failed=false
wait_prepared() {  # wait_prepared STEP…: until each STEP has ended well (0), or the background stage has failed (1)
    local step line
    $prepare_failed && return 1
    for step in "$@"; do
        # A step's line is written when it ends; the stage itself ends after its last step or its first failure.
        until line=$(grep "^$step " out/ci/prepare-timings 2> /dev/null); do
            if ! kill -0 "$prepare_pid" 2> /dev/null; then
                grep -q "^$step " out/ci/prepare-timings 2> /dev/null && continue
                break
            fi
            sleep 2
        done
        if [[ "$line" != *" status 0" ]]; then
            wait "$prepare_pid" 2> /dev/null || true
            cat out/ci/prepare-timings 2> /dev/null || true
            tail -40 out/ci/prepare.log >&2
            echo "test: the background stage did not make $step (out/ci/prepare.log)" >&2
            prepare_failed=true
            return 1
        fi
    done
}
# Tests that play through a sound rig measure real-time audio: they run one at a time, after the rest, so that a
# 2-core machine busy with voice-pack builds, TLS handshakes and parallel suites does not starve their audio. The
# push listener's field tests join them (host only: they run it under this machine's libfaketime, and time takeovers).
rig_tests='^IntegrationTests\.|^AnnounceALSATests\.|^AnnouncePushTests\.(PushEndToEndTests|PushFleetTests|PushFieldTests)'
# The suites that run programs under libfaketime (a wall clock hours or days off), which cannot run a sanitized
# program (it never gets past its start): they run later, on the release build the background stage makes for the
# amd64 packages — the executable a terminal gets.
field_tests='^IntegrationTests\.DaemonIntegration/(FieldConditionsTests|FaultScheduleTests)/|^AnnouncePushTests\.PushFieldTests/'
stage "host unit tests (in parallel)"
bounded 10 swift test --skip-build "${asan[@]}" --skip '^SystemTests\.' --skip "$rig_tests" || failed
stage "host integration tests on sound rigs (one at a time)"
bounded 30 swift test --skip-build "${asan[@]}" --no-parallel --filter "$rig_tests" --skip "$field_tests" || failed

stage "fuzzing the request decoder and the amount parser (libFuzzer + ASan, scripts/fuzz.sh)"
bounded 15 scripts/fuzz.sh "${ANNOUNCE_FUZZ_SECONDS:-10}" || failed

# Thread safety: the unit tests (the player on fake devices among them), and the integration tests that drive the
# daemon hardest (a burst from many clients, hostile input, the protocol), with the test runner AND the daemon and
# announce-ctl they start built with ThreadSanitizer (.build-tsan). TSan's slowdown (5-15x) misses real-time audio's
# deadlines, so the rigs stay out. It builds with -DANNOUNCE_TSAN, which swaps Synchronization.Mutex (invisible to
# TSan on Linux) for a pthread lock TSan understands (Sources/AnnounceCore/Support/ThreadSanitizerMutex.swift);
# AnnounceSystemdTests stay out because AnnounceSystemd does not import AnnounceCore, so its locks would still be
# invisible. ANNOUNCE_THREAD_SANITIZER=0 skips the stage (local runs only: CI runs it). docs/benchmarks.md.
if [[ "${ANNOUNCE_THREAD_SANITIZER:-1}" != 0 ]]; then
    tsan=(--sanitize=thread --scratch-path .build-tsan -Xswiftc -DANNOUNCE_TSAN)
    integration='^IntegrationTests\.DaemonIntegration/(DaemonConnectionTests|BadInputTests|DaemonProtocolTests)/'
    stage "building with --sanitize=thread"
    bounded 25 swift build -c debug --build-tests "${tsan[@]}"
    stage "tests under --sanitize=thread"
    scripts/program-links.sh "$(swift build -c debug "${tsan[@]}" --show-bin-path)"
    ANNOUNCE_BIN_DIR=$(swift build -c debug "${tsan[@]}" --show-bin-path) \
        TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan-suppressions.txt" \
        bounded 15 swift test --skip-build "${tsan[@]}" \
        --filter "^(AnnounceCoreTests|AnnounceJournalTests|AnnounceServerTests)\\.|$integration" || failed
fi

stage "field conditions on the sound rig, against the release build (libfaketime; one at a time; first waiting for the build)"
if wait_prepared amd64-packages; then
    release="$PWD/out/ci/release-bin"
    mkdir -p "$release"
    ln -sfn "$PWD/.build-amd64/release/announce" "$release/announce"
    scripts/program-links.sh "$release"
    ANNOUNCE_BIN_DIR="$release" bounded 15 swift test --skip-build "${asan[@]}" --no-parallel --filter "$field_tests" \
        || failed
else
    failed
fi

# The unit tests as arm64 executables (Debian's Swift 6.2.3, built across in the chroot) under qemu-user, against
# the arm64 sysroot (its Swift runtime: LD_LIBRARY_PATH, read inside the sysroot). The programs they start (the
# arm64 announced of the packages) run under qemu-user too, through binfmt_misc. Left out, with docs/benchmarks.md
# ("arm64"): the voice pack builder's tests (a shell script of this machine's espeak-ng and sox: nothing arm64 in
# it) and the one input test that needs the evdev ioctls, which qemu-user does not emulate (ENOSYS). The stage is
# CPU-bound: the hot loops are optimised even in debug builds (Package.swift, optimisedInDebug), without which it
# took 7 minutes instead of 1.
stage "arm64 unit tests under qemu-user (Debian's Swift 6.2.3 build; first waiting for it to be built)"
if wait_prepared toolchain sysroot arm64-packages arm64-tests && scripts/pkg/binfmt.sh; then
    arm64_skip='^AnnounceSoundTests\.VoicePackBuilderTests/'
    arm64_skip+='|^AnnounceInputTests\.InputMonitorTests/aMissingOrUnusableDeviceIsSaidOnceAndNothingStops\('
    LD_LIBRARY_PATH=/usr/libexec/swift/lib/swift/linux QEMU_LD_PREFIX="$(scripts/pkg/sysroot.sh)" \
        ANNOUNCE_ROOT="$PWD" ANNOUNCE_BIN_DIR="$PWD/.build-arm64/aarch64-unknown-linux-gnu/release" \
        bounded 20 qemu-aarch64-static .build-arm64-tests/aarch64-unknown-linux-gnu/debug/announcePackageTests.xctest \
        --testing-library swift-testing --skip '^SystemTests\.' --skip "$rig_tests" --skip "$arm64_skip" || failed
else
    failed
fi

# The deployed system last, alone on the machine: unit files, then VMs with a real kernel, ALSA drivers and
# systemd running the project's own packages (scripts/vm/run.sh; docs/deployment.md): amd64 every step, arm64
# the packages' own. One at a time: two emulated machines would share two cores. The amd64 VM runs one TCG thread,
# so the background stage makes the arm64 image on the other core meanwhile.
stage "system tests: unit files, packaging scripts, amd64 VM (packages, activation, access, push, volume, duck, keys, watchdog, kill, clock, power cut, PipeWire, upgrade, purge); first waiting for its packages and image"
# The VMs install the packages the background stage built (scripts/vm/packages.sh), when it made them.
if wait_prepared amd64-packages amd64-image; then export ANNOUNCE_VM_PACKAGES_READY=1; else unset ANNOUNCE_VM_PACKAGES_READY; fi
bounded 25 swift test --skip-build "${asan[@]}" --no-parallel --filter '^SystemTests\.' --skip '^SystemTests\.ARM64SystemTests/' || failed
stage "system tests: arm64 VM (packages, say, volume, upgrade, purge); first waiting for its packages and image"
if wait_prepared arm64-packages arm64-image; then export ANNOUNCE_VM_PACKAGES_READY=1; else unset ANNOUNCE_VM_PACKAGES_READY; fi
bounded 15 swift test --skip-build "${asan[@]}" --no-parallel --filter '^SystemTests\.ARM64SystemTests/' || failed
$prepare_failed && { stage_name="the background stage (scripts/pkg/prepare-tests.sh)"; failed; }
cat out/ci/prepare-timings 2> /dev/null || true
stage "done"
if (( ${#failed_stages[@]} > 0 )); then
    printf 'test: failed stage: %s\n' "${failed_stages[@]}" >&2
    exit 1
fi
