import CAlsa
import Logging
import Synchronization

/// libasound prints its own error messages ("ALSA lib confmisc.c:855:(parse_card) cannot find card '0'") on
/// standard error, where under systemd they land in the journal without a priority and outside the daemon's
/// log format. `route(to:)` sends them to a `Logger` instead, at debug: every failure they explain is logged by
/// the daemon itself with the call and `snd_strerror`; these lines add libasound's detail when asked for.
public enum AlsaLibraryLog {
    private static let logger = Mutex<Logger?>(nil)

    /// From now on, libasound's messages go to `logger` (process-wide).
    public static func route(to logger: Logger) {
        Self.logger.withLock { $0 = logger }
        CAlsa_setErrorSink { file, line, function, code, message in
            guard let logger = AlsaLibraryLog.logger.withLock({ $0 }), let message else { return }
            var metadata: Logger.Metadata = [
                "at": "\(file.map { String(cString: $0) } ?? "?"):\(line)",
                "function": "\(function.map { String(cString: $0) } ?? "?")",
            ]
            if code != 0 { metadata["error"] = "\(String(cString: snd_strerror(code)))" }
            logger.debug("libasound: \(String(cString: message))", metadata: metadata)
        }
    }
}
