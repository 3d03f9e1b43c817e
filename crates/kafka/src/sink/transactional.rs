//! The exactly-once sink (`kafka.delivery = "exactly_once"`): a transactional producer
//! commits each batch of whole binlog transactions **and the checkpoint record for the end
//! of that batch** in one Kafka transaction.
//!
//! # Contract
//! * A Kafka transaction holds whole binlog transactions only: it is committed with the
//!   checkpoint `C` only when every record sent in it (and before it) belongs to a binlog
//!   transaction at or before `C`, and every such record was delivered
//!   ([`outbox_checkpoint::AckTracker::records_passed`]). A `read_committed` consumer thus
//!   sees a record exactly when the checkpoint after it is committed, so a restart from the
//!   stored checkpoint re-sends nothing it saw and skips nothing.
//! * A batch is committed when it is due (`max_interval` since its first record, or
//!   `max_records` / `max_bytes` reached) and at a binlog transaction boundary: a binlog
//!   transaction larger than a batch makes the Kafka transaction larger; it is never split.
//! * Progress without records (heartbeats, other tables' transactions) is committed as a
//!   transaction holding only the checkpoint record, at most once per `idle_interval`.
//! * Any failure inside a transaction (a delivery error, a failed commit, a broker outage
//!   longer than the transaction timeout) aborts it and ends the sink with
//!   [`SinkError::TransactionAborted`]: nothing of the aborted transaction becomes visible to
//!   `read_committed` consumers, and the relay restarts its pipeline from the stored
//!   checkpoint (in process), with a fresh producer. A producer fenced by a newer one with
//!   the same `transactional.id` (another relay with the same connector name took over)
//!   ends the sink with the definite [`SinkError::Fenced`].
//! * A record Kafka rejects permanently is remembered in [`RejectedRecords`] (which
//!   outlives the restart); once it failed `dead_letter.max_attempts` times, the next
//!   attempt sends its dead letter in its place, inside the transaction that also carries
//!   the checkpoint passing it. With dead letters off (or for a class in
//!   `dead_letter.fail_on`) the sink stops with [`SinkError::Permanent`].
//! * On shutdown (or when the input closes) the open transaction is committed if it ends at
//!   a boundary within `drain_timeout`, and aborted otherwise (its records are re-read
//!   after the restart: never lost, never seen twice).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use outbox_checkpoint::Checkpoint;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::Producer;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::classify::{classify_delivery_error, FailureKind};
use super::dead_lettering::{dead_letter_replacing, permanent_error};
use super::producer::{create_kafka_client, enqueue_with_future, DeliveryOutcome, RelayProducer};
use super::task::sleep_until_or_forever;
use super::topics::{reach_cluster_at_startup, TopicManager};
use super::{
    KafkaSinkSettings, OutboundRecord, ShutdownSignal, SinkError, SinkItem, SinkObserver,
    SinkSummary,
};
use crate::dead_letter::{fnv1a64, kafka_error_class, now_millis, FailureReport, RecordOrigin};
use crate::internal_events::{
    InFlightChanged, InternalEvent, KafkaTransactionAborted, KafkaTransactionCommitted,
    OldestUnackedChanged, RecordAcked,
};
use crate::kafka_context::RelayClientContext;

/// Settings of the exactly-once sink.
#[derive(Debug, Clone)]
pub struct TransactionalSinkSettings {
    /// Producer properties, topics, dead letters, drain timeout: as for the at-least-once
    /// sink. The transactional properties are added by [`transactional_properties`].
    pub sink: KafkaSinkSettings,
    /// `transactional.id`: derived from the connector name, so a second relay with the same
    /// name fences this one instead of writing beside it.
    pub transactional_id: String,
    /// The compacted topic holding the checkpoint (the Kafka checkpoint store's topic).
    pub checkpoint_topic: String,
    /// The checkpoint record's key (the connector name).
    pub checkpoint_key: Vec<u8>,
    /// A batch is due this long after its first record.
    pub max_interval: Duration,
    /// A batch is due once it holds this many records.
    pub max_records: usize,
    /// A batch is due once it holds this many record bytes (keys, values, headers).
    pub max_bytes: usize,
    /// Least time between two transactions that only move the checkpoint.
    pub idle_interval: Duration,
    /// `transaction.timeout.ms`: the broker aborts a transaction open longer than this.
    pub transaction_timeout: Duration,
}

