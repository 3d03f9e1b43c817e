//! The Kafka sink: sends records with an idempotent producer (`enable.idempotence=true`,
//! `acks=all`), many in flight, and reports each acknowledged record's ticket.
//!
//! # Delivery contract
//! * A record is reported (its ticket passed to `on_delivered`) only after Kafka
//!   acknowledged it. Every record taken from the input is kept until then.
//! * librdkafka retries every send without a time limit (`message.timeout.ms = 0`,
//!   protected): a record never expires while a younger one of its partition is retried,
//!   so outages (broker down, leader changes, retriable broker errors) cost no order.
//! * The producer is replaced, and every unacked record resent in input order, when it can
//!   no longer deliver in order by itself: a fatal producer error (an idempotence gap, or a
//!   broker rejection under `enable.gapless.guarantee`), a failed delivery librdkafka gave
//!   up on, or the stall watchdog: the oldest unacked record had no ack for
//!   `stall_timeout` (a producer whose id the cluster forgot never recovers by itself).
//!   No new input is taken from the request on; the old producer is purged (its queue and
//!   requests in flight, voiding their late acks) and every delivery report it owes is
//!   awaited first, so nothing of the old producer can land after a resend of the new one
//!   (a purged record may have landed already: a duplicate, never a loss).
//! * A delivery report is classified by its own error code first: a permanent rejection
//!   stays permanent even when it also made the producer fatal (with
//!   `enable.gapless.guarantee` every broker-side rejection does); the producer is then
//!   rebuilt as well.
//! * Permanent errors (record too large, authorization, invalid topic, a partition beyond
//!   the topic's count, corrupt record, policy violation), whether reported on delivery or
//!   at once by the producer, are resent up to
//!   `dead_letter.max_attempts` times (with backoff), then the record is replaced by its
//!   dead letter ([`crate::dead_letter`]) on `dead_letter.topic` under the same ticket, so
//!   the ticket is reported only once the dead letter is acked. With dead letters off, for
//!   an error class in `dead_letter.fail_on`, or when the dead letter itself is rejected,
//!   the sink stops with [`SinkError::Permanent`] naming the topic; nothing is skipped.
//! * Before the first send to a topic the sink checks that it exists, creating it through
//!   the admin API when `create_topics` is set, otherwise failing with
//!   [`SinkError::TopicMissing`]. Known topics are cached. Every metadata and admin
//!   request is bounded (`admin_timeout`), and waiting for a topic (the first record's, or
//!   the dead-letter topic's when a record is dead-lettered) gives way to shutdown: the
//!   record then stays unreported.
//! * The input carries batches of records in order (`Vec<SinkItem>`, one channel message
//!   each): the at-least-once sink takes a batch's records one after the other while the
//!   limits below allow and keeps the rest, in order, for later passes (a batch may be
//!   split, never reordered); the exactly-once sink takes them one per pass.
//! * At most `max_in_flight` records are unacked at any time; the bounded input channel
//!   then applies backpressure upstream.
//!
//! # Shutdown
//! When the shutdown signal fires the sink takes no new input and waits up to
//! `drain_timeout` for the records in flight; those still unacked at the deadline are
//! abandoned (never reported), which keeps them out of the checkpoint. Records of a batch
//! not taken yet are dropped unreported, as those still in the channel.
//!
//! # Layout
//! * `producer`: the librdkafka properties, client construction, and enqueueing one record
//!   (the at-least-once sink's producer reports every delivery into one channel);
//! * `classify`: what a delivery error means (retry, rebuild, permanent);
//! * `dead_lettering`: the dead-letter policy applied to a permanent failure;
//! * `rebuild`: replacing the producer without reordering (purge, drain, rebuild) and the
//!   stall watchdog's deadline;
//! * `topics`: reaching the cluster at startup, checking and creating topics;
//! * `task`: [`run_kafka_sink`], the loop that ties them together;
//! * `transactional`: [`run_transactional_sink`], the exactly-once sink;
//! * `host`: what the sink needs from the program that runs it ([`SinkObserver`],
//!   [`ShutdownSignal`], [`SinkConfigSource`]); `metrics`: its collectors ([`SinkMetrics`]).

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::error::KafkaError;

