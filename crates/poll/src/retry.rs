//! Backoff of a row whose publish failed: exponential with full jitter, bounded.

use std::time::Duration;

/// The delay before attempt `attempts + 1` of a row that failed `attempts` times (>= 1):
/// uniformly random in `[0, min(max, initial * 2^(attempts - 1))]` ("full jitter"), so rows
/// that failed together (a broker outage) do not come back together.
pub fn retry_delay(attempts: u32, initial: Duration, max: Duration, unit: f64) -> Duration {
    let exponent = attempts.saturating_sub(1).min(32);
    let ceiling = initial
        .checked_mul(1u32 << exponent.min(31))
        .unwrap_or(max)
        .min(max);
    ceiling.mul_f64(unit.clamp(0.0, 1.0))
}

/// [`retry_delay`] with a random `unit`.
pub fn jittered_retry_delay(attempts: u32, initial: Duration, max: Duration) -> Duration {
    retry_delay(attempts, initial, max, rand::random::<f64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_doubles_up_to_the_bound_and_the_jitter_spans_it() {
        let (initial, max) = (Duration::from_millis(100), Duration::from_secs(10));
        assert_eq!(
            retry_delay(1, initial, max, 1.0),
            Duration::from_millis(100)
        );
        assert_eq!(
            retry_delay(2, initial, max, 1.0),
            Duration::from_millis(200)
        );
        assert_eq!(
            retry_delay(4, initial, max, 1.0),
            Duration::from_millis(800)
        );
        assert_eq!(retry_delay(20, initial, max, 1.0), max);
        assert_eq!(retry_delay(u32::MAX, initial, max, 1.0), max);
        assert_eq!(retry_delay(3, initial, max, 0.0), Duration::ZERO);
        assert_eq!(
            retry_delay(3, initial, max, 0.5),
            Duration::from_millis(200)
        );
        for attempts in 1..40 {
            let delay = jittered_retry_delay(attempts, initial, max);
            assert!(delay <= max, "{attempts}: {delay:?}");
        }
    }
}
