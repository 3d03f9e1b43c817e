//! Bounded exponential backoff with jitter, for reconnects and resends.

use std::time::Duration;

use rand::Rng;

/// Delays `initial, 2*initial, 4*initial, ...` capped at `max`, each plus up to 25% random
/// jitter so many relays (or many records) don't retry in lockstep.
#[derive(Debug, Clone)]
pub struct Backoff {
    /// The first delay.
    initial: Duration,
    /// The largest delay before jitter.
    max: Duration,
    /// Failures since the last [`Backoff::reset`]; the exponent.
    attempts: u32,
}

impl Backoff {
    /// A backoff starting at `initial` and capped at `max` (`max >= initial`).
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max: max.max(initial),
            attempts: 0,
        }
    }

    /// The delay before the next try; grows with each call.
    pub fn next_delay(&mut self) -> Duration {
        let factor = 1u32 << self.attempts.min(20);
        self.attempts = self.attempts.saturating_add(1);
        let base = self.initial.saturating_mul(factor).min(self.max);
        let jitter_cap = (base.as_millis() as u64) / 4;
        let jitter = if jitter_cap == 0 {
            0
        } else {
            rand::thread_rng().gen_range(0..=jitter_cap)
        };
        base + Duration::from_millis(jitter)
    }

    /// Failures counted since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Back to the initial delay (after a success).
    pub fn reset(&mut self) {
        self.attempts = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_doubles_and_caps_with_bounded_jitter() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(1000));
        let delays: Vec<Duration> = (0..8).map(|_| backoff.next_delay()).collect();
        let bases = [100u64, 200, 400, 800, 1000, 1000, 1000, 1000];
        for (delay, base) in delays.iter().zip(bases) {
            let ms = delay.as_millis() as u64;
            assert!(ms >= base && ms <= base + base / 4, "{ms} vs {base}");
        }
        assert_eq!(backoff.attempts(), 8);
        backoff.reset();
        assert!(backoff.next_delay() <= Duration::from_millis(125));
    }
}
