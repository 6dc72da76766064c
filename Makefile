# Build and install the payment announcer (FHS layout; see docs/deployment.md).
#
#   make                          build the release executable (swift build -c release --static-swift-stdlib):
#                                 announce, the one executable of announced, announce-ctl and announce-push;
#                                 and its man pages and shell completions (scripts/manuals.sh)
#   make install                  install into DESTDIR (default /) under PREFIX (default /usr): the executable
#                                 as built (with its debug information, for dh_strip), the three names as links,
#                                 the man pages and completions, units, voice packs, examples
#   make install-strip            the same, stripped, its debug information in DEBUGDIR/.build-id/ (gdb finds it)
#   make install DESTDIR=/tmp/stage BUILD_DIR=.build-vm/release
#   make check-units              systemd-analyze verify + security of the installed units (staged)
#   make uninstall
#
# `make install` copies files only. On a live system, afterwards (as root):
#   systemd-sysusers announce.conf && systemd-tmpfiles --create announce.conf && systemctl daemon-reload
#   systemctl enable --now announced.socket        # start the daemon on first use (socket activation)
#   systemctl enable --now announced.service       # … or also at boot

PREFIX ?= /usr
DESTDIR ?=
SYSCONFDIR ?= /etc
LOCALSTATEDIR ?= /var
BINDIR ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share
DOCDIR ?= $(DATADIR)/doc/announce
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
DEBUGDIR ?= $(PREFIX)/lib/debug
VOICEDIR ?= $(DATADIR)/announce/voices
CONFDIR ?= $(SYSCONFDIR)/announce
STATEDIR ?= $(LOCALSTATEDIR)/lib/announce

SWIFT ?= swift
# The Swift runtime and Foundation linked in: a terminal has no Swift toolchain to provide them, and a process
# that need not load and bind ~20 Swift shared libraries starts in about 40 % less time — which every
# `announce-ctl say` pays (docs/benchmarks.md). SWIFT_FLAGS="-c release" builds against the toolchain's libraries.
#
# Without full Foundation: no module links it or its ICU (46 MB), yet TOMLKit imports Foundation,
# so its objects ask the linker for libFoundation.a, libCoreFoundation.a, lib_FoundationICU.a and
# libFoundationInternationalization.a; the driver always lists libFoundation.a before libFoundationEssentials.a,
# and a generic specialisation that both define (79 of them) is then taken from libFoundation.a, which brings the
# rest. These flags keep those four libraries off the link; if anything ever needs full Foundation, the link
# fails naming the symbol (docs/benchmarks.md, "Size").
WITHOUT_FULL_FOUNDATION := $(foreach library,Foundation CoreFoundation _FoundationICU FoundationInternationalization,\
    -Xswiftc -Xfrontend -Xswiftc -disable-autolink-library -Xswiftc -Xfrontend -Xswiftc $(library))
SWIFT_FLAGS ?= -c release --static-swift-stdlib $(WITHOUT_FULL_FOUNDATION)
# libstdc++ linked in, not loaded: the Swift runtime's static link asks for -lstdc++, which would find
# libstdc++.so, and relocating it and looking up its symbols was 2.3 M of the 3.3 M instructions of every
# `announce-ctl` start (docs/benchmarks.md, "Left, and why"). The link searches first a folder that holds only a
# link to libstdc++.a, so -lstdc++ finds the archive; lld's --as-needed would not do it (a shared definition wins
# over an archive's). STATIC_CXX: the archive (default: the one the Swift toolchain's clang would link);
# STATIC_CXX_DIR: the folder made for it; STATIC_CXX_LINK_DIR: that folder as the linker sees it (a cross-build in
# a chroot sees the checkout elsewhere).
STATIC_CXX ?= $(shell $(dir $(shell command -v $(firstword $(SWIFT))))clang -print-file-name=libstdc++.a)
STATIC_CXX_DIR ?= $(BUILD_DIR)-static-libstdc++
STATIC_CXX_LINK_DIR ?= $(abspath $(STATIC_CXX_DIR))
# Where the executable to install is (the output of `make`, or another build such as the VM's static one).
BUILD_DIR ?= .build/release
# Every function in a section of its own, so that the linker drops the dead ones (the arm64 package: 22,571 →
# 22,045 KiB). (A checked-in list of the functions the programs run, which ordered them at the head of .text for a
# smaller idle RSS, is gone: a generated profile a maintainer had to keep alive by hand, for a figure that is
# clean file pages, not a budget. docs/benchmarks.md, "Code layout".)
SECTION_FLAGS ?= -Xswiftc -Xfrontend -Xswiftc -function-sections -Xcc -ffunction-sections -Xcxx -ffunction-sections
# One executable; the programs are links to it, and it runs the one it is called by (Sources/announce).
EXECUTABLE := announce
PROGRAMS := announced announce-ctl announce-push
UNITS := systemd/announced.service systemd/announced.socket systemd/announce-push.service
SERVICES := announced.service announce-push.service
# Default voice packs built by scripts/setup.sh.
VOICES ?= out/voices
# The man pages and bash/zsh/fish completions `make` writes from the executable's help, laid out as under
# $(DATADIR) (what the packages carry: scripts/package.sh passes its own). Empty: none (make check-units).
MANUALS ?= $(BUILD_DIR)-manuals
MANUAL_FILES := man/man8/announced.8 man/man1/announce-ctl.1 man/man1/announce-push.1 man/man1/announce.1 \
    $(foreach program,$(PROGRAMS),bash-completion/completions/$(program) zsh/vendor-completions/_$(program) \
    fish/vendor_completions.d/$(program).fish)
