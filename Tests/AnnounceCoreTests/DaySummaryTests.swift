import Foundation
import Testing

@testable import AnnounceCore

/// The day's total: local days with the C library's time zone (TZ), integer sums, and the words spoken.
@Suite(.serialized) struct DaySummaryTests {
    /// Runs `body` with the process's time zone set to `zone` (a POSIX TZ string: no tzdata needed), then puts
    /// the previous one back. The suite is serialised; nothing else in these tests reads local time.
    func inZone<T>(_ zone: String, _ body: () throws -> T) rethrows -> T {
        let previous = getenv("TZ").map { String(cString: $0) }
        setenv("TZ", zone, 1)
        tzset()
        defer {
            if let previous { setenv("TZ", previous, 1) } else { unsetenv("TZ") }
            tzset()
        }
        return try body()
    }

    @Test func aDayRunsFromLocalMidnightToLocalMidnight() throws {
        try inZone("CST-8") {
            let day = try LocalDay(parsing: "2026-11-23")
            let bounds = day.bounds
            #expect(bounds.startMs == 1_795_363_200_000, "2026-11-23 00:00 +08:00 is 2026-11-22 16:00 UTC")
            #expect(bounds.endMs == 1_795_449_600_000)
            #expect(bounds.zone == "CST" && bounds.utcOffsetSeconds == 8 * 3600)
            // 00:30 in Beijing is still the day before in UTC: the terminal's zone decides.
            #expect(LocalDay(containing: 1_795_365_000_000) == day)
            #expect(LocalDay(containing: bounds.endMs) == (try LocalDay(parsing: "2026-11-24")))
            #expect(LocalDay(containing: bounds.endMs - 1) == day)
            let summary = DaySummary(day: day, totals: DayTotals())
            #expect(summary.from == "2026-11-22T16:00:00.000Z" && summary.to == "2026-11-23T16:00:00.000Z")
            #expect(summary.utcOffset == "+08:00" && summary.date == "2026-11-23")
        }
        inZone("UTC0") {
            #expect(LocalDay(containing: 1_795_365_000_000).description == "2026-11-22")
        }
    }

    @Test func daysWhenTheClocksChangeAreShorterOrLonger() throws {
        try inZone("CET-1CEST,M3.5.0,M10.5.0/3") {
            let spring = try LocalDay(parsing: "2026-03-29").bounds
            #expect(spring.endMs - spring.startMs == 23 * 3_600_000)
            let autumn = try LocalDay(parsing: "2026-10-25").bounds
            #expect(autumn.endMs - autumn.startMs == 25 * 3_600_000)
            let ordinary = try LocalDay(parsing: "2026-06-01").bounds
            #expect(ordinary.endMs - ordinary.startMs == 24 * 3_600_000 && ordinary.zone == "CEST")
            #expect(LocalDay.offsetText(seconds: ordinary.utcOffsetSeconds) == "+02:00")
        }
    }

