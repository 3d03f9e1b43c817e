//! The relay's Kafka sink on its own, for records routed from rows read from an outbox
//! table rather than the binlog: `outbox-relay audit --fill` and the gap fill at startup
//! (`[source] on_purged = "fill_from_table"`). Idempotent producer, retries, dead letters
//! per `[dead_letter]`, as the relay publishes; it never touches the checkpoint.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::config::RelayConfig;
use crate::dead_letter::RecordOrigin;
use crate::metrics::Metrics;
use crate::shutdown::ShutdownController;
use crate::sink::{run_kafka_sink, KafkaSinkSettings, OutboundRecord, SinkError, SinkItem};
use crate::tasks::spawn_named;

/// The sink stopped taking records (its error comes from [`TableFill::finish`]).
#[derive(Debug)]
pub struct SinkStopped;

/// Why records handed to a [`TableFill`] were not all acknowledged.
#[derive(Debug, thiserror::Error)]
pub enum TableFillError {
    /// The sink stopped with an error.
    #[error("the Kafka sink stopped: {0}")]
    Sink(#[source] SinkError),
    /// The sink's task panicked.
    #[error("the Kafka sink panicked")]
    SinkPanicked,
}

/// The relay's Kafka sink on its own, publishing records routed from rows read from an
/// outbox table: `audit --fill` and the gap fill at startup (`[source] on_purged`).
pub struct TableFill {
    /// Batches of records to publish.
    records: mpsc::Sender<Vec<SinkItem<u64>>>,
    /// Records Kafka acknowledged.
    acknowledged: Arc<AtomicU64>,
    /// Stops the sink early when the walk failed.
    stop: ShutdownController,
    /// The sink's task: its outcome says whether everything handed over was acknowledged.
    sink: tokio::task::JoinHandle<Result<crate::sink::SinkSummary, SinkError>>,
}

impl TableFill {
    /// Starts the sink with the relay's `[kafka]` and `[dead_letter]` settings.
    pub fn start(config: &RelayConfig) -> Self {
        let (records, records_rx) = mpsc::channel(config.pipeline.channel_capacity);
        let acknowledged = Arc::new(AtomicU64::new(0));
        let stop = ShutdownController::new();
        let sink = {
            let acknowledged = acknowledged.clone();
            spawn_named(
                "table-fill-sink",
                run_kafka_sink(
                    KafkaSinkSettings::from_relay_config(config),
                    records_rx,
                    move |_ticket: u64| {
                        acknowledged.fetch_add(1, Ordering::Relaxed);
                    },
                    Metrics::new(),
                    stop.subscribe(),
                ),
            )
        };
        Self {
            records,
            acknowledged,
            stop,
            sink,
        }
    }

    /// Hands `records` (each with where its row came from, which a dead letter names) to
    /// the sink; `Err` when the sink has stopped.
    pub async fn publish(
        &self,
        records: Vec<(OutboundRecord, RecordOrigin)>,
    ) -> Result<(), SinkStopped> {
        if records.is_empty() {
            return Ok(());
        }
        let items = records
            .into_iter()
            .map(|(record, origin)| SinkItem {
                origin,
                record,
                ticket: 0,
            })
            .collect();
        self.records.send(items).await.map_err(|_| SinkStopped)
    }

    /// Waits for every record handed over to be acknowledged (after a failed walk, up to
    /// `pipeline.shutdown_timeout_ms`); how many were.
    pub async fn finish(self, walk_failed: bool) -> Result<u64, TableFillError> {
        drop(self.records);
        if walk_failed {
            self.stop.trigger();
        }
        self.sink
            .await
            .map_err(|_| TableFillError::SinkPanicked)?
            .map_err(TableFillError::Sink)?;
        Ok(self.acknowledged.load(Ordering::Relaxed))
    }
}