use crate::config::{DeadLetterConfig, KafkaConfig};
use crate::dead_letter::RecordOrigin;

mod classify;
mod dead_lettering;
mod host;
mod metrics;
mod pending;
mod producer;
mod rebuild;
mod task;
#[cfg(test)]
mod tests;
mod topics;
mod transactional;
#[cfg(test)]
mod transactional_tests;

pub use classify::{classify_delivery_error, FailureKind};
pub use host::{ShutdownSignal, SinkConfigSource, SinkObserver};
pub use metrics::{SinkMetrics, LATENCY_BUCKETS};
pub use producer::{
    check_client_properties, create_kafka_client, kafka_client_properties, producer_properties,
    KafkaClientError,
};
pub use task::run_kafka_sink;
pub use topics::create_topic;
pub use transactional::{
    run_transactional_sink, transactional_properties, BatchBoundary, RejectedRecords,
    SequencedTicket, TransactionalSinkSettings, TransactionalSummary,
};

/// What the at-least-once sink tells a record's ticket besides handing it back on ack.
pub trait SinkTicket {
    /// Kafka rejected the record for good and the sink swapped it for its dead letter: the
    /// ack that follows is the dead letter's. The binlog relay's checkpoint treats both
    /// alike (the default ignores it); the polling source marks the row DEAD instead of
    /// SENT, with `reason`.
    fn dead_lettered(&mut self, _reason: &str) {}

    /// The sink gave up on the record (only with
    /// [`KafkaSinkSettings::give_up_on_rebuild`]): it was not delivered as far as the sink
    /// knows (a copy may still arrive: a duplicate), and the ack that follows hands the
    /// ticket back for its source to retry.
    fn gave_up(&mut self, _reason: &str) {}
}

impl SinkTicket for u32 {}
impl SinkTicket for u64 {}

/// A record ready for Kafka, independent of how it was routed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundRecord {
    /// Destination topic.
    pub topic: String,
    /// Record key (decides the partition, hence per-key order); `None` for no key.
    pub key: Option<Vec<u8>>,
    /// Record value; `None` for a tombstone.
    pub payload: Option<Vec<u8>>,
    /// Record headers in order (e.g. `id` = event id).
    pub headers: Vec<(String, Vec<u8>)>,
    /// Headers sent with a null value, each with its place among `headers` (a NULL
    /// additional column as Debezium sends it). Kept apart so `headers` stays a list of
    /// byte values for dead letters, hashes and sizes; [`OutboundRecord::headers_to_send`]
    /// merges them.
    pub null_headers: Vec<outbox_router::NullHeader>,
    /// Record timestamp (ms since the epoch); `None` lets the producer stamp it.
    pub timestamp_ms: Option<i64>,
    /// Explicit partition; `None` lets the partitioner hash the key.
    pub partition: Option<i32>,
}

/// The router's record as the sink sends it.
impl From<outbox_router::KafkaRecord> for OutboundRecord {
    fn from(record: outbox_router::KafkaRecord) -> Self {
        OutboundRecord {
            topic: record.topic,
            key: record.key,
            payload: record.value,
            headers: record.headers,
            null_headers: record.null_headers,
            timestamp_ms: record.timestamp_millis,
            partition: record.partition,
        }
    }
}

impl OutboundRecord {
    /// Every header in sending order, `None` for a null value.
    pub fn headers_to_send(&self) -> impl Iterator<Item = (&str, Option<&[u8]>)> {
        outbox_router::headers_in_sending_order(&self.headers, &self.null_headers)
    }
}

/// One record plus the caller's ticket, returned through `on_delivered` once acked.
#[derive(Debug)]
pub struct SinkItem<T> {
    /// The record to send.
    pub record: OutboundRecord,
    /// Opaque to the sink; identifies the record to the ack tracker.
    pub ticket: T,
    /// Where the event came from in the binlog; goes into its dead letter, if any.
    pub origin: RecordOrigin,
}

