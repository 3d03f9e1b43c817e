//! Internal events (in the style of Vector's `internal_events`): each thing worth telling an
//! operator about is a struct whose [`InternalEvent::emit`] both logs it (tracing) and
//! counts it (Prometheus), in one place, so logs and metrics never disagree.
//!
//! # Metrics
//! The collectors are process-wide; [`register_metrics`] adds them to the relay's
//! [`prometheus::Registry`]:
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `outbox_checkpoint_commits_total` | counter | checkpoints stored |
//! | `outbox_checkpoint_commit_failures_total` | counter | failed store commits (retried) |
//! | `outbox_checkpoint_commit_duration_seconds` | histogram | time a store commit took |
//! | `outbox_checkpoint_event_timestamp_seconds` | gauge | source event time of the last stored checkpoint |
//! | `outbox_checkpoint_regressions_ignored_total` | counter | offered positions older than the stored one (ignored) |
//! | `outbox_checkpoint_ack_errors_total` | counter | acks the tracker rejected (double/unknown) |

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{Histogram, HistogramOpts, IntCounter, IntGauge, Registry};

use crate::checkpoint::CheckpointPosition;
use crate::store::CheckpointStoreError;
use crate::tracker::AckError;

/// Something that happened, logged and counted by [`InternalEvent::emit`].
pub trait InternalEvent {
    /// Logs the event and updates its metrics.
    fn emit(self);
}

/// The process-wide collectors of this crate.
struct CheckpointMetrics {
    /// `outbox_checkpoint_commits_total`.
    commits: IntCounter,
    /// `outbox_checkpoint_commit_failures_total`.
    commit_failures: IntCounter,
    /// `outbox_checkpoint_commit_duration_seconds`.
    commit_duration: Histogram,
    /// `outbox_checkpoint_event_timestamp_seconds`.
    committed_event_timestamp: IntGauge,
    /// `outbox_checkpoint_regressions_ignored_total`.
    regressions_ignored: IntCounter,
    /// `outbox_checkpoint_ack_errors_total`.
    ack_errors: IntCounter,
}

impl CheckpointMetrics {
    fn new() -> Result<Self, prometheus::Error> {
        Ok(Self {
            commits: IntCounter::new("outbox_checkpoint_commits_total", "Checkpoints stored.")?,
            commit_failures: IntCounter::new(
                "outbox_checkpoint_commit_failures_total",
                "Checkpoint store commits that failed (they are retried).",
            )?,
            commit_duration: Histogram::with_opts(
                HistogramOpts::new(
                    "outbox_checkpoint_commit_duration_seconds",
                    "Time a checkpoint store commit took.",
                )
                .buckets(vec![
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
                ]),
            )?,
            committed_event_timestamp: IntGauge::new(
                "outbox_checkpoint_event_timestamp_seconds",
                "Source event timestamp (Unix seconds) of the last stored checkpoint.",
            )?,
            regressions_ignored: IntCounter::new(
                "outbox_checkpoint_regressions_ignored_total",
                "Offered checkpoint positions older than the stored one, ignored.",
            )?,
            ack_errors: IntCounter::new(
                "outbox_checkpoint_ack_errors_total",
                "Acks rejected by the ack tracker (double ack or unknown token).",
            )?,
        })
    }
}

/// Created on first use; an `Err` (which constant, valid names never produce) disables
/// counting and is reported by [`register_metrics`].
static METRICS: LazyLock<Result<CheckpointMetrics, prometheus::Error>> =
    LazyLock::new(CheckpointMetrics::new);

fn metrics() -> Option<&'static CheckpointMetrics> {
    METRICS.as_ref().ok()
}

/// Registers this crate's collectors into `registry` (the relay owns the registry). Fails if
/// they are already registered there.
pub fn register_metrics(registry: &Registry) -> Result<(), prometheus::Error> {
    outbox_binlog::register_lazy_collectors(registry, &METRICS, |metrics| {
        vec![
            Box::new(metrics.commits.clone()),
            Box::new(metrics.commit_failures.clone()),
            Box::new(metrics.commit_duration.clone()),
            Box::new(metrics.committed_event_timestamp.clone()),
            Box::new(metrics.regressions_ignored.clone()),
            Box::new(metrics.ack_errors.clone()),
        ]
    })
}

