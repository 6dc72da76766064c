#!/usr/bin/env bash
# Installs the Debian packages the project needs and builds the default voice packs, on Debian 12 "bookworm"
# (what the project is developed and tested on) or 13 "trixie". Idempotent: installs only missing packages,
# rebuilds a voice pack only when its recipe changed. The Swift toolchain is not installed here (bookworm has no
# Debian package of it): scripts/demo.sh and scripts/test.sh check for it first (scripts/swift-check.sh).
#
#   scripts/setup.sh                     what building and the demo need: the C libraries, the sound test rig,
#                                        the voice pack builder; then the voice packs (out/voices/zh, out/voices/en)
#   scripts/setup.sh --tests             that and what only the tests and packaging need: the system tests' VMs,
#                                        the packaging chroot, arm64 under qemu-user, the MQTT broker …
#                                        (scripts/test.sh runs this)
#   scripts/setup.sh [--tests] --packages   packages only
#   scripts/setup.sh [--tests] --list       the packages, one a line; installs nothing
#
# Runs as root (or with sudo available).
set -euo pipefail
cd "$(dirname "$0")/.."

tests=false list=false packages_only=false
for argument in "$@"; do
    case "$argument" in
        --tests) tests=true ;;
        --list) list=true ;;
        --packages) packages_only=true ;;
        *) sed -n '2,15p' "$0" >&2; exit 64 ;;
    esac
done

# What building, the demo and the README's "Using it" need, and why.
PACKAGES=(
    libasound2-dev      # CAlsa: ALSA PCM and mixer
    libsndfile1-dev     # CSndFile: decoding voice pack clips (WAV/FLAC/OGG/Opus/MP3), writing renders
    libsoxr-dev         # CSoxr: converting clips at another rate once, at load; synthesised speech to the pack rate
    libebur128-dev      # CEbur128: measuring clip loudness (EBU R 128) to match it across a pack
    libespeak-ng-dev    # CEspeakNG: synthesising free text no voice pack covers, at run time
    libsqlite3-dev      # CSQLite: the journal (loaded on first use, like the other C libraries)
    libsystemd-dev      # CSystemd: sd_notify (ready, status, watchdog) and socket activation
    libmosquitto-dev    # CMosquitto: the push listener's MQTT client (announce-push), part of the one executable
    libcurl4-openssl-dev # CCurl: the push listener's downloads of pushed clips over HTTPS (loaded on first use)
    libssl-dev          # CCrypto: HMAC-SHA256/SHA-1 and SHA-256 (libcrypto) for the push listener's signatures
    alsa-utils          # amixer/aplay for operators and tests
    pulseaudio          # the host sound test rig (scripts/rig.sh): the demo plays into it without a sound card
    pulseaudio-utils    # pactl/parec for the rig
    libasound2-plugins  # ALSA "pulse" PCM/ctl plugin, how ALSA reaches the rig
    espeak-ng           # synthesising the default voice packs
    sox                 # trimming/normalising clips in the voice pack builder; the demo's recording as WAV
    jq                  # writing voice pack manifests
    make                # make / make install (Makefile): the release build, man pages, completions
)
# What only the tests (scripts/test.sh) and the packages (scripts/package.sh) need besides: hundreds of MB
# (qemu-user-static alone 379 MB) a demo has no use for.
TEST_PACKAGES=(
    systemd             # systemd-analyze (unit checks), systemd-socket-activate (socket activation tests)
    qemu-system-x86     # the amd64 system-test VM (scripts/vm/run.sh): real kernel, ALSA drivers, systemd
    qemu-system-arm     # the arm64 system-test VM (qemu-system-aarch64)
    qemu-user-static    # arm64 executables on this machine: the arm64 unit tests, man pages, the arm64 VM's root
    debootstrap         # the packaging chroot (scripts/pkg/toolchain.sh)
    mmdebstrap          # the VMs' Debian roots (scripts/vm/image.sh): an arm64 root without emulating dpkg
    arch-test           # … which mmdebstrap asks whether arm64 programs run here
    curl                # scripts/package.sh: is Debian's archive within reach
    xz-utils            # the VMs' kernel modules (.ko.xz)
    zstd                # … or .ko.zst
    busybox-static      # the VM's initramfs
    kmod                # depmod/modprobe for the VM's kernel modules
    e2fsprogs           # mkfs.ext4 -d: the VM's root image; mkfs.ext4/e2fsck: a failing flash card for the daemon (FailingDisk)
    cpio                # packing the VM's initramfs
    mosquitto           # the MQTT broker the push tests start on loopback
    openssl             # test certificates for the push listener's TLS test; HMAC cross-check
    faketime            # libfaketime: a wall clock hours or days off for the listener and the daemon (PushFieldTests, FieldConditionsTests, the fault schedules)
    socat               # the documented `echo … | socat` client, tested against the daemon (half-closed requests)
)
$tests && PACKAGES+=("${TEST_PACKAGES[@]}")
if $list; then
    printf '%s\n' "${PACKAGES[@]}"
    exit 0
fi

need=()
for package in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || need+=("$package")
done
if ((${#need[@]})); then
    SUDO=""
    [[ $(id -u) -eq 0 ]] || SUDO="sudo"
    echo "setup: installing ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
$packages_only && exit 0

# Default voice packs, rebuilt when the builder changes.
recipe=$(cat scripts/build-voice-pack.sh <(espeak-ng --version) <(sox --version) | sha256sum | cut -c1-16)
for lang in zh en; do
    out="out/voices/$lang"
    if [[ -f "$out/manifest.json" && "$(cat "$out/.recipe" 2>/dev/null)" == "$recipe" ]]; then
        continue
    fi
    scripts/build-voice-pack.sh --lang "$lang" --out "$out"
    echo "$recipe" > "$out/.recipe"
done
echo "setup: ok (voice packs in out/voices)"
