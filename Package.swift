// swift-tools-version:6.0
import PackageDescription

// Optimised even in debug builds: the targets whose loops the tests run hardest — amounts and readings, clip
// preparation and rendering, the audio comparison of what a rig captured. Their unoptimised code ran 40–90 times
// slower under qemu-user than on the host, most of the arm64 test stage (docs/benchmarks.md, "CI stages");
// optimised, the host's unit tests take 14 s instead of 36. Debug builds of everything else, the tests' own code
// among them, stay -Onone (optimised, the core tests' fake sink drew a ThreadSanitizer report: its tape read by the
// test while the player thread appended to it under the same lock).
let optimisedInDebug: [SwiftSetting] = [.unsafeFlags(["-O"], .when(configuration: .debug))]

let package = Package(
    name: "announce",
    platforms: [.macOS(.v15)],
    products: [
        // One multi-call executable, installed as /usr/bin/announce with the links announced, announce-ctl and
        // announce-push; it runs the program its name (or its first argument) says (docs/deployment.md).
        .executable(name: "announce", targets: ["announce"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/LebJe/TOMLKit", from: "0.6.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/swiftlang/swift-subprocess", from: "1.0.2"),
    ],
    targets: [
        // C modules: includes and trampolines only. They name no library to link: the executable loads each one
        // the first time one of its functions is called (CLazyLibraries), so that a program starts without the
        // libraries only the others need (docs/benchmarks.md, "Start-up").
        .target(name: "CLazyLibraries"),
        // The commit the executable was built from (scripts/build-info.sh writes it; "unknown" without it).
        .target(name: "CBuildInfo"),
        .systemLibrary(
            name: "CAlsa",
            path: "CAlsa",
            providers: [.apt(["libasound2-dev"])]
        ),
        .systemLibrary(
            name: "CSndFile",
            path: "Sources/CSndFile",
            providers: [.apt(["libsndfile1-dev"])]
        ),
        .systemLibrary(
            name: "CSystemd",
            path: "Sources/CSystemd",
            providers: [.apt(["libsystemd-dev"])]
        ),
        .systemLibrary(
            name: "CSoxr",
            path: "Sources/CSoxr",
            providers: [.apt(["libsoxr-dev"])]
        ),
        .systemLibrary(
            name: "CEbur128",
            path: "Sources/CEbur128",
            providers: [.apt(["libebur128-dev"])]
        ),
        .systemLibrary(
            name: "CEspeakNG",
            path: "Sources/CEspeakNG",
            providers: [.apt(["libespeak-ng-dev"])]
        ),
        // Linux input events (evdev), inotify, eventfd: includes and ioctl trampolines for the hardware keys.
        .systemLibrary(name: "CInput", path: "Sources/CInput"),
        // glibc's malloc.h (malloc_trim: the heap given back after a voice pack load).
        .systemLibrary(name: "CMalloc", path: "Sources/CMalloc"),
        // glibc's sys/timex.h (adjtimex: whether the kernel's clock is synchronised).
        .systemLibrary(name: "CTimex", path: "Sources/CTimex"),
        // glibc's pthread_cond_clockwait (ConditionLock's timed waits on the monotonic clock).
        .systemLibrary(name: "CPthread", path: "Sources/CPthread"),
        .systemLibrary(
            name: "CSQLite",
            path: "Sources/CSQLite",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        .systemLibrary(
            name: "CMosquitto",
            path: "Sources/CMosquitto",
            providers: [.apt(["libmosquitto-dev"])]
        ),
        .systemLibrary(
            name: "CCurl",
            path: "Sources/CCurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),
        .systemLibrary(
            name: "CCrypto",
            path: "Sources/CCrypto",
            providers: [.apt(["libssl-dev"])]
        ),

        // Pure Swift: amounts, readings, voice packs, composition, jobs, queue, protocol. No C library: only glibc's
        // pthread_cond_clockwait, which the Glibc module leaves out (CPthread).
        .target(
            name: "AnnounceCore", dependencies: ["CPthread", .product(name: "Logging", package: "swift-log")],
            swiftSettings: optimisedInDebug),
        // Sound: decoding clips (libsndfile), resampling (libsoxr), loudness (libebur128), loading voice packs,
        // synthesising free text (libespeak-ng), writing renders.
        .target(
            name: "AnnounceSound",
            dependencies: ["AnnounceCore", "CSndFile", "CSoxr", "CEbur128", "CEspeakNG", "CLazyLibraries", "CMalloc"],
            swiftSettings: optimisedInDebug
        ),
        // ALSA: PCM sink, mixer, recovery. The only target that touches CAlsa.
        .target(
            name: "AnnounceALSA",
            dependencies: ["AnnounceCore", "CAlsa", "CLazyLibraries", .product(name: "Logging", package: "swift-log")]
        ),
        // systemd: sd_notify (ready, status, watchdog), socket activation. The only target that touches CSystemd.
        .target(
            name: "AnnounceSystemd",
            dependencies: [
                "CSystemd", "CLazyLibraries",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // The version and commit every program reports (`--version`, `status`, metrics).
        .target(name: "AnnounceVersion", dependencies: ["CBuildInfo"]),
        // What every program's command line shares: a usage error is one line (exit 64).
        .target(
            name: "AnnounceCommandLine",
            dependencies: [.product(name: "ArgumentParser", package: "swift-argument-parser")]),
        // What an operator reads: logs to journald natively (fields, message ids) or to standard error, and the
        // Prometheus endpoint over HTTP shared by the daemon and the push listener.
        .target(
            name: "AnnounceTelemetry",
            dependencies: [
                "AnnounceCore", "AnnounceSystemd", "AnnounceVersion",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // Whether the wall clock can be trusted (the kernel's synchronisation flag), for the daemon and the listener.
        .target(name: "AnnounceClock", dependencies: ["AnnounceCore", "CTimex"]),
        // Client side of the socket protocol (announce-ctl, push listener).
        .target(name: "AnnounceClient", dependencies: ["AnnounceCore"]),
        // Hardware keys: reading evdev devices (hot-plug through inotify), key presses to shop actions. The only
        // target that touches CInput.
        .target(
            name: "AnnounceInput",
            dependencies: ["AnnounceCore", "CInput", .product(name: "Logging", package: "swift-log")]
        ),
        // The journal: accepted jobs, their outcomes and the de-duplication window in SQLite (libsqlite3, through
        // a small layer of its own: SQLite.swift). The only target that touches CSQLite.
        .target(
            name: "AnnounceJournal",
            dependencies: ["AnnounceCore", "CSQLite", "CLazyLibraries"]
        ),
        // The daemon: socket server, peer authentication, configuration, player thread, wiring.
        .target(
            name: "AnnounceServer",
            dependencies: [
                "AnnounceCore", "AnnounceSound", "AnnounceALSA", "AnnounceJournal", "AnnounceSystemd", "AnnounceInput",
                "AnnounceTelemetry", "AnnounceVersion", "AnnounceClock",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "TOMLKit", package: "TOMLKit"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ]
        ),

        // MQTT client over libmosquitto. The only target that touches CMosquitto.
        .target(
            name: "AnnounceMQTT",
            dependencies: ["CMosquitto", "CLazyLibraries"]
        ),
        // HMAC-SHA256, HMAC-SHA1 and SHA-256 with OpenSSL's libcrypto. The only target that touches CCrypto.
        .target(name: "AnnounceCrypto", dependencies: ["CCrypto", "CLazyLibraries"]),
        // Downloads over HTTPS with libcurl (pushed clips). The only target that touches CCurl.
        .target(
            name: "AnnounceDownload",
            dependencies: ["AnnounceCore", "AnnounceCrypto", "CCurl", "CLazyLibraries"]
        ),
        // The push listener: signed payment messages from MQTT, verified and forwarded to the daemon; pushed clips
        // (the corpus) downloaded, checked with the voice-pack loader and installed for the daemon.
        .target(
            name: "AnnouncePush",
            dependencies: [
                "AnnounceCore", "AnnounceClient", "AnnounceMQTT", "AnnounceVersion", "AnnounceClock",
                "AnnounceDownload", "AnnounceSound", "AnnounceCrypto",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "TOMLKit", package: "TOMLKit"),
            ]
        ),

        // The three programs: argument parsing and wiring only. Libraries, so that one executable holds them all.
        .target(
            name: "AnnouncedApp",
            dependencies: [
                "AnnounceServer", "AnnounceTelemetry", "AnnounceVersion", "AnnounceCommandLine",
                "CLazyLibraries",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "AnnounceCtlApp",
            dependencies: [
                "AnnounceCore", "AnnounceClient", "AnnounceSound", "AnnounceVersion", "AnnounceCommandLine",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .target(
            name: "AnnouncePushApp",
            dependencies: [
                "AnnounceCore", "AnnounceMQTT", "AnnouncePush", "AnnounceTelemetry", "AnnounceVersion",
                "AnnounceCommandLine",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ]
        ),
        // The executable: runs announced, announce-ctl or announce-push, as its name (argv[0]) says. Linked with
        // lld for packed relative relocations (DT_RELR, glibc ≥ 2.36: a 2.6 MB table becomes 20 kB), and without
        // exporting its symbols (the Swift runtime's static link exports them all: 27,000 dynamic symbols that
        // every process start searched). docs/benchmarks.md, "Start-up". Release builds only: the sanitizer builds
        // (debug) keep the toolchain's link, which their runtimes are made for. `make` also keeps full Foundation and
        // ICU off the link, which a manifest cannot do for its dependencies (Makefile, WITHOUT_FULL_FOUNDATION).
        .executableTarget(
            name: "announce",
            dependencies: ["AnnounceCore", "AnnounceVersion", "AnnouncedApp", "AnnounceCtlApp", "AnnouncePushApp"],
            linkerSettings: [
                .unsafeFlags(
                    [
                        "-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs",
                        "-Xlinker", "--no-export-dynamic",
                    ], .when(configuration: .release))
            ]),

        // Test helpers shared by the test targets: the sound rig, daemon processes, audio comparison.
        .target(
            name: "AnnounceTestSupport",
            dependencies: [
                "AnnounceCore", "AnnounceClient",
                .product(name: "Subprocess", package: "swift-subprocess"),
            ],
            path: "Tests/Support",
            swiftSettings: optimisedInDebug
        ),
        .testTarget(name: "AnnounceCoreTests", dependencies: ["AnnounceCore", "AnnounceTestSupport"]),
        .testTarget(
            name: "AnnounceCtlAppTests",
            dependencies: [
                "AnnounceCtlApp", "AnnounceCommandLine", "AnnounceCore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]),
        .testTarget(name: "AnnounceJournalTests", dependencies: ["AnnounceJournal", "AnnounceTestSupport"]),
        .testTarget(
            name: "AnnounceInputTests",
            dependencies: ["AnnounceInput", "CInput", .product(name: "Logging", package: "swift-log")]
        ),
        .testTarget(name: "AnnounceClientTests", dependencies: ["AnnounceClient", "AnnounceTestSupport"]),
        .testTarget(name: "AnnounceServerTests", dependencies: ["AnnounceServer", "AnnounceSound", "AnnounceTestSupport"]),
        .testTarget(
            name: "AnnounceSoundTests", dependencies: ["AnnounceSound", "CLazyLibraries", "AnnounceTestSupport"]),
        .testTarget(
            name: "AnnounceALSATests",
            dependencies: ["AnnounceALSA", "AnnounceSound", "AnnounceTestSupport"]
        ),
        .testTarget(
            name: "AnnounceTelemetryTests",
            dependencies: [
                "AnnounceTelemetry", "AnnounceCore", "AnnounceSystemd", "AnnounceTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "AnnounceSystemdTests",
            dependencies: [
                "AnnounceSystemd",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: ["AnnounceCore", "AnnounceSound", "AnnounceClient", "AnnounceTestSupport"]
        ),
        .testTarget(name: "AnnounceMQTTTests", dependencies: ["AnnounceMQTT", "AnnounceTestSupport"]),
        .testTarget(
            name: "AnnouncePushTests",
            dependencies: [
                "AnnouncePush", "AnnounceClock", "AnnounceMQTT", "AnnounceCore", "AnnounceClient", "AnnounceSound",
                "AnnounceCrypto", "AnnounceTestSupport",
            ]
        ),
        .testTarget(name: "AnnounceCryptoTests", dependencies: ["AnnounceCrypto"]),
        // The deployed system: unit files, make install, and the VM with a real kernel, ALSA and systemd.
        // Run after the others (scripts/test.sh): it boots a VM and takes a few minutes.
        .testTarget(name: "SystemTests", dependencies: ["AnnounceCore", "AnnounceSound", "AnnounceTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
