//! The consume loop: one fetch loop, one worker task per partition.
//!
//! The fetch loop reads records from the group's [`StreamConsumer`] and hands each to its
//! partition's worker over a bounded queue (so one partition's records are applied in
//! offset order, and partitions in parallel). A worker applies a record (see the crate docs),
//! then commits `offset + 1` synchronously for that partition. After a rebalance a worker may
//! still hold records of a partition that moved to another instance: applying them is
//! harmless (the other instance's copy is a duplicate, skipped), and their offset commit is
//! refused by the group coordinator or overtaken.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mysql_async::{Pool, Transaction, TxOpts};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::config::{ConsumerConfig, CrashPoint};
use crate::dead_letter::{dead_letter_headers, error_classes, now_ms, Failure, Origin};
use crate::event::{decode_payload, ConsumedEvent, EVENT_ID_HEADER};
use crate::handler::{EventHandler, HandlerError};
use crate::internal_events::{
    DeadLettered, DuplicateSkipped, EventApplied, HandlerFailed, InfrastructureRetry,
    InternalEvent, OffsetCommitFailed,
};
use crate::metrics::ConsumerMetrics;
use crate::processed::{claim_event, Claim};

/// How long the high-watermark request for the lag gauge may take (after each commit).
const WATERMARK_TIMEOUT: Duration = Duration::from_secs(2);

/// How long one dead-letter send may take before it is retried.
const DEAD_LETTER_SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// Why [`OutboxConsumer::run`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// The Kafka client could not be created or subscribed (bad properties, bad topic
    /// names): definite, fix the configuration.
    #[error("kafka: {operation}: {source}")]
    Kafka {
        /// What was being done.
        operation: &'static str,
        /// librdkafka's error.
        source: KafkaError,
    },
    /// The configuration is unusable.
    #[error("consumer configuration: {reason}")]
    Config {
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// A failure test's crash point was reached (see [`CrashPoint`]).
    #[error("crash point {0:?} reached (failure tests only)")]
    CrashPointReached(CrashPoint),
    /// `processed_event` cannot be written (missing table, missing grant, wrong columns):
    /// no event can be applied, so the consumer stops instead of retrying forever.
    #[error("consumer {consumer_name}: cannot insert into processed_event: {source}; create it with outbox_consumer::create_processed_event_table_sql() in the pool's default database and grant INSERT on it")]
    ProcessedEventTable {
        /// The consumer.
        consumer_name: String,
        /// The server's error.
        source: mysql_async::Error,
    },
    /// A partition worker panicked (a bug in the handler or here).
    #[error("a partition worker panicked: {0}")]
    WorkerPanicked(String),
}

/// An idempotent consumer: see the crate docs.
pub struct OutboxConsumer<H> {
    /// Settings.
    config: ConsumerConfig,
    /// Connections for the per-event transactions (and the `processed_event` inserts).
    pool: Pool,
    /// The application's handler, shared by the partition workers.
    handler: Arc<H>,
    /// Where applied/duplicate/failure/dead-letter/lag numbers go.
    metrics: ConsumerMetrics,
}

/// What every partition worker shares.
struct Shared<H> {
    /// Settings.
    config: ConsumerConfig,
    /// See [`OutboxConsumer::pool`].
    pool: Pool,
    /// See [`OutboxConsumer::handler`].
    handler: Arc<H>,
    /// See [`OutboxConsumer::metrics`].
    metrics: ConsumerMetrics,
    /// The group member: workers commit offsets through it.
    consumer: Arc<StreamConsumer>,
    /// Sends dead letters.
    dead_letter_producer: FutureProducer,
    /// Set at shutdown: workers stop before their next record or retry, committing nothing
    /// they did not apply.
    stopping: AtomicBool,
}

impl<H: EventHandler> OutboxConsumer<H> {
    /// A consumer; nothing connects until [`OutboxConsumer::run`].
    pub fn new(config: ConsumerConfig, pool: Pool, handler: H, metrics: ConsumerMetrics) -> Self {
        Self {
            config,
            pool,
            handler: Arc::new(handler),
            metrics,
        }
    }