/// Sink settings derived from `[kafka]` and `[pipeline]`.
#[derive(Debug, Clone)]
pub struct KafkaSinkSettings {
    /// The full librdkafka property list (bootstrap, idempotence, tuning, pass-through).
    pub client_properties: Vec<(String, String)>,
    /// Create missing topics through the admin API.
    pub create_topics: bool,
    /// Partitions of created topics.
    pub topic_partitions: i32,
    /// Replication factor of created topics.
    pub topic_replication_factor: i32,
    /// Topic configs of created topics.
    pub topic_config: BTreeMap<String, String>,
    /// Timeout of metadata and admin requests.
    pub admin_timeout: Duration,
    /// First resend delay.
    pub retry_initial_backoff: Duration,
    /// Largest resend delay (before jitter).
    pub retry_max_backoff: Duration,
    /// Most unacked records.
    pub max_in_flight: usize,
    /// How long shutdown waits for records in flight.
    pub drain_timeout: Duration,
    /// What a permanently rejected record becomes (dead letter or stop).
    pub dead_letter: DeadLetterConfig,
    /// Metadata requests at startup before the sink gives up on an unreachable cluster
    /// (0 = forever).
    pub startup_attempts: u32,
    /// How long the oldest unacked record may go without an ack before the producer is
    /// purged and rebuilt and every unacked record resent in input order (librdkafka's own
    /// delivery timeout is infinite).
    pub stall_timeout: Duration,
    /// Hand records back instead of resending them: when the producer must be replaced
    /// (a stall, a failure librdkafka gave up on, a fatal error), every unacked record's
    /// ticket is told [`SinkTicket::gave_up`] and handed back through `on_delivered`, and
    /// the new producer starts empty. For a source that retries on its own schedule (poll
    /// mode: the row goes back to PENDING with a backoff); the binlog relay resends.
    pub give_up_on_rebuild: bool,
}

impl KafkaSinkSettings {
    /// Settings from `[kafka]` with the relay's in-flight limit and drain timeout; dead
    /// letters at their defaults.
    pub fn from_config(kafka: &KafkaConfig, max_in_flight: usize, drain_timeout: Duration) -> Self {
        Self {
            client_properties: producer_properties(kafka),
            create_topics: kafka.create_topics,
            topic_partitions: kafka.topic_partitions,
            topic_replication_factor: kafka.topic_replication_factor,
            topic_config: kafka.topic_config.clone(),
            admin_timeout: Duration::from_millis(kafka.admin_timeout_ms),
            retry_initial_backoff: Duration::from_millis(kafka.retry_initial_backoff_ms),
            retry_max_backoff: Duration::from_millis(kafka.retry_max_backoff_ms),
            max_in_flight,
            drain_timeout,
            dead_letter: DeadLetterConfig::default(),
            startup_attempts: kafka.startup_attempts,
            stall_timeout: Duration::from_millis(kafka.stall_timeout_ms),
            give_up_on_rebuild: false,
        }
    }

    /// Settings from the whole config, `[dead_letter]` included.
    pub fn from_relay_config(config: &impl SinkConfigSource) -> Self {
        Self {
            dead_letter: config.dead_letter().clone(),
            ..Self::from_config(
                config.kafka(),
                config.max_in_flight(),
                config.drain_timeout(),
            )
        }
    }
}

