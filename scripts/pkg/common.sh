# Shared by scripts/package.sh and the scripts under scripts/pkg/ (sourced, not run): where things are cached,
# a private view of Debian's archive (trixie and sid, amd64 and arm64) that leaves the machine's own apt sources
# alone, chroot helpers, and the checks that stop a run at once when it cannot succeed.
#
# ANNOUNCE_PKG_CACHE      the cache (default ~/.cache/announce-pkg): the toolchain chroot, the arm64 sysroot,
#                         downloaded .debs, the arm64 VM image. Every entry is keyed by its recipe and marked
#                         complete only when it is; an entry without the mark (an interrupted run) is rebuilt.
# ANNOUNCE_DEBIAN_MIRROR  Debian's archive (default http://deb.debian.org/debian)

PKG_CACHE="${ANNOUNCE_PKG_CACHE:-${XDG_CACHE_HOME:-${HOME:-/var/tmp}/.cache}/announce-pkg}"
DEBIAN_MIRROR="${ANNOUNCE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# What the packages are for, and where Debian's Swift comes from.
TARGET_SUITE=trixie
SWIFT_SUITE=sid
DEBIAN_KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
# The archive reached from these machines can be a snapshot whose Release files are past their Valid-Until:
# their signatures are still checked, their age is not.
APT_NO_VALID_UNTIL=(-o Acquire::Check-Valid-Until=false)

pkg_log() { echo "${PKG_LOG_NAME:-package}: $*" >&2; }
pkg_die() { pkg_log "$*"; exit 1; }

