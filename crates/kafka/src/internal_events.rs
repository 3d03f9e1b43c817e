//! The sink's internal events (the workspace's `internal_events` pattern): each notable
//! thing the sink does is a struct whose [`InternalEvent::emit`] writes the log line and
//! updates the collectors ([`SinkMetrics`]) and the host's state ([`SinkObserver`]) in one
//! place, so logs and counters cannot drift apart.

use std::time::Duration;

use crate::sink::{SinkMetrics, SinkObserver};

/// Something the sink did, to be logged and counted.
pub trait InternalEvent {
    /// Logs the event and updates `observer`'s collectors (and its state, for readiness).
    fn emit(self, observer: &dyn SinkObserver);
}

fn metrics(observer: &dyn SinkObserver) -> &SinkMetrics {
    observer.sink_metrics()
}

/// Kafka acknowledged one record: counts it and observes its latencies.
#[derive(Debug)]
pub struct RecordAcked {
    /// Time from handing it to the producer (its last send) to the ack; `None` if unknown.
    pub publish_latency: Option<Duration>,
    /// Server timestamp (epoch seconds) of its binlog event; `None` if unknown.
    pub event_timestamp: Option<u32>,
}

impl InternalEvent for RecordAcked {
    fn emit(self, observer: &dyn SinkObserver) {
        let metrics = metrics(observer);
        metrics.records_delivered.inc();
        observer.delivered();
        if let Some(latency) = self.publish_latency {
            metrics
                .publish_latency_seconds
                .observe(latency.as_secs_f64());
        }
        if let Some(timestamp) = self.event_timestamp.filter(|t| *t != 0) {
            let now = crate::unix_millis_now() as f64 / 1000.0;
            metrics
                .end_to_end_latency_seconds
                .observe((now - f64::from(timestamp)).max(0.0));
        }
    }
}

/// A record was handed to a producer again (after a failure or a rebuild).
#[derive(Debug)]
pub struct RecordResent;

impl InternalEvent for RecordResent {
    fn emit(self, observer: &dyn SinkObserver) {
        metrics(observer).records_resent.inc();
    }
}

/// The oldest unacked record changed (or none is left): sets what
/// `oldest_unacked_age_seconds` is computed from.
#[derive(Debug)]
pub struct OldestUnackedChanged {
    /// When (Unix ms) the sink took the oldest unacked record; `None` when none is unacked.
    pub since_ms: Option<u64>,
}

impl InternalEvent for OldestUnackedChanged {
    fn emit(self, observer: &dyn SinkObserver) {
        metrics(observer).oldest_unacked_since_ms.store(
            self.since_ms.unwrap_or(0),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

/// The in-flight record count changed.
#[derive(Debug)]
pub struct InFlightChanged {
    /// Records sent and not acked now.
    pub in_flight: usize,
}

impl InternalEvent for InFlightChanged {
    fn emit(self, observer: &dyn SinkObserver) {
        metrics(observer)
            .in_flight
            .set(i64::try_from(self.in_flight).unwrap_or(i64::MAX));
    }
}

/// An event failed permanently and its dead letter is being written (counted by class;
/// the event is acked only once the dead letter is). Also emitted by the relay's pipeline
/// for a row the router cannot route.
#[derive(Debug)]
pub struct DeadLettered<'a> {
    /// The error class (`routing`, `message_too_large`, ...).
    pub class: &'a str,
    /// The event id, when known, so the operator can find it with `dlq list`.
    pub id: Option<&'a str>,
    /// The topic the event was meant for (empty when unknown).
    pub original_topic: &'a str,
    /// The dead-letter topic.
    pub dead_letter_topic: &'a str,
    /// Sends tried.
    pub attempts: u32,
    /// The error text.
    pub error: &'a str,
}

impl InternalEvent for DeadLettered<'_> {
    fn emit(self, observer: &dyn SinkObserver) {
        let metrics = metrics(observer);
        metrics.dead_lettered.with_label_values(&[self.class]).inc();
        metrics
            .dead_letter_last_timestamp_seconds
            .set(crate::unix_millis_now() as f64 / 1000.0);
        tracing::error!(class = self.class, id = self.id.unwrap_or("<unknown>"), original_topic = self.original_topic, dead_letter_topic = self.dead_letter_topic, attempts = self.attempts, error = self.error, "event failed permanently; writing it to the dead-letter topic (see `outbox-relay dlq list`)");
    }
}

/// A delivery failed transiently; the record will be resent.
#[derive(Debug)]
pub struct DeliveryFailedTransient<'a> {
    /// Topic of the record.
    pub topic: &'a str,
    /// What librdkafka said.
    pub error: &'a rdkafka::error::KafkaError,
    /// Delay before the resend.
    pub retry_in: Duration,
    /// Records waiting for that resend.
    pub waiting: usize,
}

