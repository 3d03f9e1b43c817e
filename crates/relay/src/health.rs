//! Readiness of a running relay: the checks `GET /readyz` answers with.
//!
//! # Contract
//! * Each check is a flag set by the internal event that observes it (source connected or
//!   reconnecting, broker probe answered or not, checkpoint committed or failed, retries
//!   started or ended), never by the HTTP handler, so the answer costs nothing.
//! * The relay is ready when every check passes: the source is connected, the broker
//!   answered the last probe, the last checkpoint commit (if any) succeeded, and neither
//!   the source nor the sink has been retrying for longer than
//!   `metrics.ready_max_backoff_ms`.
//! * Before the first source connection and the first broker probe the relay is not ready.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

/// Milliseconds since the Unix epoch (0 if the clock is before it); `outbox-kafka`'s, whose
/// sink stamps records with it.
pub use outbox_kafka::unix_millis_now;

/// One check's state: whether it passes and the reason when it does not.
#[derive(Debug, Default)]
struct CheckState {
    /// Whether the check passes now.
    ok: AtomicBool,
    /// What failed last, for the JSON body (empty when it passes).
    detail: Mutex<String>,
}

impl CheckState {
    fn set(&self, ok: bool, detail: impl Into<String>) {
        self.ok.store(ok, Ordering::Relaxed);
        *self
            .detail
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = detail.into();
    }

    fn report(&self) -> CheckReport {
        CheckReport {
            ok: self.ok.load(Ordering::Relaxed),
            detail: self
                .detail
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .clone(),
        }
    }
}

/// The readiness state shared by the pipeline (writes) and the HTTP server (reads).
#[derive(Debug)]
pub struct Health {
    /// The binlog source: connected, or the error it reconnects after.
    source: CheckState,
    /// The Kafka cluster: answered the last metadata probe, or the probe's error.
    broker: CheckState,
    /// The checkpoint store: the last commit succeeded (or none was due yet), or its error.
    checkpoint: CheckState,
    /// When (Unix ms) the source started retrying without success in between; 0: not.
    source_retrying_since_ms: AtomicU64,
    /// When (Unix ms) the sink started retrying deliveries without an ack in between; 0: not.
    sink_retrying_since_ms: AtomicU64,
    /// Longest retry loop that still counts as ready (`metrics.ready_max_backoff_ms`).
    max_backoff: Mutex<Duration>,
}

impl Default for Health {
    fn default() -> Self {
        let health = Self {
            source: CheckState::default(),
            broker: CheckState::default(),
            checkpoint: CheckState::default(),
            source_retrying_since_ms: AtomicU64::new(0),
            sink_retrying_since_ms: AtomicU64::new(0),
            max_backoff: Mutex::new(Duration::from_millis(
                crate::config::DEFAULT_READY_MAX_BACKOFF_MS,
            )),
        };
        health.source.set(false, "not connected yet");
        health.broker.set(false, "not probed yet");
        health.checkpoint.set(true, "");
        health
    }
}

/// One check in the `/readyz` body.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CheckReport {
    /// Whether it passes.
    pub ok: bool,
    /// Why not (empty when it passes).
    pub detail: String,
}

/// The `/readyz` body.
#[derive(Debug, Clone, Serialize)]
pub struct ReadinessReport {
    /// True when every check passes (the HTTP status is then 200, else 503).
    pub ready: bool,
    /// `source_connected`: the binlog stream is up.
    pub source_connected: CheckReport,
    /// `broker_reachable`: the Kafka cluster answered the last metadata probe.
    pub broker_reachable: CheckReport,
    /// `checkpoint_store`: the last checkpoint commit succeeded.
    pub checkpoint_store: CheckReport,
    /// `not_backing_off`: no retry loop (source or sink) older than the threshold.
    pub not_backing_off: CheckReport,
}

impl Health {
    /// Sets `metrics.ready_max_backoff_ms`.
    pub fn set_max_backoff(&self, max_backoff: Duration) {
        *self
            .max_backoff
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = max_backoff;
    }

