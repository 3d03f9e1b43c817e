//! The sink task: takes records from the input, keeps every unacked one, and reacts to
//! each delivery report (ack, resend in order, rebuild, dead letter, stop).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::Producer;
use tokio::sync::mpsc;

use super::classify::{classify_delivery_error, FailureKind};
use super::dead_lettering::{on_permanent_failure, Pending, PermanentAction};
use super::producer::create_kafka_client;
use super::producer::{enqueue, RelayProducer};
use super::topics::{reach_cluster_at_startup, TopicManager};
use super::{KafkaSinkSettings, SinkError, SinkItem, SinkSummary};
use crate::backoff::Backoff;
use crate::internal_events::{
    DeliveryFailedTransient, InFlightChanged, InternalEvent, ProducerRecreated, RecordsDelivered,
};
use crate::kafka_context::RelayClientContext;
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// Sends records from `input` until it closes (and everything is acked) or shutdown fires
/// (and the drain deadline passes); calls `on_delivered` with each acked record's ticket.
pub async fn run_kafka_sink<T, F>(
    settings: KafkaSinkSettings,
    mut input: mpsc::Receiver<SinkItem<T>>,
    mut on_delivered: F,
    metrics: Arc<Metrics>,
    mut shutdown: Shutdown,
) -> Result<SinkSummary, SinkError>
where
    T: Send + 'static,
    F: FnMut(T) + Send,
{
    let mut producer: RelayProducer =
        create_kafka_client(&settings.client_properties, RelayClientContext::default())
            .map_err(SinkError::Client)?;
    if !reach_cluster_at_startup(&producer, &settings, &mut shutdown).await? {
        return Ok(SinkSummary::default());
    }
    let mut generation: u64 = 0;
    let mut topics = TopicManager::new(&settings)?;
    let mut pending: BTreeMap<u64, Pending<T>> = BTreeMap::new();
    let mut next_sequence: u64 = 0;
    let mut deliveries = FuturesUnordered::new();
    let mut waiting_for_resend: BTreeSet<u64> = BTreeSet::new();
    let mut backoff = Backoff::new(settings.retry_initial_backoff, settings.retry_max_backoff);
    let mut resend_timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    let mut input_open = true;
    // Set when the producer must be rebuilt before the next resend: (reason, metric kind).
    let mut recreate_reason: Option<(String, &'static str)> = None;
    let mut drain_deadline: Option<tokio::time::Instant> = None;
    let mut summary = SinkSummary::default();

    loop {
        if !input_open && pending.is_empty() {
            break;
        }
        if drain_deadline.is_some() && pending.is_empty() {
            break;
        }
        let accepting = input_open
            && drain_deadline.is_none()
            && waiting_for_resend.is_empty()
            && pending.len() < settings.max_in_flight;
        let deadline_sleep = async {
            match drain_deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        let resend_due = async {
            match resend_timer.as_mut() {
                Some(timer) => timer.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            Some((sequence, sent_generation, outcome)) = deliveries.next(), if !deliveries.is_empty() => {
                match outcome {
                    Ok(()) => {
                        if let Some(done) = pending.remove(&sequence) {
                            waiting_for_resend.remove(&sequence);
                            on_delivered(done.ticket);
                            summary.delivered += 1;
                            RecordsDelivered { count: 1 }.emit(&metrics);
                            InFlightChanged { in_flight: pending.len() }.emit(&metrics);
                            backoff.reset();
                        }
                    }
                    Err(error) if sent_generation == generation && pending.contains_key(&sequence) => {
                        // The report's own code first: with enable.gapless.guarantee a broker's
                        // permanent rejection also makes the producer fatal
                        // (_GAPLESS_GUARANTEE), but the record is still rejected for good
                        // and must be dead-lettered, not resent forever.
                        let fatal = producer.client().fatal_error();
                        let kind = match (classify_delivery_error(&error), &fatal) {
                            (FailureKind::Permanent, _) => FailureKind::Permanent,
                            (_, Some(_)) => FailureKind::Fatal,
                            (kind, None) => kind,
                        };
                        match kind {
                            FailureKind::Permanent => {
                                if let Some((code, message)) = &fatal {
                                    // The producer is unusable after it: rebuild before the resend.
                                    recreate_reason = Some((format!("fatal {code:?} after a permanent rejection: {message}"), "fatal"));
                                }
                                let action = on_permanent_failure(&mut pending, sequence, error, &settings.dead_letter, &metrics)?;
                                if matches!(action, PermanentAction::DeadLettered) {
                                    topics.ensure(&settings.dead_letter.topic, &producer, &metrics).await?;
                                }
                                waiting_for_resend.insert(sequence);
                                if resend_timer.is_none() {
                                    resend_timer = Some(Box::pin(tokio::time::sleep(backoff.next_delay())));
                                }
                            }
                            FailureKind::Fatal => {
                                let reason = fatal.map(|(code, message)| format!("fatal {code:?}: {message}")).unwrap_or_else(|| format!("fatal: {error}"));
                                recreate_reason = Some((reason, "fatal"));
                                waiting_for_resend.insert(sequence);
                                if resend_timer.is_none() {
                                    resend_timer = Some(Box::pin(tokio::time::sleep(backoff.next_delay())));
                                }
                            }
                            FailureKind::Transient => {
                                if error.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageTimedOut) && recreate_reason.is_none() {
                                    // librdkafka retried for message.timeout.ms already. A producer
                                    // whose id the cluster forgot (broker restarted empty) never
                                    // recovers by itself: start over with a fresh one.
                                    recreate_reason = Some((format!("delivery timed out: {error}"), "timeout"));
                                }
                                let first_failure = waiting_for_resend.is_empty();
                                waiting_for_resend.insert(sequence);
                                if first_failure || resend_timer.is_none() {
                                    let delay = backoff.next_delay();
                                    let topic = pending.get(&sequence).map(|p| p.record.topic.as_str()).unwrap_or("");
                                    DeliveryFailedTransient { topic, error: &error, retry_in: delay, waiting: waiting_for_resend.len() }.emit(&metrics);
                                    resend_timer = Some(Box::pin(tokio::time::sleep(delay)));
                                } else {
                                    metrics.delivery_errors.with_label_values(&["transient"]).inc();
                                }
                            }
                        }
                    }
                    Err(_) => {
                        // A failure from a replaced producer generation: the record was resent.
                    }
                }
            }
            _ = resend_due => {
                resend_timer = None;
                if let Some((reason, kind)) = recreate_reason.take() {
                    ProducerRecreated { reason: &reason, kind, resending: pending.len() }.emit(&metrics);
                    let fresh = create_kafka_client(&settings.client_properties, RelayClientContext::default())
                        .map_err(SinkError::Client)?;
                    let old = std::mem::replace(&mut producer, fresh);
                    // Dropping a producer purges and flushes for up to 500 ms: not on the runtime.
                    // Its outstanding deliveries then fail (ignored: older generation) or
                    // succeed (accepted: a real ack).
                    tokio::task::spawn_blocking(move || drop(old));
                    generation += 1;
                    waiting_for_resend = pending.keys().copied().collect();
                }
                let due: Vec<u64> = std::mem::take(&mut waiting_for_resend).into_iter().collect();
                for sequence in due {
                    let enqueued = pending.get(&sequence).map(|item| enqueue(&producer, &item.record, sequence, generation));
                    if let Some(Err(error)) = enqueued.as_ref().filter(|r| matches!(r, Err(e) if classify_delivery_error(e) == FailureKind::Permanent)) {
                        let error = error.clone();
                        let action = on_permanent_failure(&mut pending, sequence, error, &settings.dead_letter, &metrics)?;
                        if matches!(action, PermanentAction::DeadLettered) {
                            topics.ensure(&settings.dead_letter.topic, &producer, &metrics).await?;
                        }
                        waiting_for_resend.insert(sequence);
                        if resend_timer.is_none() {
                            resend_timer = Some(Box::pin(tokio::time::sleep(backoff.next_delay())));
                        }
                        continue;
                    }
                    if let (Some(item), Some(enqueued)) = (pending.get(&sequence), enqueued) {
                        match enqueued {
                            Ok(delivery) => deliveries.push(delivery),
                            Err(error) => {
                                // Queue full or similar: try again after the next delay.
                                waiting_for_resend.insert(sequence);
                                if resend_timer.is_none() {
                                    let delay = backoff.next_delay();
                                    DeliveryFailedTransient { topic: &item.record.topic, error: &error, retry_in: delay, waiting: waiting_for_resend.len() }.emit(&metrics);
                                    resend_timer = Some(Box::pin(tokio::time::sleep(delay)));
                                }
                            }
                        }
                    }
                }
            }
            _ = deadline_sleep => {
                summary.abandoned = pending.len();
                tracing::warn!(unacked = pending.len(), "shutdown deadline passed with records unacked; they stay out of the checkpoint and are replayed on the next start");
                break;
            }
            _ = shutdown.recv(), if drain_deadline.is_none() => {
                drain_deadline = Some(tokio::time::Instant::now() + settings.drain_timeout);
                tracing::info!(in_flight = pending.len(), "sink draining records in flight");
            }
            received = input.recv(), if accepting => {
                match received {
                    None => input_open = false,
                    Some(item) => {
                        let known = topics.is_known(&item.record.topic);
                        if !known {
                            let mut shutdown_for_topic = shutdown.clone();
                            tokio::select! {
                                ensured = topics.ensure(&item.record.topic, &producer, &metrics) => ensured?,
                                _ = shutdown_for_topic.recv() => {
                                    // The record was never sent: not reported, so not checkpointed.
                                    drain_deadline = Some(tokio::time::Instant::now() + settings.drain_timeout);
                                    continue;
                                }
                            }
                        }
                        let sequence = next_sequence;
                        next_sequence += 1;
                        let mut permanent_at_enqueue = None;
                        match enqueue(&producer, &item.record, sequence, generation) {
                            Ok(delivery) => deliveries.push(delivery),
                            Err(error) if classify_delivery_error(&error) == FailureKind::Permanent => {
                                // E.g. larger than message.max.bytes: the producer refuses at once.
                                permanent_at_enqueue = Some(error);
                            }
                            Err(error) => {
                                waiting_for_resend.insert(sequence);
                                if resend_timer.is_none() {
                                    let delay = backoff.next_delay();
                                    DeliveryFailedTransient { topic: &item.record.topic, error: &error, retry_in: delay, waiting: waiting_for_resend.len() }.emit(&metrics);
                                    resend_timer = Some(Box::pin(tokio::time::sleep(delay)));
                                }
                            }
                        }
                        pending.insert(sequence, Pending { record: item.record, ticket: item.ticket, origin: item.origin, permanent_failures: 0, first_failure_ms: 0 });
                        InFlightChanged { in_flight: pending.len() }.emit(&metrics);
                        if let Some(error) = permanent_at_enqueue {
                            let action = on_permanent_failure(&mut pending, sequence, error, &settings.dead_letter, &metrics)?;
                            if matches!(action, PermanentAction::DeadLettered) {
                                topics.ensure(&settings.dead_letter.topic, &producer, &metrics).await?;
                            }
                            waiting_for_resend.insert(sequence);
                            if resend_timer.is_none() {
                                resend_timer = Some(Box::pin(tokio::time::sleep(backoff.next_delay())));
                            }
                        }
                    }
                }
            }
        }
    }
    InFlightChanged {
        in_flight: pending.len(),
    }
    .emit(&metrics);
    tokio::task::spawn_blocking(move || drop(producer));
    Ok(summary)
}