# Every example goes to $(DOCDIR)/examples; only the daemon's is also put in $(CONFDIR) (where absent). The push
# listener's example holds placeholder keys: the operator writes /etc/announce/push.toml from it, and until
# then announce-push.service is skipped (ConditionPathExists), not crash-looping on the placeholders.
EXAMPLE_CONFIGS := $(wildcard examples/*.toml)
CONF_DEFAULTS := examples/announced.toml
ASOUND_EXAMPLE := docs/asound.conf
# The drop-in that lets announced read the speaker's keys (group input): an installer's choice, not installed live.
KEYS_DROPIN := systemd/announced-keys.conf
# The drop-in that lets announced serve its metrics over HTTP on loopback: also a choice, not installed live.
METRICS_DROPIN := systemd/announced-metrics.conf
# A terminal whose sound stack is PipeWire (docs/audio.md, "PipeWire"): system-wide units, its user, WirePlumber's
# role-based ducking and announced's drop-in. Examples only, in examples/pipewire/ of the documentation.
PIPEWIRE_EXAMPLES := $(wildcard examples/pipewire/*)
DOCS := README.md docs/deployment.md docs/configuration.md docs/push.md
INSTALL ?= install

.PHONY: all build manuals install install-strip uninstall check-units

all: build manuals

build:
	@if [ "$(SWIFT)" = swift ]; then scripts/swift-check.sh; fi
	scripts/build-info.sh
	mkdir -p $(STATIC_CXX_DIR)
	ln -sfn $(STATIC_CXX) $(STATIC_CXX_DIR)/libstdc++.a
	$(SWIFT) build $(SWIFT_FLAGS) $(SECTION_FLAGS) -Xlinker -L$(STATIC_CXX_LINK_DIR) --product $(EXECUTABLE)
	scripts/program-links.sh $(BUILD_DIR)

manuals:
	scripts/manuals.sh $(BUILD_DIR)/$(EXECUTABLE) $(MANUALS)

install:
	@[ -x "$(BUILD_DIR)/$(EXECUTABLE)" ] || { echo "make install: $(BUILD_DIR)/$(EXECUTABLE) missing; run make first" >&2; exit 1; }
	@[ -f "$(VOICES)/zh/manifest.json" ] || { echo "make install: no voice packs in $(VOICES); run scripts/setup.sh" >&2; exit 1; }
	@[ -z "$(MANUALS)" ] || [ -f "$(MANUALS)/man/man8/announced.8" ] || { echo "make install: no man pages in $(MANUALS); run make first" >&2; exit 1; }
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR) \
	    $(DESTDIR)$(VOICEDIR) $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(CONFDIR)
	$(INSTALL) -d -m 0750 $(DESTDIR)$(STATEDIR)
	$(INSTALL) -m 0755 $(BUILD_DIR)/$(EXECUTABLE) $(DESTDIR)$(BINDIR)/$(EXECUTABLE)
	for program in $(PROGRAMS); do ln -sfn $(EXECUTABLE) $(DESTDIR)$(BINDIR)/$$program; done
	# Units name /usr/bin and /usr/share: rewrite them for another PREFIX.
	for unit in $(UNITS); do \
	    sed -e 's|/usr/bin/|$(BINDIR)/|g' -e 's|/usr/share/|$(DATADIR)/|g' -e 's|/etc/announce|$(CONFDIR)|g' \
	        "$$unit" > $(DESTDIR)$(UNITDIR)/$$(basename "$$unit"); \
	    chmod 0644 $(DESTDIR)$(UNITDIR)/$$(basename "$$unit"); \
	done
	$(INSTALL) -m 0644 systemd/announce.sysusers $(DESTDIR)$(SYSUSERSDIR)/announce.conf
	$(INSTALL) -m 0644 systemd/announce.tmpfiles $(DESTDIR)$(TMPFILESDIR)/announce.conf
	for pack in $(VOICES)/*/; do \
	    name=$$(basename "$$pack"); \
	    (cd "$$pack" && find . -type f ! -name '.*') | while read -r file; do \
	        $(INSTALL) -D -m 0644 "$$pack/$$file" "$(DESTDIR)$(VOICEDIR)/$$name/$$file" || exit 1; \
	    done; \
	done
	if [ -n "$(MANUALS)" ]; then \
	    for file in $(MANUAL_FILES); do $(INSTALL) -D -m 0644 "$(MANUALS)/$$file" "$(DESTDIR)$(DATADIR)/$$file" || exit 1; done; \
	fi
	$(INSTALL) -m 0644 $(DOCS) $(DESTDIR)$(DOCDIR)/
	# Examples; a config already in $(CONFDIR) is the operator's and is never overwritten.
	for example in $(EXAMPLE_CONFIGS) $(ASOUND_EXAMPLE) $(KEYS_DROPIN) $(METRICS_DROPIN); do \
	    $(INSTALL) -m 0644 "$$example" $(DESTDIR)$(DOCDIR)/examples/; \
	done
	$(INSTALL) -d $(DESTDIR)$(DOCDIR)/examples/pipewire
	for example in $(PIPEWIRE_EXAMPLES); do $(INSTALL) -m 0644 "$$example" $(DESTDIR)$(DOCDIR)/examples/pipewire/; done
	for config in $(CONF_DEFAULTS); do \
	    target=$(DESTDIR)$(CONFDIR)/$$(basename "$$config"); \
	    [ -e "$$target" ] || $(INSTALL) -m 0644 "$$config" "$$target"; \
	done

# Stripped, as a terminal without a -dbgsym package wants it: the debug information goes to
# $(DEBUGDIR)/.build-id/XX/YYYY.debug, linked from the executable (scripts/split-debug.sh).
install-strip: install
	scripts/split-debug.sh $(DESTDIR)$(BINDIR)/$(EXECUTABLE) $(DESTDIR)$(DEBUGDIR)

uninstall:
	id=$$(readelf -n $(DESTDIR)$(BINDIR)/$(EXECUTABLE) 2>/dev/null | awk '/Build ID/ {print $$3}'); \
	    [ -z "$$id" ] || rm -f $(DESTDIR)$(DEBUGDIR)/.build-id/$$(echo $$id | cut -c1-2)/$$(echo $$id | cut -c3-).debug
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(EXECUTABLE) $(PROGRAMS))
	rm -f $(addprefix $(DESTDIR)$(UNITDIR)/,$(notdir $(UNITS)))
	rm -f $(DESTDIR)$(SYSUSERSDIR)/announce.conf $(DESTDIR)$(TMPFILESDIR)/announce.conf
	rm -f $(addprefix $(DESTDIR)$(DATADIR)/,$(MANUAL_FILES))
	rm -rf $(DESTDIR)$(VOICEDIR) $(DESTDIR)$(DOCDIR)
	@echo "kept $(CONFDIR) and $(STATEDIR) (configuration and journal)"

# Verifies the units as installed into a scratch prefix: every unit loads and names programs that exist, and
# each service's exposure (systemd-analyze security) is at most 2.0.
CHECK_ROOT ?= $(CURDIR)/.build-units
check-units:
	rm -rf $(CHECK_ROOT)
	$(MAKE) --no-print-directory install PREFIX=$(CHECK_ROOT)/usr SYSCONFDIR=$(CHECK_ROOT)/etc \
	    LOCALSTATEDIR=$(CHECK_ROOT)/var MANUALS= >/dev/null
	systemd-analyze verify --man=no $(addprefix $(CHECK_ROOT)/usr/lib/systemd/system/,$(notdir $(UNITS)))
	for service in $(SERVICES); do \
	    systemd-analyze security --offline=yes --threshold=20 $(CHECK_ROOT)/usr/lib/systemd/system/$$service \
	        > $(CHECK_ROOT)/security.txt || { cat $(CHECK_ROOT)/security.txt; exit 1; }; \
	    tail -1 $(CHECK_ROOT)/security.txt; \
	done
	rm -rf $(CHECK_ROOT)
