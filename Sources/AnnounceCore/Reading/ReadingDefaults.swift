/// How a terminal reads amounts unless a request says otherwise: a reading style and 两, for every payment and per
/// channel (`[reading]` in announced.toml, docs/configuration.md). A shop whose Alipay speaker said 十二元三角四分
/// for years can keep hearing Alipay payments that way.
///
/// Precedence, field by field: the request (a `say`, a push message), then the channel's default, then the
/// terminal's default, then the voice pack's reader (decimal for Mandarin, units for English; 二, not 两).
public struct ReadingDefaults: Sendable, Equatable {
    public struct Choice: Sendable, Equatable {
        public var style: ReadingStyle?
        public var liang: Bool?

        public init(style: ReadingStyle? = nil, liang: Bool? = nil) {
            self.style = style
            self.liang = liang
        }
    }

    /// For every channel.
    public var all = Choice()
    /// Per channel (`plain`, `alipay`, `wechat` …), over `all`.
    public var channels: [String: Choice] = [:]

    public init(all: Choice = Choice(), channels: [String: Choice] = [:]) {
        self.all = all
        self.channels = channels
    }

    /// The style and 两 for a payment on `channel` whose request chose `requested` (nil fields: not chosen).
    public func choice(channel: String, requested: Choice) -> Choice {
        let channel = channels[channel] ?? Choice()
        return Choice(
            style: requested.style ?? channel.style ?? all.style, liang: requested.liang ?? channel.liang ?? all.liang)
    }

    /// Fills in the style and 两 a payment (or the day's total: no channel) request left open. Prompts and text
    /// have no amount: left alone. The job then carries the choice, so a restart or a replay reads it the same way.
    public func apply(to request: inout JobRequest) {
        let requested = Choice(style: request.style, liang: request.liang)
        let chosen: Choice
        switch request.utterance {
        case .payment(_, let channel, _): chosen = choice(channel: channel, requested: requested)
        // The day's total, and a combination's amounts: no channel.
        case .summary, .combination:
            chosen = Choice(style: requested.style ?? all.style, liang: requested.liang ?? all.liang)
        case .prompt, .text: return
        }
        request.style = chosen.style
        request.liang = chosen.liang
    }

    /// Whether nothing is configured.
    public var isEmpty: Bool { all == Choice() && channels.values.allSatisfy { $0 == Choice() } }
}
