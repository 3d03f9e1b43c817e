//! outbox-kafka: the relay's Kafka side that is not the record sink.
//!
//! * the Kafka checkpoint store ([`KafkaCheckpointStore`], `kafka_store.rs`): the
//!   checkpoint as a record on a compacted topic, keyed by connector name;
//! * the standby lease: which of several relays with the same connector name is active,
//!   decided by Kafka's group coordinator (no home-made election).

#![warn(missing_docs)]

mod kafka_store;
mod kafka_store_context;
mod kafka_store_events;

pub use kafka_store::{
    checkpoint_record_key, checkpoint_record_value, checkpoint_transactional_id,
    ensure_checkpoint_topic, KafkaCheckpointStore, KafkaStoreSettings, CHECKPOINT_PARTITION,
    CHECKPOINT_TRANSACTIONAL_ID_PREFIX, DEFAULT_CHECKPOINT_TOPIC, OPEN_TRANSACTION_WAIT,
};
pub use kafka_store_events::register_kafka_store_metrics;
pub mod lease;

pub use lease::{lease_group_id, LeaderLease, LeaseError, LeaseSettings, LeaseState};
