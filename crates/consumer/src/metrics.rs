//! The consumer's Prometheus collectors.
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `outbox_consumer_events_applied_total` | counter | events whose transaction committed |
//! | `outbox_consumer_duplicates_skipped_total` | counter | events already in `processed_event` (redeliveries) |
//! | `outbox_consumer_handler_failures_total` | counter | failed handler attempts (retried or dead-lettered) |
//! | `outbox_consumer_dead_letters_total` | counter | records sent to the dead-letter topic |
//! | `outbox_consumer_database_retries_total` | counter | the library's own statements retried (begin, claim, commit) |
//! | `outbox_consumer_lag` | gauge, per `topic`, `partition` | high watermark minus the next offset to apply |
//!
//! Every collector has the constant label `consumer` (the `consumer_name`), so several
//! consumers can share one registry.

use prometheus::{IntCounter, IntGaugeVec, Opts, Registry};

/// One consumer's collectors (cheap to clone: the collectors are shared handles).
#[derive(Debug, Clone)]
pub struct ConsumerMetrics {
    /// `outbox_consumer_events_applied_total`.
    pub events_applied: IntCounter,
    /// `outbox_consumer_duplicates_skipped_total`.
    pub duplicates_skipped: IntCounter,
    /// `outbox_consumer_handler_failures_total`.
    pub handler_failures: IntCounter,
    /// `outbox_consumer_dead_letters_total`.
    pub dead_letters: IntCounter,
    /// `outbox_consumer_database_retries_total`.
    pub database_retries: IntCounter,
    /// `outbox_consumer_lag`.
    pub lag: IntGaugeVec,
}

impl ConsumerMetrics {
    /// New collectors labelled `consumer = consumer_name` (not registered anywhere).
    pub fn new(consumer_name: &str) -> Result<Self, prometheus::Error> {
        let opts =
            |name: &str, help: &str| Opts::new(name, help).const_label("consumer", consumer_name);
        Ok(Self {
            events_applied: IntCounter::with_opts(opts(
                "outbox_consumer_events_applied_total",
                "Events applied (their database transaction committed).",
            ))?,
            duplicates_skipped: IntCounter::with_opts(opts(
                "outbox_consumer_duplicates_skipped_total",
                "Events skipped because processed_event already had them (redeliveries).",
            ))?,
            handler_failures: IntCounter::with_opts(opts(
                "outbox_consumer_handler_failures_total",
                "Handler attempts that failed (retried, or dead-lettered).",
            ))?,
            dead_letters: IntCounter::with_opts(opts(
                "outbox_consumer_dead_letters_total",
                "Records sent to the consumer's dead-letter topic.",
            ))?,
            database_retries: IntCounter::with_opts(opts(
                "outbox_consumer_database_retries_total",
                "The library's own database statements (begin, processed_event insert, commit) retried.",
            ))?,
            lag: IntGaugeVec::new(
                opts(
                    "outbox_consumer_lag",
                    "Records in the partition not applied yet (high watermark minus next offset).",
                ),
                &["topic", "partition"],
            )?,
        })
    }

    /// Adds every collector to `registry`.
    pub fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.events_applied.clone()))?;
        registry.register(Box::new(self.duplicates_skipped.clone()))?;
        registry.register(Box::new(self.handler_failures.clone()))?;
        registry.register(Box::new(self.dead_letters.clone()))?;
        registry.register(Box::new(self.database_retries.clone()))?;
        registry.register(Box::new(self.lag.clone()))?;
        Ok(())
    }
}
