/// A validated `say` or `prompt` request: what to announce and how to queue it. Validation is pure (no voice
/// pack needed), so a malformed request is refused before anything else happens.
public struct JobRequest: Sendable, Equatable {
    public var utterance: Utterance
    /// Voice pack language asked for; nil: the daemon's default.
    public var lang: String?
    public var style: ReadingStyle?
    public var liang: Bool?
    public var order: String?
    public var priority: JobPriority
    /// nil: the priority class's default ttl; 0: no ttl.
    public var ttlMs: Int64?
    public var wait: Bool
    /// Play through the owner's mute (if the terminal allows it: ``VolumeGuard/allowEnforce``).
    public var enforce: Bool

    public init(
        utterance: Utterance, lang: String? = nil, style: ReadingStyle? = nil, liang: Bool? = nil,
        order: String? = nil, priority: JobPriority, ttlMs: Int64? = nil, wait: Bool = false, enforce: Bool = false
    ) {
        self.enforce = enforce
        self.utterance = utterance
        self.lang = lang
        self.style = style
        self.liang = liang
        self.order = order
        self.priority = priority
        self.ttlMs = ttlMs
        self.wait = wait
    }

    /// Longest ttl accepted: a week.
    public static let maximumTTLSeconds: Double = 7 * 24 * 3600
    public static let maximumOrderLength = 128
    public static let maximumNameLength = 64

    /// The reading options to compose with, given the reader's default style.
    public func readingOptions(defaultStyle: ReadingStyle) -> ReadingOptions? {
        if style == nil && liang == nil { return nil }
        return ReadingOptions(style: style ?? defaultStyle, liang: liang ?? false)
    }
}

extension Request {
    private func refuse(_ message: String) -> AnnounceError { AnnounceError(.badRequest, message) }

    /// The operation, or `bad_request` naming the unknown one.
    public func operation() throws(AnnounceError) -> Operation {
        guard let operation = Operation(rawValue: op) else {
            let known = Operation.allCases.map(\.rawValue).joined(separator: ", ")
            throw refuse("unknown op \"\(op)\" (known: \(known))")
        }
        return operation
    }

    /// What the operation needs: `control` to make the speaker speak or change it, `read` to look.
    public func requiredAccess() throws(AnnounceError) -> Access {
        switch try operation() {
        // Loading the pushed clips the push listener installed: what may speak (the listener's role) may ask.
        // A repeat is the fleet's (a listener starts and stops its own notices): what may speak may stop one.
        case .say, .prompt, .text, .combine, .corpus, .repeatNotice: .submit
        // The last combination again is no more than the combinations one may send (the fleet's "replay last").
        case .replay where kind == ReplayKind.combination.rawValue && job == nil: .submit
        case .cancel, .replay: .control
        case .volume: (threshold != nil || reset == true || level != nil) ? .control : .read
        // Speaking the day's total makes the speaker speak, as a prompt does; reading it only looks.
        case .today: say == true ? .submit : .read
        case .status, .queue, .history, .ping, .metrics, .subscribe: .read
        }
    }

    /// What `replay` without `job` says again: the last spoken payment, or combination.
    public func replayKind() throws(AnnounceError) -> ReplayKind {
        guard let kind else { return .payment }
        guard let parsed = ReplayKind(rawValue: kind) else {
            throw refuse("replay's \"kind\" is \"payment\" or \"combination\", not \"\(kind)\"")
        }
        if job != nil { throw refuse("replay takes \"job\" or \"kind\", not both") }
        return parsed
    }

    /// Checks the protocol version the client speaks.
    public func checkVersion() throws(AnnounceError) {
        if let v, v < 1 || v > ProtocolVersion.current {
            throw refuse("protocol version \(v) is not supported (this daemon speaks 1…\(ProtocolVersion.current))")
        }
    }