/// A ticket that knows its record's place in the ack tracker's sequence.
pub trait SequencedTicket {
    /// The record's [`outbox_checkpoint::AckToken::sequence`].
    fn sequence(&self) -> u64;
}

/// The checkpoint a batch may be committed with, from the pipeline's ack tracker: the
/// tracker's own [`outbox_checkpoint::ExactlyOnceBoundary`] (the rule and its tests live on
/// `AckTracker::exactly_once_boundary`).
pub type BatchBoundary = outbox_checkpoint::ExactlyOnceBoundary;

/// What the sink did before it returned normally.
#[derive(Debug, Clone, Default)]
pub struct TransactionalSummary {
    /// Delivered and committed records, abandoned ones.
    pub sink: SinkSummary,
    /// The last checkpoint committed with a transaction.
    pub checkpoint: Option<Checkpoint>,
}

/// Records Kafka rejected permanently, remembered across the pipeline restarts that follow
/// the abort (a restart re-reads them from the checkpoint): after
/// `dead_letter.max_attempts` rejections a record is replaced by its dead letter.
#[derive(Debug, Clone, Default)]
pub struct RejectedRecords {
    /// Rejections by record identity ([`rejection_key`]).
    by_record: Arc<Mutex<HashMap<u64, Rejection>>>,
}

/// What is known about one rejected record.
#[derive(Debug, Clone)]
struct Rejection {
    /// Rejections so far.
    failures: u32,
    /// First rejection (Unix ms), for the dead letter.
    first_failure_ms: i64,
    /// Last rejection (Unix ms).
    last_failure_ms: i64,
    /// The error class (`kafka_error_class`).
    class: &'static str,
    /// The last error's text.
    message: String,
}

impl RejectedRecords {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Rejection>> {
        self.by_record
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records one more rejection of `record`; returns how many there were.
    fn note(&self, key: u64, error: &KafkaError) -> u32 {
        let now = now_millis();
        let mut map = self.lock();
        let entry = map.entry(key).or_insert_with(|| Rejection {
            failures: 0,
            first_failure_ms: now,
            last_failure_ms: now,
            class: kafka_error_class(error),
            message: String::new(),
        });
        entry.failures += 1;
        entry.last_failure_ms = now;
        entry.class = kafka_error_class(error);
        entry.message = error.to_string();
        entry.failures
    }

    /// The rejection history of `key`, once it reached `max_attempts`.
    fn exhausted(&self, key: u64, max_attempts: u32) -> Option<Rejection> {
        self.lock()
            .get(&key)
            .filter(|rejection| rejection.failures >= max_attempts)
            .cloned()
    }

    /// Whether `key` was rejected before.
    fn rejected_before(&self, key: u64) -> bool {
        self.lock().contains_key(&key)
    }