impl InternalEvent for DeliveryFailedTransient<'_> {
    fn emit(self, observer: &dyn SinkObserver) {
        let metrics = metrics(observer);
        metrics
            .delivery_errors
            .with_label_values(&["transient"])
            .inc();
        metrics.retries.with_label_values(&["kafka_delivery"]).inc();
        observer.retrying();
        tracing::warn!(topic = self.topic, error = %self.error, retry_in_ms = self.retry_in.as_millis() as u64, waiting = self.waiting, "Kafka delivery failed; resending (checkpoint held back)");
    }
}

/// Kafka rejected a record for good (too large, authorization, ...): counted as a
/// permanent delivery error, and, when the dead-letter policy resends it before
/// dead-lettering, as a retry of the Kafka delivery.
#[derive(Debug)]
pub struct DeliveryRejected<'a> {
    /// Topic of the record.
    pub topic: &'a str,
    /// The dead-letter error class of the rejection.
    pub class: &'static str,
    /// What librdkafka or the broker said.
    pub error: &'a rdkafka::error::KafkaError,
    /// `Some((attempt, max_attempts))` when the record is resent; `None` when it is
    /// dead-lettered now or stops the relay (logged there).
    pub resending: Option<(u32, u32)>,
}

impl InternalEvent for DeliveryRejected<'_> {
    fn emit(self, observer: &dyn SinkObserver) {
        let metrics = metrics(observer);
        metrics
            .delivery_errors
            .with_label_values(&["permanent"])
            .inc();
        if let Some((attempt, max_attempts)) = self.resending {
            metrics.retries.with_label_values(&["kafka_delivery"]).inc();
            tracing::warn!(topic = self.topic, class = self.class, error = %self.error, attempt, max_attempts, "Kafka rejected a record permanently; resending before dead-lettering it");
        }
    }
}

/// The producer is rebuilt (after a fatal error, a delivery failure librdkafka gave up on,
/// or a stall) and every unacked record resent in input order.
#[derive(Debug)]
pub struct ProducerRecreated<'a> {
    /// Why, for the log.
    pub reason: &'a str,
    /// `fatal`, `failure` or `stall`: the `delivery_errors` label counted for it.
    pub kind: &'static str,
    /// Records that will be resent.
    pub resending: usize,
}

impl InternalEvent for ProducerRecreated<'_> {
    fn emit(self, observer: &dyn SinkObserver) {
        let metrics = metrics(observer);
        metrics
            .delivery_errors
            .with_label_values(&[self.kind])
            .inc();
        metrics.producer_recreations.inc();
        metrics
            .producer_rebuilds
            .with_label_values(&[self.kind])
            .inc();
        observer.retrying();
        tracing::error!(reason = self.reason, kind = self.kind, resending = self.resending, "Kafka producer replaced (old one purged and drained); resending every unacked record in input order");
    }
}

/// The stall watchdog fired: the oldest unacked record had no ack for `stall_timeout`.
#[derive(Debug)]
pub struct ProducerStalled<'a> {
    /// Topic of the oldest unacked record.
    pub topic: &'a str,
    /// `kafka.stall_timeout_ms`.
    pub stall_timeout: Duration,
    /// Records unacked (all are resent).
    pub unacked: usize,
}

impl InternalEvent for ProducerStalled<'_> {
    fn emit(self, observer: &dyn SinkObserver) {
        metrics(observer).producer_stalls.inc();
        tracing::warn!(topic = self.topic, stall_timeout_ms = self.stall_timeout.as_millis() as u64, unacked = self.unacked, "no Kafka ack for the oldest record within kafka.stall_timeout_ms; purging and rebuilding the producer (checkpoint held back)");
    }
}

/// A topic was created through the admin API.
#[derive(Debug)]
pub struct TopicCreated<'a> {
    /// The topic.
    pub topic: &'a str,
    /// Its partition count.
    pub partitions: i32,
}

impl InternalEvent for TopicCreated<'_> {
    fn emit(self, observer: &dyn SinkObserver) {
        metrics(observer).topics_created.inc();
        tracing::info!(
            topic = self.topic,
            partitions = self.partitions,
            "created Kafka topic"
        );
    }
}

