//! The `[kafka]` and `[dead_letter]` sections of the relay's TOML configuration: the
//! structs with their serde attributes, defaults and docs, and the rule that guards the
//! protected producer properties. The relay's `config` module re-exports them and keeps the
//! validation of the whole file in one place (`RelayConfig::validate`).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::security::{redacted_properties, KafkaSecurityConfig};

/// The error classes `dead_letter.fail_on` accepts (see the dead-letter module of the relay).
pub const DEAD_LETTER_ERROR_CLASSES: &[&str] = &[
    "routing",
    "message_too_large",
    "authorization",
    "invalid_topic",
    "corrupt_record",
    "other",
];

/// `[dead_letter]`: per-event permanent failures go to a dead-letter topic instead of
/// stopping the relay.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterConfig {
    /// Off restores the old behaviour: every permanent failure stops the relay.
    #[serde(default = "default_dead_letter_enabled")]
    pub enabled: bool,
    /// The topic dead letters are written to; it must accept the largest dead letter.
    #[serde(default = "default_dead_letter_topic")]
    pub topic: String,
    /// Sends of a record Kafka rejects permanently before it is dead-lettered (with the
    /// sink's backoff between them): a broker-side limit may be raised meanwhile. Routing
    /// errors are deterministic and are dead-lettered after one attempt.
    #[serde(default = "default_dead_letter_max_attempts")]
    pub max_attempts: u32,
    /// How many payload bytes a dead letter keeps when the payload itself is what Kafka
    /// rejected (too large, corrupt); its size and FNV-1a hash go into headers.
    #[serde(default = "default_dead_letter_payload_prefix_bytes")]
    pub payload_prefix_bytes: usize,
    /// Error classes that stop the relay instead of being dead-lettered (policy `fail`):
    /// any of `routing`, `message_too_large`, `authorization`, `invalid_topic`,
    /// `corrupt_record`, `other`.
    #[serde(default)]
    pub fail_on: Vec<String>,
}

impl Default for DeadLetterConfig {
    fn default() -> Self {
        Self {
            enabled: default_dead_letter_enabled(),
            topic: default_dead_letter_topic(),
            max_attempts: default_dead_letter_max_attempts(),
            payload_prefix_bytes: default_dead_letter_payload_prefix_bytes(),
            fail_on: Vec::new(),
        }
    }
}

impl DeadLetterConfig {
    /// True when an event failing with `class` is dead-lettered (policy), false when it
    /// stops the relay.
    pub fn dead_letters(&self, class: &str) -> bool {
        self.enabled && !self.fail_on.iter().any(|c| c == class)
    }
}

fn default_dead_letter_enabled() -> bool {
    true
}
fn default_dead_letter_topic() -> String {
    "outbox.dlq".into()
}
/// The default of `dead_letter.max_attempts`.
pub fn default_dead_letter_max_attempts() -> u32 {
    3
}
fn default_dead_letter_payload_prefix_bytes() -> usize {
    1024
}