/// A checkpoint was stored.
#[derive(Debug)]
pub struct CheckpointCommitted<'a> {
    /// What was stored.
    pub position: &'a CheckpointPosition,
    /// How long the store took (slow stores slow the commit cadence, not the pipeline).
    pub duration: Duration,
    /// [`crate::CheckpointStore::describe`] of the store, so the log says where.
    pub store: &'a str,
}

impl InternalEvent for CheckpointCommitted<'_> {
    fn emit(self) {
        tracing::debug!(
            binlog = %self.position.binlog,
            gtid_set = %self.position.gtid_set,
            event_timestamp = self.position.timestamp,
            duration_ms = self.duration.as_secs_f64() * 1000.0,
            store = self.store,
            "checkpoint committed"
        );
        if let Some(metrics) = metrics() {
            metrics.commits.inc();
            metrics.commit_duration.observe(self.duration.as_secs_f64());
            metrics
                .committed_event_timestamp
                .set(i64::from(self.position.timestamp));
        }
    }
}

/// Storing a checkpoint failed; the position stays pending and the next offer or flush
/// retries.
#[derive(Debug)]
pub struct CheckpointCommitFailed<'a> {
    /// Why the store failed.
    pub error: &'a CheckpointStoreError,
    /// The position that was not stored.
    pub position: &'a CheckpointPosition,
    /// Where it should have gone.
    pub store: &'a str,
}

impl InternalEvent for CheckpointCommitFailed<'_> {
    fn emit(self) {
        tracing::warn!(
            error = %self.error,
            binlog = %self.position.binlog,
            store = self.store,
            "checkpoint commit failed; it will be retried"
        );
        if let Some(metrics) = metrics() {
            metrics.commit_failures.inc();
        }
    }
}

/// A position older than the last committed one was offered and ignored.
#[derive(Debug)]
pub struct CheckpointRegressionIgnored<'a> {
    /// The older position that was offered.
    pub offered: &'a CheckpointPosition,
    /// The newer position already committed or pending.
    pub newest: &'a CheckpointPosition,
}

impl InternalEvent for CheckpointRegressionIgnored<'_> {
    fn emit(self) {
        tracing::warn!(
            offered = %self.offered.binlog,
            newest = %self.newest.binlog,
            "ignoring a checkpoint position older than the newest one"
        );
        if let Some(metrics) = metrics() {
            metrics.regressions_ignored.inc();
        }
    }
}

/// The ack tracker rejected an ack (double ack or a token of another tracker).
#[derive(Debug)]
pub struct AckRejected<'a> {
    /// What the tracker said.
    pub error: &'a AckError,
}

impl InternalEvent for AckRejected<'_> {
    fn emit(self) {
        tracing::error!(error = %self.error, "ack tracker rejected an ack");
        if let Some(metrics) = metrics() {
            metrics.ack_errors.inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_register_and_count() {
        let registry = Registry::new();
        register_metrics(&registry).unwrap();
        assert!(
            register_metrics(&registry).is_err(),
            "registering twice is an error"
        );
        let before = metrics().unwrap().ack_errors.get();
        let error = AckError::UnknownToken {
            token: crate::AckTracker::new(CheckpointPosition::at(
                outbox_binlog::BinlogPosition::new("b.000001", 4),
            ))
            .add_record(),
        };
        AckRejected { error: &error }.emit();
        assert!(metrics().unwrap().ack_errors.get() > before);
        let names: Vec<String> = registry
            .gather()
            .iter()
            .map(|family| family.name().to_owned())
            .collect();
        assert!(
            names.contains(&"outbox_checkpoint_commits_total".to_owned()),
            "{names:?}"
        );
        assert!(names.contains(&"outbox_checkpoint_ack_errors_total".to_owned()));
    }
}
