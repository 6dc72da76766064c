import AnnounceCore
import AnnounceTestSupport
import Logging
import NIOCore
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

@testable import AnnounceTelemetry

/// The HTTP endpoint, scraped for real over TCP on the loopback.
@Suite struct MetricsEndpointTests {
    static func endpoint(
        port: Int = 0, exchangeTimeout: TimeAmount = .seconds(5), retry: TimeAmount = .seconds(30),
        render: @escaping @Sendable () -> String = { "# TYPE x counter\nx 1\n" }
    ) async throws -> (MetricsEndpoint, Int) {
        var limits = MetricsEndpoint.Limits()
        limits.exchangeTimeout = exchangeTimeout
        limits.retryInterval = retry
        let endpoint = MetricsEndpoint(
            address: ListenAddress(host: "127.0.0.1", port: port), program: "test", logger: Logger(label: "test"),
            limits: limits, render: render)
        try await endpoint.start().get()
        guard case .serving(let address) = endpoint.state else { return (endpoint, 0) }
        return (endpoint, address.port)
    }

    @Test func getMetricsAnswersThePrometheusTextAndOtherRequestsAreRefused() async throws {
        let scrapes = Atomic<Int>(0)
        let (endpoint, port) = try await Self.endpoint {
            let count = scrapes.add(1, ordering: .relaxed).newValue
            return "# TYPE announce_scrapes_total counter\nannounce_scrapes_total \(count)\n"
        }
        defer { Task { await endpoint.stop() } }
        #expect(port > 0, "\(endpoint.state)")
        let first = try await HTTP.request(port: port, path: "/metrics")
        #expect(first.status == 200, "\(first)")
        #expect(first.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8")
        #expect(first.headers["connection"] == "close")
        #expect(HTTP.sample("announce_scrapes_total", in: first.body) == 1, "\(first.body)")
        let second = try await HTTP.request(port: port, path: "/metrics?x=1")
        #expect(HTTP.sample("announce_scrapes_total", in: second.body) == 2, "rendered for every scrape")
        #expect(try await HTTP.request(port: port, path: "/").status == 200)
        #expect(try await HTTP.request(port: port, path: "/other").status == 404)
        let post = try await HTTP.request(port: port, path: "/metrics", method: "POST")
        #expect(post.status == 405 && post.headers["allow"] == "GET, HEAD", "\(post)")
        let head = try await HTTP.request(port: port, path: "/metrics", method: "HEAD")
        #expect(head.status == 200 && head.body.isEmpty)
    }

    /// A client that never finishes its request, or connects and says nothing, is cut off at the exchange limit;
    /// meanwhile, and after, others are served.
    @Test func aSlowScraperIsCutOffAndOthersAreServed() async throws {
        let (endpoint, port) = try await Self.endpoint(exchangeTimeout: .milliseconds(300))
        defer { Task { await endpoint.stop() } }
        let slow = try HTTP.connect(port: port)
        defer { close(slow) }
        try HTTP.send(slow, "GET /metr")
        let silent = try HTTP.connect(port: port)
        defer { close(silent) }
        #expect(try await HTTP.request(port: port, path: "/metrics").status == 200, "served while the others stall")
        // Both are closed by the server (end of stream), long before this test would give up on them.
        let slowRead = try await blocking { try HTTP.readToEnd(slow, timeout: .seconds(20)) }
        #expect(slowRead.isEmpty, "no answer to an unfinished request")
        _ = try await blocking { try HTTP.readToEnd(silent, timeout: .seconds(20)) }
        #expect(try await HTTP.request(port: port, path: "/metrics").status == 200)
    }

    /// A port in use is no reason to stop: the endpoint says why it is not serving, and serves once the port is
    /// free.
    @Test func aTakenPortIsReportedAndRetried() async throws {
        let holder = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(holder, pointer, length) == 0 && listen(holder, 1) == 0
                    && getsockname(holder, pointer, &length) == 0
            }
        }
        #expect(bound)
        let port = Int(UInt16(bigEndian: address.sin_port))
        let (endpoint, _) = try await Self.endpoint(port: port, retry: .milliseconds(100))
        defer { Task { await endpoint.stop() } }
        guard case .unavailable(let reason) = endpoint.state else {
            Issue.record("serving on a taken port: \(endpoint.state)")
            return
        }
        #expect(reason.contains("in use by another program"), "\(reason)")
        close(holder)
        let deadline = ContinuousClock.now + .seconds(30)
        while case .unavailable = endpoint.state, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(endpoint.state == .serving(ListenAddress(host: "127.0.0.1", port: port)))
        #expect(try await HTTP.request(port: port, path: "/metrics").status == 200)
    }

    @Test func addressesAreReadStrictly() throws {
        #expect(try ListenAddress(parsing: "127.0.0.1:9464") == ListenAddress(host: "127.0.0.1", port: 9464))
        #expect(try ListenAddress(parsing: ":9464") == ListenAddress(host: "127.0.0.1", port: 9464))
        #expect(try ListenAddress(parsing: "9464") == ListenAddress(host: "127.0.0.1", port: 9464))
        #expect(try ListenAddress(parsing: "localhost:9464").isLoopback)
        #expect(try ListenAddress(parsing: "[::1]:9464") == ListenAddress(host: "::1", port: 9464))
        #expect(try ListenAddress(parsing: "[::1]:9464").description == "[::1]:9464")
        #expect(try !ListenAddress(parsing: "0.0.0.0:9464").isLoopback)
        let bad = ["127.0.0.1:99999", "127.0.0.1", "host.example:9464", "::1:9464", "[::1]", "[127.0.0.1]:1", "a:b", ""]
        for bad in bad {
            #expect(throws: AnnounceError.self, "\(bad)") { try ListenAddress(parsing: bad) }
        }
        let error = try #require(throws: AnnounceError.self) { try ListenAddress(parsing: "127.0.0.1:99999") }
        #expect(error.message.contains("write HOST:PORT"), "\(error.message)")
    }
}