/// Why the sink stopped.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The producer or admin client could not be created (bad property, usually).
    #[error("cannot create the Kafka client: {0}; check [kafka] and [kafka.properties]")]
    Client(#[source] KafkaClientError),
    /// A topic does not exist and `kafka.create_topics` is off.
    #[error(
        "Kafka topic `{topic}` does not exist; create it, or set `kafka.create_topics = true`"
    )]
    TopicMissing {
        /// The missing topic.
        topic: String,
    },
    /// Creating a topic failed.
    #[error("cannot create Kafka topic `{topic}`: {message}")]
    TopicCreation {
        /// The topic.
        topic: String,
        /// The broker's or client's message.
        message: String,
    },
    /// A broker refused the relay for a reason retrying cannot fix (wrong credentials, a
    /// certificate that does not verify): definite, reported at the first failure.
    #[error("the Kafka cluster at {brokers} refused the relay: {reason}; fix [kafka.security] (or [kafka.properties]) and start again")]
    Refused {
        /// `bootstrap.servers`.
        brokers: String,
        /// librdkafka's reason ([`crate::kafka_context::ClientFailure`]).
        reason: String,
    },
    /// No broker answered a metadata request at startup within `kafka.startup_attempts`.
    #[error("cannot reach the Kafka cluster at {brokers}: {attempts} metadata requests over {waited:?} failed, the last with: {error} ({reason}); check kafka.brokers, that the brokers are up and reachable from this host, and the security settings in [kafka.security] and [kafka.properties] (or set kafka.startup_attempts = 0 to wait forever)")]
    Unreachable {
        /// `bootstrap.servers`.
        brokers: String,
        /// How many requests failed.
        attempts: u32,
        /// Time from the first request to giving up.
        waited: Duration,
        /// The last request's error (boxed: large, and this path is cold).
        error: Box<KafkaError>,
        /// librdkafka's last reported reason (the request's error says only e.g.
        /// `BrokerTransportFailure`).
        reason: String,
    },
    /// The exactly-once sink aborted its Kafka transaction (transient): nothing of it is
    /// visible to `read_committed` consumers; the relay restarts from the checkpoint.
    #[error("Kafka transaction of `{transactional_id}` aborted: {reason}; restarting from the stored checkpoint")]
    TransactionAborted {
        /// The producer's `transactional.id`.
        transactional_id: String,
        /// What failed.
        reason: String,
    },
    /// A newer producer with the same `transactional.id` fenced this one: another relay
    /// with the same connector name is active. Definite for this process.
    #[error("the Kafka producer `{transactional_id}` was fenced by a newer one with the same transactional.id ({message}): another relay with connector name of this id is active; this one stopped publishing")]
    Fenced {
        /// The producer's `transactional.id`.
        transactional_id: String,
        /// librdkafka's message.
        message: String,
    },
    /// A record whose big payload only the producer held (the sink does not keep a second
    /// copy of payloads over 1 MiB) failed without its payload coming back: the producer
    /// went away before reporting it. Transient: the relay restarts from the stored
    /// checkpoint, which never passed the record, and reads the row again.
    #[error("a record for topic `{topic}` failed ({reason}) and its payload, held only by the replaced Kafka producer, did not come back; restarting from the stored checkpoint to read the row again")]
    PayloadLost {
        /// The record's topic.
        topic: String,
        /// The delivery error.
        reason: String,
    },
    /// Kafka rejected a record for a reason retrying cannot fix.
    #[error("Kafka rejected a record for topic `{topic}` (key {key}): {error}; the relay stopped so nothing is skipped")]
    Permanent {
        /// The record's topic.
        topic: String,
        /// The record's key, lossy UTF-8, for the operator.
        key: String,
        /// What Kafka said (boxed: it is large and this path is cold).
        error: Box<KafkaError>,
    },
}

impl SinkError {
    /// Whether the pipeline may restart from the stored checkpoint and try again: an
    /// aborted Kafka transaction of the exactly-once sink, or a big payload lost with a
    /// replaced producer.
    pub fn restarts_from_checkpoint(&self) -> bool {
        matches!(
            self,
            SinkError::TransactionAborted { .. } | SinkError::PayloadLost { .. }
        )
    }
}

/// What the sink did before it returned normally.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SinkSummary {
    /// Records acknowledged and reported.
    pub delivered: u64,
    /// Records still unacked when the shutdown deadline passed (never reported).
    pub abandoned: usize,
}
