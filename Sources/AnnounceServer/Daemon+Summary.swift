import AnnounceCore

/// The day's takings (`today`, the long press of the total key, `summary.say_at`): counted from the journal, day
/// boundaries in the terminal's local time zone (``LocalDay``).
extension Daemon {
    /// The payments and refunds heard on `day` (read from the journal on the job executor).
    public func daySummary(_ day: LocalDay) async throws(AnnounceError) -> DaySummary {
        let bounds = day.bounds
        return DaySummary(day: day, totals: try await jobs.dayTotals(fromMs: bounds.startMs, toMs: bounds.endMs))
    }

    /// Speaks `summary` with the voice pack's summary templates: a job like a payment's, queued behind the
    /// payments waiting (never interrupting one), read in the terminal's reading style. `template` carries the
    /// language, priority, ttl and wait of the request.
    public func sayDaySummary(_ summary: DaySummary, template: JobRequest) async throws(AnnounceError) -> Submission {
        var request = template
        request.utterance = .summary(summary.totals)
        limits.reading.apply(to: &request)
        return try await submit(request)
    }
}