    /// Forgets `key` (its dead letter was committed, or it went through alone).
    fn forget(&self, key: u64) {
        self.lock().remove(&key);
    }
}

/// A record's identity across re-reads: its binlog origin and its bytes.
fn rejection_key(record: &OutboundRecord, origin: &RecordOrigin) -> u64 {
    let mut bytes = Vec::with_capacity(128);
    bytes.extend_from_slice(record.topic.as_bytes());
    bytes.push(0);
    if let Some(file) = &origin.binlog_file {
        bytes.extend_from_slice(file.as_bytes());
    }
    bytes.extend_from_slice(&origin.binlog_position.unwrap_or(0).to_le_bytes());
    bytes.extend_from_slice(record.key.as_deref().unwrap_or_default());
    bytes.push(0);
    for (name, value) in &record.headers {
        bytes.extend_from_slice(name.as_bytes());
        bytes.extend_from_slice(value);
    }
    for null in &record.null_headers {
        bytes.extend_from_slice(&null.position.to_le_bytes());
        bytes.extend_from_slice(null.name.as_bytes());
    }
    bytes.extend_from_slice(&fnv1a64(record.payload.as_deref().unwrap_or_default()).to_le_bytes());
    fnv1a64(&bytes)
}

/// The producer properties for exactly-once: the at-least-once ones, minus the settings a
/// transactional producer may not have (an infinite message timeout, the gapless
/// guarantee), plus `transactional.id` and the transaction timeout. A record that expires
/// only aborts its transaction, which costs no order: all of it is resent after the restart.
pub fn transactional_properties(
    base: &[(String, String)],
    transactional_id: &str,
    transaction_timeout: Duration,
) -> Vec<(String, String)> {
    let timeout_ms = transaction_timeout.as_millis().to_string();
    let mut properties: Vec<(String, String)> = base
        .iter()
        .filter(|(key, _)| {
            !matches!(
                key.as_str(),
                "message.timeout.ms" | "enable.gapless.guarantee" | "transactional.id"
            )
        })
        .cloned()
        .collect();
    properties.push(("transactional.id".into(), transactional_id.to_owned()));
    properties.push(("transaction.timeout.ms".into(), timeout_ms.clone()));
    properties.push(("message.timeout.ms".into(), timeout_ms));
    properties
}

/// A record sent in the open transaction and not yet delivered.
struct InTransaction<T> {
    /// Handed back on delivery.
    ticket: T,
    /// For the rejection history and a later dead letter.
    rejection_key: u64,
    /// Whether this is a dead letter replacing a rejected record.
    is_dead_letter: bool,
    /// Topic, for errors.
    topic: String,
    /// Key, for errors.
    key: Option<Vec<u8>>,
    /// When it was sent, for the publish latency histogram.
    sent_at: Instant,
    /// Binlog origin, for the end-to-end latency.
    event_timestamp: Option<u32>,
    /// When (Unix ms) the sink took it, for `oldest_unacked_age_seconds`.
    accepted_at_ms: u64,
}

/// The open Kafka transaction.
#[derive(Debug, Default)]
struct OpenBatch {
    /// `begin_transaction` was called and neither commit nor abort since.
    open: bool,
    /// When its first record was sent.
    started: Option<Instant>,
    /// Records sent in it.
    records: usize,
    /// Record bytes sent in it.
    bytes: usize,
    /// The tracker sequence of the newest record sent (in this or an earlier transaction).
    last_sent_sequence: Option<u64>,
    /// Dead letters sent in it (forgotten from [`RejectedRecords`] once committed).
    dead_letters: Vec<u64>,
    /// Records delivered in it (reported in the summary once committed).
    delivered: u64,
}

/// Runs the exactly-once sink until the input closes or shutdown fires (see the module
/// docs). `boundary` asks the ack tracker for the checkpoint a transaction may be committed
/// with, given the sequence of the newest record sent: `None` while that record's binlog
/// transaction has not ended or a record before it is undelivered. Counts in `observer`'s
/// collectors and tells it about each committed checkpoint.
#[allow(clippy::too_many_arguments)]
pub async fn run_transactional_sink<T, F, B, S>(
    settings: TransactionalSinkSettings,
    mut input: mpsc::Receiver<Vec<SinkItem<T>>>,
    mut on_delivered: F,
    mut boundary: B,
    progress: Arc<Notify>,
    rejected: RejectedRecords,
    resumed_from: Option<Checkpoint>,
    observer: Arc<dyn SinkObserver>,
    mut shutdown: S,
) -> Result<TransactionalSummary, SinkError>
where
    T: SequencedTicket + Send + 'static,
    F: FnMut(T) + Send,
    B: FnMut(Option<u64>) -> Option<BatchBoundary> + Send,
    S: ShutdownSignal,
{
    let metrics: &dyn SinkObserver = &*observer;
    let properties = transactional_properties(
        &settings.sink.client_properties,
        &settings.transactional_id,
        settings.transaction_timeout,
    );
    let context = RelayClientContext::default();
    let failures = context.last_failure_handle();
    let producer: RelayProducer =
        create_kafka_client(&properties, context).map_err(SinkError::Client)?;
    if !reach_cluster_at_startup(&producer, &failures, &settings.sink, &mut shutdown).await? {
        return Ok(TransactionalSummary::default());
    }
    metrics.cluster_reached();
    {
        let producer = producer.clone();
        let timeout = settings
            .sink
            .admin_timeout
            .max(settings.transaction_timeout);
        let outcome = tokio::task::spawn_blocking(move || producer.init_transactions(timeout))
            .await
            .map_err(|join| SinkError::TransactionAborted {
                transactional_id: settings.transactional_id.clone(),
                reason: format!("init_transactions task failed: {join}"),
            })?;
        outcome.map_err(|error| {
            let reason = format!("init_transactions failed: {error}");
            fenced_or_aborted(&settings, &error, reason)
        })?;
    }
    tracing::info!(transactional_id = %settings.transactional_id, checkpoint_topic = %settings.checkpoint_topic, "exactly-once producer ready (transactions initialised; older producers with this id are fenced)");
    // The checkpoint topic is the Kafka checkpoint store's: compacted, one partition.
    crate::ensure_checkpoint_topic(
        &settings.sink.client_properties,
        &settings.checkpoint_topic,
        settings.sink.create_topics,
        settings.sink.topic_replication_factor,
        settings.sink.admin_timeout,
    )
    .await
    .map_err(|error| SinkError::TopicCreation {
        topic: settings.checkpoint_topic.clone(),
        message: error.to_string(),
    })?;
    let mut topics = TopicManager::new(&settings.sink)?;

    let mut summary = TransactionalSummary {
        checkpoint: resumed_from,
        ..TransactionalSummary::default()
    };
    let mut batch = OpenBatch::default();
    let mut in_transaction: BTreeMap<u64, InTransaction<T>> = BTreeMap::new();
    let mut deliveries = FuturesUnordered::new();
    let mut next_local: u64 = 0;
    let mut input_open = true;
    let mut drain_deadline: Option<Instant> = None;
    let mut last_idle_commit: Option<Instant> = None;
    // Taken from the input and not yet sent (see the top of the loop).
    let mut next_item: Option<SinkItem<T>> = None;
    // The rest of the input batch `next_item` came from, in order: each becomes `next_item`
    // in a pass of its own, under the same conditions as a record from the channel.
    let mut held: std::vec::IntoIter<SinkItem<T>> = Vec::new().into_iter();
    // A record rejected before, sent alone: nothing else is sent until its report.
    let mut sending_alone: Option<u64> = None;

    loop {
        // The record taken from the input, sent now unless it must go alone: a record Kafka
        // rejected before (in an aborted attempt) is sent with nothing else in flight and
        // nothing after it until its report, because a broker rejects a whole produce
        // request and only the record's own size or content may count against it.
        if let Some(item) = next_item.take() {
            let key = rejection_key(&item.record, &item.origin);
            let max_attempts = settings.sink.dead_letter.max_attempts;
            let retried =
                rejected.rejected_before(key) && rejected.exhausted(key, max_attempts).is_none();
            if retried && !in_transaction.is_empty() {
                next_item = Some(item);
            } else {
                let SinkItem {
                    record,
                    ticket,
                    origin,
                } = item;
                let (record, is_dead_letter) = match rejected
                    .exhausted(key, settings.sink.dead_letter.max_attempts)
                {
                    Some(rejection) => (
                        dead_letter_in_place_of(&record, &origin, &rejection, &settings, metrics),
                        true,
                    ),
                    None => (record, false),
                };
                if !topics.is_known(&record.topic) {
                    let mut shutdown_for_topic = shutdown.clone();
                    tokio::select! {
                        ensured = topics.ensure(&record.topic, &producer, metrics) => ensured?,
                        _ = shutdown_for_topic.recv() => {
                            drain_deadline.get_or_insert_with(|| Instant::now() + settings.sink.drain_timeout);
                            // Never sent: its batch cannot be committed past it.
                            if batch.open {
                                abort_batch(&producer, &settings, &mut batch, "shutdown while a topic was checked", metrics).await;
                            }
                            break;
                        }
                    }
                }
                if !batch.open {
                    begin(&producer, &settings, &mut batch)?;
                }
                let local = next_local;
                next_local += 1;
                let sequence = ticket.sequence();
                let size = record_size(&record);
                let delivery: futures_util::future::BoxFuture<'static, DeliveryOutcome> =
                    match send_with_room(&producer, &record, local).await {
                        Ok(delivery) => delivery,
                        Err(error) => {
                            fenced_by_fatal_error(&producer, &settings)?;
                            let failed = InTransaction {
                                ticket,
                                rejection_key: key,
                                is_dead_letter,
                                topic: record.topic.clone(),
                                key: record.key.clone(),
                                sent_at: Instant::now(),
                                event_timestamp: origin.event_timestamp,
                                accepted_at_ms: crate::unix_millis_now(),
                            };
                            let reason =
                                on_delivery_failure(&settings, Some(&failed), &error, &rejected)?;
                            abort_batch(&producer, &settings, &mut batch, &reason, metrics).await;
                            return Err(SinkError::TransactionAborted {
                                transactional_id: settings.transactional_id.clone(),
                                reason,
                            });
                        }
                    };
                deliveries.push(delivery);
                if batch.started.is_none() {
                    batch.started = Some(Instant::now());
                }
                batch.records += 1;
                batch.bytes += size;
                batch.last_sent_sequence = Some(sequence);
                if is_dead_letter {
                    batch.dead_letters.push(key);
                }
                if retried {
                    sending_alone = Some(local);
                }
                in_transaction.insert(
                    local,
                    InTransaction {
                        ticket,
                        rejection_key: key,
                        is_dead_letter,
                        topic: record.topic,
                        key: record.key,
                        sent_at: Instant::now(),
                        event_timestamp: origin.event_timestamp,
                        accepted_at_ms: crate::unix_millis_now(),
                    },
                );
                InFlightChanged {
                    in_flight: in_transaction.len(),
                }
                .emit(metrics);
                continue;
            }
            // Parked until everything in flight reported (the select below waits for it).
        }
        let stopping = drain_deadline.is_some() || !input_open;
        let due = batch.open
            && (stopping
                || batch.records >= settings.max_records
                || batch.bytes >= settings.max_bytes
                || batch
                    .started
                    .is_some_and(|started| started.elapsed() >= settings.max_interval));
        let mut boundary_missed = false;
        if in_transaction.is_empty() && (due || (!batch.open && !stopping)) {
            match boundary(batch.last_sent_sequence) {
                Some(found) if batch.open && due => {
                    commit_batch(&producer, &settings, &mut batch, &found, &rejected, metrics)
                        .await?;
                    summary.sink.delivered += std::mem::take(&mut batch.delivered);
                    summary.checkpoint = Some(found.checkpoint);
                    continue;
                }
                Some(found) if !batch.open => {
                    // Progress without records: commit it alone, now and then.
                    let moved = summary.checkpoint.as_ref().is_none_or(|stored| {
                        stored.position.binlog != found.checkpoint.position.binlog
                            || stored.position.gtid_set != found.checkpoint.position.gtid_set
                    });
                    let idle_due =
                        last_idle_commit.is_none_or(|at| at.elapsed() >= settings.idle_interval);
                    if moved && idle_due {
                        begin(&producer, &settings, &mut batch)?;
                        commit_batch(&producer, &settings, &mut batch, &found, &rejected, metrics)
                            .await?;
                        summary.checkpoint = Some(found.checkpoint);
                        last_idle_commit = Some(Instant::now());
                        continue;
                    }
                }
                Some(_) => {}
                None => boundary_missed = due,
            }
        }
        if stopping && in_transaction.is_empty() {
            // Here the batch, if open, did not end at a boundary (a commit `continue`s).
            if !batch.open {
                break;
            }
            if !input_open {
                abort_batch(
                    &producer,
                    &settings,
                    &mut batch,
                    "the input ended inside a binlog transaction",
                    metrics,
                )
                .await;
                break;
            }
            // Shutdown inside a binlog transaction: read on to its end, within the drain
            // deadline.
        }
        let accepting = input_open
            && next_item.is_none()
            && sending_alone.is_none()
            && in_transaction.len() < settings.sink.max_in_flight
            && (!due || (in_transaction.is_empty() && boundary_missed));
        OldestUnackedChanged {
            since_ms: in_transaction
                .values()
                .next()
                .map(|item| item.accepted_at_ms),
        }
        .emit(metrics);
        let batch_due_at = batch
            .started
            .filter(|_| batch.open && !due)
            .map(|started| started + settings.max_interval);
        // Wakes the loop when an idle-only commit becomes due again (only a deadline still
        // ahead: one passed would win the biased select forever; later progress wakes it).
        let idle_at = last_idle_commit
            .filter(|at| !batch.open && at.elapsed() < settings.idle_interval)
            .map(|at| at + settings.idle_interval);
        tokio::select! {
            biased;
            Some((local, _generation, outcome)) = deliveries.next(), if !deliveries.is_empty() => {
                let outcome: Result<(), KafkaError> = outcome.map_err(|failure| failure.error);
                match outcome {
                    Ok(()) => {
                        if let Some(done) = in_transaction.remove(&local) {
                            if sending_alone == Some(local) {
                                // It went through alone: its earlier rejection was its batch's.
                                sending_alone = None;
                                rejected.forget(done.rejection_key);
                            }
                            let acked = RecordAcked { publish_latency: Some(done.sent_at.elapsed()), event_timestamp: done.event_timestamp };
                            on_delivered(done.ticket);
                            batch.delivered += 1;
                            acked.emit(metrics);
                            InFlightChanged { in_flight: in_transaction.len() }.emit(metrics);
                        }
                    }
                    Err(error) => {
                        fenced_by_fatal_error(&producer, &settings)?;
                        let failed = in_transaction.remove(&local);
                        let reason = on_delivery_failure(&settings, failed.as_ref(), &error, &rejected)?;
                        abort_batch(&producer, &settings, &mut batch, &reason, metrics).await;
                        return Err(SinkError::TransactionAborted { transactional_id: settings.transactional_id.clone(), reason });
                    }
                }
            }
            _ = sleep_until_or_forever(drain_deadline) => {
                let reason = format!("shutdown: the transaction did not reach a binlog transaction boundary within {:?}", settings.sink.drain_timeout);
                summary.sink.abandoned = in_transaction.len();
                if batch.open {
                    abort_batch(&producer, &settings, &mut batch, &reason, metrics).await;
                }
                break;
            }
            _ = shutdown.recv(), if drain_deadline.is_none() => {
                drain_deadline = Some(Instant::now() + settings.sink.drain_timeout);
                tracing::info!(in_flight = in_transaction.len(), "exactly-once sink: committing or aborting the open transaction");
            }
            _ = sleep_until_or_forever(batch_due_at) => {}
            _ = sleep_until_or_forever(idle_at), if !stopping => {}
            _ = progress.notified(), if boundary_missed || !batch.open => {}
            received = next_held_or_received(&mut held, &mut input), if accepting => {
                match received {
                    Some(item) => next_item = Some(item),
                    None => input_open = false,
                }
            }
        }
    }
    InFlightChanged { in_flight: 0 }.emit(metrics);
    tokio::task::spawn_blocking(move || drop(producer));
    Ok(summary)
}

/// The next record: the next of the batch taken last, else the first of the next non-empty
/// batch from `input` (`None` once it closed).
async fn next_held_or_received<T>(
    held: &mut std::vec::IntoIter<SinkItem<T>>,
    input: &mut mpsc::Receiver<Vec<SinkItem<T>>>,
) -> Option<SinkItem<T>> {
    loop {
        if let Some(item) = held.next() {
            return Some(item);
        }
        *held = input.recv().await?.into_iter();
    }
}

/// Bytes a record adds to a batch.
fn record_size(record: &OutboundRecord) -> usize {
    record.key.as_ref().map_or(0, Vec::len)
        + record.payload.as_ref().map_or(0, Vec::len)
        + record
            .headers
            .iter()
            .map(|(name, value)| name.len() + value.len())
            .sum::<usize>()
}

/// Enqueues `record`, waiting while librdkafka's queue is full (inside a transaction a
/// record cannot wait for a later resend: the transaction would be committed without it).
async fn send_with_room(
    producer: &RelayProducer,
    record: &OutboundRecord,
    local: u64,
) -> Result<futures_util::future::BoxFuture<'static, DeliveryOutcome>, KafkaError> {
    loop {
        match enqueue_with_future(producer, record, local, 0, false) {
            Err(KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)) => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            other => return other,
        }
    }
}

