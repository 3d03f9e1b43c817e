//! Prometheus metrics of one relay (served by [`crate::http`]).
//!
//! # Contract
//! * Every metric is changed only through [`crate::internal_events`], so a log line and its
//!   counter never disagree. Gauges that are ages (oldest unacked record, readiness) are
//!   computed from their timestamps when the registry is rendered, so they keep growing
//!   while nothing happens.
//! * Labels are low-cardinality only: `kind`/`class` (a fixed set of error classes), the
//!   build's `version`/`git_sha`; never ids, keys or positions.
//! * The Kafka sink's collectors ([`SinkMetrics`]: deliveries, delivery errors, retries,
//!   dead letters, in flight, producer rebuilds, latencies, Kafka transactions) are
//!   `outbox-kafka`'s, registered into this relay's registry under the same names; a
//!   [`Metrics`] reads through to them (`metrics.records_delivered` is
//!   `metrics.sink.records_delivered`), and is the sink's [`SinkObserver`].

use std::sync::Arc;

use outbox_kafka::sink::{BatchBoundary, SinkMetrics, SinkObserver};
use prometheus::{
    Encoder, Gauge, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

use crate::health::Health;
use crate::internal_events::{CheckpointCommitted, InternalEvent};

pub use outbox_kafka::sink::LATENCY_BUCKETS;

/// The git commit the binary was built from (`build.rs`: `OUTBOX_RELAY_GIT_SHA`, else
/// `git rev-parse`, else `unknown`).
pub const GIT_SHA: &str = env!("OUTBOX_RELAY_GIT_SHA");

/// All metrics of one relay; cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Metrics {
    /// The registry the text endpoint encodes; one per relay so in-process tests don't mix.
    pub registry: Registry,
    /// The Kafka sink's collectors, registered in `registry` (the sink is `outbox-kafka`'s,
    /// and counts only through its own events); also what `Metrics` dereferences to.
    pub sink: SinkMetrics,
    /// Row changes of watched tables read from the binlog.
    pub events_read: IntCounter,
    /// Committed transactions read (watched rows or not).
    pub transactions_read: IntCounter,
    /// Rows the router turned into records.
    pub events_routed: IntCounter,
    /// Rows the router skipped by design (updates, deletes of outbox rows).
    pub events_skipped: IntCounter,
    /// Bytes of row data reserved between the reader and Kafka's ack
    /// (`pipeline.max_in_flight_bytes`).
    pub in_flight_bytes: IntGauge,
    /// Checkpoint commits that reached the store.
    pub checkpoint_commits: IntCounter,
    /// Byte offset of the last committed checkpoint position.
    pub checkpoint_binlog_offset: IntGauge,
    /// Numeric suffix of the last committed binlog file (`binlog.000042` -> 42).
    pub checkpoint_binlog_file_number: IntGauge,
    /// Seconds between now and the server timestamp of the last committed transaction;
    /// 0 when every read transaction is committed (caught up and idle).
    pub checkpoint_lag_seconds: Gauge,
    /// Reconnects of the binlog source after transient errors.
    pub source_reconnects: IntCounter,
    /// Outbox rows published from the table by gap fills (`[source] on_purged =
    /// "fill_from_table"`), for a purged checkpoint position.
    pub gap_filled: IntCounter,
    /// Gap fills of a table that could not prove every event recovered: the table held no
    /// row older than the fill's window, so rows the gap needed may have been deleted.
    pub gap_unrecoverable: IntCounter,
    /// Seconds since the `XA PREPARE` (server clock) of the oldest prepared XA transaction
    /// whose outbox rows the relay holds until its outcome; 0 when none. A prepared XA
    /// transaction also holds the checkpoint back, so a growing value needs an operator
    /// (`XA RECOVER` lists them).
    pub xa_oldest_prepared_age_seconds: IntGauge,
    /// Prepared XA transactions whose outbox rows the relay holds.
    pub xa_prepared_held: IntGauge,
    /// Seconds between now and the server timestamp of the newest transaction read; 0
    /// after a heartbeat (the server had nothing newer to send).
    pub source_seconds_behind: Gauge,
    /// Records of this run that the previous run had already handed on for sending before
    /// it crashed (read again between the stored checkpoint and the sent-through position
    /// stored with it; see [`crate::replay`]): possible duplicates, a lower bound of the
    /// replay.
    pub replayed_records: IntCounter,
    /// 1 when `/readyz` says ready, else 0 (rendered from `health`).
    pub ready: IntGauge,
    /// Always 1, labelled with the build's `version` and `git_sha`.
    pub build_info: IntGaugeVec,
    /// The readiness checks `/readyz` reports.
    pub health: Health,
    /// Seconds of binlog retention left before the checkpoint's file may be purged by age
    /// (`+Inf`: no expiry; NaN: not measured). See [`crate::purge_horizon`].
    pub binlog_purge_horizon_seconds: Gauge,
    /// Bytes the server may still write before the checkpoint's file is purged by size
    /// (`+Inf`: no `max_binlog_total_size`; NaN: not measured).
    pub binlog_purge_horizon_bytes: Gauge,
    /// Binlog bytes between the committed checkpoint and the server's newest position.
    pub source_binlog_bytes_behind: Gauge,
    /// 1 while this relay leads its connector's lease group (`[ha]`) and publishes, else 0
    /// (a standby, or `[ha]` off: then it is 1 while running).
    pub leader: IntGauge,
    /// The leader epoch of the current (or last) term under `[ha]`; 0 before the first.
    pub leader_epoch: IntGauge,
    /// Leadership changes of this relay under `[ha]`: each term gained and each term
    /// ended counts one.
    pub leadership_changes: IntCounter,
    /// Times this relay was fenced as a stale leader, by `kind`: `checkpoint_store` (the
    /// store refused its epoch), `lease` (the lease ended its term while it published).
    pub fencing_events: IntCounterVec,
    /// `[heartbeat]` records by `outcome`: `sent` (acked), `failed`, `skipped` (due while
    /// the binlog source was not connected); see [`crate::heartbeat`].
    pub heartbeats: IntCounterVec,
    /// The committed checkpoint's binlog file and offset, for the purge horizon.
    committed_checkpoint: std::sync::Mutex<Option<(String, u64)>>,
}

