import AnnounceCore
import Foundation

extension DaemonProcess {
    /// The daemon's metrics scraped over HTTP, as Prometheus would (the daemon started with
    /// `--metrics-listen 127.0.0.1:0`: the port it got is read from `status`).
    public func scrape() async throws -> String {
        let status = try await reply(Request(op: "status")).status
        guard let serving = status?.metrics?.serving, let port = serving.split(separator: ":").last.flatMap({ Int($0) })
        else { throw HarnessError("the daemon serves no metrics: \(String(describing: status?.metrics))") }
        let reply = try await HTTP.request(port: port, path: "/metrics")
        guard reply.status == 200 else { throw HarnessError("scrape: \(reply)") }
        return reply.body
    }
}