/// Decides what a failed delivery means: a permanent rejection is remembered (the restart
/// dead-letters it once it used up its attempts) or stops the sink when it may not be
/// dead-lettered; a fenced producer stops it; anything else is a transient abort. Returns
/// the abort's reason.
fn on_delivery_failure<T>(
    settings: &TransactionalSinkSettings,
    failed: Option<&InTransaction<T>>,
    error: &KafkaError,
    rejected: &RejectedRecords,
) -> Result<String, SinkError> {
    if is_fenced(error) {
        return Err(SinkError::Fenced {
            transactional_id: settings.transactional_id.clone(),
            message: error.to_string(),
        });
    }
    let Some(failed) = failed else {
        return Ok(format!("a delivery failed: {error}"));
    };
    if classify_delivery_error(error) != FailureKind::Permanent {
        return Ok(format!("delivery to `{}` failed: {error}", failed.topic));
    }
    let dead_letter = &settings.sink.dead_letter;
    let class = kafka_error_class(error);
    if failed.is_dead_letter || !dead_letter.dead_letters(class) {
        return Err(permanent_error(
            &failed.topic,
            failed.key.as_deref(),
            error.clone(),
        ));
    }
    let failures = rejected.note(failed.rejection_key, error);
    tracing::warn!(topic = %failed.topic, class, %error, attempt = failures, max_attempts = dead_letter.max_attempts, "Kafka rejected a record permanently inside a transaction; aborting it (the record is dead-lettered once it used up its attempts)");
    Ok(format!(
        "Kafka rejected a record for `{}` ({class}, attempt {failures} of {}): {error}",
        failed.topic, dead_letter.max_attempts
    ))
}

