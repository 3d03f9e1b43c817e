//! Replays after a restart: records the previous run had already sent, read and sent again
//! because its checkpoint was behind them (`outbox_relay_replayed_records_total`).
//!
//! The checkpoint only passes acked records (invariant 1), so after a crash (`kill -9`, a
//! lost host) every record between the checkpoint and the point the crashed run had reached
//! is sent again, and each one that had reached Kafka is a duplicate on its topic (same
//! `id`). The crash point itself is gone with the process; what survives is what the
//! previous run stored: with every checkpoint commit it also stores **sent through**, the
//! newest transaction end whose records it had handed on for sending
//! ([`outbox_checkpoint::Checkpoint::sent_through`]; while the acked position stands still
//! it is stored again once per commit interval). At startup, the records the relay hands to
//! the sink for transactions ending at or before that position are counted.
//!
//! What the number is:
//! * a **lower bound** of the records re-read between the checkpoint and the crash point:
//!   the crashed run may have sent more in its last commit interval after its last commit;
//! * each counted record had been handed on for sending by the crashed run (its own record
//!   says so), so it is a *possible* duplicate: an actual duplicate on the topic exactly
//!   when that earlier send reached Kafka (most had: the checkpoint trails the acks by at
//!   most one commit interval), not when the crash came first;
//! * 0 after a graceful stop (the final checkpoint covers everything sent), after
//!   `checkpoint set`, and when the relay resumes by GTID set (after a failover the stored
//!   file offsets belong to another server, so nothing is counted rather than guessed).

use std::cmp::Ordering;
use std::sync::{Arc, Mutex};

use outbox_binlog::BinlogPosition;
use outbox_checkpoint::compare_binlog_positions;

use crate::internal_events::{InternalEvent, RecordsReplayed, ReplayFinished};
use crate::metrics::Metrics;
use crate::sink::{BatchBoundary, SinkMetrics, SinkObserver};

/// The newest transaction end whose records the router handed to the sink: written by the
/// router, read by the committer, which stores it with the checkpoint.
///
/// Only once the sink reached the cluster ([`SentThrough::sink_reached_cluster`]): before
/// that the records wait in the channel and nothing was sent, so a failed start (Kafka
/// unreachable, credentials refused) stores no `sent_through`, and the next start does not
/// take it for a crash.
#[derive(Debug, Clone, Default)]
pub struct SentThrough(Arc<Mutex<SentThroughState>>);

/// [`SentThrough`]'s state.
#[derive(Debug, Default)]
struct SentThroughState {
    /// The newest position the router advanced to.
    position: Option<BinlogPosition>,
    /// The sink reached the cluster: what it was handed may reach Kafka.
    sink_reached_cluster: bool,
}

impl SentThrough {
    /// The router handed every record of the transaction ending at `position` to the sink.
    pub fn advance(&self, position: &BinlogPosition) {
        self.lock().position = Some(position.clone());
    }

    /// The sink reached the cluster and takes its input from now on.
    pub fn sink_reached_cluster(&self) {
        self.lock().sink_reached_cluster = true;
    }

