//! The librdkafka client context of the relay's producer and admin client: librdkafka's log
//! lines and global errors go to `tracing`, and repeats are rate-limited.
//!
//! While a broker is down librdkafka reports the same condition (`Connection refused`,
//! `AllBrokersDown`) every few milliseconds per client; the relay already logs what matters
//! (delivery failures, resends, producer rebuilds) through its own events. So each distinct
//! message is logged at most once per [`REPEAT_INTERVAL`], with the count of suppressed
//! repeats.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;

/// Least time between two log lines with the same text.
pub const REPEAT_INTERVAL: Duration = Duration::from_secs(30);

/// Most distinct messages remembered; the memory is cleared when it is full.
const REMEMBERED_MESSAGES: usize = 256;

/// Client context for every Kafka client the relay creates.
#[derive(Debug, Default)]
pub struct RelayClientContext {
    /// Per message key: when it was last logged and how many repeats were suppressed since.
    recent: Mutex<HashMap<String, (Instant, u64)>>,
}

impl RelayClientContext {
    /// `Some(suppressed repeats)` when a message with this key should be logged now.
    fn should_log(&self, key: &str) -> Option<u64> {
        let mut recent = self
            .recent
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        if let Some((last, suppressed)) = recent.get_mut(key) {
            if now.duration_since(*last) < REPEAT_INTERVAL {
                *suppressed += 1;
                return None;
            }
            let repeats = *suppressed;
            *last = now;
            *suppressed = 0;
            return Some(repeats);
        }
        if recent.len() >= REMEMBERED_MESSAGES {
            recent.clear();
        }
        recent.insert(key.to_owned(), (now, 0));
        Some(0)
    }
}

/// The part of a librdkafka message that identifies it: without the varying tail
/// (`(after 12ms in state CONNECT, 3 identical error(s) suppressed)`).
fn message_key(facility: &str, message: &str) -> String {
    let stable = message.split(" (after ").next().unwrap_or(message);
    format!(
        "{facility}:{}",
        stable.chars().take(160).collect::<String>()
    )
}

impl ClientContext for RelayClientContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        if matches!(level, RDKafkaLogLevel::Debug) {
            tracing::debug!(target: "librdkafka", facility, "{message}");
            return;
        }
        let Some(suppressed) = self.should_log(&message_key(facility, message)) else {
            return;
        };
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", facility, suppressed, "{message}")
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", facility, suppressed, "{message}")
            }
            _ => tracing::info!(target: "librdkafka", facility, suppressed, "{message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let key = message_key("error", &format!("{error}: {reason}"));
        if let Some(suppressed) = self.should_log(&key) {
            tracing::warn!(target: "librdkafka", %error, suppressed, "Kafka client error: {reason}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_suppressed_and_counted() {
        let context = RelayClientContext::default();
        let key = message_key(
            "FAIL",
            "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)",
        );
        let same = message_key(
            "FAIL",
            "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 3ms in state CONNECT, 1 identical error(s) suppressed)",
        );
        assert_eq!(key, same);
        assert_eq!(context.should_log(&key), Some(0));
        assert_eq!(context.should_log(&same), None);
        assert_eq!(context.should_log(&key), None);
        assert_eq!(context.should_log("FAIL:something else"), Some(0));
        {
            let mut recent = context.recent.lock().unwrap();
            let entry = recent.get_mut(&key).unwrap();
            entry.0 -= REPEAT_INTERVAL;
        }
        assert_eq!(
            context.should_log(&key),
            Some(2),
            "reports the suppressed count"
        );
    }
}