    /// Joins the group and applies records until `shutdown` completes (then returns
    /// `Ok` after each worker finished its current record) or a crash point / worker panic
    /// stops it. Transient Kafka and database errors are retried, never returned.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), ConsumerError> {
        if self.config.max_attempts == 0 {
            return Err(ConsumerError::Config {
                reason: "max_attempts must be at least 1".to_owned(),
            });
        }
        if self.config.topics.is_empty() {
            return Err(ConsumerError::Config {
                reason: "no topics to consume".to_owned(),
            });
        }
        let consumer: StreamConsumer = client_config(&self.config)
            .set("group.id", &self.config.group_id)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .create()
            .map_err(|source| ConsumerError::Kafka {
                operation: "creating the consumer",
                source,
            })?;
        let topics: Vec<&str> = self.config.topics.iter().map(String::as_str).collect();
        consumer
            .subscribe(&topics)
            .map_err(|source| ConsumerError::Kafka {
                operation: "subscribing",
                source,
            })?;
        let dead_letter_producer: FutureProducer = client_config(&self.config)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .create()
            .map_err(|source| ConsumerError::Kafka {
                operation: "creating the dead-letter producer",
                source,
            })?;
        let shared = Arc::new(Shared {
            config: self.config,
            pool: self.pool,
            handler: self.handler,
            metrics: self.metrics,
            consumer: Arc::new(consumer),
            dead_letter_producer,
            stopping: AtomicBool::new(false),
        });
        let (failure_sender, mut failures) = mpsc::unbounded_channel::<ConsumerError>();
        let mut queues: HashMap<(String, i32), mpsc::Sender<OwnedMessage>> = HashMap::new();
        let mut workers = JoinSet::new();
        tokio::pin!(shutdown);
        let outcome = loop {
            tokio::select! {
                () = &mut shutdown => break Ok(()),
                Some(error) = failures.recv() => break Err(error),
                Some(joined) = workers.join_next(), if !workers.is_empty() => {
                    if let Err(error) = joined {
                        break Err(ConsumerError::WorkerPanicked(error.to_string()));
                    }
                }
                received = shared.consumer.recv() => {
                    let message = match received {
                        Ok(message) => message.detach(),
                        Err(error) => {
                            tracing::warn!(%error, "kafka consumer error (librdkafka retries)");
                            continue;
                        }
                    };
                    let queue = queues
                        .entry((message.topic().to_owned(), message.partition()))
                        .or_insert_with(|| {
                            let (sender, receiver) =
                                mpsc::channel(shared.config.partition_queue_capacity.max(1));
                            workers.spawn(partition_worker(
                                Arc::clone(&shared),
                                receiver,
                                failure_sender.clone(),
                            ));
                            sender
                        })
                        .clone();
                    tokio::select! {
                        sent = queue.send(message) => {
                            if sent.is_err() {
                                // The worker stopped; its failure (if any) is in `failures`.
                                continue;
                            }
                        }
                        () = &mut shutdown => break Ok(()),
                        Some(error) = failures.recv() => break Err(error),
                    }
                }
            }
        };
        shared.stopping.store(true, Ordering::SeqCst);
        drop(queues);
        while let Some(joined) = workers.join_next().await {
            if let Err(error) = joined {
                tracing::error!(%error, "a partition worker panicked during shutdown");
            }
        }
        // A crash point reached while other workers were stopping is still the outcome.
        match (outcome, failures.try_recv()) {
            (Ok(()), Ok(error)) => Err(error),
            (outcome, _) => outcome,
        }
    }
}

/// bootstrap servers and the application's extra properties.
fn client_config(config: &ConsumerConfig) -> ClientConfig {
    let mut client = ClientConfig::new();
    for (key, value) in &config.kafka_properties {
        client.set(key, value);
    }
    client.set("bootstrap.servers", &config.brokers);
    client
}

/// Applies one partition's records in order until the queue closes, shutdown, or a crash
/// point.
async fn partition_worker<H: EventHandler>(
    shared: Arc<Shared<H>>,
    mut queue: mpsc::Receiver<OwnedMessage>,
    failures: mpsc::UnboundedSender<ConsumerError>,
) {
    while let Some(message) = queue.recv().await {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        if let Err(error) = process_record(&shared, &message).await {
            let _ = failures.send(error);
            return;
        }
    }
}

