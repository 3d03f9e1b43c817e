//! The sink task: takes records from the input, keeps every unacked one, and reacts to
//! each delivery report (ack, resend in order, rebuild, dead letter, stop) and to the
//! stall watchdog.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::error::KafkaError;
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};

use super::classify::{classify_delivery_error, FailureKind};
use super::dead_lettering::{on_permanent_failure, Pending, PermanentAction};
use super::pending::PendingRecords;
use super::producer::{create_sink_producer, enqueue, DeliveryOutcome, SinkProducer};
use super::rebuild::{purge_producer, stall_deadline, Rebuild};
use super::topics::{reach_cluster_at_startup, TopicManager};
use super::{
    KafkaSinkSettings, ShutdownSignal, SinkError, SinkItem, SinkObserver, SinkSummary, SinkTicket,
};
use crate::backoff::Backoff;
use crate::internal_events::{
    DeliveryFailedTransient, InFlightChanged, InternalEvent, OldestUnackedChanged,
    ProducerRecreated, ProducerStalled, RecordAcked, RecordResent,
};

/// Sends records from `input` until it closes (and everything is acked) or shutdown fires
/// (and the drain deadline passes); calls `on_delivered` with each acked record's ticket.
/// `input` carries batches of records in order (one channel message per batch; an empty
/// one is allowed and ignored): a pass takes the records of a batch one after the other
/// while the limits allow, and keeps the rest, in order, for later passes.
/// Counts in `observer`'s collectors and tells it about deliveries and retries.
pub async fn run_kafka_sink<T, F, S>(
    settings: KafkaSinkSettings,
    mut input: mpsc::Receiver<Vec<SinkItem<T>>>,
    mut on_delivered: F,
    observer: Arc<dyn SinkObserver>,
    mut shutdown: S,
) -> Result<SinkSummary, SinkError>
where
    T: SinkTicket + Send + 'static,
    F: FnMut(T) + Send,
    S: ShutdownSignal,
{
    let metrics: &dyn SinkObserver = &*observer;
    // Every producer's delivery reports, tagged with its generation: one channel for the
    // sink's life, drained in bulk by the loop below.
    let (report_sender, mut reports) = mpsc::unbounded_channel::<DeliveryOutcome>();
    let mut generation: u64 = 0;
    let mut producer: SinkProducer = create_sink_producer(
        &settings.client_properties,
        generation,
        report_sender.clone(),
    )
    .map_err(SinkError::Client)?;
    let failures = producer
        .client()
        .context()
        .relay_context()
        .last_failure_handle();
    if !reach_cluster_at_startup(&producer, &failures, &settings, &mut shutdown).await? {
        return Ok(SinkSummary::default());
    }
    metrics.cluster_reached();
    let mut topics = TopicManager::new(&settings)?;
    let mut pending: PendingRecords<T> = PendingRecords::new();
    // Records acked out of order leave a slot each behind the oldest unacked one (see
    // `pending`): while one record is stuck (its partition's leader down, say) the others'
    // slots pile up, so input stops at this span too.
    let max_pending_span = settings.max_in_flight.saturating_mul(PENDING_SPAN_FACTOR);
    // Records the current producer holds whose delivery report has not come yet: a rebuild
    // waits for all of them (the old per-record futures' count).
    let mut unreported: usize = 0;
    let mut waiting_for_resend: BTreeSet<u64> = BTreeSet::new();
    let mut backoff = Backoff::new(settings.retry_initial_backoff, settings.retry_max_backoff);
    let mut resend_timer: Option<Pin<Box<Sleep>>> = None;
    let mut input_open = true;
    // Records taken from the input in a batch and not accepted yet (the limits stopped the
    // batch part way): the next pass that may accept input starts with them, in order. Not
    // unacked yet: at shutdown they are dropped unreported, as records still in the channel.
    let mut held: std::vec::IntoIter<SinkItem<T>> = Vec::new().into_iter();
    // Set from the moment the producer must be replaced until the new one exists.
    let mut rebuild: Option<Rebuild> = None;
    let mut drain_deadline: Option<Instant> = None;
    let mut summary = SinkSummary::default();

    'sink: loop {
        OldestUnackedChanged {
            since_ms: pending.oldest().map(|item| item.accepted_at_ms),
        }
        .emit(metrics);
        if (!input_open || drain_deadline.is_some()) && pending.is_empty() {
            break;
        }
        if let Some(request) = rebuild.as_mut() {
            if request.drain_until.is_none() {
                purge_producer(&producer).await;
                request.drain_until = Some(Instant::now() + settings.admin_timeout);
            }
        }
        let drained = rebuild.as_ref().is_some_and(|request| {
            unreported == 0
                || request
                    .drain_until
                    .is_some_and(|until| Instant::now() >= until)
        });
        if drained {
            if let Some(request) = rebuild.take() {
                ProducerRecreated {
                    reason: &request.reason,
                    kind: request.kind,
                    resending: pending.len(),
                }
                .emit(metrics);
                let fresh = create_sink_producer(
                    &settings.client_properties,
                    generation + 1,
                    report_sender.clone(),
                )
                .map_err(SinkError::Client)?;
                let old = std::mem::replace(&mut producer, fresh);
                // Reports the old producer still owes (past the drain deadline only) come
                // with its generation and are ignored: their records are resent below.
                unreported = 0;
                // Dropping a producer flushes for up to 500 ms: not on the runtime.
                tokio::task::spawn_blocking(move || drop(old));
                generation += 1;
                if settings.give_up_on_rebuild {
                    // The old producer is purged: nothing of these records is left in
                    // flight, so their source may retry them in any order it likes. A
                    // record Kafka rejected for good stays until its dead letter is written
                    // (handed back, its rejections would be forgotten and it would never
                    // die).
                    let unacked: Vec<u64> = pending.sequences().collect();
                    for sequence in unacked {
                        let rejected = pending
                            .get(sequence)
                            .is_some_and(|item| item.permanent_failures > 0);
                        if rejected {
                            continue;
                        }
                        if let Some(mut item) = pending.remove(sequence) {
                            item.ticket.gave_up(&request.reason);
                            on_delivered(item.ticket);
                        }
                    }
                    InFlightChanged {
                        in_flight: pending.len(),
                    }
                    .emit(metrics);
                }
                for item in pending.values_mut() {
                    item.sent_at = None;
                }
                waiting_for_resend = pending.sequences().collect();
                if !waiting_for_resend.is_empty() {
                    resend_timer = Some(Box::pin(tokio::time::sleep(request.resend_after)));
                }
            }
        }
        // A record Kafka rejected before is resent alone (see the resend below); the others
        // waiting behind it go once nothing is in flight any more.
        if rebuild.is_none()
            && resend_timer.is_none()
            && !waiting_for_resend.is_empty()
            && pending.values().all(|item| item.sent_at.is_none())
        {
            resend_timer = Some(Box::pin(tokio::time::sleep(Duration::ZERO)));
        }
        let accepting = input_open
            && drain_deadline.is_none()
            && rebuild.is_none()
            && waiting_for_resend.is_empty()
            && pending.len() < settings.max_in_flight
            && pending.span() < max_pending_span;
        let stall_at = match rebuild {
            Some(_) => None,
            None => stall_deadline(
                pending.values().find_map(|item| item.sent_at),
                settings.stall_timeout,
            ),
        };
        let rebuild_drain_until = rebuild.as_ref().and_then(|request| request.drain_until);
        let deadline_sleep = sleep_until_or_forever(drain_deadline);
        let stall_sleep = sleep_until_or_forever(stall_at);
        let rebuild_drain_sleep = sleep_until_or_forever(rebuild_drain_until);
        let resend_due = async {
            match resend_timer.as_mut() {
                Some(timer) => timer.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            Some(first) = reports.recv() => {
                // Every report ready now is handled in this pass, each as it would be alone.
                let mut report = first;
                loop {
                    let (sequence, sent_generation, outcome) = report;
                    // A report of a replaced producer is ignored: that producer was purged
                    // and drained, or dropped past the drain deadline, and its records are
                    // resent through the new one.
                    if sent_generation == generation {
                        unreported = unreported.saturating_sub(1);
                        let outcome = match outcome {
                            Ok(()) => Ok(()),
                            Err(failure) => {
                                // A handed-over payload comes back with its failed report; without
                                // it the record can be neither resent nor dead-lettered.
                                if let Some(item) = pending.get_mut(sequence) {
                                    take_payload_back(item, failure.payload);
                                    if item.payload_with_producer {
                                        return Err(payload_lost(&item.record.topic, &failure.error));
                                    }
                                }
                                Err(failure.error)
                            }
                        };
                        match outcome {
                            Ok(()) => {
                                if let Some(done) = pending.remove(sequence) {
                                    waiting_for_resend.remove(&sequence);
                                    let acked = RecordAcked { publish_latency: done.sent_at.map(|sent| sent.elapsed()), event_timestamp: done.origin.event_timestamp };
                                    on_delivered(done.ticket);
                                    summary.delivered += 1;
                                    acked.emit(metrics);
                                    InFlightChanged { in_flight: pending.len() }.emit(metrics);
                                    backoff.reset();
                                }
                            }
                            Err(error) if pending.contains(sequence) => {
                                if let Some(item) = pending.get_mut(sequence) {
                                    item.sent_at = None;
                                }
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
                                        let action = on_permanent_failure(&mut pending, sequence, error, &settings.dead_letter, metrics)?;
                                        if matches!(action, PermanentAction::DeadLettered)
                                            && !ensure_dead_letter_topic(&mut topics, &settings, &producer, metrics, &shutdown).await?
                                        {
                                            // Shutdown came first: the dead letter stays unsent and unreported.
                                            drain_deadline.get_or_insert_with(|| Instant::now() + settings.drain_timeout);
                                            continue 'sink;
                                        }
                                        match (&fatal, rebuild.is_some()) {
                                            (_, true) => {
                                                // Resent with everything else once the new producer exists.
                                            }
                                            (Some((code, message)), false) => {
                                                // The producer is unusable after it: rebuild before the resend.
                                                rebuild = Some(Rebuild::new(format!("fatal {code:?} after a permanent rejection: {message}"), "fatal", backoff.next_delay()));
                                            }
                                            (None, false) => {
                                                queue_resend(&mut waiting_for_resend, &mut resend_timer, &mut backoff, sequence);
                                            }
                                        }
                                    }
                                    _ if rebuild.is_some() => {
                                        // A report of the producer being replaced (purged, or failed with
                                        // it): its record is resent once the new producer exists.
                                    }
                                    FailureKind::Fatal => {
                                        let reason = fatal.map(|(code, message)| format!("fatal {code:?}: {message}")).unwrap_or_else(|| format!("fatal: {error}"));
                                        rebuild = Some(Rebuild::new(reason, "fatal", backoff.next_delay()));
                                    }
                                    FailureKind::Transient => {
                                        // librdkafka retries without a time limit, so a failure it
                                        // reports is one it gave up on, while younger records of the
                                        // same partition may still be in the producer: resending this one
                                        // alone could put it behind them. Replace the whole producer.
                                        let delay = backoff.next_delay();
                                        let topic = pending.get(sequence).map(|p| p.record.topic.as_str()).unwrap_or("");
                                        DeliveryFailedTransient { topic, error: &error, retry_in: delay, waiting: pending.len() }.emit(metrics);
                                        rebuild = Some(Rebuild::new(format!("delivery failed: {error}"), "failure", delay));
                                    }
                                }
                            }
                            Err(_) => {
                                // A failure of a record no longer pending: nothing waits for it.
                            }
                        }
                    }
                    match reports.try_recv() {
                        Ok(next) => report = next,
                        Err(_) => break,
                    }
                }
            }
            _ = rebuild_drain_sleep => {
                // The loop top replaces the producer now that the drain deadline passed.
                tracing::warn!(unreported, "the replaced Kafka producer did not report every purged record in time; dropping it and resending them");
            }
            _ = stall_sleep => {
                let oldest = pending.values().find(|item| item.sent_at.is_some());
                let topic = oldest.map(|item| item.record.topic.clone()).unwrap_or_default();
                ProducerStalled { topic: &topic, stall_timeout: settings.stall_timeout, unacked: pending.len() }.emit(metrics);
                rebuild = Some(Rebuild::new(
                    format!("no ack for {:?} (oldest unacked record for topic `{topic}`)", settings.stall_timeout),
                    "stall",
                    Duration::ZERO,
                ));
            }
            _ = resend_due, if rebuild.is_none() => {
                resend_timer = None;
                let due: Vec<u64> = std::mem::take(&mut waiting_for_resend).into_iter().collect();
                for (index, &sequence) in due.iter().enumerate() {
                    // A broker rejects a whole produce request: one record over the topic's
                    // max.message.bytes fails every record batched with it. So a record Kafka
                    // rejected before is resent in a batch of its own (nothing else in flight,
                    // nothing after it until its report), and only its own size or content
                    // can count against it; the records that merely shared its batch go
                    // through.
                    let rejected_before = pending.get(sequence).is_some_and(|item| item.permanent_failures > 0);
                    if rejected_before && pending.values().any(|item| item.sent_at.is_some()) {
                        waiting_for_resend.extend(due[index..].iter().copied());
                        break;
                    }
                    let Some(item) = pending.get_mut(sequence) else { continue };
                    if item.payload_with_producer {
                        // Its old producer was dropped before it reported the record.
                        return Err(payload_lost(&item.record.topic, &KafkaError::Canceled));
                    }
                    match enqueue(&producer, &item.record, sequence) {
                        Ok(()) => {
                            hand_over_big_payload(item);
                            item.sent_at = Some(Instant::now());
                            unreported += 1;
                            RecordResent.emit(metrics);
                            if rejected_before {
                                waiting_for_resend.extend(due[index + 1..].iter().copied());
                                break;
                            }
                        }
                        Err(error) if classify_delivery_error(&error) == FailureKind::Permanent => {
                            let action = on_permanent_failure(&mut pending, sequence, error, &settings.dead_letter, metrics)?;
                            if matches!(action, PermanentAction::DeadLettered)
                                && !ensure_dead_letter_topic(&mut topics, &settings, &producer, metrics, &shutdown).await?
                            {
                                drain_deadline.get_or_insert_with(|| Instant::now() + settings.drain_timeout);
                                continue;
                            }
                            queue_resend(&mut waiting_for_resend, &mut resend_timer, &mut backoff, sequence);
                        }
                        Err(error) => {
                            // Queue full or similar: this one and every later one wait for the
                            // next delay, so none overtakes it.
                            waiting_for_resend.extend(due[index..].iter().copied());
                            let delay = backoff.next_delay();
                            DeliveryFailedTransient { topic: &item.record.topic, error: &error, retry_in: delay, waiting: waiting_for_resend.len() }.emit(metrics);
                            resend_timer = Some(Box::pin(tokio::time::sleep(delay)));
                            break;
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
                drain_deadline = Some(Instant::now() + settings.drain_timeout);
                tracing::info!(in_flight = pending.len(), "sink draining records in flight");
            }
            received = next_batch(&mut held, &mut input), if accepting => {
                match received {
                    None => input_open = false,
                    Some(batch) => held = batch,
                }
                // The batch's records one after the other, each as a pass of its own would
                // take it, while the limits allow; the rest waits in `held`.
                for item in held.by_ref() {
                    // Unacked from now on, also while its topic is checked or created.
                    let accepted_at_ms = crate::unix_millis_now();
                    if pending.is_empty() {
                        OldestUnackedChanged { since_ms: Some(accepted_at_ms) }.emit(metrics);
                    }
                    let known = topics.is_known(&item.record.topic);
                    if !known {
                        let mut shutdown_for_topic = shutdown.clone();
                        tokio::select! {
                            ensured = topics.ensure(&item.record.topic, &producer, metrics) => ensured?,
                            _ = shutdown_for_topic.recv() => {
                                // The record was never sent: not reported, so not checkpointed.
                                drain_deadline = Some(Instant::now() + settings.drain_timeout);
                                continue 'sink;
                            }
                        }
                    }
                    let sequence = pending.next_sequence();
                    let mut permanent_at_enqueue: Option<KafkaError> = None;
                    let mut sent_at = None;
                    match enqueue(&producer, &item.record, sequence) {
                        Ok(()) => {
                            sent_at = Some(Instant::now());
                            unreported += 1;
                        }
                        Err(error) if classify_delivery_error(&error) == FailureKind::Permanent => {
                            // E.g. larger than message.max.bytes: the producer refuses at once.
                            permanent_at_enqueue = Some(error);
                        }
                        Err(error) => {
                            waiting_for_resend.insert(sequence);
                            if resend_timer.is_none() {
                                let delay = backoff.next_delay();
                                DeliveryFailedTransient { topic: &item.record.topic, error: &error, retry_in: delay, waiting: waiting_for_resend.len() }.emit(metrics);
                                resend_timer = Some(Box::pin(tokio::time::sleep(delay)));
                            }
                        }
                    }
                    let mut entry = Pending { record: item.record, ticket: item.ticket, origin: item.origin, permanent_failures: 0, first_failure_ms: 0, sent_at, accepted_at_ms, payload_with_producer: false };
                    if sent_at.is_some() {
                        hand_over_big_payload(&mut entry);
                    }
                    pending.push(entry);
                    InFlightChanged { in_flight: pending.len() }.emit(metrics);
                    if let Some(error) = permanent_at_enqueue {
                        let action = on_permanent_failure(&mut pending, sequence, error, &settings.dead_letter, metrics)?;
                        if matches!(action, PermanentAction::DeadLettered)
                            && !ensure_dead_letter_topic(&mut topics, &settings, &producer, metrics, &shutdown).await?
                        {
                            drain_deadline.get_or_insert_with(|| Instant::now() + settings.drain_timeout);
                            continue 'sink;
                        }
                        queue_resend(&mut waiting_for_resend, &mut resend_timer, &mut backoff, sequence);
                    }
                    // The same limits as `accepting` (a rebuild only starts from a report).
                    let accepts_more = drain_deadline.is_none()
                        && waiting_for_resend.is_empty()
                        && pending.len() < settings.max_in_flight
                        && pending.span() < max_pending_span;
                    if !accepts_more {
                        break;
                    }
                }
            }
        }
    }
    InFlightChanged {
        in_flight: pending.len(),
    }
    .emit(metrics);
    tokio::task::spawn_blocking(move || drop(producer));
    Ok(summary)
}

/// How many slots the unacked records may span, per record of `max_in_flight` (see
/// `max_pending_span` in [`run_kafka_sink`]): 16 x 10 000 records x one pointer is 1.25 MiB.
const PENDING_SPAN_FACTOR: usize = 16;

/// Payloads at least this big are handed over to librdkafka: once it copied one into its
/// queue the sink drops its own copy instead of keeping both until the ack (a 64 MiB row
/// would otherwise cost 64 MiB more), and takes the payload back from a failed delivery
/// report. Smaller payloads are kept: cheap, and resent without that round trip.
pub(super) const HAND_OVER_PAYLOAD_BYTES: usize = 1 << 20;

/// Whether `record`'s payload is handed over to the producer once enqueued.
fn is_big(record: &super::OutboundRecord) -> bool {
    record
        .payload
        .as_ref()
        .is_some_and(|payload| payload.len() >= HAND_OVER_PAYLOAD_BYTES)
}

/// Drops the sink's copy of a big payload that librdkafka now holds (see
/// [`HAND_OVER_PAYLOAD_BYTES`]).
fn hand_over_big_payload<T>(item: &mut Pending<T>) {
    if is_big(&item.record) {
        item.record.payload = None;
        item.payload_with_producer = true;
    }
}

/// Puts a handed-over payload back into its record from a failed delivery report.
fn take_payload_back<T>(item: &mut Pending<T>, payload: Option<Vec<u8>>) {
    if item.payload_with_producer {
        if let Some(payload) = payload {
            item.record.payload = Some(payload);
            item.payload_with_producer = false;
        }
    }
}

/// The sink's stop when a handed-over payload is gone (its producer was dropped before it
/// reported the record): the relay restarts from the stored checkpoint and reads the row
/// again, since the checkpoint never passed the record.
fn payload_lost(topic: &str, error: &KafkaError) -> SinkError {
    SinkError::PayloadLost {
        topic: topic.to_owned(),
        reason: error.to_string(),
    }
}

/// Queues `sequence` for a resend and arms the resend timer with the next backoff delay,
/// unless it is armed already (an armed timer resends everything waiting, in input order).
fn queue_resend(
    waiting_for_resend: &mut BTreeSet<u64>,
    resend_timer: &mut Option<Pin<Box<Sleep>>>,
    backoff: &mut Backoff,
    sequence: u64,
) {
    waiting_for_resend.insert(sequence);
    if resend_timer.is_none() {
        *resend_timer = Some(Box::pin(tokio::time::sleep(backoff.next_delay())));
    }
}

/// Makes sure the dead-letter topic exists (checked, or created with
/// `kafka.create_topics`) before a dead letter is sent; `false` when shutdown fired first.
/// Each metadata or admin request is bounded by `kafka.admin_timeout_ms`, and while the
/// cluster is unreachable the retries wait for shutdown too: a half-open connection or a
/// long outage cannot hold the sink past the drain deadline.
async fn ensure_dead_letter_topic<S: ShutdownSignal>(
    topics: &mut TopicManager,
    settings: &KafkaSinkSettings,
    producer: &SinkProducer,
    metrics: &dyn SinkObserver,
    shutdown: &S,
) -> Result<bool, SinkError> {
    let mut shutdown = shutdown.clone();
    tokio::select! {
        ensured = topics.ensure(&settings.dead_letter.topic, producer, metrics) => ensured.map(|()| true),
        _ = shutdown.recv() => Ok(false),
    }
}

/// The records to take next: those kept from the last batch, else the next batch from
/// `input` (`None` once it closed and nothing is kept).
async fn next_batch<T>(
    held: &mut std::vec::IntoIter<SinkItem<T>>,
    input: &mut mpsc::Receiver<Vec<SinkItem<T>>>,
) -> Option<std::vec::IntoIter<SinkItem<T>>> {
    if held.len() > 0 {
        return Some(std::mem::take(held));
    }
    input.recv().await.map(Vec::into_iter)
}

/// Sleeps until `deadline`, or forever without one.
pub(super) async fn sleep_until_or_forever(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
