//! outbox-consumer: the consumer side of the transactional outbox. Each Kafka event changes
//! the business state **once**, though Kafka and the relay deliver at least once.
//!
//! # How
//! For every record, in partition order:
//! 1. open a MySQL transaction from the application's pool;
//! 2. insert `(consumer_name, event_id)` into `processed_event` (event id from header `id`,
//!    which the relay and Debezium send). A duplicate key means the event was applied before:
//!    roll back, count it (`outbox_consumer_duplicates_skipped_total`), commit the offset, move
//!    on;
//! 3. call the application's [`EventHandler`] with the event and the open transaction; it
//!    makes its business change there;
//! 4. commit the transaction; only then commit the Kafka offset (`offset + 1`).
//!
//! A crash between 4's two commits redelivers the event after the restart; step 2 makes that
//! redelivery a no-op. A crash before the database commit rolls everything back; the
//! redelivery applies it. Both are tested with crash points ([`CrashPoint`]).
//!
//! # Order and parallelism
//! One task per assigned partition applies that partition's records one at a time, in
//! offset order (so one aggregate's events, which share a key and hence a partition, apply in
//! order); partitions proceed in parallel.
//!
//! # Failures
//! A handler error is retried with exponential backoff; [`HandlerError::Permanent`], or
//! `max_attempts` failed attempts, sends the record to the consumer's dead-letter topic with
//! its key, payload and headers (so `id` survives) and the relay's `dlq.*` failure headers
//! (plus `dlq.consumer`, `dlq.original_partition`, `dlq.original_offset`), then commits the
//! offset: one poison event does not stop its partition. The relay's `outbox-relay dlq replay`
//! reads these dead letters too (same header names). A dead letter is never dropped: if the
//! dead-letter topic cannot be written, the send is retried until it can (the partition
//! waits). Database errors of the library's own statements (begin, processed_event insert,
//! commit) are retried with backoff without counting as handler attempts.
//!
//! # Formats
//! [`PayloadFormat::Raw`] (the relay's default: the payload column's bytes) or
//! [`PayloadFormat::DebeziumJsonString`] (Debezium's `JsonConverter` writing a string
//! payload: a JSON string literal, or `{"schema": ..., "payload": "..."}` with schemas
//! enabled), or [`PayloadFormat::Auto`].

#![warn(missing_docs)]

mod config;
mod dead_letter;
mod event;
mod handler;
pub mod internal_events;
mod metrics;
mod processed;
mod runner;

pub use config::{ConsumerConfig, CrashPoint, PayloadFormat};
pub use dead_letter::headers as dead_letter_headers;
pub use event::{decode_payload, ConsumedEvent, PayloadDecodeError};
pub use handler::{EventHandler, HandlerError};
pub use metrics::ConsumerMetrics;
pub use processed::{
    create_processed_event_table_sql, prune_processed_events, topic_retention, PruneError,
    PROCESSED_EVENT_TABLE,
};
pub use runner::{ConsumerError, OutboxConsumer};
