//! What the sink needs from the program that runs it (the relay), as three small traits,
//! so this crate never depends on the relay: where its collectors are and whom to tell
//! about deliveries, retries and committed checkpoints ([`SinkObserver`]), when to stop
//! ([`ShutdownSignal`]), and the config its settings come from ([`SinkConfigSource`]).

use std::future::Future;
use std::time::Duration;

use super::metrics::SinkMetrics;
use super::transactional::BatchBoundary;
use crate::config::{DeadLetterConfig, KafkaConfig};

/// The sink's host: its collectors, and the notifications beyond them (readiness, the
/// checkpoint state the exactly-once sink commits). The relay's `Metrics` implements it;
/// [`SinkMetrics`] alone does too, with no host to notify (tests, benchmarks).
pub trait SinkObserver: Send + Sync {
    /// The collectors the sink's events count in.
    fn sink_metrics(&self) -> &SinkMetrics;

    /// Kafka acknowledged records: a retry loop of the sink, if any, has ended.
    fn delivered(&self);

    /// The sink started retrying (a delivery failed, the producer is rebuilt).
    fn retrying(&self);

    /// The exactly-once sink committed a Kafka transaction carrying `boundary`'s
    /// checkpoint: it is stored now (the at-least-once sink never calls this; its
    /// checkpoints are the host's committer's).
    fn checkpoint_committed(&self, boundary: &BatchBoundary);

    /// The sink reached the cluster at startup and starts taking its input: from here on
    /// what it takes may reach Kafka. Before it (a failed start), nothing was sent.
    fn cluster_reached(&self) {}
}

impl SinkObserver for SinkMetrics {
    fn sink_metrics(&self) -> &SinkMetrics {
        self
    }

    fn delivered(&self) {}

    fn retrying(&self) {}

    fn checkpoint_committed(&self, _boundary: &BatchBoundary) {}
}

/// The shutdown signal the sink selects on next to its work. Each task holds its own
/// clone; [`ShutdownSignal::recv`] completes once shutdown is requested (at once if it
/// already was, and also when nobody can request it any more).
pub trait ShutdownSignal: Clone + Send + Sync + 'static {
    /// Completes when shutdown is requested.
    fn recv(&mut self) -> impl Future<Output = ()> + Send;
}

/// A `watch` flag as the shutdown signal: shutdown once it is `true` (or its sender is
/// gone).
impl ShutdownSignal for tokio::sync::watch::Receiver<bool> {
    async fn recv(&mut self) {
        // An error means the sender is gone: nobody can trigger any more, which counts as a
        // shutdown so no task waits forever.
        let _ = self.wait_for(|fired| *fired).await;
    }
}

/// The config the sink's settings are built from ([`super::KafkaSinkSettings::from_relay_config`]):
/// `[kafka]`, `[dead_letter]`, and the two `[pipeline]` values the sink needs. The relay's
/// `RelayConfig` implements it.
pub trait SinkConfigSource {
    /// `[kafka]`.
    fn kafka(&self) -> &KafkaConfig;
    /// `[dead_letter]`.
    fn dead_letter(&self) -> &DeadLetterConfig;
    /// `pipeline.max_in_flight`: most unacked records.
    fn max_in_flight(&self) -> usize;
    /// `pipeline.shutdown_timeout_ms`: how long shutdown waits for records in flight.
    fn drain_timeout(&self) -> Duration;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_watch_flag_stops_early_and_late_listeners_and_a_dropped_sender_too() {
        let (sender, receiver) = tokio::sync::watch::channel(false);
        let mut early = receiver.clone();
        let waiter = tokio::spawn(async move { ShutdownSignal::recv(&mut early).await });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished());
        sender.send_replace(true);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        let mut late = receiver.clone();
        tokio::time::timeout(Duration::from_secs(5), ShutdownSignal::recv(&mut late))
            .await
            .unwrap();

        let (sender, mut orphan) = tokio::sync::watch::channel(false);
        drop(sender);
        tokio::time::timeout(Duration::from_secs(5), ShutdownSignal::recv(&mut orphan))
            .await
            .unwrap();
    }
}
