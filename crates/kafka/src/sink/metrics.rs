//! The sink's Prometheus collectors, one set per relay (several relays run in one test
//! process, so nothing here is global), registered into the relay's registry under the
//! relay's metric names (`outbox_relay_*`): dashboards and alert rules see the same series
//! as before the sink became a library.
//!
//! Every collector changes only through [`crate::internal_events`].

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus::{
    Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
};

use crate::dead_letter::DEAD_LETTER_CLASSES;

/// Latency buckets (seconds) from 1 ms to 60 s, about three per decade.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0,
];

/// The `delivery_errors` kinds, started at 0 so their series exist from the first scrape.
const DELIVERY_ERROR_KINDS: [&str; 5] = ["transient", "fatal", "failure", "stall", "permanent"];

/// The producer rebuild classes (also `delivery_errors` kinds).
const REBUILD_CLASSES: [&str; 3] = ["fatal", "failure", "stall"];

/// The sink's collectors.
#[derive(Debug)]
pub struct SinkMetrics {
    /// Records Kafka acknowledged.
    pub records_delivered: IntCounter,
    /// Failed deliveries, by `kind` (`transient`, `fatal`, `failure`, `stall`, `permanent`).
    pub delivery_errors: IntCounterVec,
    /// Retries by `class`: the sink counts `kafka_delivery`; the family is the relay's too
    /// (`source_reconnect`, `checkpoint_commit`), registered once, here.
    pub retries: IntCounterVec,
    /// Events written to the dead-letter topic, by error `class` (routing errors included).
    pub dead_lettered: IntCounterVec,
    /// Unix time (seconds) of the newest dead letter; 0 when none this run.
    pub dead_letter_last_timestamp_seconds: Gauge,
    /// Records sent and not yet acknowledged.
    pub in_flight: IntGauge,
    /// Times the Kafka producer was rebuilt (fatal error, failed delivery, stall).
    pub producer_recreations: IntCounter,
    /// Producer rebuilds by `class` (`fatal`, `failure`, `stall`).
    pub producer_rebuilds: IntCounterVec,
    /// Times the stall watchdog fired: the oldest unacked record had no ack for
    /// `kafka.stall_timeout_ms` (an alert rule can page on its rate).
    pub producer_stalls: IntCounter,
    /// Topics the sink created through the admin API.
    pub topics_created: IntCounter,
    /// Records handed to a producer again (after a failure or a rebuild): each may reach
    /// the topic twice, so this counts possible duplicates.
    pub records_resent: IntCounter,
    /// Seconds from handing a record to the producer to its ack (resends start anew).
    pub publish_latency_seconds: Histogram,
    /// Seconds from the binlog event's server timestamp (commit time, 1 s resolution) to
    /// the ack: what a consumer waits for an event.
    pub end_to_end_latency_seconds: Histogram,
    /// Kafka transactions of the exactly-once sink by `outcome` (`committed`, `aborted`).
    pub kafka_transactions: IntCounterVec,
    /// Seconds `commit_transaction` took (exactly-once sink): the checkpoint's cost.
    pub kafka_transaction_commit_seconds: Histogram,
    /// Seconds since the sink took the oldest record still unacked; 0 when none. Set from
    /// `oldest_unacked_since_ms` by [`SinkMetrics::refresh_computed_gauges`] at scrape
    /// time, so it grows while a record is stuck.
    pub oldest_unacked_age_seconds: Gauge,
    /// When (Unix ms) the sink took the oldest unacked record; 0 when none is unacked. An
    /// atomic, not a gauge: the sink sets it on every pass, the scrape turns it into an age.
    pub oldest_unacked_since_ms: AtomicU64,
}