    @Test func theNextTimeOfDayIsTodayOrTomorrow() {
        inZone("CST-8") {
            #expect(LocalDay.next(hour: 21, minute: 30, after: 1_795_435_200_000) == 1_795_440_600_000, "20:00 → 21:30")
            #expect(
                LocalDay.next(hour: 21, minute: 30, after: 1_795_442_400_000) == 1_795_527_000_000, "22:00 → tomorrow")
            #expect(LocalDay.next(hour: 21, minute: 30, after: 1_795_440_600_000) == 1_795_527_000_000, "not twice")
        }
    }

    @Test func datesAreCheckedStrictly() {
        for bad in ["2026-02-30", "2026-2-03", "26-02-03", "2026-13-01", "2026-00-10", "today", "", "２０２６-01-01",
                    "2026-01-01T00:00"] {
            #expect(throws: AnnounceError.self, "\(bad)") { try LocalDay(parsing: bad) }
        }
        #expect((try? LocalDay(parsing: "2028-02-29"))?.description == "2028-02-29", "a leap day exists")
    }

    @Test func sumsAreIntegerFenAndRefundsApart() throws {
        var totals = DayTotals()
        for fen: Int64 in [10, 20, 1] { try totals.add(fen: fen, refund: false) }
        try totals.add(fen: 5000, refund: true)
        #expect(totals.payments == DayTotals.Tally(count: 3, fen: 31) && totals.payments.amount == "0.31")
        #expect(totals.refunds.count == 1 && totals.refunds.amount == "50.00")
        // 0.1 + 0.2 in binary floating point is 0.30000000000000004; here it is 30 fen.
        #expect(DayTotals.yuan(123_450) == "1234.50" && DayTotals.yuan(0) == "0.00" && DayTotals.yuan(7) == "0.07")
        var full = DayTotals(payments: .init(count: 1, fen: .max - 1))
        #expect(throws: AnnounceError.self) { try full.add(fen: 2, refund: false) }
        let json = String(decoding: try JSONEncoder().encode(totals.payments), as: UTF8.self)
        #expect(json.contains("\"amount\":\"0.31\"") && json.contains("\"fen\":31"))
    }

    // MARK: - The words

    static let zhManifest = VoicePackManifest(
        name: "zh-test", language: "zh", sampleRate: 16000,
        clips: Dictionary(uniqueKeysWithValues: "零一二两三四五六七八九十百千万亿点元角分".map { (String($0), "c.wav") }
            + [("到账", "c.wav"), ("今日收款", "c.wav"), ("笔，共", "c.wav"), ("退款", "c.wav"), ("今日暂无收款", "c.wav")]),
        templates: ["plain": ["到账", "{amount}"]], chime: "c.wav",
        summary: .init(
            payments: ["今日收款", "{count}", "笔，共", "{amount}"], refunds: ["退款", "{count}", "笔，共", "{amount}"],
            none: ["今日暂无收款"]))

    @Test func theTotalIsReadWithTheAmountReader() throws {
        let composer = try Composer(manifest: Self.zhManifest)
        var totals = DayTotals()
        for fen: Int64 in [100_000, 23_450, 10_000] { try totals.add(fen: fen, refund: false) }
        #expect(try composer.compose(summary: totals).text == "今日收款三笔，共一千三百三十四点五元")
        try totals.add(fen: 5_000, refund: true)
        #expect(try composer.compose(summary: totals).text == "今日收款三笔，共一千三百三十四点五元退款一笔，共五十元")
        // In units style, and two payments are 两笔 (a count before a measure word), as two hundred are 两百笔.
        let two = DayTotals(payments: .init(count: 2, fen: 1_234))
        #expect(try composer.compose(summary: two, options: ReadingOptions(style: .units)).text == "今日收款两笔，共十二元三角四分")
        #expect(try composer.compose(summary: DayTotals(payments: .init(count: 200, fen: 20_000))).text
                == "今日收款两百笔，共二百元")
        #expect(try composer.compose(summary: DayTotals(payments: .init(count: 12, fen: 1))).text == "今日收款十二笔，共零点零一元")
        #expect(try composer.compose(summary: DayTotals()).text == "今日暂无收款")
        let onlyRefunds = DayTotals(refunds: .init(count: 1, fen: 250))
        #expect(try composer.compose(summary: onlyRefunds).text == "今日暂无收款退款一笔，共二点五元")
        // Through the utterance, as a job is composed.
        #expect(try composer.compose(.summary(two)).tokens == ["今日收款", "两", "笔，共", "十", "二", "点", "三", "四", "元"])
        #expect(try composer.compose(.summary(two)).missing.isEmpty)
    }

    @Test func englishCountsAreCardinals() throws {
        let reader = EnglishReader()
        #expect(reader.words(forCount: 3) == ["three"])
        #expect(reader.words(forCount: 0) == ["zero"])
        #expect(reader.words(forCount: 105) == ["one", "hundred", "and", "five"])
        let mandarin = MandarinReader()
        #expect(mandarin.words(forCount: 2) == ["两"] && mandarin.words(forCount: 22) == ["二", "十", "二"])
        #expect(mandarin.words(forCount: 0) == ["零"] && mandarin.words(forCount: 10) == ["十"])
        #expect(mandarin.words(forCount: 20_000) == ["两", "万"])
    }

    @Test func aPackWithoutSummaryTemplatesSaysSoAndBrokenOnesAreRefused() throws {
        var manifest = Self.zhManifest
        manifest.summary = nil
        #expect(manifest.problems().isEmpty, "optional")
        let composer = try Composer(manifest: manifest)
        let error = #expect(throws: AnnounceError.self) { try composer.compose(summary: DayTotals()) }
        #expect(error?.code == .notFound && error?.message.contains("has no summary templates") == true)
        manifest.summary = .init(payments: ["今日收款", "{amount}"], refunds: ["退款", "{count}", "{count}", "{amount}"],
                                 none: ["没有"])
        let problems = manifest.problems()
        #expect(problems.contains("summary \"payments\" must have 1 {count} placeholder(s)"), "\(problems)")
        #expect(problems.contains("summary \"refunds\" must have 1 {count} placeholder(s)"), "\(problems)")
        #expect(problems.contains("summary \"none\" uses token \"没有\" that has no clip"), "\(problems)")
    }

    @Test func volumeStepsSnapToTheGridAndNameTheirPrompt() {
        #expect(VolumeSteps.next(from: 63, step: 10, up: true) == 70)
        #expect(VolumeSteps.next(from: 63, step: 10, up: false) == 60)
        #expect(VolumeSteps.next(from: 60, step: 10, up: true) == 70)
        #expect(VolumeSteps.next(from: 60, step: 10, up: false) == 50)
        #expect(VolumeSteps.next(from: 100, step: 10, up: true) == 100)
        #expect(VolumeSteps.next(from: 0, step: 10, up: false) == 0)
        #expect(VolumeSteps.next(from: 3, step: 5, up: true) == 5)
        #expect(VolumeSteps.prompt(percent: 60) == "volume-6")
        #expect(VolumeSteps.prompt(percent: 0) == "volume-min" && VolumeSteps.prompt(percent: 100) == "volume-max")
        #expect(VolumeSteps.prompt(percent: 5) == "volume-1", "the quietest audible step still says a level")
    }

    /// On the elements the daemon meets: a softvol (−51…0 dB in 0.2 dB steps, as the VM's Master), PulseAudio's
    /// Master (raw 0…65536, no dB) and a coarse card (16 steps of 1.5 dB): a level set as N % reads back N %, and
    /// a step moves one grid point — or more, where the grid points sound the same.
    @Test func stepsMoveTheRawValueOnEveryKindOfElement() {
        let softvol = VolumeScale(
            raw: 0...255,
            decibels: .init(
                range: -5100...0, fromRaw: { ($0 - 255) * 20 },
                toRaw: { centidB, up in
                    let exact = Double(centidB + 5100) / 20
                    return min(255, max(0, Int(up ? exact.rounded(.up) : exact.rounded(.down))))
                }))
        let pulse = VolumeScale(raw: 0...65536)
        let coarse = VolumeScale(
            raw: 0...15,
            decibels: .init(
                range: -2250...0, fromRaw: { ($0 - 15) * 150 },
                toRaw: { centidB, up in
                    let exact = Double(centidB + 2250) / 150
                    return min(15, max(0, Int(up ? exact.rounded(.up) : exact.rounded(.down))))
                }))
        for scale in [softvol, pulse, coarse] {
            for percent in stride(from: 0, through: 100, by: 10) {
                let raw = VolumeMapping.raw(normalized: Double(percent) / 100, scale: scale, roundUp: true)
                let back = VolumeMapping.percent(ofRaw: raw, scale: scale)
                let again = VolumeMapping.raw(normalized: Double(back) / 100, scale: scale, roundUp: true)
                #expect(back <= percent && again == raw, "\(percent) % is raw \(raw), read back as \(back) %")
            }
        }
        let eighty = VolumeMapping.raw(normalized: 0.8, scale: softvol, roundUp: true)
        #expect(VolumeMapping.percent(ofRaw: eighty, scale: softvol) == 80)
        #expect(VolumeSteps.step(fromRaw: eighty, scale: softvol, step: 10, up: false).percent == 70)
        #expect(VolumeSteps.step(fromRaw: eighty, scale: softvol, step: 10, up: true).percent == 90)
        #expect(VolumeSteps.step(fromRaw: 32768, scale: pulse, step: 10, up: true) == (60, 39322))
        // Held down from the top to the bottom, every press is heard as a change.
        for scale in [softvol, pulse, coarse] {
            var raw = scale.raw.upperBound
            var levels: [Int] = []
            while raw > scale.raw.lowerBound {
                let next = VolumeSteps.step(fromRaw: raw, scale: scale, step: 10, up: false)
                #expect(next.raw < raw, "a step down from raw \(raw) went to \(next)")
                levels.append(next.percent)
                raw = next.raw
            }
            #expect(levels.last == 0 && levels == levels.sorted(by: >), "\(levels)")
        }
    }

    @Test func readingDefaultsFillWhatTheRequestLeftOpen() throws {
        let defaults = ReadingDefaults(
            all: .init(style: .units), channels: ["alipay": .init(liang: true), "wechat": .init(style: .decimal)])
        func resolved(
            _ channel: String, style: ReadingStyle? = nil, liang: Bool? = nil
        ) throws -> (ReadingStyle?, Bool?) {
            var request = JobRequest(
                utterance: .payment(amount: try Amount(parsing: "2.00"), channel: channel, refund: false), style: style,
                liang: liang, priority: .payment)
            defaults.apply(to: &request)
            return (request.style, request.liang)
        }
        #expect(try resolved("plain") == (.units, nil))
        #expect(try resolved("alipay") == (.units, true))
        #expect(try resolved("wechat") == (.decimal, nil))
        #expect(try resolved("alipay", style: .decimal, liang: false) == (.decimal, false), "the request wins")
        var prompt = JobRequest(utterance: .prompt(name: "network-lost"), priority: .status)
        defaults.apply(to: &prompt)
        #expect(prompt.style == nil && prompt.liang == nil)
        var summary = JobRequest(utterance: .summary(DayTotals()), priority: .payment)
        defaults.apply(to: &summary)
        #expect(summary.style == .units, "the day's total is read in the terminal's style")
    }
}