/// The exactly-once sink committed a Kafka transaction (its records and the checkpoint).
#[derive(Debug)]
pub struct KafkaTransactionCommitted {
    /// Records in it (the checkpoint record not counted).
    pub records: usize,
    /// How long `commit_transaction` took.
    pub duration: Duration,
}

impl InternalEvent for KafkaTransactionCommitted {
    fn emit(self, observer: &dyn SinkObserver) {
        let metrics = metrics(observer);
        metrics
            .kafka_transactions
            .with_label_values(&["committed"])
            .inc();
        metrics
            .kafka_transaction_commit_seconds
            .observe(self.duration.as_secs_f64());
        tracing::debug!(
            records = self.records,
            commit_ms = self.duration.as_millis() as u64,
            "Kafka transaction committed"
        );
    }
}

/// The exactly-once sink aborted a Kafka transaction; the pipeline restarts from the
/// stored checkpoint.
#[derive(Debug)]
pub struct KafkaTransactionAborted<'a> {
    /// Why.
    pub reason: &'a str,
    /// Records sent in it (none of them becomes visible to `read_committed` consumers).
    pub records: usize,
    /// Why the abort itself failed, if it did (the broker then aborts it on timeout).
    pub abort_error: Option<&'a str>,
}

impl InternalEvent for KafkaTransactionAborted<'_> {
    fn emit(self, observer: &dyn SinkObserver) {
        metrics(observer)
            .kafka_transactions
            .with_label_values(&["aborted"])
            .inc();
        match self.abort_error {
            None => tracing::warn!(reason = self.reason, records = self.records, "Kafka transaction aborted; restarting from the stored checkpoint (read_committed consumers see none of it)"),
            Some(error) => tracing::warn!(reason = self.reason, records = self.records, abort_error = error, "Kafka transaction could not be aborted cleanly; the broker aborts it when the next producer with this transactional.id starts or at transaction.timeout.ms"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::sink::BatchBoundary;

    /// A host that counts its notifications.
    struct CountingHost {
        metrics: SinkMetrics,
        delivered: AtomicUsize,
        retrying: AtomicUsize,
    }

    impl SinkObserver for CountingHost {
        fn sink_metrics(&self) -> &SinkMetrics {
            &self.metrics
        }
        fn delivered(&self) {
            self.delivered.fetch_add(1, Ordering::Relaxed);
        }
        fn retrying(&self) {
            self.retrying.fetch_add(1, Ordering::Relaxed);
        }
        fn checkpoint_committed(&self, _boundary: &BatchBoundary) {}
    }

    #[test]
    fn events_count_in_the_collectors_and_tell_the_host() {
        let host = CountingHost {
            metrics: SinkMetrics::new(&prometheus::Registry::new()).unwrap(),
            delivered: AtomicUsize::new(0),
            retrying: AtomicUsize::new(0),
        };
        RecordAcked {
            publish_latency: Some(Duration::from_millis(3)),
            event_timestamp: None,
        }
        .emit(&host);
        assert_eq!(host.metrics.records_delivered.get(), 1);
        assert_eq!(host.metrics.publish_latency_seconds.get_sample_count(), 1);
        assert_eq!(
            host.metrics.end_to_end_latency_seconds.get_sample_count(),
            0
        );
        assert_eq!(host.delivered.load(Ordering::Relaxed), 1);

        ProducerRecreated {
            reason: "test",
            kind: "stall",
            resending: 2,
        }
        .emit(&host);
        assert_eq!(
            host.metrics
                .delivery_errors
                .with_label_values(&["stall"])
                .get(),
            1
        );
        assert_eq!(
            host.metrics
                .producer_rebuilds
                .with_label_values(&["stall"])
                .get(),
            1
        );
        assert_eq!(host.metrics.producer_recreations.get(), 1);
        assert_eq!(host.retrying.load(Ordering::Relaxed), 1);

        DeadLettered {
            class: "routing",
            id: Some("event-1"),
            original_topic: "",
            dead_letter_topic: "outbox.dlq",
            attempts: 1,
            error: "no route",
        }
        .emit(&host);
        assert_eq!(
            host.metrics
                .dead_lettered
                .with_label_values(&["routing"])
                .get(),
            1
        );
        assert!(host.metrics.dead_letter_last_timestamp_seconds.get() > 0.0);

        InFlightChanged { in_flight: 7 }.emit(&host);
        assert_eq!(host.metrics.in_flight.get(), 7);
    }
}
