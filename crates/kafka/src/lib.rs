//! outbox-kafka: the relay's Kafka side as a library.
//!
//! * [`sink`]: the Kafka sink, at-least-once (an idempotent producer, many records in
//!   flight, resends in input order, producer rebuilds, the stall watchdog) and exactly-once
//!   (Kafka transactions carrying the checkpoint); it reports to its host through
//!   [`sink::SinkObserver`] and counts in [`sink::SinkMetrics`], both the relay's;
//! * [`dead_letter`]: what a per-event permanent failure becomes instead of a stop, and
//!   `dlq list` / `dlq replay` reading them back;
//! * [`internal_events`]: the sink's events, each logging and counting in one place;
//! * the Kafka checkpoint store ([`KafkaCheckpointStore`], `kafka_store.rs`): the
//!   checkpoint as a record on a compacted topic, keyed by connector name;
//! * the standby lease: which of several relays with the same connector name is active,
//!   decided by Kafka's group coordinator (no home-made election);
//! * [`config`]: the `[kafka]` and `[dead_letter]` config sections (the relay's `config`
//!   module re-exports them and validates the whole file); [`security`]: `[kafka.security]`,
//!   TLS and SASL to the brokers, and the masking of secret properties;
//! * [`kafka_context`]: the librdkafka client context of the relay's producers and admin
//!   clients (logs through `tracing`, repeats rate-limited);
//! * [`crash_points`]: `OUTBOX_RELAY_CRASH_AT`, deliberate aborts for the failure tests;
//! * [`Backoff`]: bounded exponential backoff with jitter; [`unix_millis_now`]: the wall
//!   clock the age gauges are computed from.

#![warn(missing_docs)]

mod backoff;
mod clock;
pub mod config;
pub mod crash_points;
pub mod dead_letter;
pub mod internal_events;
pub mod kafka_context;
mod kafka_store;
mod kafka_store_context;
mod kafka_store_events;
pub mod sink;

pub use backoff::Backoff;
pub use clock::unix_millis_now;
pub use kafka_store::{
    checkpoint_record_key, checkpoint_record_value, checkpoint_transactional_id,
    ensure_checkpoint_topic, exactly_once_transactional_id, KafkaCheckpointStore,
    KafkaStoreSettings, CHECKPOINT_PARTITION, CHECKPOINT_TRANSACTIONAL_ID_PREFIX,
    DEFAULT_CHECKPOINT_TOPIC, OPEN_TRANSACTION_WAIT,
};
pub use kafka_store_events::register_kafka_store_metrics;
pub mod lease;
pub mod security;

pub use lease::{lease_group_id, LeaderLease, LeaseError, LeaseSettings, LeaseState};
