//! Prometheus metrics of one relay (served by [`crate::http`]).
//!
//! # Contract
//! * Every metric is changed only through [`crate::internal_events`], so a log line and its
//!   counter never disagree. Gauges that are ages (oldest unacked record, readiness) are
//!   computed from their timestamps when the registry is rendered, so they keep growing
//!   while nothing happens.
//! * Labels are low-cardinality only: `kind`/`class` (a fixed set of error classes), the
//!   build's `version`/`git_sha`; never ids, keys or positions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry,
};

use crate::health::Health;

/// Latency buckets (seconds) from 1 ms to 60 s, about three per decade.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0,
];

/// The git commit the binary was built from (`build.rs`: `OUTBOX_RELAY_GIT_SHA`, else
/// `git rev-parse`, else `unknown`).
pub const GIT_SHA: &str = env!("OUTBOX_RELAY_GIT_SHA");

/// All metrics of one relay; cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Metrics {
    /// The registry the text endpoint encodes; one per relay so in-process tests don't mix.
    pub registry: Registry,
    /// Row changes of watched tables read from the binlog.
    pub events_read: IntCounter,
    /// Committed transactions read (watched rows or not).
    pub transactions_read: IntCounter,
    /// Rows the router turned into records.
    pub events_routed: IntCounter,
    /// Rows the router skipped by design (updates, deletes of outbox rows).
    pub events_skipped: IntCounter,
    /// Records Kafka acknowledged.
    pub records_delivered: IntCounter,
    /// Failed deliveries, by `kind` (`transient`, `fatal`, `permanent`).
    pub delivery_errors: IntCounterVec,
    /// Events written to the dead-letter topic (and acked there), by error `class`.
    pub dead_lettered: IntCounterVec,
    /// Records sent and not yet acknowledged.
    pub in_flight: IntGauge,
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
    /// Times the Kafka producer was rebuilt (fatal error, failed delivery, stall).
    pub producer_recreations: IntCounter,
    /// Times the stall watchdog fired: the oldest unacked record had no ack for
    /// `kafka.stall_timeout_ms` (an alert rule can page on its rate).
    pub producer_stalls: IntCounter,
    /// Topics the relay created through the admin API.
    pub topics_created: IntCounter,
    /// Seconds since the `XA PREPARE` (server clock) of the oldest prepared XA transaction
    /// whose outbox rows the relay holds until its outcome; 0 when none. A prepared XA
    /// transaction also holds the checkpoint back, so a growing value needs an operator
    /// (`XA RECOVER` lists them).
    pub xa_oldest_prepared_age_seconds: IntGauge,
    /// Prepared XA transactions whose outbox rows the relay holds.
    pub xa_prepared_held: IntGauge,
    /// Seconds from handing a record to the producer to its ack (resends start anew).
    pub publish_latency_seconds: Histogram,
    /// Seconds from the binlog event's server timestamp (commit time, 1 s resolution) to
    /// the ack: what a consumer waits for an event.
    pub end_to_end_latency_seconds: Histogram,
    /// Seconds since the sink took the oldest record still unacked; 0 when none. Rendered
    /// from `oldest_unacked_since_ms`, so it grows while a record is stuck.
    pub oldest_unacked_age_seconds: Gauge,
    /// When (Unix ms) the sink took the oldest unacked record; 0 when none is unacked.
    pub oldest_unacked_since_ms: AtomicU64,
    /// Seconds between now and the server timestamp of the newest transaction read; 0
    /// after a heartbeat (the server had nothing newer to send).
    pub source_seconds_behind: Gauge,
    /// Retries by `class` (`source_reconnect`, `kafka_delivery`, `checkpoint_commit`).
    pub retries: IntCounterVec,
    /// Records handed to a producer again (after a failure or a rebuild): each may reach
    /// the topic twice, so this counts possible duplicates.
    pub records_resent: IntCounter,
    /// Records of this run that the previous run had already handed on for sending before
    /// it crashed (read again between the stored checkpoint and the sent-through position
    /// stored with it; see [`crate::replay`]): possible duplicates, a lower bound of the
    /// replay.
    pub replayed_records: IntCounter,
    /// Producer rebuilds by `class` (`fatal`, `failure`, `stall`).
    pub producer_rebuilds: IntCounterVec,
    /// Unix time (seconds) of the newest dead letter; 0 when none this run.
    pub dead_letter_last_timestamp_seconds: Gauge,
    /// Kafka transactions of the exactly-once sink by `outcome` (`committed`, `aborted`).
    pub kafka_transactions: IntCounterVec,
    /// Seconds `commit_transaction` took (exactly-once sink): the checkpoint's cost.
    pub kafka_transaction_commit_seconds: Histogram,
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
        let delivery_errors = IntCounterVec::new(
            Opts::new(
                "outbox_relay_delivery_errors_total",
                "Failed Kafka deliveries by kind (transient, fatal, permanent)",
            ),
            &["kind"],
        )
        .unwrap_or_else(|e| panic!("metric delivery_errors: {e}"));
        let _ = registry.register(Box::new(delivery_errors.clone()));
        let dead_lettered = IntCounterVec::new(
            Opts::new(
                "outbox_relay_dead_lettered_total",
                "Events sent to the dead-letter topic, by error class",
            ),
            &["class"],
        )
        .unwrap_or_else(|e| panic!("metric dead_lettered: {e}"));
        let _ = registry.register(Box::new(dead_lettered.clone()));
        let checkpoint_lag_seconds = Gauge::new(
            "outbox_relay_checkpoint_lag_seconds",
            "Now minus the server timestamp of the last committed transaction; 0 when caught up",
        )
        .unwrap_or_else(|e| panic!("metric checkpoint_lag_seconds: {e}"));
        let _ = registry.register(Box::new(checkpoint_lag_seconds.clone()));
        let histogram = |name: &str, help: &str| {
            let h = Histogram::with_opts(
                HistogramOpts::new(format!("outbox_relay_{name}"), help)
                    .buckets(LATENCY_BUCKETS.to_vec()),
            )
            .unwrap_or_else(|e| panic!("metric {name}: {e}"));
            let _ = registry.register(Box::new(h.clone()));
            h
        };
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
            events_read: counter("events_read_total", "Row changes of watched tables read"),
            transactions_read: counter("transactions_read_total", "Committed transactions read"),
            events_routed: counter("events_routed_total", "Rows routed to a Kafka record"),
            events_skipped: counter(
                "events_skipped_total",
                "Rows the router skipped by design (updates, deletes)",
            ),
            records_delivered: counter("records_delivered_total", "Records acknowledged by Kafka"),
            delivery_errors,
            dead_lettered,
            in_flight: int_gauge("in_flight", "Records sent and not yet acknowledged"),
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
            producer_recreations: counter(
                "producer_recreations_total",
                "Kafka producer rebuilds (fatal error, failed delivery, stall)",
            ),
            producer_stalls: counter(
                "producer_stalls_total",
                "Times the oldest unacked record had no ack for kafka.stall_timeout_ms",
            ),
            topics_created: counter("topics_created_total", "Topics created by the relay"),
            xa_oldest_prepared_age_seconds: int_gauge(
                "xa_oldest_prepared_age_seconds",
                "Seconds since the XA PREPARE of the oldest prepared XA transaction held; 0 when none",
            ),
            xa_prepared_held: int_gauge(
                "xa_prepared_held",
                "Prepared XA transactions whose outbox rows are held until their outcome",
            ),
            publish_latency_seconds: histogram(
                "publish_latency_seconds",
                "Seconds from handing a record to the Kafka producer to its ack",
            ),
            end_to_end_latency_seconds: histogram(
                "end_to_end_latency_seconds",
                "Seconds from the binlog event's server timestamp to the Kafka ack",
            ),
            oldest_unacked_age_seconds: gauge(
                "oldest_unacked_age_seconds",
                "Seconds since the sink took the oldest record still unacked; 0 when none",
            ),
            oldest_unacked_since_ms: AtomicU64::new(0),
            source_seconds_behind: gauge(
                "source_seconds_behind",
                "Now minus the server timestamp of the newest transaction read; 0 after a heartbeat",
            ),
            retries: counter_vec(
                "retries_total",
                "Retries by class (source_reconnect, kafka_delivery, checkpoint_commit)",
                "class",
            ),
            records_resent: counter(
                "records_resent_total",
                "Records sent again after a failure or producer rebuild (possible duplicates)",
            ),
            replayed_records: counter(
                "replayed_records_total",
                "Records sent again after a restart that the previous run had already sent (between the checkpoint and its stored sent-through position; a lower bound)",
            ),
            producer_rebuilds: counter_vec(
                "producer_rebuilds_total",
                "Kafka producer rebuilds by class (fatal, failure, stall)",
                "class",
            ),
            dead_letter_last_timestamp_seconds: gauge(
                "dead_letter_last_timestamp_seconds",
                "Unix time of the newest dead letter written; 0 when none",
            ),
            kafka_transactions: counter_vec(
                "kafka_transactions_total",
                "Kafka transactions of the exactly-once sink by outcome (committed, aborted)",
                "outcome",
            ),
            kafka_transaction_commit_seconds: histogram(
                "kafka_transaction_commit_seconds",
                "Seconds commit_transaction took (exactly-once sink)",
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
            build_info,
            health: Health::default(),
            registry,
        });
        // Every label value known in advance starts at 0, so the series exist from the first
        // scrape (`increase()` sees the first event, dashboards and rules find the names).
        for kind in ["transient", "fatal", "failure", "stall", "permanent"] {
            metrics.delivery_errors.with_label_values(&[kind]);
        }
        for class in ["source_reconnect", "kafka_delivery", "checkpoint_commit"] {
            metrics.retries.with_label_values(&[class]);
        }
        for class in ["fatal", "failure", "stall"] {
            metrics.producer_rebuilds.with_label_values(&[class]);
        }
        for class in crate::dead_letter::DEAD_LETTER_CLASSES {
            metrics.dead_lettered.with_label_values(&[class]);
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
        let since = self.oldest_unacked_since_ms.load(Ordering::Relaxed);
        let age = match since {
            0 => 0.0,
            since => crate::health::unix_millis_now().saturating_sub(since) as f64 / 1000.0,
        };
        self.oldest_unacked_age_seconds.set(age);
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

#[cfg(test)]
mod tests {
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