/// Whether a step finished or shutdown interrupted it (then nothing more is done for the
/// record and its offset is not committed).
enum Step<T> {
    /// Done, with its result.
    Done(T),
    /// Shutdown came first.
    Stopped,
}

/// Applies one record (or skips or dead-letters it) and commits its offset.
async fn process_record<H: EventHandler>(
    shared: &Shared<H>,
    message: &OwnedMessage,
) -> Result<(), ConsumerError> {
    let headers: Vec<(String, Option<Vec<u8>>)> = message
        .headers()
        .map(|headers| {
            headers
                .iter()
                .map(|header| (header.key.to_owned(), header.value.map(<[u8]>::to_vec)))
                .collect()
        })
        .unwrap_or_default();
    let event_id = headers
        .iter()
        .find(|(key, _)| key == EVENT_ID_HEADER)
        .and_then(|(_, value)| std::str::from_utf8(value.as_deref()?).ok())
        .filter(|id| !id.is_empty())
        .map(str::to_owned);
    let Some(event_id) = event_id else {
        let now = now_ms();
        let failure = Failure {
            class: error_classes::MISSING_EVENT_ID,
            message: format!(
                "the record has no text header `{EVENT_ID_HEADER}`, so it cannot be deduplicated"
            ),
            attempts: 0,
            first_failure_ms: now,
            last_failure_ms: now,
        };
        return dead_letter_then_commit(shared, message, &headers, "-", failure).await;
    };
    let payload = match message.payload() {
        None => None,
        Some(value) => match decode_payload(value, shared.config.payload_format) {
            Ok(payload) => Some(payload),
            Err(error) => {
                let now = now_ms();
                let failure = Failure {
                    class: error_classes::UNDECODABLE_PAYLOAD,
                    message: error.to_string(),
                    attempts: 0,
                    first_failure_ms: now,
                    last_failure_ms: now,
                };
                return dead_letter_then_commit(shared, message, &headers, &event_id, failure)
                    .await;
            }
        },
    };
    let event = ConsumedEvent {
        event_id,
        topic: message.topic().to_owned(),
        partition: message.partition(),
        offset: message.offset(),
        key: message.key().map(<[u8]>::to_vec),
        headers,
        payload,
        timestamp_ms: message.timestamp().to_millis(),
    };
    let mut attempt: u32 = 0;
    let mut infrastructure_failures: u32 = 0;
    let mut first_failure_ms = None;
    loop {
        if shared.stopping.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut transaction = match shared.pool.start_transaction(TxOpts::default()).await {
            Ok(transaction) => transaction,
            Err(error) => {
                infrastructure_failures += 1;
                infrastructure_backoff(
                    shared,
                    "beginning a transaction",
                    &error,
                    infrastructure_failures,
                )
                .await;
                continue;
            }
        };
        match claim_event(
            &mut transaction,
            &shared.config.consumer_name,
            &event.event_id,
        )
        .await
        {
            Ok(Claim::Claimed) => {}
            Ok(Claim::AlreadyProcessed) => {
                let _ = transaction.rollback().await;
                DuplicateSkipped { event: &event }.emit(&shared.metrics);
                commit_offset(shared, &event.topic, event.partition, event.offset).await;
                return Ok(());
            }
            Err(error) => {
                drop(transaction);
                match classify_claim_error(&error) {
                    ClaimErrorKind::Transient => {}
                    ClaimErrorKind::IdTooLong => {
                        let now = now_ms();
                        let failure = Failure {
                            class: error_classes::EVENT_ID_TOO_LONG,
                            message: format!(
                                "event id of {} bytes does not fit processed_event.event_id: {error}",
                                event.event_id.len()
                            ),
                            attempts: 0,
                            first_failure_ms: now,
                            last_failure_ms: now,
                        };
                        return dead_letter_then_commit(
                            shared,
                            message,
                            &event.headers,
                            &event.event_id,
                            failure,
                        )
                        .await;
                    }
                    ClaimErrorKind::Definite => {
                        return Err(ConsumerError::ProcessedEventTable {
                            consumer_name: shared.config.consumer_name.clone(),
                            source: error,
                        });
                    }
                }
                infrastructure_failures += 1;
                infrastructure_backoff(
                    shared,
                    "inserting into processed_event",
                    &error,
                    infrastructure_failures,
                )
                .await;
                continue;
            }
        }
        attempt += 1;
        match shared.handler.handle(&event, &mut transaction).await {
            Ok(()) => match commit_transaction(shared, transaction, &event, attempt).await? {
                Step::Done(true) => {
                    commit_offset(shared, &event.topic, event.partition, event.offset).await;
                    return Ok(());
                }
                Step::Done(false) => {
                    // The commit's outcome is unknown: try again; if it did commit, the
                    // claim finds the row and the event is skipped.
                    attempt -= 1;
                    infrastructure_failures += 1;
                    let wait = shared.config.backoff_after(infrastructure_failures);
                    tokio::time::sleep(wait).await;
                }
                Step::Stopped => return Ok(()),
            },
            Err(error) => {
                let _ = transaction.rollback().await;
                let now = now_ms();
                let first = *first_failure_ms.get_or_insert(now);
                let permanent = matches!(error, HandlerError::Permanent(_));
                let give_up = permanent || attempt >= shared.config.max_attempts;
                let wait = shared.config.backoff_after(attempt);
                let text = error.to_string();
                HandlerFailed {
                    event: &event,
                    attempt,
                    error: &text,
                    retry_in: (!give_up).then_some(wait),
                }
                .emit(&shared.metrics);
                if give_up {
                    let failure = Failure {
                        class: if permanent {
                            error_classes::HANDLER_PERMANENT
                        } else {
                            error_classes::HANDLER_RETRIES_EXHAUSTED
                        },
                        message: text,
                        attempts: attempt,
                        first_failure_ms: first,
                        last_failure_ms: now,
                    };
                    return dead_letter_then_commit(
                        shared,
                        message,
                        &event.headers,
                        &event.event_id,
                        failure,
                    )
                    .await;
                }
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// What a failed `processed_event` insert means.
enum ClaimErrorKind {
    /// Connection trouble, a deadlock or lock wait timeout: retry.
    Transient,
    /// The id is longer than the column (`ER_DATA_TOO_LONG`, 1406): this record only.
    IdTooLong,
    /// Any other server error (no such table, no INSERT grant, ...): every record would fail
    /// the same way; stop and tell the operator.
    Definite,
}

/// Sorts a claim error (see [`ClaimErrorKind`]).
fn classify_claim_error(error: &mysql_async::Error) -> ClaimErrorKind {
    match error {
        mysql_async::Error::Server(server) if server.code == 1406 => ClaimErrorKind::IdTooLong,
        mysql_async::Error::Server(server) if matches!(server.code, 1205 | 1213) => {
            ClaimErrorKind::Transient
        }
        mysql_async::Error::Server(_) => ClaimErrorKind::Definite,
        _ => ClaimErrorKind::Transient,
    }
}

/// Commits the event's transaction (crash points around it): `Done(true)` committed,
/// `Done(false)` the commit failed (outcome unknown).
async fn commit_transaction<H: EventHandler>(
    shared: &Shared<H>,
    transaction: Transaction<'static>,
    event: &ConsumedEvent,
    attempts: u32,
) -> Result<Step<bool>, ConsumerError> {
    if shared.config.crash_point == Some(CrashPoint::BeforeDatabaseCommit) {
        drop(transaction);
        return Err(ConsumerError::CrashPointReached(
            CrashPoint::BeforeDatabaseCommit,
        ));
    }
    if let Err(error) = transaction.commit().await {
        InfrastructureRetry {
            operation: "committing the event's transaction",
            error: &error.to_string(),
            retry_in: shared.config.backoff_initial,
        }
        .emit(&shared.metrics);
        if shared.stopping.load(Ordering::SeqCst) {
            return Ok(Step::Stopped);
        }
        return Ok(Step::Done(false));
    }
    EventApplied { event, attempts }.emit(&shared.metrics);
    if shared.config.crash_point == Some(CrashPoint::AfterDatabaseCommit) {
        return Err(ConsumerError::CrashPointReached(
            CrashPoint::AfterDatabaseCommit,
        ));
    }
    Ok(Step::Done(true))
}

/// Logs, counts and waits before retrying one of the library's own statements.
async fn infrastructure_backoff<H>(
    shared: &Shared<H>,
    operation: &'static str,
    error: &mysql_async::Error,
    failures: u32,
) {
    let wait = shared.config.backoff_after(failures);
    InfrastructureRetry {
        operation,
        error: &error.to_string(),
        retry_in: wait,
    }
    .emit(&shared.metrics);
    tokio::time::sleep(wait).await;
}

/// Sends the dead letter (retrying until Kafka takes it, or shutdown), then commits the
/// record's offset.
async fn dead_letter_then_commit<H>(
    shared: &Shared<H>,
    message: &OwnedMessage,
    headers: &[(String, Option<Vec<u8>>)],
    event_id: &str,
    failure: Failure,
) -> Result<(), ConsumerError> {
    let origin = Origin {
        topic: message.topic(),
        partition: message.partition(),
        offset: message.offset(),
        consumer: &shared.config.consumer_name,
    };
    let dead_letter_headers = dead_letter_headers(headers, &origin, &failure);
    let topic = &shared.config.dead_letter_topic;
    let mut failures: u32 = 0;
    loop {
        let mut record = FutureRecord::<[u8], [u8]>::to(topic).headers(dead_letter_headers.clone());
        if let Some(key) = message.key() {
            record = record.key(key);
        }
        if let Some(payload) = message.payload() {
            record = record.payload(payload);
        }
        match shared
            .dead_letter_producer
            .send(record, Timeout::After(DEAD_LETTER_SEND_TIMEOUT))
            .await
        {
            Ok(_) => break,
            Err((error, _)) => {
                if shared.stopping.load(Ordering::SeqCst) {
                    return Ok(());
                }
                failures += 1;
                let wait = shared.config.backoff_after(failures);
                InfrastructureRetry {
                    operation: "sending a dead letter",
                    error: &error.to_string(),
                    retry_in: wait,
                }
                .emit(&shared.metrics);
                tokio::time::sleep(wait).await;
            }
        }
    }
    DeadLettered {
        event_id,
        origin: (origin.topic, origin.partition, origin.offset),
        dead_letter_topic: topic,
        class: failure.class,
        error: &failure.message,
    }
    .emit(&shared.metrics);
    commit_offset(
        shared,
        message.topic(),
        message.partition(),
        message.offset(),
    )
    .await;
    Ok(())
}

/// Commits `offset + 1` of the partition (synchronously, on a blocking thread) and updates
/// the lag gauge from the partition's high watermark (one request per commit). A failed commit is logged: the record may be redelivered, a no-op.
async fn commit_offset<H>(shared: &Shared<H>, topic: &str, partition: i32, offset: i64) {
    let next = offset + 1;
    let mut offsets = TopicPartitionList::new();
    if let Err(error) = offsets.add_partition_offset(topic, partition, Offset::Offset(next)) {
        OffsetCommitFailed {
            topic,
            partition,
            offset: next,
            error: &error.to_string(),
        }
        .emit(&shared.metrics);
        return;
    }
    let consumer = Arc::clone(&shared.consumer);
    let owned_topic = topic.to_owned();
    let joined = tokio::task::spawn_blocking(move || {
        let committed = consumer.commit(&offsets, CommitMode::Sync);
        let watermarks = consumer.fetch_watermarks(&owned_topic, partition, WATERMARK_TIMEOUT);
        (committed, watermarks)
    })
    .await;
    let (committed, watermarks) = match joined {
        Ok((committed, watermarks)) => (
            committed.map_err(|error| error.to_string()),
            watermarks.ok(),
        ),
        Err(error) => (Err(error.to_string()), None),
    };
    if let Err(error) = committed {
        OffsetCommitFailed {
            topic,
            partition,
            offset: next,
            error: &error,
        }
        .emit(&shared.metrics);
    }
    if let Some((_low, high)) = watermarks {
        shared
            .metrics
            .lag
            .with_label_values(&[topic, &partition.to_string()])
            .set((high - next).max(0));
    }
}
