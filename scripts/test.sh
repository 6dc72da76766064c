#!/usr/bin/env bash
# Runs every test: installs what is missing (scripts/setup.sh), builds, runs the unit and integration tests,
# a short fuzz run, the memory-safety stage, the unit tests again as arm64 executables under qemu-user, then the
# system tests. The integration tests start their own sound rigs (scripts/rig.sh) and daemons; the system tests
# install the release packages (scripts/package.sh) in two VMs, amd64 and arm64 (scripts/vm/run.sh: images
# cached in ~/.cache/announce-vm, results in out/system-test*). The arm64 build (Debian's Swift 6.2.3 in a
# chroot), the packages and the VM images are made in the background while the rig tests run
# (scripts/pkg/prepare-tests.sh). What each stage costs: docs/benchmarks.md ("CI stages").
#
#   scripts/test.sh
#
# ANNOUNCE_SANITIZERS="address thread" (default) chooses the sanitizer builds; "" skips the stage (local runs
# only: CI runs it). ANNOUNCE_FUZZ_SECONDS (default 30 per target) sets the fuzz run's length.
set -euo pipefail
cd "$(dirname "$0")/.."
unset ANNOUNCE_VM_REUSE  # the system tests always boot the VM here

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

scripts/setup.sh
stage "building"

scripts/build-info.sh  # the commit --version, status and the metrics report
# Warning-free with this machine's Swift 6.3.1, as with Debian's 6.2.3 (scripts/package.sh checks that build).
mkdir -p out/ci
bounded 30 swift build --build-tests 2>&1 | tee out/ci/build.log
if grep -E '(^|: )warning: ' out/ci/build.log; then
    echo "test: the build printed warnings (above)" >&2
    exit 1
fi
export ANNOUNCE_BIN_DIR
ANNOUNCE_BIN_DIR=$(swift build --show-bin-path)
scripts/program-links.sh "$ANNOUNCE_BIN_DIR"  # the programs: links to the one executable, as installed
export ANNOUNCE_VOICES="$PWD/out/voices"

# The arm64 build, the packages and the VM images, in the background at idle priority (SCHED_IDLE: only CPU time
# no test wants; the rig tests spend most of theirs waiting on real-time audio). Waited for before the stages
# that use them; its log is out/ci/prepare.log.
chrt --idle 0 ionice -c 3 timeout --kill-after=30 $((45 * 60)) scripts/pkg/prepare-tests.sh \
    > out/ci/prepare.log 2>&1 &
prepare_pid=$!
trap 'kill -- "$prepare_pid" 2> /dev/null || true' EXIT
# Tests that play through a sound rig measure real-time audio: they run one at a time, after the rest, so that a
# 2-core machine busy with voice-pack builds, TLS handshakes and parallel suites does not starve their audio.
rig_tests='^IntegrationTests\.|^AnnounceALSATests\.|^AnnouncePushTests\.(PushEndToEndTests|PushFleetTests)'
stage "host unit tests (in parallel)"
bounded 10 swift test --skip-build --skip '^SystemTests\.' --skip "$rig_tests" || failed
stage "host integration tests on sound rigs (one at a time)"
bounded 30 swift test --skip-build --no-parallel --filter "$rig_tests" || failed

stage "fuzzing the request decoder and the amount parser (libFuzzer + ASan, scripts/fuzz.sh)"
bounded 15 scripts/fuzz.sh "${ANNOUNCE_FUZZ_SECONDS:-30}" || failed

