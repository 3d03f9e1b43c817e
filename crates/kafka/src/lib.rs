//! outbox-kafka: the relay's Kafka side as a library.
//!
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
//! * [`Backoff`]: bounded exponential backoff with jitter.

#![warn(missing_docs)]

mod backoff;
pub mod config;
pub mod crash_points;
pub mod kafka_context;
mod kafka_store;
mod kafka_store_context;
mod kafka_store_events;

pub use backoff::Backoff;
pub use kafka_store::{
    checkpoint_record_key, checkpoint_record_value, checkpoint_transactional_id,
    ensure_checkpoint_topic, KafkaCheckpointStore, KafkaStoreSettings, CHECKPOINT_PARTITION,
    CHECKPOINT_TRANSACTIONAL_ID_PREFIX, DEFAULT_CHECKPOINT_TOPIC, OPEN_TRANSACTION_WAIT,
};
pub use kafka_store_events::register_kafka_store_metrics;
pub mod lease;
pub mod security;

pub use lease::{lease_group_id, LeaderLease, LeaseError, LeaseSettings, LeaseState};
