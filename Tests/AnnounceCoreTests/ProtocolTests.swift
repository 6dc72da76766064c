import Foundation
import Testing

@testable import AnnounceCore

struct ProtocolTests {
    func decode(_ json: String) throws -> Request {
        try JSONDecoder().decode(Request.self, from: Data(json.utf8))
    }

    func code(_ json: String) throws -> AnnounceError.Code? {
        do {
            _ = try decode(json).jobRequest()
            return nil
        } catch let error as AnnounceError {
            return error.code
        }
    }

    @Test func aSayRequestBecomesAPaymentJob() throws {
        let request = try decode(
            #"{"id":"1","op":"say","amount":"1,000.00","channel":"alipay","refund":true,"lang":"zh","order":"A-1","#
                + #""ttl":30,"wait":true,"unknown":"ignored"}"#
        )
        let job = try request.jobRequest()
        #expect(job.utterance == .payment(amount: try Amount(parsing: "1000"), channel: "alipay", refund: true))
        #expect(job.order == "A-1")
        #expect(job.priority == .payment)
        #expect(job.ttlMs == 30_000)
        #expect(job.wait)
        #expect(job.lang == "zh")
    }

    @Test func fenAndANumericIDAreAccepted() throws {
        let request = try decode(#"{"id":42,"op":"say","fen":1234}"#)
        #expect(request.id == "42")
        #expect(
            try request.jobRequest().utterance
                == .payment(amount: try Amount(fen: 1234), channel: "plain", refund: false))
    }

    @Test func badSayRequestsGetStableCodes() throws {
        #expect(try code(#"{"op":"say","amount":"-5"}"#) == .invalidAmount)
        #expect(try code(#"{"op":"say","fen":0}"#) == .invalidAmount)
        #expect(try code(#"{"op":"say","amount":"1.005"}"#) == .invalidAmount)
        #expect(try code(#"{"op":"say"}"#) == .badRequest)
        #expect(try code(#"{"op":"say","amount":"1","fen":100}"#) == .badRequest)
        #expect(
            try code(#"{"op":"say","amount":"1","priority":"status"}"#) == .badRequest, "a payment is never droppable")
        #expect(try code(#"{"op":"say","amount":"1","priority":"loud"}"#) == .badRequest)
        #expect(try code(#"{"op":"say","amount":"1","ttl":-1}"#) == .badRequest)
        #expect(try code(#"{"op":"say","amount":"1","channel":"ali pay"}"#) == .badRequest)
        #expect(try code(#"{"op":"say","amount":"1","order":""}"#) == .badRequest)
        #expect(try code(#"{"op":"say","amount":"1","order":"a\u0007b"}"#) == .badRequest)
        #expect(try code(#"{"op":"say","amount":"1","style":"roman"}"#) == .badRequest)
        #expect(try code(#"{"op":"prompt"}"#) == .badRequest)
        #expect(try code(#"{"op":"prompt","prompt":"network_lost","amount":"1"}"#) == .badRequest)
    }

    @Test func wrongTypesDoNotDecode() {
        #expect(throws: DecodingError.self) { try decode(#"{"op":"say","amount":100}"#) }
        #expect(throws: DecodingError.self) { try decode(#"{"amount":"100"}"#) }
        #expect(throws: DecodingError.self) { try decode(#"{"op":"say","wait":"yes"}"#) }
    }

    @Test func promptsAreStatusByDefaultAndMayBeKept() throws {
        #expect(try decode(#"{"op":"prompt","prompt":"network_lost"}"#).jobRequest().priority == .status)
        #expect(try decode(#"{"op":"prompt","prompt":"x","priority":"urgent"}"#).jobRequest().priority == .urgent)
        #expect(try decode(#"{"op":"prompt","prompt":"x","ttl":0}"#).jobRequest().ttlMs == 0, "0: no ttl")
    }

    @Test func accessNeededPerOperation() throws {
        // Speaking needs `submit` (the push listener's role); cancelling, replaying, setting the volume `control`.
        #expect(try decode(#"{"op":"say"}"#).requiredAccess() == .submit)
        #expect(try decode(#"{"op":"prompt"}"#).requiredAccess() == .submit)
        #expect(try decode(#"{"op":"text"}"#).requiredAccess() == .submit)
        #expect(try decode(#"{"op":"cancel"}"#).requiredAccess() == .control)
        #expect(try decode(#"{"op":"replay"}"#).requiredAccess() == .control)
        // The last combination again: no more than the combinations a submitter may send.
        #expect(try decode(#"{"op":"replay","kind":"combination"}"#).requiredAccess() == .submit)
        #expect(try decode(#"{"op":"replay","kind":"combination","job":3}"#).requiredAccess() == .control)
        #expect(try decode(#"{"op":"replay","kind":"payment"}"#).requiredAccess() == .control)
        #expect(try decode(#"{"op":"replay","kind":"combination"}"#).replayKind() == .combination)
        #expect(throws: AnnounceError.self) { try decode(#"{"op":"replay","kind":"chime"}"#).replayKind() }
        #expect(throws: AnnounceError.self) { try decode(#"{"op":"replay","kind":"payment","job":3}"#).replayKind() }
        #expect(try decode(#"{"op":"volume","threshold":50}"#).requiredAccess() == .control)
        #expect(try decode(#"{"op":"volume","reset":true}"#).requiredAccess() == .control)
        #expect(try decode(#"{"op":"volume"}"#).requiredAccess() == .read)
        for op in ["status", "queue", "history", "ping", "metrics"] {
            #expect(try decode(#"{"op":"\#(op)"}"#).requiredAccess() == .read)
        }
        #expect(Access.control > Access.submit && Access.submit > Access.read && Access.read > Access.none)
        #expect(throws: AnnounceError.self) { try decode(#"{"op":"sing"}"#).requiredAccess() }
    }

    @Test func onlyKnownProtocolVersionsAreAccepted() throws {
        try decode(#"{"op":"ping"}"#).checkVersion()
        try decode(#"{"op":"ping","v":1}"#).checkVersion()
        #expect(throws: AnnounceError.self) { try decode(#"{"op":"ping","v":2}"#).checkVersion() }
    }

    @Test func repliesRoundTripThroughJSON() throws {
        let reply = Response(
            id: "7", ok: false,
            job: JobInfo(id: 3, state: .spoken, priority: .payment, text: "到账一百元", order: "A1"),
            error: ErrorInfo(code: "duplicate", message: "order already accepted as job 3"))
        let data = try JSONEncoder().encode(reply)
        #expect(try JSONDecoder().decode(Response.self, from: data) == reply)
    }
}
