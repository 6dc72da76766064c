import AnnounceCore
import AnnounceTestSupport
import Foundation
import Testing

/// Certificates made for one test with openssl: a CA, the broker's certificate (localhost, 127.0.0.1) and a
/// device's client certificate, all signed by that CA; and an unrelated CA.
struct TestCertificates {
    let directory: String

    init() async throws {
        directory = try Paths.temporaryDirectory("tls")
        let script = """
            set -e
            cd "\(directory)"
            key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1" 2>/dev/null; }
            key ca.key && openssl req -x509 -new -key ca.key -out ca.pem -days 2 -subj /CN=push-test-ca
            key other-ca.key && openssl req -x509 -new -key other-ca.key -out other-ca.pem -days 2 -subj /CN=other-ca
            printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > server.ext
            key server.key && openssl req -new -key server.key -out server.csr -subj /CN=localhost
            openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 \
                -extfile server.ext 2>/dev/null
            key device.key && openssl req -new -key device.key -out device.csr -subj /CN=T1
            openssl x509 -req -in device.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out device.pem -days 2 \
                2>/dev/null
            """
        let result = try await run("/bin/bash", ["-c", script])
        guard result.status == 0 else { throw HarnessError("openssl failed: \(result)") }
    }

    /// A mosquitto TLS listener that requires a client certificate from this CA.
    var listener: String {
        """
        listener PORT 127.0.0.1
        allow_anonymous true
        cafile \(directory)/ca.pem
        certfile \(directory)/server.pem
        keyfile \(directory)/server.key
        require_certificate true
        use_identity_as_username true
        """
    }

    func remove() { try? FileManager.default.removeItem(atPath: directory) }
}

/// The listener over TLS to a real mosquitto: broker certificate verified against the configured CA, the device
/// authenticated by its client certificate.
@Suite(.serialized)
struct PushTLSTests {
    @Test func paymentOverTLSWithClientCertificate() async throws {
        let certificates = try await TestCertificates()
        defer { certificates.remove() }
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await withBroker(listener: certificates.listener) { broker in
                let tls = """
                    [broker.tls]
                    ca_file = "\(certificates.directory)/ca.pem"
                    cert_file = "\(certificates.directory)/device.pem"
                    key_file = "\(certificates.directory)/device.key"
                    """
                try await withListener(
                    broker: broker, socket: daemon.socket, url: "mqtts://localhost:\(broker.port)", tls: tls
                ) { setup, listener in
                    // The publisher tool over the same TLS settings (from the config).
                    try await setup.publish(["--order", "TLS-1", "66.00"])
                    try await daemon.waitUntilSpoken(["TLS-1"])
                    #expect(try await daemon.jobs(order: "TLS-1").count == 1)
                    #expect(listener.logLines(containing: "connected to the broker", "mqtts://localhost").count == 1)
                }
            }
        }
    }

    /// A broker whose certificate is not signed by the configured CA is never connected to (a man in the middle
    /// cannot feed the terminal), and a missing client certificate is refused by the broker.
    @Test func untrustedBrokerOrMissingClientCertificateNeverConnects() async throws {
        let certificates = try await TestCertificates()
        defer { certificates.remove() }
        try await withDaemon(rig: nil, device: "null") { daemon in
            try await withBroker(listener: certificates.listener) { broker in
                let url = "mqtts://localhost:\(broker.port)"
                let wrongCA = """
                    [broker.tls]
                    ca_file = "\(certificates.directory)/other-ca.pem"
                    cert_file = "\(certificates.directory)/device.pem"
                    key_file = "\(certificates.directory)/device.key"
                    """
                let noClientCertificate = """
                    [broker.tls]
                    ca_file = "\(certificates.directory)/ca.pem"
                    """
                for tls in [wrongCA, noClientCertificate] {
                    try await withListener(
                        broker: broker, socket: daemon.socket, url: url, tls: tls, waitForSubscription: false
                    ) { _, listener in
                        try await listener.waitForLog("cannot connect to the broker")
                        // It keeps trying (backoff) and never gets in.
                        try await listener.waitForLog("reconnecting", count: 3)
                        #expect(listener.logLines(containing: "connected to the broker").isEmpty, "\(listener.log)")
                    }
                }
            }
        }
    }
}
