import Foundation
import Testing

@testable import AnnounceCore

/// The audio engine's status as every client decodes it (`status`, `volume`). Swift 6.3.1's debug build crashed in
/// the synthesized decoder of `AudioEngineStatus` once `VolumeStatus` had grown (see its `init(from:)`); these round
/// trips catch a crash or a lost field here, in the unit tests, before a daemon or the VM runs.
struct StatusCodingTests {
    @Test func theSmallestEngineStatusDecodes() throws {
        let text = #"""
            {"deviceFailures": 0, "jobsGivenUp": 0, "keepOpen": false, "leadInMs": 0, "recoveries": 0,
             "sink": {"device": "default", "isOpen": false, "xruns": 0, "suspends": 0, "interruptions": 0},
             "state": "idle"}
            """#
        let status = try JSONDecoder().decode(AudioEngineStatus.self, from: Data(text.utf8))
        #expect(status.state == .idle && status.volume == nil && status.sink.device == "default")
    }

    @Test func theEngineStatusSurvivesAJSONRoundTrip() throws {
        var status = AudioEngineStatus(
            sink: SinkStatus(device: "default"), state: .playing, keepOpen: false, leadInMs: 0, deviceFailures: 1,
            recoveries: 1, jobsGivenUp: 0)
        var volume = VolumeStatus(
            element: "default/Master", threshold: "60%", mutePolicy: .respect, raised: true, raises: 2, restores: 1,
            userOverrides: 0)
        volume.raw = [201, 201]
        volume.percent = [60.5, 60.5]
        volume.muted = false
        volume.thresholdRaw = 201
        volume.thresholdPercent = 60.5
        volume.everydayRaw = [76, 76]
        volume.level = 13
        volume.lastError = ErrorInfo(code: "mixer", message: "injected")
        status.volume = volume
        status.ducking = DuckStatus(
            decibels: 20, rampMs: 150,
            controls: [
                DuckedControl(
                    element: "default/Music", ducked: true, raw: [150], original: [255], ducks: 1, userOverrides: 0)
            ])
        status.lastError = ErrorInfo(code: "audio_device", message: "gone")
        status.retryInMs = 100
        status.pauseMs = 500
        status.sink.opens = 3
        status.sink.xruns = 2
        let decoded = try JSONDecoder().decode(AudioEngineStatus.self, from: JSONEncoder().encode(status))
        #expect(decoded == status)
        #expect(decoded.volume?.level == 13 && decoded.volume?.everydayRaw == [76, 76] && decoded.pauseMs == 500)
        #expect(decoded.sink.opens == 3 && decoded.sink.xruns == 2, "the sink's own decoder keeps its counters")
        // Every stored property is set above (none left at its default), so a field the written-out coding forgets
        // makes the two differ.
        let unset = Mirror(reflecting: status).children.filter { "\($0.value)" == "nil" }.compactMap(\.label)
        #expect(unset.isEmpty, "set these too: \(unset)")
        var other = decoded
        other.volume?.level = 14
        #expect(other != decoded && decoded.volume?.level == 13, "a value, not a shared box")
    }
}
