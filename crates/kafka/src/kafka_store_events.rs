//! The Kafka checkpoint store's internal events (the workspace's `internal_events`
//! pattern): each struct's `emit` logs the event and counts it, in one place.
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `outbox_kafka_checkpoint_topics_created_total` | counter | checkpoint topics this process created |
//! | `outbox_kafka_checkpoint_open_transaction_loads_total` | counter | loads that found a transaction still open on the checkpoint topic after waiting |

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{IntCounter, Registry};

/// The process-wide collectors of the Kafka store.
struct KafkaStoreMetrics {
    /// `outbox_kafka_checkpoint_topics_created_total`.
    topics_created: IntCounter,
    /// `outbox_kafka_checkpoint_open_transaction_loads_total`.
    open_transaction_loads: IntCounter,
}

impl KafkaStoreMetrics {
    fn new() -> Result<Self, prometheus::Error> {
        Ok(Self {
            topics_created: IntCounter::new(
                "outbox_kafka_checkpoint_topics_created_total",
                "Checkpoint topics created by this process.",
            )?,
            open_transaction_loads: IntCounter::new(
                "outbox_kafka_checkpoint_open_transaction_loads_total",
                "Checkpoint loads that returned while a transaction on the checkpoint topic was still open.",
            )?,
        })
    }
}

/// Created on first use; an `Err` (valid constant names never produce one) disables counting
/// and is reported by [`register_kafka_store_metrics`].
static METRICS: LazyLock<Result<KafkaStoreMetrics, prometheus::Error>> =
    LazyLock::new(KafkaStoreMetrics::new);

/// Registers the Kafka store's collectors into `registry` (the relay owns the registry).
pub fn register_kafka_store_metrics(registry: &Registry) -> Result<(), prometheus::Error> {
    outbox_binlog::register_lazy_collectors(registry, &METRICS, |metrics| {
        vec![
            Box::new(metrics.topics_created.clone()),
            Box::new(metrics.open_transaction_loads.clone()),
        ]
    })
}

/// The store created its compacted checkpoint topic.
#[derive(Debug)]
pub struct CheckpointTopicCreated<'a> {
    /// The topic.
    pub topic: &'a str,
    /// Its replicas.
    pub replication_factor: i32,
}

impl CheckpointTopicCreated<'_> {
    /// Logs and counts the event.
    pub fn emit(self) {
        tracing::info!(
            topic = self.topic,
            replication_factor = self.replication_factor,
            "created the checkpoint topic (1 partition, cleanup.policy=compact)"
        );
        if let Ok(metrics) = METRICS.as_ref() {
            metrics.topics_created.inc();
        }
    }
}

/// A load reached the last stable offset below the high watermark and the open
/// transaction did not resolve within the wait: it returned what is committed.
#[derive(Debug)]
pub struct CheckpointTopicTransactionOpen<'a> {
    /// Topic, brokers and connector.
    pub location: &'a str,
    /// Where the committed log ended (the first offset of the open transaction).
    pub last_stable_offset: i64,
    /// The high watermark when the load started.
    pub high_watermark: i64,
    /// How long the load waited.
    pub waited: Duration,
}

impl CheckpointTopicTransactionOpen<'_> {
    /// Logs and counts the event.
    pub fn emit(self) {
        tracing::warn!(
            location = self.location,
            last_stable_offset = self.last_stable_offset,
            high_watermark = self.high_watermark,
            waited_ms = self.waited.as_millis() as u64,
            "a transaction on the checkpoint topic is still open; loaded the last committed checkpoint before it (a crashed writer's transaction is aborted by the broker after transaction.timeout.ms, or when a writer with its transactional id starts)"
        );
        if let Ok(metrics) = METRICS.as_ref() {
            metrics.open_transaction_loads.inc();
        }
    }
}
