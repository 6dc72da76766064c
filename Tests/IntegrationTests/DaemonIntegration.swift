import Testing

/// Every test that starts a real `announced`, one at a time: they play in real time on sound rigs and measure
/// what was heard, and a 2-core machine running several rigs and daemons at once would starve their audio.
/// (`scripts/test.sh` also runs every rig test one at a time, after the unit tests: `swift test --no-parallel`.)
@Suite(.serialized) enum DaemonIntegration {}