impl Metrics {
    /// Registers every metric in a fresh registry.
    pub fn new() -> Arc<Metrics> {
        let registry = Registry::new();
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(format!("outbox_relay_{name}"), help)
                .unwrap_or_else(|e| panic!("metric {name}: {e}"));
            // Registering distinct, constant names in a fresh registry cannot fail.
            let _ = registry.register(Box::new(c.clone()));
            c
        };
        let int_gauge = |name: &str, help: &str| {
            let g = IntGauge::new(format!("outbox_relay_{name}"), help)
                .unwrap_or_else(|e| panic!("metric {name}: {e}"));
            let _ = registry.register(Box::new(g.clone()));
            g
        };
        // Constant, distinct names in a fresh registry: creating them cannot fail.
        let sink =
            SinkMetrics::new(&registry).unwrap_or_else(|e| panic!("the sink's metrics: {e}"));
        let checkpoint_lag_seconds = Gauge::new(
            "outbox_relay_checkpoint_lag_seconds",
            "Now minus the server timestamp of the last committed transaction; 0 when caught up",
        )
        .unwrap_or_else(|e| panic!("metric checkpoint_lag_seconds: {e}"));
        let _ = registry.register(Box::new(checkpoint_lag_seconds.clone()));
        let gauge = |name: &str, help: &str| {
            let g = Gauge::new(format!("outbox_relay_{name}"), help)
                .unwrap_or_else(|e| panic!("metric {name}: {e}"));
            let _ = registry.register(Box::new(g.clone()));
            g
        };
        let counter_vec = |name: &str, help: &str, label: &str| {
            let c = IntCounterVec::new(Opts::new(format!("outbox_relay_{name}"), help), &[label])
                .unwrap_or_else(|e| panic!("metric {name}: {e}"));
            let _ = registry.register(Box::new(c.clone()));
            c
        };
        let build_info = IntGaugeVec::new(
            Opts::new(
                "outbox_relay_build_info",
                "Always 1; the labels name the running build",
            ),
            &["version", "git_sha"],
        )
        .unwrap_or_else(|e| panic!("metric build_info: {e}"));
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION"), GIT_SHA])
            .set(1);
        let _ = registry.register(Box::new(build_info.clone()));
        // CPU, memory, open files, start time of this process (`process_*`).
        #[cfg(target_os = "linux")]
        if let Err(error) = registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        )) {
            tracing::warn!(%error, "process metrics not registered");
        }
        // The checkpoint crate's own counters (commit durations, failures, ack errors).
        if let Err(error) = outbox_checkpoint::register_metrics(&registry) {
            tracing::warn!(%error, "checkpoint metrics not registered");
        }
        // The Kafka checkpoint store's counters (topics created, loads past an open transaction).
        if let Err(error) = outbox_kafka::register_kafka_store_metrics(&registry) {
            tracing::warn!(%error, "Kafka checkpoint store metrics not registered");
        }
        // The binlog reader's counters (events, bytes, rows, commits, heartbeats, errors).
        if let Err(error) = outbox_poll::internal_events::register_metrics(&registry) {
            tracing::warn!(%error, "poll source metrics not registered");
        }
        if let Err(error) = outbox_binlog::register_metrics(&registry) {
            tracing::warn!(%error, "binlog reader metrics not registered");
        }
        let metrics = Arc::new(Metrics {
            leader: int_gauge(
                "leader",
                "1 while this relay leads (publishes); 0 while it is a standby",
            ),
            leader_epoch: int_gauge(
                "leader_epoch",
                "Leader epoch of the current or last leadership term ([ha])",
            ),
            leadership_changes: counter(
                "leadership_changes_total",
                "Leadership terms gained plus terms ended ([ha])",
            ),
            fencing_events: counter_vec(
                "fencing_events_total",
                "Times this relay was fenced as a stale leader, by kind (checkpoint_store, lease)",
                "kind",
            ),
            heartbeats: counter_vec(
                "heartbeats_total",
                "Heartbeat records ([heartbeat]) by outcome: sent (acked by Kafka), failed, skipped (source not connected)",
                "outcome",
            ),
            events_read: counter("events_read_total", "Row changes of watched tables read"),
            transactions_read: counter("transactions_read_total", "Committed transactions read"),
            events_routed: counter("events_routed_total", "Rows routed to a Kafka record"),
            events_skipped: counter(
                "events_skipped_total",
                "Rows the router skipped by design (updates, deletes)",
            ),
            in_flight_bytes: int_gauge(
                "in_flight_bytes",
                "Bytes of row data between the binlog reader and Kafka's acknowledgement",
            ),
            checkpoint_commits: counter("checkpoint_commits_total", "Checkpoint commits"),
            checkpoint_binlog_offset: int_gauge(
                "checkpoint_binlog_offset",
                "Byte offset of the committed checkpoint position",
            ),
            checkpoint_binlog_file_number: int_gauge(
                "checkpoint_binlog_file_number",
                "Numeric suffix of the committed checkpoint's binlog file",
            ),
            checkpoint_lag_seconds,
            source_reconnects: counter(
                "source_reconnects_total",
                "Binlog source reconnects after transient errors",
            ),
            gap_filled: counter(
                "gap_filled_total",
                "Outbox rows published from the table for a purged checkpoint position",
            ),
            gap_unrecoverable: counter(
                "gap_unrecoverable_total",
                "Gap fills of a table that could not prove every event recovered (rows may have been deleted)",
            ),
            xa_oldest_prepared_age_seconds: int_gauge(
                "xa_oldest_prepared_age_seconds",
                "Seconds since the XA PREPARE of the oldest prepared XA transaction held; 0 when none",
            ),
            xa_prepared_held: int_gauge(
                "xa_prepared_held",
                "Prepared XA transactions whose outbox rows are held until their outcome",
            ),
            source_seconds_behind: gauge(
                "source_seconds_behind",
                "Now minus the server timestamp of the newest transaction read; 0 after a heartbeat",
            ),
            replayed_records: counter(
                "replayed_records_total",
                "Records sent again after a restart that the previous run had already sent (between the checkpoint and its stored sent-through position; a lower bound)",
            ),
            ready: int_gauge("ready", "1 when /readyz reports ready, else 0"),
            binlog_purge_horizon_seconds: gauge(
                "binlog_purge_horizon_seconds",
                "Seconds of binlog retention left before the checkpoint's file may be purged (+Inf: no expiry)",
            ),
            binlog_purge_horizon_bytes: gauge(
                "binlog_purge_horizon_bytes",
                "Bytes the server may still write before the checkpoint's file is purged by size (+Inf: no limit)",
            ),
            source_binlog_bytes_behind: gauge(
                "source_binlog_bytes_behind",
                "Binlog bytes between the committed checkpoint and the server's newest position",
            ),
            committed_checkpoint: std::sync::Mutex::new(None),
            sink,
            build_info,
            health: Health::default(),
            registry,
        });
        // Every label value known in advance starts at 0, so the series exist from the first
        // scrape (`increase()` sees the first event, dashboards and rules find the names).
        // (The sink's own labels start at 0 in `SinkMetrics::new`.)
        for class in ["source_reconnect", "checkpoint_commit"] {
            metrics.retries.with_label_values(&[class]);
        }
        for outcome in ["sent", "failed", "skipped"] {
            metrics.heartbeats.with_label_values(&[outcome]);
        }
        // Unknown until measured: 0 would read as "purged any moment" and page.
        metrics.binlog_purge_horizon_seconds.set(f64::NAN);
        metrics.binlog_purge_horizon_bytes.set(f64::NAN);
        metrics.source_binlog_bytes_behind.set(f64::NAN);
        metrics
    }

    /// The registry in the Prometheus text exposition format (ages computed now).
    pub fn render(&self) -> String {
        self.refresh_computed_gauges();
        let mut buffer = Vec::new();
        let encoder = prometheus::TextEncoder::new();
        if let Err(error) = encoder.encode(&self.registry.gather(), &mut buffer) {
            tracing::error!(%error, "cannot encode metrics");
        }
        String::from_utf8_lossy(&buffer).into_owned()
    }

    /// Remembers the committed checkpoint's binlog file and offset.
    pub fn set_committed_checkpoint(&self, file: &str, offset: u64) {
        *self
            .committed_checkpoint
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some((file.to_string(), offset));
    }

    /// The committed checkpoint's binlog file and offset, once one is known.
    pub fn committed_checkpoint(&self) -> Option<(String, u64)> {
        self.committed_checkpoint
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Sets the gauges derived from timestamps and the health checks.
    pub fn refresh_computed_gauges(&self) {
        self.sink.refresh_computed_gauges();
        self.ready.set(i64::from(self.health.report().ready));
    }

    /// The names of every metric family this relay exports (checkpoint and binlog crates'
    /// included), for checks that dashboards and alert rules only name real metrics.
    pub fn family_names(&self) -> Vec<String> {
        self.registry
            .gather()
            .iter()
            .map(|family| family.name().to_string())
            .collect()
    }
}