/// The dead letter that replaces a record rejected `max_attempts` times.
fn dead_letter_in_place_of(
    record: &OutboundRecord,
    origin: &RecordOrigin,
    rejection: &Rejection,
    settings: &TransactionalSinkSettings,
    metrics: &dyn SinkObserver,
) -> OutboundRecord {
    let failure = FailureReport {
        class: rejection.class,
        message: rejection.message.clone(),
        attempts: rejection.failures,
        first_failure_ms: rejection.first_failure_ms,
        last_failure_ms: rejection.last_failure_ms,
    };
    dead_letter_replacing(
        record,
        origin,
        &failure,
        &settings.sink.dead_letter,
        metrics,
    )
}

/// `begin_transaction` (local to the producer: no broker round trip).
fn begin(
    producer: &RelayProducer,
    settings: &TransactionalSinkSettings,
    batch: &mut OpenBatch,
) -> Result<(), SinkError> {
    producer.begin_transaction().map_err(|error| {
        let reason = format!("begin_transaction failed: {error}");
        fenced_or_aborted(settings, &error, reason)
    })?;
    batch.open = true;
    batch.started = None;
    batch.records = 0;
    batch.bytes = 0;
    batch.dead_letters.clear();
    batch.delivered = 0;
    Ok(())
}

/// Sends the checkpoint record and commits the transaction.
async fn commit_batch(
    producer: &RelayProducer,
    settings: &TransactionalSinkSettings,
    batch: &mut OpenBatch,
    found: &BatchBoundary,
    rejected: &RejectedRecords,
    metrics: &dyn SinkObserver,
) -> Result<(), SinkError> {
    let checkpoint_record = OutboundRecord {
        topic: settings.checkpoint_topic.clone(),
        key: Some(settings.checkpoint_key.clone()),
        payload: Some(crate::checkpoint_record_value(&found.checkpoint)),
        headers: Vec::new(),
        null_headers: Vec::new(),
        timestamp_ms: None,
        partition: Some(crate::CHECKPOINT_PARTITION),
    };
    let checkpoint_delivery = match send_with_room(producer, &checkpoint_record, u64::MAX).await {
        Ok(delivery) => delivery,
        Err(error) => {
            let reason = format!("sending the checkpoint record failed: {error}");
            abort_batch(producer, settings, batch, &reason, metrics).await;
            return Err(fenced_or_aborted(settings, &error, reason));
        }
    };
    crate::crash_points::crash_if_armed(crate::crash_points::CrashPoint::BeforeCheckpointCommit);
    let started = Instant::now();
    let committed = {
        let producer = producer.clone();
        let timeout = settings.transaction_timeout;
        tokio::task::spawn_blocking(move || producer.commit_transaction(timeout)).await
    };
    let committed = match committed {
        Ok(result) => result,
        Err(join) => {
            let reason = format!("the commit_transaction task failed: {join}");
            abort_batch(producer, settings, batch, &reason, metrics).await;
            return Err(SinkError::TransactionAborted {
                transactional_id: settings.transactional_id.clone(),
                reason,
            });
        }
    };
    if let Err(error) = committed {
        fenced_by_fatal_error(producer, settings)?;
        let reason = format!("commit_transaction failed: {error}");
        abort_batch(producer, settings, batch, &reason, metrics).await;
        return Err(fenced_or_aborted(settings, &error, reason));
    }
    // Committed: the checkpoint record was delivered with it.
    let _ = checkpoint_delivery.await;
    batch.open = false;
    for key in batch.dead_letters.drain(..) {
        rejected.forget(key);
    }
    KafkaTransactionCommitted {
        records: batch.records,
        duration: started.elapsed(),
    }
    .emit(metrics);
    metrics.checkpoint_committed(found);
    batch.started = None;
    batch.records = 0;
    batch.bytes = 0;
    Ok(())
}

