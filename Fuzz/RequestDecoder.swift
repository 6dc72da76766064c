import AnnounceCore
import Foundation

/// libFuzzer target: one request line through the daemon's own decoding and validation (``RequestLine``,
/// `checkVersion`, `requiredAccess`, `jobRequest` …), then the reply through the daemon's encoder and back
/// through a client's decoder. Crashes (sanitizer reports, traps, failed preconditions) are findings:
/// - every line is ignored (blank), refused with `bad_request`/`invalid_amount`, or valid;
/// - a valid job request holds only what validation promises (amount in range, short printable order …);
/// - every reply encodes as one JSON line that decodes back to the same reply.
/// Built and run by scripts/fuzz.sh (swiftc -sanitize=fuzzer,address), not by `swift build`.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRequestLine(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let line = Array(UnsafeBufferPointer(start: data, count: size))
    let reply: Response
    switch RequestLine.decode(line) {
    case .blank:
        precondition(String(decoding: line, as: UTF8.self).allSatisfy(\.isWhitespace), "blank but not whitespace")
        return 0
    case .refused(let id, let error):
        precondition(error.code == .badRequest, "undecodable line refused with \(error.code)")
        reply = .failure(id: id, error)
    case .request(let request):
        do throws(AnnounceError) {
            reply = try validate(request)
        } catch {
            precondition(
                error.code == .badRequest || error.code == .invalidAmount, "validation failed with \(error.code)")
            precondition(!error.message.isEmpty, "an error without a message")
            reply = .failure(id: request.id, error)
        }
    }
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]  // as the daemon (SocketServer.serve)
    let encoded: Data
    do { encoded = try encoder.encode(reply) } catch { preconditionFailure("reply does not encode: \(error)") }
    precondition(!encoded.contains(UInt8(ascii: "\n")), "a reply spans more than one line")
    let decoded: Response
    do { decoded = try JSONDecoder().decode(Response.self, from: encoded) } catch {
        preconditionFailure("reply does not decode: \(error)")
    }
    precondition(decoded == reply, "reply changes through the wire: \(reply) → \(decoded)")
    return 0
}

/// What the daemon checks before an operation touches any state (RequestHandler.handle/perform).
private func validate(_ request: Request) throws(AnnounceError) -> Response {
    try request.checkVersion()
    precondition(request.v.map { $0 == ProtocolVersion.current } ?? true)
    _ = try request.requiredAccess()
    switch try request.operation() {
    case .say, .prompt, .text, .combine:
        let job = try request.jobRequest()
        check(job)
        return Response(id: request.id, ok: true, job: JobInfo(id: 1, state: .queued, priority: job.priority))
    case .replay:
        let priority = try request.priorityClass(default: .urgent)
        _ = try request.replayKind()
        _ = try request.orderID()
        let ttl = try request.ttlMilliseconds()
        precondition(ttl.map { $0 >= 0 && $0 <= Int64(JobRequest.maximumTTLSeconds) * 1000 } ?? true)
        return Response(id: request.id, ok: true, job: JobInfo(id: 1, state: .queued, priority: priority))
    case .today:
        let (_, job) = try request.todayRequest()
        if let job { check(job) }
        return Response(id: request.id, ok: true)
    case .repeatNotice:
        switch try request.repeatCommand() {
        case .start(let plan):
            precondition(RepeatPlan.everyRange.contains(Double(plan.everyMs) / 1000), "every \(plan.everyMs) ms")
            precondition((1...RepeatPlan.maximumTimes).contains(plan.times), "times \(plan.times)")
            let time = plan.occurrence(plan.times)
            precondition(time.priority == .notice && time.order == "\(plan.order)#\(plan.times)")
            check(time)
        case .stop(let order):
            if let order { precondition(!order.isEmpty && order.utf8.count <= JobRequest.maximumOrderLength) }
        case .show(let order):
            precondition(!order.isEmpty && order.utf8.count <= JobRequest.maximumOrderLength)
        }
        return Response(id: request.id, ok: true)
    default:
        return Response(id: request.id, ok: true)
    }
}

private func check(_ job: JobRequest) {
    switch job.utterance {
    case .payment(let amount, let channel, _):
        precondition((1...Amount.maximumFen).contains(amount.fen), "amount out of range: \(amount.fen)")
        precondition(!channel.isEmpty && channel.utf8.count <= JobRequest.maximumNameLength)
        precondition(job.priority != .status, "a payment accepted as droppable")
        precondition(job.priority != .notice, "a payment accepted as a notice (which gives way)")
    case .prompt(let name):
        precondition(!name.isEmpty && name.utf8.count <= JobRequest.maximumNameLength)
    case .text(let text):
        precondition(!text.allSatisfy(\.isWhitespace) && text.count <= Composer.maximumTextLength)
    case .combination(let parts):
        precondition((1...CombinationPart.maximumCount).contains(parts.count), "\(parts.count) parts")
        for part in parts {
            switch part {
            case .clip(let id):
                precondition(!id.isEmpty && id.count <= JobRequest.maximumNameLength, "clip id \(id)")
                precondition(!id.unicodeScalars.contains { $0.properties.generalCategory == .control }, "control in id")
            case .amount(let amount):
                precondition((1...Amount.maximumFen).contains(amount.fen), "amount out of range: \(amount.fen)")
            case .digits(let digits):
                precondition((1...CombinationPart.maximumDigits).contains(digits.utf8.count), "digits \(digits)")
                precondition(digits.utf8.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
            }
        }
    case .summary(let totals):
        // `today` with `say`: the daemon fills the totals in from its journal, never from the request.
        precondition(totals == DayTotals(), "a request set the day's totals")
        precondition(job.priority != .status, "the day's total accepted as droppable")
    }
    if let order = job.order {
        // A repeat's times add `#<time>` to its id.
        precondition(!order.isEmpty && order.utf8.count <= JobRequest.maximumOrderLength + 5, "order length")
        precondition(!order.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }, "control in order")
    }
    if let ttl = job.ttlMs {
        precondition(ttl >= 0 && ttl <= Int64(JobRequest.maximumTTLSeconds) * 1000, "ttl out of range: \(ttl)")
    }
}