/// The sink's collectors read as the relay's own (`metrics.records_delivered`), so code
/// and tests that count deliveries need not know which crate sends them.
impl std::ops::Deref for Metrics {
    type Target = SinkMetrics;

    fn deref(&self) -> &SinkMetrics {
        &self.sink
    }
}

/// The relay hosts the Kafka sink: its collectors, readiness, and the checkpoint the
/// exactly-once sink commits.
impl SinkObserver for Metrics {
    fn sink_metrics(&self) -> &SinkMetrics {
        &self.sink
    }

    fn delivered(&self) {
        self.health.sink_delivered();
    }

    fn retrying(&self) {
        self.health.sink_retrying();
    }

    fn checkpoint_committed(&self, boundary: &BatchBoundary) {
        let position = &boundary.checkpoint.position;
        CheckpointCommitted {
            position: &position.binlog,
            gtid_set: Some(position.gtid_set.to_string()),
            transaction_timestamp: position.timestamp,
            caught_up: boundary.caught_up,
        }
        .emit(self);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    #[test]
    fn oldest_unacked_age_and_readiness_are_computed_at_render() {
        let metrics = Metrics::new();
        metrics
            .oldest_unacked_since_ms
            .store(crate::health::unix_millis_now() - 3_000, Ordering::Relaxed);
        let text = metrics.render();
        let age = metrics.oldest_unacked_age_seconds.get();
        assert!((3.0..10.0).contains(&age), "{age}");
        assert!(text.contains("outbox_relay_ready 0"), "{text}");
        assert!(text.contains("outbox_relay_build_info{git_sha="), "{text}");
        assert!(
            text.contains("outbox_relay_publish_latency_seconds_bucket{le=\"0.001\"} 0"),
            "{text}"
        );
        metrics.oldest_unacked_since_ms.store(0, Ordering::Relaxed);
        metrics.render();
        assert_eq!(metrics.oldest_unacked_age_seconds.get(), 0.0);
        #[cfg(target_os = "linux")]
        assert!(
            metrics
                .family_names()
                .iter()
                .any(|name| name == "process_resident_memory_bytes"),
            "{:?}",
            metrics.family_names()
        );
    }
}
