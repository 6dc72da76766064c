#!/usr/bin/env bash
# Installs everything the project needs on a fresh Debian 12 machine and builds the default voice packs.
# Idempotent: installs only missing packages, rebuilds a voice pack only when its recipe changed.
#
#   scripts/setup.sh            packages + voice packs (out/voices/zh, out/voices/en)
#   scripts/setup.sh --packages packages only
#
# Runs as root (or with sudo available).
set -euo pipefail
cd "$(dirname "$0")/.."

# Every Debian package the project uses, and why.
PACKAGES=(
    libasound2-dev      # CAlsa: ALSA PCM and mixer
    libsndfile1-dev     # CSndFile: decoding voice pack clips (WAV/FLAC/OGG/Opus/MP3), writing renders
    libsoxr-dev         # CSoxr: converting clips at another rate once, at load; synthesised speech to the pack rate
    libebur128-dev      # CEbur128: measuring clip loudness (EBU R 128) to match it across a pack
    libespeak-ng-dev    # CEspeakNG: synthesising free text no voice pack covers, at run time
    alsa-utils          # amixer/aplay for operators and tests
    pulseaudio          # the host sound test rig (scripts/rig.sh)
    pulseaudio-utils    # pactl/parec for the rig
    libasound2-plugins  # ALSA "pulse" PCM/ctl plugin, how ALSA reaches the rig
    espeak-ng           # synthesising the default voice packs
    sox                 # trimming/normalising clips in the voice pack builder
    jq                  # writing voice pack manifests
    libsqlite3-dev      # CSQLite: the journal (loaded on first use, like the other C libraries)
    libsystemd-dev      # CSystemd: sd_notify (ready, status, watchdog) and socket activation
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
    e2fsprogs           # mkfs.ext4 -d: the VM's root image without mounting anything
    cpio                # packing the VM's initramfs
    make                # make install / make check-units (Makefile)
    libmosquitto-dev    # CMosquitto: the push listener's MQTT client (announce-push)
    mosquitto           # the MQTT broker the push tests start on loopback
    openssl             # test certificates for the push listener's TLS test; HMAC cross-check
    socat               # the documented `echo … | socat` client, tested against the daemon (half-closed requests)
)

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
[[ "${1:-}" == "--packages" ]] && exit 0

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