    /// Validates a `say` or `prompt` request.
    public func jobRequest() throws(AnnounceError) -> JobRequest {
        let operation = try operation()
        let utterance: Utterance
        let defaultPriority: JobPriority
        switch operation {
        case .say:
            let amount: Amount
            switch (self.amount, fen) {
            case let (text?, nil):
                do { amount = try Amount(parsing: text) } catch {
                    throw AnnounceError(.invalidAmount, error.description)
                }
            case let (nil, fen?):
                do { amount = try Amount(fen: fen) } catch {
                    throw AnnounceError(.invalidAmount, error.description)
                }
            case (nil, nil):
                throw refuse("say needs \"amount\" (a string such as \"100.00\") or \"fen\" (an integer)")
            case (.some, .some):
                throw refuse("give either \"amount\" or \"fen\", not both")
            }
            let channel = try name(self.channel ?? "plain", field: "channel")
            utterance = .payment(amount: amount, channel: channel, refund: refund ?? false)
            defaultPriority = .payment
            if prompt != nil { throw refuse("\"prompt\" belongs to the prompt op, not say") }
        case .prompt:
            guard let prompt, !prompt.isEmpty else { throw refuse("prompt needs a \"prompt\" name") }
            utterance = .prompt(name: try name(prompt, field: "prompt"))
            defaultPriority = .status
            if amount != nil || fen != nil { throw refuse("a prompt has no amount; use say") }
        case .text:
            guard let text, !text.allSatisfy(\.isWhitespace) else {
                throw refuse("text needs a non-empty \"text\"")
            }
            guard text.count <= Composer.maximumTextLength else {
                throw refuse("text is \(text.count) characters long; at most \(Composer.maximumTextLength) are spoken")
            }
            utterance = .text(text)
            // An operator's message is spoken in turn like a payment and never dropped.
            defaultPriority = .payment
            if amount != nil || fen != nil { throw refuse("text has no amount; use say") }
        case .combine:
            utterance = .combination(try combinationParts())
            // Spoken in turn like a payment and never dropped, unless sent as a (droppable) status prompt.
            defaultPriority = .payment
            if amount != nil || fen != nil { throw refuse("a combination's amounts are parts: {\"amount\": …}") }
        default:
            throw refuse("\(op) does not create a job")
        }
        var language: String?
        if let lang { language = try name(lang, field: "lang") }
        return JobRequest(
            utterance: utterance, lang: language, style: try readingStyle(),
            liang: liang, order: try orderID(), priority: try priorityClass(default: defaultPriority),
            ttlMs: try ttlMilliseconds(), wait: wait ?? false, enforce: enforce ?? false)
    }

    /// Validates a `today` request: the local day asked for (`date`, else today) and, with `say`, the job that
    /// speaks it — its totals filled in by the daemon. The day's total is spoken in turn like a payment.
    public func todayRequest() throws(AnnounceError) -> (day: LocalDay, say: JobRequest?) {
        let day = try date.map { text throws(AnnounceError) in try LocalDay(parsing: text) } ?? LocalDay.today
        guard say == true else {
            if wait == true { throw refuse("\"wait\" needs \"say\": true") }
            return (day, nil)
        }
        var language: String?
        if let lang { language = try name(lang, field: "lang") }
        let job = JobRequest(
            utterance: .summary(DayTotals()), lang: language, style: try readingStyle(), liang: liang,
            priority: try priorityClass(default: .payment), ttlMs: try ttlMilliseconds(), wait: wait ?? false)
        return (day, job)
    }