/// `[kafka]`: the cluster and producer settings.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// `bootstrap.servers`: comma-separated `host:port` list.
    pub brokers: String,
    /// Create a missing topic through the admin API before the first send to it. When false
    /// a missing topic stops the relay with an error naming it (brokers often do not
    /// auto-create).
    #[serde(default)]
    pub create_topics: bool,
    /// Partitions of topics the relay creates.
    #[serde(default = "default_topic_partitions")]
    pub topic_partitions: i32,
    /// Replication factor of topics the relay creates.
    #[serde(default = "default_topic_replication_factor")]
    pub topic_replication_factor: i32,
    /// Topic-level configs of created topics (e.g. `"retention.ms" = "604800000"`).
    #[serde(default)]
    pub topic_config: BTreeMap<String, String>,
    /// `compression.type`: `none`, `gzip`, `snappy`, `lz4` or `zstd`.
    #[serde(default = "default_compression")]
    pub compression: String,
    /// `linger.ms`: how long the producer waits to fill a batch (throughput vs latency).
    #[serde(default = "default_linger_ms")]
    pub linger_ms: u64,
    /// `batch.num.messages`: the most records per batch.
    #[serde(default = "default_batch_num_messages")]
    pub batch_num_messages: u64,
    /// How long the oldest unacked record may go without an ack before the sink treats the
    /// producer as stalled: it takes no new input, purges the producer (queue and requests
    /// in flight), waits for all its delivery reports, builds a fresh one and resends every
    /// unacked record in input order. librdkafka's own delivery timeout is infinite
    /// (`message.timeout.ms = 0`), so a record never expires behind a younger one of its
    /// key. Shorter means outages show up in logs and metrics sooner. At least 1000: a
    /// rebuilt producer needs that long to get its producer id before its first delivery.
    #[serde(default = "default_stall_timeout_ms")]
    pub stall_timeout_ms: u64,
    /// Replaced by `stall_timeout_ms`; kept only to refuse it with the reason (a
    /// `message.timeout.ms` that expires a record behind a younger one breaks per-key order).
    #[serde(default)]
    pub message_timeout_ms: Option<u64>,
    /// First delay before the relay resends a record whose delivery failed; doubles each try.
    #[serde(default = "default_retry_initial_backoff_ms")]
    pub retry_initial_backoff_ms: u64,
    /// Upper bound of the resend delay (jitter is added on top, up to 25%).
    #[serde(default = "default_retry_max_backoff_ms")]
    pub retry_max_backoff_ms: u64,
    /// How long metadata and admin requests (topic checks, creation) may take.
    #[serde(default = "default_admin_timeout_ms")]
    pub admin_timeout_ms: u64,
    /// How many metadata requests the relay makes at startup to reach the cluster before it
    /// stops with an error (0 = forever). Brokers never reached are more often a wrong
    /// `brokers` list than an outage; once a broker answered, the relay retries deliveries
    /// without limit.
    #[serde(default = "default_kafka_startup_attempts")]
    pub startup_attempts: u32,
    /// Any librdkafka property, passed as-is; applied last, so it overrides the above.
    /// Properties the relay's guarantees depend on are refused at load with the reason
    /// ([`check_protected_property`]): `enable.idempotence`, `acks`,
    /// `enable.gapless.guarantee`, `message.timeout.ms` (and their aliases), a
    /// `max.in.flight` above 5, `retries`, `transactional.id`.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// `[kafka.security]`: TLS and SASL as first-class keys (see [`crate::security`]).
    #[serde(default)]
    pub security: KafkaSecurityConfig,
    /// `at_least_once` (the default: an idempotent producer, the checkpoint stored after
    /// the acks; a crash re-sends what was acked after the last checkpoint) or
    /// `exactly_once` (a transactional producer commits each batch of whole binlog
    /// transactions together with the checkpoint record in one Kafka transaction:
    /// `read_committed` consumers see every event once, across crashes; needs
    /// `[checkpoint] store = "kafka"`).
    #[serde(default)]
    pub delivery: DeliveryMode,
    /// Exactly-once: `transaction.timeout.ms`, how long a transaction may stay open before
    /// the broker aborts it (at most the broker's `transaction.max.timeout.ms`, 15 minutes
    /// by default). A record that cannot be delivered within it aborts the transaction
    /// and the relay restarts from the checkpoint.
    #[serde(default = "default_transaction_timeout_ms")]
    pub transaction_timeout_ms: u64,
    /// Exactly-once: a Kafka transaction is committed (at the next binlog transaction
    /// boundary) once it holds this many records, or after `pipeline.commit_interval_ms`.
    #[serde(default = "default_transaction_max_records")]
    pub transaction_max_records: usize,
    /// Exactly-once: ... or this many bytes of keys, values and headers.
    #[serde(default = "default_transaction_max_bytes")]
    pub transaction_max_bytes: usize,
}

/// `kafka.delivery`: what a consumer may see after a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryMode {
    /// Every event at least once, with a stable id; duplicates after a crash.
    #[default]
    AtLeastOnce,
    /// Every event exactly once for `read_committed` consumers (Kafka transactions).
    ExactlyOnce,
}

fn default_transaction_timeout_ms() -> u64 {
    60_000
}
fn default_transaction_max_records() -> usize {
    10_000
}
fn default_transaction_max_bytes() -> usize {
    16 * 1024 * 1024
}

impl std::fmt::Debug for KafkaConfig {
    /// Pass-through properties may hold secrets (`sasl.password`, ...): masked.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let properties: Vec<(String, String)> = self
            .properties
            .iter()
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        f.debug_struct("KafkaConfig")
            .field("brokers", &self.brokers)
            .field("compression", &self.compression)
            .field("properties", &redacted_properties(&properties))
            .field("security", &self.security)
            .field("delivery", &self.delivery)
            .field("transaction_timeout_ms", &self.transaction_timeout_ms)
            .field("transaction_max_records", &self.transaction_max_records)
            .field("transaction_max_bytes", &self.transaction_max_bytes)
            .finish_non_exhaustive()
    }
}