# Stops at once, saying what is needed, when the run cannot succeed: root (debootstrap, chroot, mounts),
# debootstrap, and Debian's archive within reach.
pkg_preflight() {
    local need=() tool
    [[ $(id -u) -eq 0 ]] || pkg_die "must run as root (it makes a chroot with debootstrap and mounts /proc in it): sudo $0 $*"
    for tool in debootstrap dpkg-deb curl; do
        command -v "$tool" > /dev/null || need+=("$tool")
    done
    ((${#need[@]} == 0)) || pkg_die "missing: ${need[*]} (apt-get install debootstrap dpkg curl, or run scripts/setup.sh --tests)"
    [[ -r "$DEBIAN_KEYRING" ]] || pkg_die "missing $DEBIAN_KEYRING (apt-get install debian-archive-keyring)"
    curl -fsS --max-time 20 -o /dev/null "$DEBIAN_MIRROR/dists/$SWIFT_SUITE/Release" 2> /dev/null \
        || pkg_die "cannot reach Debian's archive at $DEBIAN_MIRROR (dists/$SWIFT_SUITE/Release): the toolchain and the target's libraries come from there; set ANNOUNCE_DEBIAN_MIRROR to a mirror you can reach"
}

# Holds the cache's lock for KIND until the calling script ends: a second run waits for the first to finish
# its entry instead of taking an unfinished one for an interrupted one (and removing it under the first).
pkg_lock() {  # KIND
    mkdir -p "$PKG_CACHE"
    exec 9>> "$PKG_CACHE/$1.lock"
    flock 9
}

# A cache entry's folder for a recipe (the text that decides its contents). Other entries of the same kind are
# removed so that old ones do not pile up, and so is this one unless it is marked complete (an interrupted run's
# is never trusted). Prints the folder: complete ("$folder/complete" exists), or absent, to be built and then
# marked complete.
pkg_cache_entry() {  # KIND RECIPE-TEXT
    local kind="$1" key old
    key=$(printf '%s' "$2" | sha256sum | cut -c1-16)
    mkdir -p "$PKG_CACHE/$kind"
    for old in "$PKG_CACHE/$kind"/*; do
        if [[ -e "$old" && ( "$old" != "$PKG_CACHE/$kind/$key" || ! -f "$old/complete" ) ]]; then
            pkg_log "removing $old (another recipe's, or left unfinished)"
            pkg_remove_tree "$old"
        fi
    done
    echo "$PKG_CACHE/$kind/$key"
}

# Removes a cached tree, after unmounting whatever an interrupted run left mounted inside it (a bind-mounted
# /dev must never be emptied by rm), and never crossing into another file system.
pkg_remove_tree() {
    local dir mount
    dir=$(realpath -m "$1")
    { awk '{ print $2 }' /proc/mounts | grep -E "^$dir(/|$)" || true; } | sort -r | while read -r mount; do
        umount -l "$mount" 2> /dev/null || true
    done
    if awk '{ print $2 }' /proc/mounts | grep -qE "^$dir(/|$)"; then
        pkg_die "$dir still has file systems mounted inside; unmount them, then run again"
    fi
    rm -rf --one-file-system "$dir"
}

# apt-get / apt-cache over a private configuration: the archive's trixie and sid for amd64 and arm64, an empty
# dpkg status (nothing counts as installed, so --download-only resolves a whole closure), its own lists and
# downloaded .debs under the cache. The machine's sources and state are untouched.
PKG_APT_DIR="$PKG_CACHE/apt"
pkg_apt_options() {
    echo -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$PKG_APT_DIR/sources.list.d" \
        -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts="$PKG_APT_DIR/preferences.d" \
        -o Dir::State::Lists="$PKG_APT_DIR/lists" -o Dir::Cache="$PKG_APT_DIR/cache" \
        -o Dir::State::status="$PKG_APT_DIR/status" -o Debug::NoLocking=1 \
        -o APT::Architectures::=amd64 -o APT::Architectures::=arm64 -o APT::Install-Recommends=false \
        -o Acquire::Retries=3 -o Acquire::Check-Valid-Until=false
}
pkg_apt_update() {  # refreshes the lists when older than a day (or missing)
    mkdir -p "$PKG_APT_DIR"/{sources.list.d,preferences.d,lists/partial,cache/archives/partial}
    : > "$PKG_APT_DIR/status"
    cat > "$PKG_APT_DIR/sources.list.d/debian.sources" << SOURCES
Types: deb
URIs: $DEBIAN_MIRROR
Suites: $TARGET_SUITE $SWIFT_SUITE
Components: main
Architectures: amd64 arm64
Signed-By: $DEBIAN_KEYRING
SOURCES
    # Unless asked for by suite, what the target gets comes from trixie.
    printf 'Package: *\nPin: release n=%s\nPin-Priority: 990\n' "$TARGET_SUITE" > "$PKG_APT_DIR/preferences.d/target"
    if [[ -z "$(find "$PKG_APT_DIR/lists" -name '*_Packages*' -mmin -1440 2> /dev/null | head -1)" ]]; then
        pkg_log "reading Debian's $TARGET_SUITE and $SWIFT_SUITE indexes (amd64, arm64)"
        # shellcheck disable=SC2046
        apt-get $(pkg_apt_options) update -qq > "$PKG_APT_DIR/update.log" 2>&1 \
            || { cat "$PKG_APT_DIR/update.log" >&2; pkg_die "apt-get update of $DEBIAN_MIRROR failed"; }
    fi
}
pkg_apt_get() { apt-get $(pkg_apt_options) "$@"; }      # shellcheck disable=SC2046
pkg_apt_cache() { apt-cache $(pkg_apt_options) "$@"; }  # shellcheck disable=SC2046

# Runs a command in a chroot with /proc, /sys and /dev mounted. The mounts are made in a mount namespace of the
# command's own (unshare), so they end with it however it ends: a run killed half-way (a timeout's SIGKILL) leaves
# nothing mounted behind for the next one to trip over ("sysfs already mounted"). Extra bind mounts:
# PKG_CHROOT_BINDS=("HOST-PATH:CHROOT-PATH[:ro]" …).
PKG_CHROOT_BINDS=()
pkg_chroot() {  # ROOT COMMAND...
    local root="$1"
    shift
    unshare --mount --propagation private -- bash -euo pipefail -c '
        root="$1" binds="$2"
        shift 2
        mount_in() {  # WHAT WHERE MOUNT-OPTIONS…: over whatever an older run (before namespaces) left there
            mkdir -p "$root$2"
            while mountpoint -q "$root$2"; do umount -l "$root$2"; done
            mount "${@:3}" "$1" "$root$2"
        }
        mount_in proc /proc -t proc
        mount_in sysfs /sys -t sysfs
        mount_in /dev /dev --bind
        mount_in devpts /dev/pts -t devpts
        for ((i = 0; i < binds; i++)); do
            IFS=: read -r host inside mode <<< "$1"
            shift
            mount_in "$host" "$inside" --bind
            if [[ "$mode" == ro ]]; then mount -o remount,bind,ro "$root$inside"; fi
        done
        exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
            DEBIAN_FRONTEND=noninteractive "$@"
    ' pkg_chroot "$root" "${#PKG_CHROOT_BINDS[@]}" "${PKG_CHROOT_BINDS[@]}" "$@"
}
