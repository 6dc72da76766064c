#if ANNOUNCE_TSAN
import AnnounceCore

/// The ThreadSanitizer stage's lock (AnnounceCore/Support/ThreadSanitizerMutex.swift), named here because this
/// module sees `Synchronization.Mutex` through several imports and would find the name ambiguous.
typealias Mutex = AnnounceCore.Mutex
#endif
