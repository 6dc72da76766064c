/// The speaker's everyday volume in steps, as its keys change it: on alsamixer's percent scale (so a step is the
/// same loudness on every card), snapped to the step grid, 0…100.
public enum VolumeSteps {
    /// The level one step up or down from `percent`: the next multiple of `step` above (below) it. 63 % with a
    /// step of 10 goes to 70 (60); 60 goes to 70 (50); the ends stay where they are.
    public static func next(from percent: Double, step: Int, up: Bool) -> Int {
        let step = max(1, min(100, step))
        // A level set from a percentage reads back a hair above it (the raw value rounds up): 60.0004 is 60.
        let current = (percent * 100).rounded() / 100
        let steps = current / Double(step)
        let next = up ? (steps + 1e-6).rounded(.down) + 1 : (steps - 1e-6).rounded(.up) - 1
        return min(100, max(0, Int(next) * step))
    }

    /// The voice pack prompt that says a level: `volume-min` at 0, `volume-max` at 100, else `volume-N` with N the
    /// level in tenths (60 % is `volume-6`, 音量六; 65 % rounds to `volume-7`).
    public static func prompt(percent: Int) -> String {
        if percent <= 0 { return "volume-min" }
        if percent >= 100 { return "volume-max" }
        return "volume-\(min(10, max(1, Int((Double(percent) / 10).rounded()))))"
    }
}
