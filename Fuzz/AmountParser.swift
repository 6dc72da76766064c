import AnnounceCore

/// libFuzzer target: any bytes (read as UTF-8, invalid sequences replaced) through `Amount(parsing:)`, the
/// parser behind every `amount` on the socket and on announce-ctl's command line. Findings are crashes:
/// - an accepted amount is in range, made only of the characters the parser documents, and equal to what an
///   independent reference reading of the same text gives (differential check);
/// - its canonical text parses back to it;
/// - the Mandarin words of every style read back to the same amount (an inverse reader, below), and the
///   English reader gives words for it.
/// Built and run by scripts/fuzz.sh (swiftc -sanitize=fuzzer,address), not by `swift build`.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzAmountParser(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let amount: Amount
    do {
        amount = try Amount(parsing: text)
    } catch {
        precondition(!error.description.isEmpty, "a refusal without a message")
        precondition(referenceFen(text) == nil || isRefusedByDesign(text), "refused but the reference accepts: \(text)")
        return 0
    }
    precondition((1...Amount.maximumFen).contains(amount.fen), "out of range: \(amount.fen) from \(text)")
    precondition(text.unicodeScalars.allSatisfy(allowed.contains), "accepted a character it documents as refused")
    precondition(referenceFen(text) == amount.fen, "\(text) parsed as \(amount.fen) fen; reference disagrees")
    precondition((try? Amount(parsing: amount.description)) == amount, "canonical text does not round-trip")
    for style in ReadingStyle.allCases {
        for liang in [false, true] {
            let words = MandarinReader().words(for: amount, options: ReadingOptions(style: style, liang: liang))
            precondition(readMandarin(words) == amount.fen, "\(amount) read as \(words.joined())")
            precondition(!EnglishReader().words(for: amount, options: ReadingOptions(style: style)).isEmpty)
        }
    }
    return 0
}

private let allowed = Set("0123456789.,¥￥ \t\r\n\u{0B}\u{0C}".unicodeScalars)

/// Forms the reference reads but the parser refuses on purpose (documented in Amount): leading zeros and the
/// like. The reference is deliberately simpler; these are the only disagreements allowed.
private func isRefusedByDesign(_ text: String) -> Bool {
    guard let core = strip(text) else { return true }
    let integer = core.split(separator: ".", omittingEmptySubsequences: false)[0].filter { $0 != "," }
    return integer.count > 1 && integer.first == "0"
}

/// The text without ASCII whitespace around it and without one leading currency sign (and whitespace after it).
private func strip(_ text: String) -> Substring? {
    let space: Set<Character> = [" ", "\t", "\r", "\n", "\u{0B}", "\u{0C}", "\r\n"]
    var core = Substring(text)
    while let first = core.first, space.contains(first) { core.removeFirst() }
    while let last = core.last, space.contains(last) { core.removeLast() }
    if core.first == "¥" || core.first == "￥" {
        core.removeFirst()
        while let first = core.first, space.contains(first) { core.removeFirst() }
    }
    return core.isEmpty ? nil : core
}

/// An independent reading of well-formed amounts: digits, optional 3-digit comma groups, at most two decimals.
private func referenceFen(_ text: String) -> Int64? {
    guard let core = strip(text) else { return nil }
    let parts = core.split(separator: ".", omittingEmptySubsequences: false)
    guard parts.count <= 2 else { return nil }
    let groups = parts[0].split(separator: ",", omittingEmptySubsequences: false)
    guard let head = groups.first, (1...(groups.count > 1 ? 3 : 12)).contains(head.count) else { return nil }
    guard groups.dropFirst().allSatisfy({ $0.count == 3 }) else { return nil }
    let integer = groups.joined()
    let fraction = parts.count == 2 ? parts[1] : ""
    guard parts.count == 1 || (1...2).contains(fraction.count) else { return nil }
    guard integer.count <= 12, (integer + fraction).allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
    var fen: Int64 = 0
    for digit in integer { fen = fen * 10 + Int64(digit.wholeNumberValue!) }
    let padded = fraction + String(repeating: "0", count: 2 - fraction.count)
    for digit in padded { fen = fen * 10 + Int64(digit.wholeNumberValue!) }
    return fen > 0 ? fen : nil
}

/// Reads Mandarin amount words (either style, with or without 两) back into fen.
private func readMandarin(_ words: [String]) -> Int64? {
    let digits: [String: Int64] = [
        "零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9,
    ]
    var total: Int64 = 0, section: Int64 = 0, digit: Int64 = 0
    var yuan: Int64 = 0, fen: Int64 = 0
    var decimals: [Int64]?
    for word in words {
        if var fraction = decimals {
            if word == "元" { break }
            guard let value = digits[word] else { return nil }
            fraction.append(value)
            decimals = fraction
            continue
        }
        switch word {
        case "十": section += (digit == 0 ? 1 : digit) * 10; digit = 0
        case "百": section += digit * 100; digit = 0
        case "千": section += digit * 1000; digit = 0
        case "万": total += (section + digit) * 10_000; section = 0; digit = 0
        case "亿": total = (total + section + digit) * 100_000_000; section = 0; digit = 0
        case "点": yuan = total + section + digit; decimals = []
        case "元": yuan = total + section + digit; total = 0; section = 0; digit = 0
        case "角": fen += digit * 10; digit = 0
        case "分": fen += digit; digit = 0
        default:
            guard let value = digits[word] else { return nil }
            digit = value
        }
    }
    if let fraction = decimals {
        guard (1...2).contains(fraction.count) else { return nil }
        fen = fraction[0] * 10 + (fraction.count == 2 ? fraction[1] : 0)
    }
    return yuan * 100 + fen
}
