//! The dead-letter policy applied to a record Kafka rejected permanently: resend within
//! the budget, replace it by its dead letter, or stop the sink.

use rdkafka::error::KafkaError;

use super::pending::PendingRecords;
use super::{OutboundRecord, SinkError, SinkObserver, SinkTicket};
use crate::config::DeadLetterConfig;
use crate::dead_letter::{
    dead_letter_for_record, kafka_error_class, now_millis, FailureReport, RecordOrigin,
};
use crate::internal_events::{DeadLettered, DeliveryRejected, InternalEvent};

/// A record taken from the input and not yet acked.
pub(super) struct Pending<T> {
    /// The record, kept for resends (replaced by its dead letter when dead-lettered).
    pub(super) record: OutboundRecord,
    /// The caller's ticket, handed back on ack.
    pub(super) ticket: T,
    /// Binlog origin, for the dead letter.
    pub(super) origin: RecordOrigin,
    /// Permanent failures so far, against `dead_letter.max_attempts`.
    pub(super) permanent_failures: u32,
    /// When the first permanent failure happened (ms since the epoch), for the dead letter.
    pub(super) first_failure_ms: i64,
    /// When the record was last handed to the current producer; `None` while it waits for
    /// a resend. The stall watchdog measures the oldest one.
    pub(super) sent_at: Option<tokio::time::Instant>,
    /// When (Unix ms) the sink took the record, for `oldest_unacked_age_seconds`.
    pub(super) accepted_at_ms: u64,
    /// The record's payload was handed over to the producer: the sink dropped its own copy
    /// after librdkafka copied it (a big payload is not kept twice until its ack), and a
    /// failed delivery report hands it back. Until then `record.payload` is `None` and the
    /// record cannot be resent or dead-lettered.
    pub(super) payload_with_producer: bool,
}

/// What to do after a permanent failure that did not stop the sink.
pub(super) enum PermanentAction {
    /// Resend the same record after the backoff (budget not used up).
    Resend,
    /// The record was replaced by its dead letter: make sure the topic exists, then send.
    DeadLettered,
}

/// Applies the dead-letter policy to a permanent failure of `sequence`.
pub(super) fn on_permanent_failure<T: SinkTicket>(
    pending: &mut PendingRecords<T>,
    sequence: u64,
    error: KafkaError,
    dead_letter: &DeadLetterConfig,
    metrics: &dyn SinkObserver,
) -> Result<PermanentAction, SinkError> {
    let Some(item) = pending.get_mut(sequence) else {
        return Ok(PermanentAction::Resend);
    };
    let class = kafka_error_class(&error);
    let is_dead_letter = dead_letter.enabled && item.record.topic == dead_letter.topic;
    if is_dead_letter || !dead_letter.dead_letters(class) {
        DeliveryRejected {
            topic: &item.record.topic,
            class,
            error: &error,
            resending: None,
        }
        .emit(metrics);
        return Err(permanent_error(
            &item.record.topic,
            item.record.key.as_deref(),
            error,
        ));
    }
    let now = now_millis();
    if item.permanent_failures == 0 {
        item.first_failure_ms = now;
    }
    item.permanent_failures += 1;
    let resend = item.permanent_failures < dead_letter.max_attempts;
    DeliveryRejected {
        topic: &item.record.topic,
        class,
        error: &error,
        resending: resend.then_some((item.permanent_failures, dead_letter.max_attempts)),
    }
    .emit(metrics);
    if resend {
        return Ok(PermanentAction::Resend);
    }
    let failure = FailureReport {
        class,
        message: error.to_string(),
        attempts: item.permanent_failures,
        first_failure_ms: item.first_failure_ms,
        last_failure_ms: now,
    };
    item.ticket.dead_lettered(&failure.message);
    item.record = dead_letter_replacing(&item.record, &item.origin, &failure, dead_letter, metrics);
    Ok(PermanentAction::DeadLettered)
}

/// The dead letter that takes `record`'s place after `failure`, with its
/// [`DeadLettered`] event (log and count in one place, for both sinks).
pub(super) fn dead_letter_replacing(
    record: &OutboundRecord,
    origin: &RecordOrigin,
    failure: &FailureReport,
    dead_letter: &DeadLetterConfig,
    metrics: &dyn SinkObserver,
) -> OutboundRecord {
    let letter = dead_letter_for_record(record, origin, failure, dead_letter);
    let id = record
        .headers
        .iter()
        .find(|(key, _)| key == "id")
        .map(|(_, value)| String::from_utf8_lossy(value).into_owned());
    DeadLettered {
        class: failure.class,
        id: id.as_deref(),
        original_topic: &record.topic,
        dead_letter_topic: &dead_letter.topic,
        attempts: failure.attempts,
        error: &failure.message,
    }
    .emit(metrics);
    letter
}

/// The sink's stop for a record Kafka rejected for good that may not be dead-lettered.
pub(super) fn permanent_error(topic: &str, key: Option<&[u8]>, error: KafkaError) -> SinkError {
    SinkError::Permanent {
        topic: topic.to_owned(),
        key: key.map(describe_key).unwrap_or_else(|| "<none>".into()),
        error: Box::new(error),
    }
}

/// A key for an error message: lossy UTF-8, cut after 64 bytes with its size (a
/// gigantic key must not flood the log).
fn describe_key(key: &[u8]) -> String {
    const SHOWN: usize = 64;
    if key.len() <= SHOWN {
        return String::from_utf8_lossy(key).into_owned();
    }
    format!(
        "{}... ({} bytes)",
        String::from_utf8_lossy(&key[..SHOWN]),
        key.len()
    )
}
