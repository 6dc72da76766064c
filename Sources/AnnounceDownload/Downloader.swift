import AnnounceCore
import AnnounceCrypto
import CCurl

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif
#if canImport(Glibc)
    import Glibc
#endif

/// Why a download failed. One domain error (``AnnounceError``) with these stable codes, which the push listener puts
/// in its receipts (docs/push.md, "Corpus push").
extension AnnounceError.Code {
    /// The transfer failed: the server could not be reached, answered with an HTTP error, the TLS certificate did
    /// not verify, or the transfer stalled or took longer than allowed.
    public static let downloadFailed = AnnounceError.Code(rawValue: "download_failed")
    /// The file is larger than it may be (the size announced, or the configured limit).
    public static let tooLarge = AnnounceError.Code(rawValue: "too_large")
    /// The terminal's disk is full (or the file cannot be written).
    public static let noSpace = AnnounceError.Code(rawValue: "no_space")
    /// Not an https:// URL (plain http only where the operator allows it), or not a URL at all.
    public static let insecureURL = AnnounceError.Code(rawValue: "insecure_url")
}

/// Downloads a file over HTTPS with libcurl (Debian's libcurl4, reached through `Sources/CCurl` and loaded on first
/// use), never with an HTTP client written here. What the push listener needs of it, and why:
/// - **only https** (plain http only when the operator allows it), for the first request and every redirect:
///   `CURLOPT_PROTOCOLS_STR`/`CURLOPT_REDIR_PROTOCOLS_STR`; the certificate and host name always verified;
/// - **bounded**: a file larger than `maximumBytes` is cut off as it arrives (a server announcing a larger size
///   is refused before the body), so a hostile server cannot fill the terminal's flash; a transfer slower than
///   1 kB/s for 30 s, or longer than `timeoutSeconds`, is abandoned;
/// - **checked as it is written**: the SHA-256 and the byte count are taken over exactly the bytes written to the
///   file, which is synced before this returns;
/// - HTTP errors (4xx/5xx) fail the download rather than being saved as the file.
///
/// One transfer at a time per call; the calls block their thread (the push listener's corpus worker).
public enum Downloader {
    public struct Limits: Sendable, Equatable {
        /// The most bytes accepted.
        public var maximumBytes: Int
        /// The longest a whole transfer may take, seconds.
        public var timeoutSeconds: Double
        /// Whether `http://` is accepted besides `https://` (tests, a site's own mirror on a trusted network).
        public var allowPlainHTTP: Bool
        /// A CA certificate file (PEM) to verify servers with instead of the system's store.
        public var caFile: String?

        public init(maximumBytes: Int, timeoutSeconds: Double = 60, allowPlainHTTP: Bool = false, caFile: String? = nil)
        {
            self.maximumBytes = maximumBytes
            self.timeoutSeconds = timeoutSeconds
            self.allowPlainHTTP = allowPlainHTTP
            self.caFile = caFile
        }
    }

    /// What was written.
    public struct Result: Sendable, Equatable {
        public var bytes: Int
        /// Lowercase hex SHA-256 of the bytes written.
        public var sha256: String
    }