    /// The source connected: it passes and its retry loop ends.
    pub fn source_connected(&self) {
        self.source.set(true, "");
        self.source_retrying_since_ms.store(0, Ordering::Relaxed);
    }

    /// The source failed and retries: it fails, and its retry loop starts (if not running).
    pub fn source_retrying(&self, error: &str) {
        self.source.set(false, format!("reconnecting: {error}"));
        let _ = self.source_retrying_since_ms.compare_exchange(
            0,
            unix_millis_now(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// The broker probe's outcome.
    pub fn broker_probed(&self, error: Option<&str>) {
        match error {
            None => self.broker.set(true, ""),
            Some(error) => self.broker.set(false, error),
        }
    }

    /// Whether the last broker probe got an answer.
    pub fn broker_reachable(&self) -> bool {
        self.broker.ok.load(Ordering::Relaxed)
    }

    /// A checkpoint commit's outcome.
    pub fn checkpoint_committed(&self, error: Option<&str>) {
        match error {
            None => self.checkpoint.set(true, ""),
            Some(error) => self
                .checkpoint
                .set(false, format!("last commit failed: {error}")),
        }
    }

    /// A delivery failed and is retried: the sink's retry loop starts (if not running).
    pub fn sink_retrying(&self) {
        let _ = self.sink_retrying_since_ms.compare_exchange(
            0,
            unix_millis_now(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Kafka acked a record: the sink's retry loop ends.
    pub fn sink_delivered(&self) {
        self.sink_retrying_since_ms.store(0, Ordering::Relaxed);
    }

    /// The checks now.
    pub fn report(&self) -> ReadinessReport {
        let max_backoff = *self
            .max_backoff
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = unix_millis_now();
        let retrying_for = |since: &AtomicU64| match since.load(Ordering::Relaxed) {
            0 => None,
            since => Some(Duration::from_millis(now.saturating_sub(since))),
        };
        let too_long = [
            ("source", retrying_for(&self.source_retrying_since_ms)),
            ("sink", retrying_for(&self.sink_retrying_since_ms)),
        ]
        .into_iter()
        .filter_map(|(what, retrying)| {
            retrying
                .filter(|elapsed| *elapsed > max_backoff)
                .map(|elapsed| {
                    format!(
                        "the {what} has been retrying for {} s (metrics.ready_max_backoff_ms = {})",
                        elapsed.as_secs(),
                        max_backoff.as_millis()
                    )
                })
        })
        .collect::<Vec<_>>();
        let not_backing_off = CheckReport {
            ok: too_long.is_empty(),
            detail: too_long.join("; "),
        };
        let source_connected = self.source.report();
        let broker_reachable = self.broker.report();
        let checkpoint_store = self.checkpoint.report();
        ReadinessReport {
            ready: source_connected.ok
                && broker_reachable.ok
                && checkpoint_store.ok
                && not_backing_off.ok,
            source_connected,
            broker_reachable,
            checkpoint_store,
            not_backing_off,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_check_passes() {
        let health = Health::default();
        assert!(!health.report().ready, "nothing connected yet");
        health.source_connected();
        health.broker_probed(None);
        assert!(health.report().ready);
        health.broker_probed(Some("all brokers down"));
        let report = health.report();
        assert!(!report.ready);
        assert_eq!(report.broker_reachable.detail, "all brokers down");
        health.broker_probed(None);
        health.checkpoint_committed(Some("disk full"));
        assert!(!health.report().ready);
        health.checkpoint_committed(None);
        health.source_retrying("connection refused");
        assert!(!health.report().source_connected.ok);
        health.source_connected();
        assert!(health.report().ready);
    }

    #[test]
    fn a_retry_loop_longer_than_the_threshold_is_not_ready() {
        let health = Health::default();
        health.source_connected();
        health.broker_probed(None);
        health.set_max_backoff(Duration::from_millis(50));
        health.sink_retrying();
        assert!(health.report().ready, "a fresh retry loop is fine");
        std::thread::sleep(Duration::from_millis(80));
        let report = health.report();
        assert!(!report.ready);
        assert!(report.not_backing_off.detail.contains("sink"), "{report:?}");
        health.sink_delivered();
        assert!(health.report().ready);
    }
}
