//! Replacing the producer without reordering: purge the old one, wait for every one of its
//! delivery reports, and only then build the new one and resend in input order.
//!
//! A producer is replaced when it can no longer deliver in order by itself: librdkafka's
//! fatal state (an idempotence gap, or any broker rejection under
//! `enable.gapless.guarantee`), a delivery failure librdkafka gave up on, or the stall
//! watchdog (the oldest unacked record had no ack for `kafka.stall_timeout_ms`). While the
//! old producer still holds records, a younger record of a key could land after the sink
//! resent an older one through a new producer; purging first (queue and requests in
//! flight, which also voids their late acks) and draining every report closes that window.

use std::time::Duration;

use rdkafka::producer::PurgeConfig;
use tokio::time::Instant;

use super::producer::SinkProducer;

/// A requested producer replacement, from the request until the new producer exists.
pub(super) struct Rebuild {
    /// Why, for the log (`ProducerRecreated`).
    pub(super) reason: String,
    /// `fatal`, `failure` or `stall`: the `delivery_errors` label it is counted under.
    pub(super) kind: &'static str,
    /// Delay between the new producer and the resend (backoff after a failure, none
    /// after a stall: the stall timeout already spaced the attempts).
    pub(super) resend_after: Duration,
    /// Set once the old producer was purged: from then on only its remaining delivery
    /// reports are awaited, until this deadline (a report that never comes must not hold
    /// the sink forever).
    pub(super) drain_until: Option<Instant>,
}

impl Rebuild {
    /// A replacement requested for `reason`.
    pub(super) fn new(reason: String, kind: &'static str, resend_after: Duration) -> Self {
        Self {
            reason,
            kind,
            resend_after,
            drain_until: None,
        }
    }
}

/// Purges `producer`'s queue and its requests in flight (their acks are voided, so a record
/// purged from the old producer can never land after its resend through the new one); every
/// purged record gets its delivery report promptly. Runs off the runtime: `rd_kafka_purge`
/// waits for librdkafka's threads.
pub(super) async fn purge_producer(producer: &SinkProducer) {
    let producer = producer.clone();
    let purge = tokio::task::spawn_blocking(move || {
        producer.purge(PurgeConfig::default().queue().inflight());
    });
    if let Err(error) = purge.await {
        tracing::warn!(%error, "purging the Kafka producer failed; waiting for its delivery reports anyway");
    }
}

/// When the watchdog fires: `stall_timeout` after the oldest record still in the
/// producer was handed to it (`sent_at` of the first unacked record in input order that is
/// not waiting for a resend).
pub(super) fn stall_deadline(
    oldest_sent_at: Option<Instant>,
    stall_timeout: Duration,
) -> Option<Instant> {
    oldest_sent_at.map(|sent_at| sent_at + stall_timeout)
}
