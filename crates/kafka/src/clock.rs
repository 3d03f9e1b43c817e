//! The wall clock in Unix milliseconds: the sink stamps when it took a record with it, and
//! the age gauges (oldest unacked record, readiness) are computed from such stamps at
//! scrape time.

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn unix_millis_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}
