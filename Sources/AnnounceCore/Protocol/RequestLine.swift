#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// One request line as the daemon reads it: UTF-8 check, JSON decoding into a ``Request``, and the `id` of a
/// request that fails to decode (so that even a refusal echoes it). Pure, so it can be fuzzed on its own
/// (Fuzz/RequestDecoder.swift) exactly as the daemon runs it.
public enum RequestLine: Sendable, Equatable {
    /// Only whitespace: ignored (keep-alives, hand typing).
    case blank
    case request(Request)
    /// Not a request: the `bad_request` to answer, with the `id` if one could be read.
    case refused(id: String?, AnnounceError)

    /// Decodes one line (without its newline).
    public static func decode(_ line: [UInt8]) -> RequestLine {
        guard let text = String(validating: line, as: UTF8.self) else {
            return .refused(id: nil, AnnounceError(.badRequest, "the request is not UTF-8 text"))
        }
        if text.allSatisfy(\.isWhitespace) { return .blank }
        let data = Data(text.utf8)
        do {
            return .request(try JSONDecoder().decode(Request.self, from: data))
        } catch {
            let id = (try? JSONDecoder().decode(IDOnly.self, from: data))?.id
            return .refused(
                id: id,
                AnnounceError(
                    .badRequest, "the request is not a JSON object with an \"op\" and fields of the right types",
                    cause: describe(error)))
        }
    }

    private struct IDOnly: Decodable {
        var id: String?
        enum CodingKeys: String, CodingKey { case id }
        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            id =
                (try? c.decodeIfPresent(String.self, forKey: .id))
                ?? (try? c.decodeIfPresent(Int64.self, forKey: .id)).flatMap { $0.map(String.init) }
        }
    }

    private static func describe(_ error: any Error) -> String {
        switch error {
        case DecodingError.dataCorrupted(let context):
            context.underlyingError.map { "\($0)" } ?? context.debugDescription
        case DecodingError.keyNotFound(let key, _): "missing field \"\(key.stringValue)\""
        case DecodingError.typeMismatch(_, let context):
            "field \"\(context.codingPath.map(\.stringValue).joined(separator: "."))\" has the wrong type"
        case DecodingError.valueNotFound(_, let context):
            "field \"\(context.codingPath.map(\.stringValue).joined(separator: "."))\" is null"
        default: "\(error)"
        }
    }
}