    /// The `parts` of a `combine` request, each checked: exactly one of `clip` (a name), `amount` (as `say`'s) or
    /// `digits` (`0`–`9`).
    private func combinationParts() throws(AnnounceError) -> [CombinationPart] {
        guard let parts, !parts.isEmpty else {
            throw refuse("combine needs \"parts\": a list such as [{\"clip\": \"new_order\"}, {\"amount\": \"12.50\"}]")
        }
        guard parts.count <= CombinationPart.maximumCount else {
            throw refuse("a combination has at most \(CombinationPart.maximumCount) parts, not \(parts.count)")
        }
        var checked: [CombinationPart] = []
        for (index, part) in parts.enumerated() {
            let field = "parts[\(index)]"
            switch (part.clip, part.amount, part.digits) {
            case let (clip?, nil, nil):
                // A corpus id (a name) or a token of the pack, which may be any word (到账, new_order).
                guard !clip.isEmpty, clip.count <= JobRequest.maximumNameLength,
                    !clip.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
                else {
                    throw refuse("\(field).clip must be a clip id of 1…\(JobRequest.maximumNameLength) characters")
                }
                checked.append(.clip(clip))
            case let (nil, amount?, nil):
                do { checked.append(.amount(try Amount(parsing: amount))) } catch {
                    throw AnnounceError(.invalidAmount, "\(field).amount: \(error.description)")
                }
            case let (nil, nil, digits?):
                guard !digits.isEmpty, digits.utf8.count <= CombinationPart.maximumDigits,
                    digits.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
                else {
                    throw refuse("\(field).digits must be 1…\(CombinationPart.maximumDigits) digits 0-9, not \"\(digits)\"")
                }
                checked.append(.digits(digits))
            default:
                throw refuse("\(field) must have exactly one of \"clip\", \"amount\" or \"digits\"")
            }
        }
        return checked
    }

    /// The `priority` field, checked: a payment may not be `status` (droppable).
    public func priorityClass(default defaultPriority: JobPriority) throws(AnnounceError) -> JobPriority {
        guard let priority else { return defaultPriority }
        guard let parsed = JobPriority(rawValue: priority) else {
            throw refuse("unknown priority \"\(priority)\" (use urgent, payment, notice or status)")
        }
        if parsed == .status && op == Operation.say.rawValue {
            throw refuse("a payment cannot have priority status (status prompts may be dropped; payments never are)")
        }
        if parsed == .notice && op == Operation.say.rawValue {
            throw refuse("a payment cannot have priority notice (a notice gives way to payments; a payment never does)")
        }
        return parsed
    }

    /// The `ttl` field in milliseconds: nil absent, 0 none.
    public func ttlMilliseconds() throws(AnnounceError) -> Int64? {
        guard let ttl else { return nil }
        guard ttl.isFinite, ttl >= 0, ttl <= JobRequest.maximumTTLSeconds else {
            throw refuse("ttl must be seconds between 0 (none) and \(Int(JobRequest.maximumTTLSeconds))")
        }
        return Int64((ttl * 1000).rounded(.up))
    }

    private func readingStyle() throws(AnnounceError) -> ReadingStyle? {
        guard let style else { return nil }
        guard let parsed = ReadingStyle(rawValue: style) else {
            throw refuse("unknown style \"\(style)\" (use decimal or units)")
        }
        return parsed
    }

    /// The order id, checked (nil: none).
    public func orderID() throws(AnnounceError) -> String? {
        guard let order else { return nil }
        guard !order.isEmpty, order.utf8.count <= JobRequest.maximumOrderLength else {
            throw refuse("order must be 1…\(JobRequest.maximumOrderLength) bytes")
        }
        guard
            order.unicodeScalars.allSatisfy({ !$0.properties.isWhitespace || $0 == " " })
                && !order.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
        else { throw refuse("order must not contain control characters") }
        return order
    }

    /// Names (channel, prompt, lang): short, printable ASCII letters, digits, `_`, `-`, `.`.
    private func name(_ value: String, field: String) throws(AnnounceError) -> String {
        let allowed = value.unicodeScalars.allSatisfy { scalar in
            scalar.isASCII
                && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar)
                    || scalar == "_" || scalar == "-" || scalar == ".")
        }
        guard !value.isEmpty, value.utf8.count <= JobRequest.maximumNameLength, allowed else {
            throw refuse("\(field) must be 1…\(JobRequest.maximumNameLength) characters of A–Z a–z 0–9 _ - .")
        }
        return value
    }
}

/// What `replay` without a job id says again: the last spoken payment (the replay key's), or the last spoken
/// combination broadcast (the fleet's "replay last").
public enum ReplayKind: String, Sendable, Equatable {
    case payment, combination
}