/// The values `kafka.compression` accepts; every one is compiled into this build's
/// librdkafka (a test creates a producer with each).
pub const KAFKA_COMPRESSIONS: &[&str] = &["none", "gzip", "snappy", "lz4", "zstd"];

/// The default of `kafka.topic_partitions`.
pub fn default_topic_partitions() -> i32 {
    1
}
/// The default of `kafka.topic_replication_factor`.
pub fn default_topic_replication_factor() -> i32 {
    1
}
fn default_compression() -> String {
    "none".to_owned()
}
fn default_linger_ms() -> u64 {
    5
}
fn default_batch_num_messages() -> u64 {
    10_000
}
/// The default of `kafka.stall_timeout_ms`.
pub fn default_stall_timeout_ms() -> u64 {
    30_000
}
fn default_retry_initial_backoff_ms() -> u64 {
    100
}
fn default_retry_max_backoff_ms() -> u64 {
    10_000
}
fn default_admin_timeout_ms() -> u64 {
    10_000
}
fn default_kafka_startup_attempts() -> u32 {
    10
}

/// Producer properties the relay's delivery guarantee depends on; the relay sets them
/// last and `[kafka.properties]` may not change them (see [`check_protected_property`]).
/// * Idempotence with `acks=all`: librdkafka's own retries neither duplicate nor reorder.
/// * `enable.gapless.guarantee`: librdkafka raises a fatal error instead of bumping the
///   producer epoch past a failed record (which would let later records of the partition
///   land before the failed one is resent); the sink then rebuilds the producer and resends
///   every unacked record in order.
/// * `message.timeout.ms = 0` (infinite): librdkafka never expires a queued record while a
///   younger one of its partition is still being retried (gapless does not cover timeouts).
///   The sink's stall watchdog (`kafka.stall_timeout_ms`) takes over: it purges and
///   rebuilds the whole producer, so the resend keeps input order. Kafka Connect protects
///   `delivery.timeout.ms` the same way.
pub const PROTECTED_KAFKA_PROPERTIES: &[(&str, &str)] = &[
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("enable.gapless.guarantee", "true"),
    ("message.timeout.ms", "0"),
];

/// librdkafka's other names for the protected properties (and for the ones bounded below).
const KAFKA_PROPERTY_ALIASES: &[(&str, &str)] = &[
    ("request.required.acks", "acks"),
    ("delivery.timeout.ms", "message.timeout.ms"),
    ("max.in.flight.requests.per.connection", "max.in.flight"),
    ("message.send.max.retries", "retries"),
];

/// Most requests in flight per connection with which an idempotent producer keeps order
/// (Kafka keeps the sequence state of 5 batches per partition).
const MAX_IDEMPOTENT_IN_FLIGHT: u64 = 5;

/// Why `[kafka.properties]` may not set `key` to `value`, or `None` when it may.
pub fn check_protected_property(key: &str, value: &str) -> Option<String> {
    let canonical = KAFKA_PROPERTY_ALIASES
        .iter()
        .find(|(alias, _)| *alias == key)
        .map_or(key, |(_, canonical)| canonical);
    let reason = |why: &str| Some(format!("`{key}` = `{value}` is refused: {why}"));
    if let Some((_, required)) = PROTECTED_KAFKA_PROPERTIES
        .iter()
        .find(|(name, _)| *name == canonical)
    {
        let same =
            value.eq_ignore_ascii_case(required) || (canonical == "acks" && value.trim() == "-1");
        if same {
            return None;
        }
        return match canonical {
            "message.timeout.ms" => reason(
                "the relay keeps librdkafka's delivery timeout infinite (`0`), or a record can expire and be resent after a younger one of its key; use `kafka.stall_timeout_ms` to bound how long a stalled delivery waits before the relay rebuilds the producer; remove the line",
            ),
            _ => reason(&format!(
                "must stay `{required}` (per-key order and at-least-once depend on it); remove the line"
            )),
        };
    }
    match canonical {
        "max.in.flight" => match value.trim().parse::<u64>() {
            Ok(n) if (1..=MAX_IDEMPOTENT_IN_FLIGHT).contains(&n) => None,
            _ => reason(&format!(
                "an idempotent producer keeps order with 1 to {MAX_IDEMPOTENT_IN_FLIGHT} requests in flight per connection"
            )),
        },
        "retries" => reason(
            "librdkafka must retry without limit (the relay's stall watchdog bounds a stuck delivery: `kafka.stall_timeout_ms`); remove the line",
        ),
        "transactional.id" => reason(
            "the relay sends with an idempotent producer outside transactions; remove the line",
        ),
        _ => None,
    }
}