/// Aborts the open transaction (best effort: a producer that cannot abort is dropped with
/// the sink, and the broker aborts its transaction at `transaction.timeout.ms` or when the
/// next producer with this id initialises).
async fn abort_batch(
    producer: &RelayProducer,
    settings: &TransactionalSinkSettings,
    batch: &mut OpenBatch,
    reason: &str,
    metrics: &dyn SinkObserver,
) {
    batch.open = false;
    let outcome = {
        let producer = producer.clone();
        let timeout = settings.sink.admin_timeout;
        tokio::task::spawn_blocking(move || producer.abort_transaction(timeout)).await
    };
    let failed = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(error)) => Some(error.to_string()),
        Err(join) => Some(join.to_string()),
    };
    KafkaTransactionAborted {
        reason,
        records: batch.records,
        abort_error: failed.as_deref(),
    }
    .emit(metrics);
}

/// A producer fenced by a newer instance with the same `transactional.id`.
fn is_fenced(error: &KafkaError) -> bool {
    let code = match error {
        KafkaError::Transaction(inner) => Some(inner.code()),
        other => other.rdkafka_error_code(),
    };
    let message = error.to_string();
    match code {
        Some(RDKafkaErrorCode::TransactionalIdAuthorizationFailed) => true,
        Some(code) => is_fenced_code(code, &message),
        None => message.contains("fenced"),
    }
}

/// The codes (or librdkafka's words) of a producer fenced by a newer one with its id.
fn is_fenced_code(code: RDKafkaErrorCode, message: &str) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
            | RDKafkaErrorCode::Fenced
    ) || message.contains("fenced")
}

/// `Err(Fenced)` when the producer's fatal error says it was fenced: librdkafka then
/// purges every queued record, so their delivery reports only say "purged".
fn fenced_by_fatal_error(
    producer: &RelayProducer,
    settings: &TransactionalSinkSettings,
) -> Result<(), SinkError> {
    match producer.client().fatal_error() {
        Some((code, message)) if is_fenced_code(code, &message) => Err(SinkError::Fenced {
            transactional_id: settings.transactional_id.clone(),
            message,
        }),
        _ => Ok(()),
    }
}

fn fenced_or_aborted(
    settings: &TransactionalSinkSettings,
    error: &KafkaError,
    reason: String,
) -> SinkError {
    if is_fenced(error) {
        SinkError::Fenced {
            transactional_id: settings.transactional_id.clone(),
            message: error.to_string(),
        }
    } else {
        SinkError::TransactionAborted {
            transactional_id: settings.transactional_id.clone(),
            reason,
        }
    }
}