# Memory safety: the unit tests (the player on fake devices among them), and the integration tests that drive the
# daemon hardest (a burst from many clients, hostile input, the protocol), with the test runner AND the daemon and
# announce-ctl they start built with the sanitizer, each in its own scratch path (.gitignore: .build-*/). Under
# ASan the playback path also runs for real: the ALSA sink and the daemon speaking on the rig, one test at a time
# (ASan's slowdown is small enough for 16 kHz audio; TSan's is not, so it leaves the rig out). TSan builds with -DANNOUNCE_TSAN, which swaps Synchronization.Mutex (invisible to TSan on
# Linux) for a pthread lock TSan understands (Sources/AnnounceCore/Support/ThreadSanitizerMutex.swift);
# AnnounceSystemdTests stay out of that stage because AnnounceSystemd does not import AnnounceCore, so its locks
# would still be invisible. Details and timings: docs/benchmarks.md.
integration='^IntegrationTests\.DaemonIntegration/(DaemonConnectionTests|BadInputTests|DaemonProtocolTests)/'
for sanitizer in ${ANNOUNCE_SANITIZERS-address thread}; do
    case "$sanitizer" in
        address) flags=(--sanitize=address --scratch-path .build-asan)
            tests="^(AnnounceCoreTests|AnnounceJournalTests|AnnounceServerTests|AnnounceSystemdTests)\\.|$integration" ;;
        thread) flags=(--sanitize=thread --scratch-path .build-tsan -Xswiftc -DANNOUNCE_TSAN)
            tests="^(AnnounceCoreTests|AnnounceJournalTests|AnnounceServerTests)\\.|$integration" ;;
        *) echo "test: unknown sanitizer $sanitizer" >&2; exit 64 ;;
    esac
    stage "building with --sanitize=$sanitizer"
    bounded 25 swift build -c debug --build-tests "${flags[@]}"
    stage "tests under --sanitize=$sanitizer"
    # Leak checking is off: the Swift runtime's and Foundation's process-lifetime caches read as leaks. Swift's
    # own crash backtracer is off too: the sanitizer prints the report, and a backtracer symbolising a sanitized
    # daemon for minutes keeps that daemon, and its socket, alive meanwhile.
    scripts/program-links.sh "$(swift build -c debug "${flags[@]}" --show-bin-path)"
    ANNOUNCE_BIN_DIR=$(swift build -c debug "${flags[@]}" --show-bin-path) \
        TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan-suppressions.txt" \
        ASAN_OPTIONS="detect_leaks=0 abort_on_error=1" SWIFT_BACKTRACE=enable=no \
        bounded 15 swift test --skip-build "${flags[@]}" --filter "$tests" || failed
    if [[ "$sanitizer" == address ]]; then
        stage "the playback path on the sound rig under --sanitize=address (one at a time)"
        ANNOUNCE_BIN_DIR=$(swift build -c debug "${flags[@]}" --show-bin-path) \
            ASAN_OPTIONS="detect_leaks=0 abort_on_error=1" SWIFT_BACKTRACE=enable=no \
            bounded 20 swift test --skip-build "${flags[@]}" --no-parallel \
            --filter '^AnnounceALSATests\.|^IntegrationTests\.DaemonIntegration/EndToEndTests/' || failed
    fi
done

stage "waiting for the background build of arm64, the packages and the VM images (scripts/pkg/prepare-tests.sh)"
prepared=0
wait "$prepare_pid" || prepared=$?
cat out/ci/prepare-timings 2>/dev/null || true
if ((prepared != 0)); then
    tail -40 out/ci/prepare.log >&2
    echo "test: the background build failed (exit $prepared): out/ci/prepare.log" >&2
    failed
fi

# The unit tests as arm64 executables (Debian's Swift 6.2.3, built across in the chroot) under qemu-user, against
# the arm64 sysroot (its Swift runtime: LD_LIBRARY_PATH, read inside the sysroot). The programs they start (the
# arm64 announced of the packages) run under qemu-user too, through binfmt_misc. Left out, with docs/benchmarks.md
# ("arm64"): the voice pack builder's tests (a shell script of this machine's espeak-ng and sox: nothing arm64 in
# it), the libsndfile codec and resampler sweeps (Debian's C code, 50x slower emulated: 16 of 17 minutes), and
# the one input test that needs the evdev ioctls, which qemu-user does not emulate (ENOSYS).
stage "arm64 unit tests under qemu-user (Debian's Swift 6.2.3 build)"
if ((prepared == 0)) && scripts/pkg/binfmt.sh; then
    arm64_skip='^AnnounceSoundTests\.VoicePackBuilderTests/'
    arm64_skip+='|^AnnounceSoundTests\.VoicePackAudioTests/(packInFormat|clipsAtMixedRatesAreConvertedOnceAtLoad)\('
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
# the packages' own. One at a time (--no-parallel): two emulated machines would share two cores.
stage "system tests (unit files; amd64 VM: packages, activation, access, push, volume, duck, keys, watchdog, kill, upgrade, purge; arm64 VM: packages, say, volume, upgrade, purge)"
bounded 35 swift test --skip-build --no-parallel --filter '^SystemTests\.' || failed
stage "done"
if (( ${#failed_stages[@]} > 0 )); then
    printf 'test: failed stage: %s\n' "${failed_stages[@]}" >&2
    exit 1
fi
