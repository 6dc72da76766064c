/// The reply of `status`: enough for an installer to see at a glance whether the speaker will work.
public struct DaemonStatus: Codable, Sendable, Equatable {
    public struct Queue: Codable, Sendable, Equatable {
        /// Waiting jobs (all classes).
        public var waiting: Int
        /// The bound on waiting urgent + payment jobs.
        public var capacity: Int
        /// Waiting jobs per priority class.
        public var byPriority: [String: Int]
        /// The job playing now.
        public var playing: UInt64?
        /// Jobs accepted and not finished yet: waiting, playing, or having their end recorded. 0: all done.
        public var unfinished: Int

        public init(waiting: Int, capacity: Int, byPriority: [String: Int], playing: UInt64? = nil, unfinished: Int) {
            self.waiting = waiting
            self.capacity = capacity
            self.byPriority = byPriority
            self.playing = playing
            self.unfinished = unfinished
        }
    }

    public struct Voice: Codable, Sendable, Equatable {
        public var lang: String
        public var name: String
        public var sampleRate: Int
        public var clips: Int
        public var isDefault: Bool

        public init(lang: String, name: String, sampleRate: Int, clips: Int, isDefault: Bool) {
            self.lang = lang
            self.name = name
            self.sampleRate = sampleRate
            self.clips = clips
            self.isDefault = isDefault
        }
    }

    public struct Journal: Codable, Sendable, Equatable {
        public var path: String
        /// Jobs found accepted and not heard in full in the journal at start (spoken after the restart).
        public var recoveredAtStart: Int
        /// Of those, the jobs that were playing when the previous run ended: spoken again from their start.
        public var interruptedAtStart: Int
        /// Changes (a job's start or end) not on disk yet: more than 0 only while the journal cannot be written
        /// (a full disk), which `lastError` says. A job whose end is not recorded counts as unfinished.
        public var unrecorded: Int?
        public var lastError: ErrorInfo?
        /// Whether the journal's reserve for a full disk is in place (false: spent; new jobs are refused).
        public var reserve: Bool?
        /// Order ids remembered for de-duplication now, and for how long each is remembered.
        public var dedupOrders: Int
        public var dedupWindowSeconds: Double
        /// The journal was found damaged at start: where the damaged file was moved (this run began with an empty
        /// journal). Absent when it was sound.
        public var recoveredFromCorruption: String?
        /// False while the journal is kept in memory because the state folder or the journal file cannot be used
        /// (`problem` says why): payments are spoken, but what is accepted meanwhile is lost if the daemon stops
        /// before the journal is back on disk. Absent: on disk.
        public var durable: Bool?
        public var problem: ErrorInfo?

        public init(
            path: String, recoveredAtStart: Int, interruptedAtStart: Int, dedupOrders: Int,
            dedupWindowSeconds: Double, recoveredFromCorruption: String? = nil
        ) {
            self.path = path
            self.recoveredAtStart = recoveredAtStart
            self.interruptedAtStart = interruptedAtStart
            self.dedupOrders = dedupOrders
            self.dedupWindowSeconds = dedupWindowSeconds
            self.recoveredFromCorruption = recoveredFromCorruption
        }
    }

    /// Who asked, as the daemon sees the peer (SO_PEERCRED), and what it may do.
    public struct Peer: Codable, Sendable, Equatable {
        public var pid: Int32
        public var uid: UInt32
        public var gid: UInt32
        public var access: Access

        public init(pid: Int32, uid: UInt32, gid: UInt32, access: Access) {
            self.pid = pid
            self.uid = uid
            self.gid = gid
            self.access = access
        }
    }

    /// Jobs since the daemon started, by final state, and refusals by error code.
    public struct Totals: Codable, Sendable, Equatable {
        public var accepted: Int
        public var finished: [String: Int]
        public var refused: [String: Int]

        public init(accepted: Int = 0, finished: [String: Int] = [:], refused: [String: Int] = [:]) {
            self.accepted = accepted
            self.finished = finished
            self.refused = refused
        }
    }

    /// The Prometheus endpoint (`[metrics] listen`), when one is configured.
    public struct Metrics: Codable, Sendable, Equatable {
        /// The address configured.
        public var listen: String
        /// The address served (the real port when port 0 was asked for); absent while not serving.
        public var serving: String?
        /// Why it is not serving (it tries again), when it is not.
        public var error: String?

        public init(listen: String, serving: String? = nil, error: String? = nil) {
            self.listen = listen
            self.serving = serving
            self.error = error
        }
    }