    /// Downloads `url` into a new file at `path` (mode 0644: the daemon, another user, reads pushed clips). A
    /// failed download leaves no file behind.
    public static func fetch(_ url: String, to path: String, limits: Limits) throws(AnnounceError) -> Result {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            throw AnnounceError(
                errno == ENOSPC ? .noSpace : .downloadFailed, "cannot create \(path)",
                cause: String(cString: strerror(errno)))
        }
        // The umask must not take the others' read bit: the daemon reads the file as its own user.
        fchmod(descriptor, 0o644)
        let sink = Sink(descriptor: descriptor, limit: limits.maximumBytes)
        do throws(AnnounceError) {
            try transfer(url, limits: limits, sink: sink)
            guard fsync(descriptor) == 0 else {
                throw AnnounceError(
                    errno == ENOSPC ? .noSpace : .downloadFailed, "cannot sync \(path)",
                    cause: String(cString: strerror(errno)))
            }
            close(descriptor)
            return Result(bytes: sink.count, sha256: sink.digest())
        } catch {
            close(descriptor)
            unlink(path)
            throw error
        }
    }

    /// Downloads `url` into memory (a small file: a list of clips), at most `limits.maximumBytes`.
    public static func fetch(_ url: String, limits: Limits) throws(AnnounceError) -> [UInt8] {
        let sink = Sink(descriptor: -1, limit: limits.maximumBytes)
        try transfer(url, limits: limits, sink: sink)
        return sink.bytes
    }

    /// Whether `url` may be fetched under `limits`: an absolute https:// (or allowed http://) URL of printable
    /// ASCII without spaces. The reason if not.
    public static func problem(url: String, allowPlainHTTP: Bool) -> String? {
        guard !url.isEmpty, url.utf8.count <= 4096, url.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            return "a URL must be 1 to 4096 printable ASCII characters without spaces"
        }
        let lower = url.lowercased()
        if lower.hasPrefix("https://"), url.utf8.count > 8 { return nil }
        if lower.hasPrefix("http://"), url.utf8.count > 7 {
            return allowPlainHTTP
                ? nil : "plain http:// is not allowed (only https://; corpus.allow_http lets a site allow it)"
        }
        return "only https:// URLs are downloaded"
    }

    // MARK: - libcurl

    /// Where the bytes go: a file (its descriptor) or memory, with the count and the running SHA-256.
    private final class Sink {
        let descriptor: Int32
        let limit: Int
        var count = 0
        let hasher = SHA256()
        var bytes: [UInt8] = []
        /// Why the callback stopped the transfer.
        var failure: AnnounceError?

        init(descriptor: Int32, limit: Int) {
            self.descriptor = descriptor
            self.limit = limit
        }

        func digest() -> String { hasher.finalize().map { cFormat("%02x", UInt32($0)) }.joined() }

        /// Takes one chunk; false stops the transfer (with `failure` saying why).
        func take(_ chunk: UnsafeRawBufferPointer) -> Bool {
            guard count + chunk.count <= limit else {
                failure = AnnounceError(.tooLarge, "more than \(limit) bytes")
                return false
            }
            if descriptor < 0 {
                bytes.append(contentsOf: chunk)
            } else {
                var offset = 0
                while offset < chunk.count {
                    let written = write(descriptor, chunk.baseAddress! + offset, chunk.count - offset)
                    if written < 0 && errno == EINTR { continue }
                    guard written > 0 else {
                        let code = written == 0 ? ENOSPC : errno
                        failure = AnnounceError(
                            code == ENOSPC || code == EDQUOT ? .noSpace : .downloadFailed,
                            "cannot write the download", cause: String(cString: strerror(code)))
                        return false
                    }
                    offset += written
                }
            }
            hasher.update(chunk)
            count += chunk.count
            return true
        }
    }

    /// libcurl's process-wide set-up, once (thread-safe: a global's initialiser runs once).
    private static let initialised: Bool = CCurl_global_init() == CURLE_OK

    private static func transfer(_ url: String, limits: Limits, sink: Sink) throws(AnnounceError) {
        if let problem = problem(url: url, allowPlainHTTP: limits.allowPlainHTTP) {
            throw AnnounceError(.insecureURL, problem)
        }
        guard initialised, let handle = curl_easy_init() else {
            throw AnnounceError(.downloadFailed, "libcurl cannot be set up")
        }
        defer { curl_easy_cleanup(handle) }
        let errorText = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
        defer { errorText.deallocate() }
        errorText.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        let protocols = limits.allowPlainHTTP ? "http,https" : "https"
        var failed: CURLcode = CURLE_OK
        func set(_ code: CURLcode) { if failed == CURLE_OK { failed = code } }
        set(CCurl_setopt_string(handle, CURLOPT_URL, url))
        set(CCurl_setopt_string(handle, CURLOPT_PROTOCOLS_STR, protocols))
        set(CCurl_setopt_string(handle, CURLOPT_REDIR_PROTOCOLS_STR, protocols))
        set(CCurl_setopt_long(handle, CURLOPT_FOLLOWLOCATION, 1))
        set(CCurl_setopt_long(handle, CURLOPT_MAXREDIRS, 5))
        set(CCurl_setopt_long(handle, CURLOPT_FAILONERROR, 1))
        // No signals from libcurl (its DNS timeouts would otherwise use SIGALRM): the listener has other threads.
        set(CCurl_setopt_long(handle, CURLOPT_NOSIGNAL, 1))
        set(CCurl_setopt_long(handle, CURLOPT_CONNECTTIMEOUT_MS, 15_000))
        set(CCurl_setopt_long(handle, CURLOPT_TIMEOUT_MS, max(1, Int(limits.timeoutSeconds * 1000))))
        set(CCurl_setopt_long(handle, CURLOPT_LOW_SPEED_LIMIT, 1000))
        set(CCurl_setopt_long(handle, CURLOPT_LOW_SPEED_TIME, 30))
        set(CCurl_setopt_offset(handle, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(limits.maximumBytes)))
        set(CCurl_setopt_long(handle, CURLOPT_SSL_VERIFYPEER, 1))
        set(CCurl_setopt_long(handle, CURLOPT_SSL_VERIFYHOST, 2))
        set(CCurl_setopt_string(handle, CURLOPT_USERAGENT, "announce-push"))
        if let caFile = limits.caFile { set(CCurl_setopt_string(handle, CURLOPT_CAINFO, caFile)) }
        set(CCurl_setopt_pointer(handle, CURLOPT_ERRORBUFFER, errorText))
        set(CCurl_setopt_write(handle, { data, size, count, context in
            guard let data, let context else { return 0 }
            let sink = Unmanaged<Sink>.fromOpaque(context).takeUnretainedValue()
            let chunk = UnsafeRawBufferPointer(start: data, count: size * count)
            return sink.take(chunk) ? size * count : 0
        }))
        let context = Unmanaged.passUnretained(sink).toOpaque()
        set(CCurl_setopt_pointer(handle, CURLOPT_WRITEDATA, context))
        guard failed == CURLE_OK else {
            throw AnnounceError(.downloadFailed, "libcurl refuses an option", cause: text(failed))
        }
        let code = withExtendedLifetime(sink) { curl_easy_perform(handle) }
        guard code != CURLE_OK else { return }
        if let failure = sink.failure { throw failure }
        let detail = String(cString: errorText)
        let cause = detail.isEmpty ? text(code) : detail
        switch code {
        case CURLE_FILESIZE_EXCEEDED:
            throw AnnounceError(.tooLarge, "the server announces more than \(limits.maximumBytes) bytes")
        case CURLE_UNSUPPORTED_PROTOCOL:
            throw AnnounceError(.insecureURL, "\(url) (or a redirect) is not \(protocols)", cause: cause)
        case CURLE_HTTP_RETURNED_ERROR:
            var status = 0
            _ = CCurl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
            throw AnnounceError(.downloadFailed, "the server answered HTTP \(status)", cause: cause)
        default:
            throw AnnounceError(.downloadFailed, "the download failed", cause: cause)
        }
    }

    private static func text(_ code: CURLcode) -> String {
        String(cString: curl_easy_strerror(code))
    }
}