impl SinkMetrics {
    /// Creates the collectors and registers them into `registry`; every label value known
    /// in advance starts at 0.
    pub fn new(registry: &Registry) -> Result<Self, prometheus::Error> {
        let counter = |name: &str, help: &str| -> Result<IntCounter, prometheus::Error> {
            let counter = IntCounter::new(format!("outbox_relay_{name}"), help)?;
            registry.register(Box::new(counter.clone()))?;
            Ok(counter)
        };
        let counter_vec =
            |name: &str, help: &str, label: &str| -> Result<IntCounterVec, prometheus::Error> {
                let counters =
                    IntCounterVec::new(Opts::new(format!("outbox_relay_{name}"), help), &[label])?;
                registry.register(Box::new(counters.clone()))?;
                Ok(counters)
            };
        let gauge = |name: &str, help: &str| -> Result<Gauge, prometheus::Error> {
            let gauge = Gauge::new(format!("outbox_relay_{name}"), help)?;
            registry.register(Box::new(gauge.clone()))?;
            Ok(gauge)
        };
        let histogram = |name: &str, help: &str| -> Result<Histogram, prometheus::Error> {
            let histogram = Histogram::with_opts(
                HistogramOpts::new(format!("outbox_relay_{name}"), help)
                    .buckets(LATENCY_BUCKETS.to_vec()),
            )?;
            registry.register(Box::new(histogram.clone()))?;
            Ok(histogram)
        };
        let in_flight = IntGauge::new(
            "outbox_relay_in_flight",
            "Records sent and not yet acknowledged",
        )?;
        registry.register(Box::new(in_flight.clone()))?;
        let metrics = Self {
            records_delivered: counter("records_delivered_total", "Records acknowledged by Kafka")?,
            delivery_errors: counter_vec(
                "delivery_errors_total",
                "Failed Kafka deliveries by kind (transient, fatal, permanent)",
                "kind",
            )?,
            retries: counter_vec(
                "retries_total",
                "Retries by class (source_reconnect, kafka_delivery, checkpoint_commit)",
                "class",
            )?,
            dead_lettered: counter_vec(
                "dead_lettered_total",
                "Events sent to the dead-letter topic, by error class",
                "class",
            )?,
            dead_letter_last_timestamp_seconds: gauge(
                "dead_letter_last_timestamp_seconds",
                "Unix time of the newest dead letter written; 0 when none",
            )?,
            in_flight,
            producer_recreations: counter(
                "producer_recreations_total",
                "Kafka producer rebuilds (fatal error, failed delivery, stall)",
            )?,
            producer_rebuilds: counter_vec(
                "producer_rebuilds_total",
                "Kafka producer rebuilds by class (fatal, failure, stall)",
                "class",
            )?,
            producer_stalls: counter(
                "producer_stalls_total",
                "Times the oldest unacked record had no ack for kafka.stall_timeout_ms",
            )?,
            topics_created: counter("topics_created_total", "Topics created by the relay")?,
            records_resent: counter(
                "records_resent_total",
                "Records sent again after a failure or producer rebuild (possible duplicates)",
            )?,
            publish_latency_seconds: histogram(
                "publish_latency_seconds",
                "Seconds from handing a record to the Kafka producer to its ack",
            )?,
            end_to_end_latency_seconds: histogram(
                "end_to_end_latency_seconds",
                "Seconds from the binlog event's server timestamp to the Kafka ack",
            )?,
            kafka_transactions: counter_vec(
                "kafka_transactions_total",
                "Kafka transactions of the exactly-once sink by outcome (committed, aborted)",
                "outcome",
            )?,
            kafka_transaction_commit_seconds: histogram(
                "kafka_transaction_commit_seconds",
                "Seconds commit_transaction took (exactly-once sink)",
            )?,
            oldest_unacked_age_seconds: gauge(
                "oldest_unacked_age_seconds",
                "Seconds since the sink took the oldest record still unacked; 0 when none",
            )?,
            oldest_unacked_since_ms: AtomicU64::new(0),
        };
        for kind in DELIVERY_ERROR_KINDS {
            metrics.delivery_errors.with_label_values(&[kind]);
        }
        metrics.retries.with_label_values(&["kafka_delivery"]);
        for class in REBUILD_CLASSES {
            metrics.producer_rebuilds.with_label_values(&[class]);
        }
        for class in DEAD_LETTER_CLASSES {
            metrics.dead_lettered.with_label_values(&[class]);
        }
        Ok(metrics)
    }

    /// Sets the gauges computed from timestamps (`oldest_unacked_age_seconds`); called when
    /// the registry is rendered.
    pub fn refresh_computed_gauges(&self) {
        let age = match self.oldest_unacked_since_ms.load(Ordering::Relaxed) {
            0 => 0.0,
            since => crate::unix_millis_now().saturating_sub(since) as f64 / 1000.0,
        };
        self.oldest_unacked_age_seconds.set(age);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_label_starts_at_zero_and_the_age_is_computed_on_refresh() {
        let registry = Registry::new();
        let metrics = SinkMetrics::new(&registry).unwrap();
        let names: Vec<String> = registry
            .gather()
            .iter()
            .map(|family| family.name().to_owned())
            .collect();
        for name in [
            "outbox_relay_records_delivered_total",
            "outbox_relay_delivery_errors_total",
            "outbox_relay_dead_lettered_total",
            "outbox_relay_in_flight",
            "outbox_relay_kafka_transaction_commit_seconds",
            "outbox_relay_oldest_unacked_age_seconds",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} missing: {names:?}");
        }
        let mut text = Vec::new();
        prometheus::Encoder::encode(
            &prometheus::TextEncoder::new(),
            &registry.gather(),
            &mut text,
        )
        .unwrap();
        let text = String::from_utf8(text).unwrap();
        for class in DEAD_LETTER_CLASSES {
            let series = format!("outbox_relay_dead_lettered_total{{class=\"{class}\"}} 0");
            assert!(text.contains(&series), "{series} missing:\n{text}");
        }

        metrics
            .oldest_unacked_since_ms
            .store(crate::unix_millis_now() - 4_000, Ordering::Relaxed);
        metrics.refresh_computed_gauges();
        let age = metrics.oldest_unacked_age_seconds.get();
        assert!((4.0..30.0).contains(&age), "{age}");
        metrics.oldest_unacked_since_ms.store(0, Ordering::Relaxed);
        metrics.refresh_computed_gauges();
        assert_eq!(metrics.oldest_unacked_age_seconds.get(), 0.0);
    }

    #[test]
    fn a_second_set_in_the_same_registry_is_refused() {
        let registry = Registry::new();
        SinkMetrics::new(&registry).unwrap();
        assert!(SinkMetrics::new(&registry).is_err());
    }
}