    /// The clips the fleet pushed (docs/voice-packs.md, "Pushed clips"): the version loaded and each clip; also the
    /// reply of `corpus`, which loads the version the folder holds now.
    public struct Corpus: Codable, Sendable, Equatable {
        public struct Clip: Codable, Sendable, Equatable {
            public var id: String
            /// Its length as prepared (trimmed), milliseconds.
            public var ms: Int

            public init(id: String, ms: Int) {
                self.id = id
                self.ms = ms
            }
        }

        /// The folder of pushed clips.
        public var directory: String
        /// The version loaded (0: none).
        public var version: UInt64
        public var clips: [Clip]
        /// Why the version in the folder could not be loaded (then `version` and `clips` are what is loaded still).
        public var error: ErrorInfo?

        public init(directory: String, version: UInt64, clips: [Clip], error: ErrorInfo? = nil) {
            self.directory = directory
            self.version = version
            self.clips = clips
            self.error = error
        }
    }

    /// `running`, or `stopping` once SIGTERM arrived.
    public var state: String
    public var v: Int
    public var pid: Int32
    public var uptimeSeconds: Double
    public var socket: String
    public var clients: Int
    public var queue: Queue
    public var voices: [Voice]
    public var journal: Journal
    public var totals: Totals
    public var audio: AudioStatus
    public var peer: Peer?
    /// The daemon's build (`announced --version`): its version and the commit it was built from.
    public var version: String?
    public var commit: String?
    /// The last payment heard (a payment, not a replay): this run's, else the journal's at start.
    public var lastPayment: JobInfo?
    public var metrics: Metrics?
    /// The payment heard last (its last sample left the device and its `spoken` is on disk), across restarts.
    public var lastHeard: JobInfo?
    /// The pushed clips (absent: the daemon loads none, `corpus = ""`).
    public var corpus: Corpus?
    /// The repeating notices running now (absent: none).
    public var repeats: [RepeatInfo]?

    public init(
        state: String, v: Int, pid: Int32, uptimeSeconds: Double, socket: String, clients: Int, queue: Queue,
        voices: [Voice], journal: Journal, totals: Totals, audio: AudioStatus, peer: Peer?
    ) {
        self.state = state
        self.v = v
        self.pid = pid
        self.uptimeSeconds = uptimeSeconds
        self.socket = socket
        self.clients = clients
        self.queue = queue
        self.voices = voices
        self.journal = journal
        self.totals = totals
        self.audio = audio
        self.peer = peer
    }
}

/// The audio side of `status`, and the reply of `volume`. The daemon fills what it knows (device, threshold);
/// the audio code fills the rest (current volume, mute, ducked controls, xrun/recovery counts, last error).
/// Every field but `device` is optional so that a sink without a mixer can still report.
public struct AudioStatus: Codable, Sendable, Equatable {
    /// ALSA PCM the daemon plays on.
    public var device: String
    /// Mixer control used for the alert volume, e.g. "default:Master".
    public var mixer: String?
    /// The control's volume now, percent (mapped like alsamixer, so a percentage means the same loudness); during
    /// an alert, the raised volume.
    public var volume: Int?
    /// The speaker's everyday level, percent: what the owner chose (keys, `volume` with `level`), which an alert
    /// raises to the threshold if it is lower and which comes back after it.
    public var level: Int?
    /// The volume an announcement is raised to if the control is lower, percent; nil: not raised.
    public var threshold: Int?
    /// Where `threshold` comes from: `config` (file or flag) or `set` (a `volume` request, kept in the journal).
    public var thresholdSource: String?
    public var muted: Bool?
    /// Controls lowered while an announcement plays (ducking), e.g. ["pulse:music:Master"].
    public var ducked: [String]?
    /// Underruns and suspends recovered since start.
    public var xruns: Int?
    public var recoveries: Int?
    public var lastError: ErrorInfo?
    /// Everything the audio engine reports (per-channel raw volume, negotiated period/buffer, recovery state,
    /// each ducked control), for tools and for a closer look; the fields above summarise it.
    public var engine: AudioEngineStatus?

    public init(
        device: String, mixer: String? = nil, volume: Int? = nil, threshold: Int? = nil,
        thresholdSource: String? = nil, muted: Bool? = nil, ducked: [String]? = nil, xruns: Int? = nil,
        recoveries: Int? = nil, lastError: ErrorInfo? = nil, engine: AudioEngineStatus? = nil
    ) {
        self.device = device
        self.mixer = mixer
        self.volume = volume
        self.threshold = threshold
        self.thresholdSource = thresholdSource
        self.muted = muted
        self.ducked = ducked
        self.xruns = xruns
        self.recoveries = recoveries
        self.lastError = lastError
        self.engine = engine
    }
}
