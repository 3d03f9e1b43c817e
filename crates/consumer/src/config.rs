//! The consumer's settings.

use std::time::Duration;

/// How record values are turned into the payload the handler sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PayloadFormat {
    /// The value's bytes as they are (the relay's default `payload = "as_is"`).
    #[default]
    Raw,
    /// Debezium's `JsonConverter` with a string payload column: the value is a JSON string
    /// literal (`"{\"orderId\":7}"`), or with `schemas.enable=true` the envelope
    /// `{"schema": {...}, "payload": "..."}`; the string's content is the payload. Anything
    /// else is an undecodable record (dead-lettered).
    DebeziumJsonString,
    /// `DebeziumJsonString` when the value is such a string or envelope, else `Raw`. Only for
    /// topics whose payloads are never themselves bare JSON strings (a payload `"text"` would
    /// be unwrapped to `text`).
    Auto,
}

/// A step where a failure test can make the consumer stop as if it crashed: the worker
/// returns [`crate::ConsumerError::CrashPointReached`] at once, the transaction (if open) is
/// dropped (rolled back), no Kafka offset is committed, and [`crate::OutboxConsumer::run`]
/// returns. A new consumer in the same group then receives the record again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// After the handler succeeded, before the database commit.
    BeforeDatabaseCommit,
    /// After the database commit, before the Kafka offset commit.
    AfterDatabaseCommit,
}

/// Everything [`crate::OutboxConsumer`] needs besides the pool, the handler and the metrics.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// Kafka `bootstrap.servers`.
    pub brokers: String,
    /// Kafka consumer group: instances of one service share it, so each partition is applied
    /// by one instance at a time.
    pub group_id: String,
    /// Topics to consume.
    pub topics: Vec<String>,
    /// The name stored in `processed_event.consumer_name`: one database can serve several
    /// consumers of the same events, each applying every event once. Usually the group id.
    pub consumer_name: String,
    /// Where poison records go (after `max_attempts` failures or a permanent error).
    pub dead_letter_topic: String,
    /// Handler attempts per record before it is dead-lettered (at least 1).
    pub max_attempts: u32,
    /// Backoff after the first failed attempt; doubles per attempt up to `backoff_max`.
    pub backoff_initial: Duration,
    /// Longest backoff between attempts (and between retries of the library's own database
    /// statements and dead-letter sends).
    pub backoff_max: Duration,
    /// How record values become payloads.
    pub payload_format: PayloadFormat,
    /// Records buffered per partition before the fetch loop waits (bounds memory).
    pub partition_queue_capacity: usize,
    /// Extra librdkafka properties (e.g. `security.protocol`), applied to the consumer and the
    /// dead-letter producer; the library's own settings (`enable.auto.commit=false`, ...)
    /// are applied after them and win.
    pub kafka_properties: Vec<(String, String)>,
    /// Failure tests only: stop at this step of the first record that reaches it.
    pub crash_point: Option<CrashPoint>,
}

impl ConsumerConfig {
    /// Settings with the defaults: 5 attempts, 100 ms to 5 s backoff, raw payloads, 64 records
    /// buffered per partition, the dead-letter topic `<group_id>.dlq`.
    pub fn new(brokers: &str, group_id: &str, topics: &[&str]) -> Self {
        Self {
            brokers: brokers.to_owned(),
            group_id: group_id.to_owned(),
            topics: topics.iter().map(|topic| (*topic).to_owned()).collect(),
            consumer_name: group_id.to_owned(),
            dead_letter_topic: format!("{group_id}.dlq"),
            max_attempts: 5,
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            payload_format: PayloadFormat::Raw,
            partition_queue_capacity: 64,
            kafka_properties: Vec::new(),
            crash_point: None,
        }
    }

    /// The backoff before attempt `attempt + 1` (after `attempt` failures, 1-based).
    pub(crate) fn backoff_after(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        self.backoff_initial
            .saturating_mul(factor)
            .min(self.backoff_max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_maximum() {
        let mut config = ConsumerConfig::new("b", "g", &["t"]);
        config.backoff_initial = Duration::from_millis(100);
        config.backoff_max = Duration::from_millis(350);
        let waits: Vec<u128> = (1..=4)
            .map(|attempt| config.backoff_after(attempt).as_millis())
            .collect();
        assert_eq!(waits, [100, 200, 350, 350]);
        assert_eq!(config.backoff_after(u32::MAX), Duration::from_millis(350));
    }
}
