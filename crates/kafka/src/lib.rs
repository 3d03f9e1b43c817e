//! outbox-kafka: the relay's Kafka side that is not the record sink.
//!
//! * the Kafka checkpoint store: the checkpoint as a record on a compacted topic, keyed by
//!   connector name;
//! * the standby lease: which of several relays with the same connector name is active,
//!   decided by Kafka's group coordinator (no home-made election).

#![warn(missing_docs)]

pub mod lease;

pub use lease::{lease_group_id, LeaderLease, LeaseError, LeaseSettings, LeaseState};
