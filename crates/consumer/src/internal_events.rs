//! Internal events (the relay's pattern): each thing worth telling an operator is a struct
//! whose [`InternalEvent::emit`] logs it and counts it in [`ConsumerMetrics`] in one place.

use std::time::Duration;

use crate::event::ConsumedEvent;
use crate::metrics::ConsumerMetrics;

/// Something that happened, logged and counted by [`InternalEvent::emit`].
pub trait InternalEvent {
    /// Logs the event and updates its metrics.
    fn emit(self, metrics: &ConsumerMetrics);
}

/// An event's transaction committed.
pub struct EventApplied<'a> {
    /// The event.
    pub event: &'a ConsumedEvent,
    /// Handler attempts it took.
    pub attempts: u32,
}

impl InternalEvent for EventApplied<'_> {
    fn emit(self, metrics: &ConsumerMetrics) {
        metrics.events_applied.inc();
        tracing::debug!(
            event_id = %self.event.event_id,
            topic = %self.event.topic,
            partition = self.event.partition,
            offset = self.event.offset,
            attempts = self.attempts,
            "event applied"
        );
    }
}

/// `processed_event` already had the event: a redelivery, rolled back and skipped.
pub struct DuplicateSkipped<'a> {
    /// The event.
    pub event: &'a ConsumedEvent,
}

impl InternalEvent for DuplicateSkipped<'_> {
    fn emit(self, metrics: &ConsumerMetrics) {
        metrics.duplicates_skipped.inc();
        tracing::info!(
            event_id = %self.event.event_id,
            topic = %self.event.topic,
            partition = self.event.partition,
            offset = self.event.offset,
            "event was applied before (redelivery): skipped"
        );
    }
}

/// A handler attempt failed.
pub struct HandlerFailed<'a> {
    /// The event.
    pub event: &'a ConsumedEvent,
    /// The attempt (1-based).
    pub attempt: u32,
    /// The error text.
    pub error: &'a str,
    /// The wait before the next attempt (`None`: dead-lettered now).
    pub retry_in: Option<Duration>,
}

impl InternalEvent for HandlerFailed<'_> {
    fn emit(self, metrics: &ConsumerMetrics) {
        metrics.handler_failures.inc();
        tracing::warn!(
            event_id = %self.event.event_id,
            topic = %self.event.topic,
            partition = self.event.partition,
            offset = self.event.offset,
            attempt = self.attempt,
            error = self.error,
            retry_in_ms = self.retry_in.map(|wait| wait.as_millis() as u64),
            "handler failed"
        );
    }
}

/// A record went to the dead-letter topic.
pub struct DeadLettered<'a> {
    /// The event id (or `-` when the record had none).
    pub event_id: &'a str,
    /// Topic, partition, offset consumed from.
    pub origin: (&'a str, i32, i64),
    /// The dead-letter topic.
    pub dead_letter_topic: &'a str,
    /// The error class.
    pub class: &'a str,
    /// The error text.
    pub error: &'a str,
}

impl InternalEvent for DeadLettered<'_> {
    fn emit(self, metrics: &ConsumerMetrics) {
        metrics.dead_letters.inc();
        tracing::error!(
            event_id = self.event_id,
            topic = self.origin.0,
            partition = self.origin.1,
            offset = self.origin.2,
            dead_letter_topic = self.dead_letter_topic,
            error_class = self.class,
            error = self.error,
            "record dead-lettered; fix the cause and replay it from the dead-letter topic (same id)"
        );
    }
}

/// One of the library's own database statements (or a dead-letter send) failed and is
/// retried.
pub struct InfrastructureRetry<'a> {
    /// What was being done.
    pub operation: &'static str,
    /// The error text.
    pub error: &'a str,
    /// The wait before the retry.
    pub retry_in: Duration,
}

impl InternalEvent for InfrastructureRetry<'_> {
    fn emit(self, metrics: &ConsumerMetrics) {
        metrics.database_retries.inc();
        tracing::warn!(
            operation = self.operation,
            error = self.error,
            retry_in_ms = self.retry_in.as_millis() as u64,
            "consumer infrastructure error; retrying"
        );
    }
}

/// A Kafka offset commit failed (the next commit covers it; at worst a redelivery).
pub struct OffsetCommitFailed<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Partition.
    pub partition: i32,
    /// The offset that was to be committed.
    pub offset: i64,
    /// The error text.
    pub error: &'a str,
}

impl InternalEvent for OffsetCommitFailed<'_> {
    fn emit(self, _metrics: &ConsumerMetrics) {
        tracing::warn!(
            topic = self.topic,
            partition = self.partition,
            offset = self.offset,
            error = self.error,
            "offset commit failed; the record may be redelivered (a no-op thanks to processed_event)"
        );
    }
}
