#!/usr/bin/env bash
# The man pages and shell completions of announced, announce-ctl and announce-push, written from the executable's
# own help — what the packages carry, and what `make install` installs (`man announced` finds it either way).
# Man pages by swift-argument-parser's generate-manual (which runs the program with --experimental-dump-help),
# completions by each program's --generate-completion-script; announce.1, the executable's own page, is here.
#
#   scripts/manuals.sh EXECUTABLE OUT [RUNNER…]
#
# OUT is laid out as PREFIX/share is: man/man8/announced.8, man/man1/{announce-ctl,announce-push,announce}.1,
# bash-completion/completions/NAME, zsh/vendor-completions/_NAME, fish/vendor_completions.d/NAME.fish.
# RUNNER runs the executable when it is not for this machine (scripts/package.sh: qemu-aarch64-static -L SYSROOT).
# generate-manual is built from the swift-argument-parser checkout SwiftPM made (ANNOUNCE_PARSER_CHECKOUT, default
# .build's, else another .build*/checkouts/swift-argument-parser) with this machine's Swift, once, into .build-tools.
set -euo pipefail
(($# >= 2)) || { sed -n '2,14p' "$0" >&2; exit 64; }
executable="$1" out="$2"
shift 2
runner=("$@")
cd "$(dirname "$0")/.."
[[ -x "$executable" ]] || { echo "manuals: $executable missing; build first (make)" >&2; exit 1; }
executable=$(cd "$(dirname "$executable")" && pwd)/$(basename "$executable")
run() { "${runner[@]}" "$executable" "$@"; }

parser="${ANNOUNCE_PARSER_CHECKOUT:-}"
for candidate in .build/checkouts/swift-argument-parser .build*/checkouts/swift-argument-parser; do
    [[ -n "$parser" ]] && break
    [[ -d "$candidate" ]] && parser="$candidate"
done
[[ -d "$parser" ]] || { echo "manuals: no swift-argument-parser checkout (.build*/checkouts); build first" >&2; exit 1; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
swift build --package-path "$parser" --scratch-path .build-tools --product generate-manual -c release > "$log" 2>&1 \
    || { tail -20 "$log" >&2; echo "manuals: building generate-manual failed" >&2; exit 1; }
generate_manual=$(swift build --package-path "$parser" --scratch-path .build-tools -c release --show-bin-path)/generate-manual

rm -rf "$out"
mkdir -p "$out/man/man1" "$out/man/man8" "$out/bash-completion/completions" "$out/zsh/vendor-completions" \
    "$out/fish/vendor_completions.d" "$out/tools"
out=$(cd "$out" && pwd)
# The manual's date: the release's (debian/changelog's first entry), so that a rebuild writes the same pages.
date=$(date -u -d "$(sed -n 's/^ -- .*>  //p' debian/changelog | head -1)" +%F)
for program in announced announce-ctl announce-push; do
    section=1
    [[ "$program" == announced ]] && section=8
    # generate-manual runs the tool it is given; this one runs the program (through RUNNER). generate-manual drops
    # every character that is not ASCII (到账, …): the help it reads has them spelled out as UNICODEhhhhX, and the
    # page gets them back as groff's \[uhhhh].
    wrapper="$out/tools/$program"
    printf '#!/bin/sh\n%s "$@" | perl -CS -pe '"'"'s/([^\\x00-\\x7f])/sprintf("UNICODE%%04XX", ord($1))/ge'"'"'\n' \
        "$(printf '%q ' "${runner[@]}" "$executable" "$program")" > "$wrapper"
    chmod +x "$wrapper"
    "$generate_manual" "$wrapper" --section "$section" --date "$date" \
        --authors "announce maintainers<maintainers@users.noreply.a-seed-c2e9b086.example>" \
        --output-directory "$out/man/man$section" \
        || { echo "manuals: generate-manual failed for $program" >&2; exit 1; }
    page="$out/man/man$section/$program.$section"
    [[ -s "$page" ]] || { echo "manuals: generate-manual wrote no $program.$section" >&2; exit 1; }
    # The help's discussion is plain text: its blank lines become paragraph breaks and its indented lines (tables
    # of commands, exit statuses) literal blocks, instead of lines that man would run together.
    awk '/^$/ { if (literal) { print ".Ed"; literal = 0 } print ".Pp"; next }
         /^  / { if (!literal) { print ".Bd -literal -offset indent"; literal = 1 } print; next }
         { if (literal) { print ".Ed"; literal = 0 } print }
         END { if (literal) print ".Ed" }' "$page" | sed -E 's/UNICODE([0-9A-F]{4,6})X/\\[u\1]/g' > "$page.tmp"
    mv "$page.tmp" "$page"
    run "$program" --generate-completion-script bash > "$out/bash-completion/completions/$program"
    run "$program" --generate-completion-script zsh > "$out/zsh/vendor-completions/_$program"
    run "$program" --generate-completion-script fish > "$out/fish/vendor_completions.d/$program.fish"
done
rm -rf "$out/tools"
# The executable's own name: what it is, and where the programs' pages are.
cat > "$out/man/man1/announce.1" << 'MAN'
.TH ANNOUNCE 1
.SH NAME
announce \- the payment announcer's one executable
.SH SYNOPSIS
.B announce
.I program
.RI [ arguments ...]
.SH DESCRIPTION
.B announce
holds the three programs of the payment announcer, like busybox: it runs the one its name says
(the links
.BR announced ,
.B announce-ctl
and
.BR announce-push ),
or the one named by its first argument.
.SH SEE ALSO
.BR announced (8),
.BR announce-ctl (1),
.BR announce-push (1)
MAN
echo "manuals: man pages and completions in $out"