    /// The newest position advanced to, once the sink reached the cluster; else `None`.
    pub fn get(&self) -> Option<BinlogPosition> {
        let state = self.lock();
        state
            .sink_reached_cluster
            .then(|| state.position.clone())
            .flatten()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SentThroughState> {
        // Plain values: a panic elsewhere cannot leave them half-written.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The host of one pipeline attempt's sink: the relay's [`Metrics`], and the attempt's
/// [`SentThrough`], told when the sink reached the cluster.
pub struct AttemptSinkObserver {
    /// Collectors, readiness, the exactly-once sink's checkpoints.
    pub metrics: Arc<Metrics>,
    /// The attempt's sent-through record.
    pub sent_through: SentThrough,
}

impl SinkObserver for AttemptSinkObserver {
    fn sink_metrics(&self) -> &SinkMetrics {
        self.metrics.sink_metrics()
    }

    fn delivered(&self) {
        self.metrics.delivered();
    }

    fn retrying(&self) {
        self.metrics.retrying();
    }

    fn checkpoint_committed(&self, boundary: &BatchBoundary) {
        self.metrics.checkpoint_committed(boundary);
    }

    fn cluster_reached(&self) {
        self.sent_through.sink_reached_cluster();
    }
}

/// Counts the records of transactions up to the previous run's sent-through position.
#[derive(Debug)]
pub struct ReplayCounter {
    /// The previous run's sent-through position; `None` once passed (or unknown).
    sent_through: Option<BinlogPosition>,
    /// Records counted so far, for the log line at the end.
    counted: u64,
}

impl ReplayCounter {
    /// Counting up to `sent_through` (the stored checkpoint's, when the relay resumes at its
    /// file position on the server that wrote it; else pass `None`: nothing is counted).
    pub fn new(sent_through: Option<BinlogPosition>) -> ReplayCounter {
        ReplayCounter {
            sent_through,
            counted: 0,
        }
    }

    /// A transaction (or heartbeat) ended at `position` after `records` records of it were
    /// handed to the sink: they are replays if it ends at or before the sent-through
    /// position. Positions come in binlog order, so once past it, counting stops.
    pub fn transaction_ended(
        &mut self,
        position: &BinlogPosition,
        records: u64,
        metrics: &Metrics,
    ) {
        let Some(sent_through) = &self.sent_through else {
            return;
        };
        match compare_binlog_positions(position, sent_through) {
            Some(Ordering::Less | Ordering::Equal) => {
                if records > 0 {
                    self.counted += records;
                    RecordsReplayed { records }.emit(metrics);
                }
                if compare_binlog_positions(position, sent_through) == Some(Ordering::Equal) {
                    self.finish(metrics);
                }
            }
            // Past it, or not comparable (another binlog base name): done.
            _ => self.finish(metrics),
        }
    }

    /// The stream moved to another server: its positions cannot be compared with the
    /// previous run's, so counting stops.
    pub fn source_moved(&mut self, metrics: &Metrics) {
        self.finish(metrics);
    }

    fn finish(&mut self, metrics: &Metrics) {
        if let Some(sent_through) = self.sent_through.take() {
            ReplayFinished {
                records: self.counted,
                sent_through: &sent_through,
            }
            .emit(metrics);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_records_of_transactions_up_to_the_sent_through_position() {
        let metrics = Metrics::new();
        let at = |offset| BinlogPosition::new("binlog.000002", offset);
        let mut counter = ReplayCounter::new(Some(at(500)));
        counter.transaction_ended(&at(200), 2, &metrics);
        counter.transaction_ended(&at(300), 0, &metrics); // a heartbeat
        counter.transaction_ended(&at(500), 3, &metrics);
        counter.transaction_ended(&at(600), 4, &metrics);
        assert_eq!(metrics.replayed_records.get(), 5);
        // Past it, nothing more is counted even for an (impossible) older position.
        counter.transaction_ended(&at(400), 1, &metrics);
        assert_eq!(metrics.replayed_records.get(), 5);

        let mut counter = ReplayCounter::new(Some(at(500)));
        counter.transaction_ended(&BinlogPosition::new("binlog.000003", 100), 7, &metrics);
        assert_eq!(metrics.replayed_records.get(), 5, "a later file is past it");
        let mut counter = ReplayCounter::new(Some(at(500)));
        counter.source_moved(&metrics);
        counter.transaction_ended(&at(200), 1, &metrics);
        assert_eq!(
            metrics.replayed_records.get(),
            5,
            "after a move nothing counts"
        );
        let mut counter = ReplayCounter::new(None);
        counter.transaction_ended(&at(200), 1, &metrics);
        assert_eq!(metrics.replayed_records.get(), 5);
    }

    #[test]
    fn sent_through_counts_only_once_the_sink_reached_the_cluster() {
        let sent_through = SentThrough::default();
        sent_through.advance(&BinlogPosition::new("binlog.000002", 500));
        assert_eq!(
            sent_through.get(),
            None,
            "records in the channel were not sent"
        );
        let observer = AttemptSinkObserver {
            metrics: Metrics::new(),
            sent_through: sent_through.clone(),
        };
        observer.cluster_reached();
        assert_eq!(
            sent_through.get(),
            Some(BinlogPosition::new("binlog.000002", 500))
        );
    }
}
