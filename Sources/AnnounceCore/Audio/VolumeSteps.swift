/// The speaker's everyday volume in steps, as its keys change it: on alsamixer's percent scale (so a step is the
/// same loudness on every card), on a grid of `step` percent, 0…100.
///
/// An element has fewer raw values than percentages where it is coarse (a softvol has 0.2 dB steps; many cards
/// 1.5 dB): several percentages share one raw value. A level is therefore read back as the *smallest* percentage
/// whose raw value is the one set (``VolumeMapping/percent(ofRaw:scale:)``), so a level set as 80 % reads 80 %, and a
/// step always moves the raw value, skipping grid points that would sound the same.
public enum VolumeSteps {
    /// The grid level one step up or down from the level `percent` (whole percent): the next multiple of `step`
    /// above (below) it. 63 % with a step of 10 goes to 70 (60); 60 goes to 70 (50); the ends stay.
    public static func next(from percent: Int, step: Int, up: Bool) -> Int {
        let step = max(1, min(100, step))
        let below = percent - percent % step
        let next = up ? below + step : (percent % step == 0 ? percent - step : below)
        return min(100, max(0, next))
    }

    /// One step from the raw value `raw` on an element of `scale`: the new level (grid percent) and its raw value,
    /// which differs from `raw` unless the level is already at the end it moves to.
    public static func step(fromRaw raw: Int, scale: VolumeScale, step: Int, up: Bool) -> (percent: Int, raw: Int) {
        var target = next(from: VolumeMapping.percent(ofRaw: raw, scale: scale), step: step, up: up)
        var value = VolumeMapping.raw(normalized: Double(target) / 100, scale: scale, roundUp: true)
        // Grid points that sound the same as now are passed over: a press always changes what is heard.
        while value == raw && (up ? target < 100 : target > 0) {
            target = next(from: target, step: step, up: up)
            value = VolumeMapping.raw(normalized: Double(target) / 100, scale: scale, roundUp: true)
        }
        return (target, value)
    }

    /// The voice pack prompt that says a level: `volume-min` at 0, `volume-max` at 100, else `volume-N` with N the
    /// level in tenths (60 % is `volume-6`, 音量六; 65 % rounds to `volume-7`).
    public static func prompt(percent: Int) -> String {
        if percent <= 0 { return "volume-min" }
        if percent >= 100 { return "volume-max" }
        return "volume-\(min(10, max(1, Int((Double(percent) / 10).rounded()))))"
    }
}

extension VolumeMapping {
    /// The whole percentage a raw value stands for: the smallest percentage whose raw value (the smallest at
    /// least that loud, as a level is set) is at least `raw`. A level set as N % reads back N %.
    public static func percent(ofRaw raw: Int, scale: VolumeScale) -> Int {
        var low = 0
        var high = 100
        while low < high {
            let middle = (low + high) / 2
            if Self.raw(normalized: Double(middle) / 100, scale: scale, roundUp: true) >= raw {
                high = middle
            } else {
                low = middle + 1
            }
        }
        return low
    }
}
