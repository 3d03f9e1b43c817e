//! The Kafka sink: sends records with an idempotent producer (`enable.idempotence=true`,
//! `acks=all`), many in flight, and reports each acknowledged record's ticket.
//!
//! # Delivery contract
//! * A record is reported (its ticket passed to `on_delivered`) only after Kafka
//!   acknowledged it. Every record taken from the input is kept until then.
//! * Transient failures (timeouts, broker down, leader changes) are retried without limit,
//!   with bounded exponential backoff plus jitter. While any record waits for a resend, no
//!   new record is taken, and waiting records are resent in input order, so per-key order
//!   holds as far as librdkafka's own idempotent retries allow (a resend after a reported
//!   failure may duplicate, never lose).
//! * A fatal producer error (librdkafka's `Fatal`, e.g. an idempotence sequence gap), and a
//!   delivery timeout (librdkafka already retried for `message.timeout.ms`; a broker that
//!   restarted empty no longer knows the producer id, so that producer never recovers),
//!   rebuild the producer and resend every unacked record in input order.
//! * Permanent errors (record too large, authorization, invalid topic, corrupt record),
//!   whether reported on delivery or at once by the producer, are resent up to
//!   `dead_letter.max_attempts` times (with backoff), then the record is replaced by its
//!   dead letter ([`crate::dead_letter`]) on `dead_letter.topic` under the same ticket, so
//!   the ticket is reported only once the dead letter is acked. With dead letters off, for
//!   an error class in `dead_letter.fail_on`, or when the dead letter itself is rejected,
//!   the sink stops with [`SinkError::Permanent`] naming the topic; nothing is skipped.
//! * Before the first send to a topic the sink checks that it exists, creating it through
//!   the admin API when `create_topics` is set, otherwise failing with
//!   [`SinkError::TopicMissing`]. Known topics are cached.
//! * At most `max_in_flight` records are unacked at any time; the bounded input channel
//!   then applies backpressure upstream.
//!
//! # Shutdown
//! When the shutdown signal fires the sink takes no new input and waits up to
//! `drain_timeout` for the records in flight; those still unacked at the deadline are
//! abandoned (never reported), which keeps them out of the checkpoint.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tokio::sync::mpsc;

use crate::backoff::Backoff;
use crate::config::{DeadLetterConfig, KafkaConfig, PROTECTED_KAFKA_PROPERTIES};
use crate::dead_letter::{
    dead_letter_for_record, kafka_error_class, now_millis, FailureReport, RecordOrigin,
};
use crate::internal_events::{
    DeadLettered, DeliveryFailedTransient, InFlightChanged, InternalEvent, ProducerRecreated,
    RecordsDelivered, TopicCreated,
};
use crate::kafka_context::RelayClientContext;
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// A record ready for Kafka, independent of how it was routed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundRecord {
    /// Destination topic.
    pub topic: String,
    /// Record key (decides the partition, hence per-key order); `None` for no key.
    pub key: Option<Vec<u8>>,
    /// Record value; `None` for a tombstone.
    pub payload: Option<Vec<u8>>,
    /// Record headers in order (e.g. `id` = event id).
    pub headers: Vec<(String, Vec<u8>)>,
    /// Record timestamp (ms since the epoch); `None` lets the producer stamp it.
    pub timestamp_ms: Option<i64>,
    /// Explicit partition; `None` lets the partitioner hash the key.
    pub partition: Option<i32>,
}

/// One record plus the caller's ticket, returned through `on_delivered` once acked.
#[derive(Debug)]
pub struct SinkItem<T> {
    /// The record to send.
    pub record: OutboundRecord,
    /// Opaque to the sink; identifies the record to the ack tracker.
    pub ticket: T,
    /// Where the event came from in the binlog; goes into its dead letter, if any.
    pub origin: RecordOrigin,
}

/// Sink settings derived from `[kafka]` and `[pipeline]`.
#[derive(Debug, Clone)]
pub struct KafkaSinkSettings {
    /// The full librdkafka property list (bootstrap, idempotence, tuning, pass-through).
    pub client_properties: Vec<(String, String)>,
    /// Create missing topics through the admin API.
    pub create_topics: bool,
    /// Partitions of created topics.
    pub topic_partitions: i32,
    /// Replication factor of created topics.
    pub topic_replication_factor: i32,
    /// Topic configs of created topics.
    pub topic_config: BTreeMap<String, String>,
    /// Timeout of metadata and admin requests.
    pub admin_timeout: Duration,
    /// First resend delay.
    pub retry_initial_backoff: Duration,
    /// Largest resend delay (before jitter).
    pub retry_max_backoff: Duration,
    /// Most unacked records.
    pub max_in_flight: usize,
    /// How long shutdown waits for records in flight.
    pub drain_timeout: Duration,
    /// What a permanently rejected record becomes (dead letter or stop).
    pub dead_letter: DeadLetterConfig,
    /// Metadata requests at startup before the sink gives up on an unreachable cluster
    /// (0 = forever).
    pub startup_attempts: u32,
}

impl KafkaSinkSettings {
    /// Settings from the config sections.
    pub fn from_config(kafka: &KafkaConfig, pipeline: &crate::config::PipelineConfig) -> Self {
        Self {
            client_properties: producer_properties(kafka),
            create_topics: kafka.create_topics,
            topic_partitions: kafka.topic_partitions,
            topic_replication_factor: kafka.topic_replication_factor,
            topic_config: kafka.topic_config.clone(),
            admin_timeout: Duration::from_millis(kafka.admin_timeout_ms),
            retry_initial_backoff: Duration::from_millis(kafka.retry_initial_backoff_ms),
            retry_max_backoff: Duration::from_millis(kafka.retry_max_backoff_ms),
            max_in_flight: pipeline.max_in_flight,
            drain_timeout: pipeline.shutdown_timeout(),
            dead_letter: DeadLetterConfig::default(),
            startup_attempts: kafka.startup_attempts,
        }
    }

    /// Settings from the whole config, `[dead_letter]` included.
    pub fn from_relay_config(config: &crate::config::RelayConfig) -> Self {
        Self {
            dead_letter: config.dead_letter.clone(),
            ..Self::from_config(&config.kafka, &config.pipeline)
        }
    }

    fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        for (key, value) in &self.client_properties {
            config.set(key, value);
        }
        config
    }
}

/// The librdkafka properties for `[kafka]`: bootstrap, the relay's tuning keys, then
/// `[kafka.properties]`, then the protected idempotence settings.
pub fn producer_properties(kafka: &KafkaConfig) -> Vec<(String, String)> {
    let mut properties: BTreeMap<String, String> = BTreeMap::new();
    properties.insert("bootstrap.servers".into(), kafka.brokers.clone());
    properties.insert("compression.type".into(), kafka.compression.clone());
    properties.insert("linger.ms".into(), kafka.linger_ms.to_string());
    properties.insert(
        "batch.num.messages".into(),
        kafka.batch_num_messages.to_string(),
    );
    properties.insert(
        "message.timeout.ms".into(),
        kafka.message_timeout_ms.to_string(),
    );
    for (key, value) in &kafka.properties {
        properties.insert(key.clone(), value.clone());
    }
    for (key, value) in PROTECTED_KAFKA_PROPERTIES {
        properties.insert((*key).into(), (*value).into());
    }
    properties.into_iter().collect()
}

/// Why the sink stopped.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The producer or admin client could not be created (bad property, usually).
    #[error("cannot create the Kafka client: {0}; check [kafka] and [kafka.properties]")]
    Client(#[source] KafkaError),
    /// A topic does not exist and `kafka.create_topics` is off.
    #[error(
        "Kafka topic `{topic}` does not exist; create it, or set `kafka.create_topics = true`"
    )]
    TopicMissing {
        /// The missing topic.
        topic: String,
    },
    /// Creating a topic failed.
    #[error("cannot create Kafka topic `{topic}`: {message}")]
    TopicCreation {
        /// The topic.
        topic: String,
        /// The broker's or client's message.
        message: String,
    },
    /// No broker answered a metadata request at startup within `kafka.startup_attempts`.
    #[error("cannot reach the Kafka cluster at {brokers}: {attempts} metadata requests over {waited:?} failed, the last with: {error}; check kafka.brokers, that the brokers are up and reachable from this host, and the security settings in [kafka.properties] (or set kafka.startup_attempts = 0 to wait forever)")]
    Unreachable {
        /// `bootstrap.servers`.
        brokers: String,
        /// How many requests failed.
        attempts: u32,
        /// Time from the first request to giving up.
        waited: Duration,
        /// The last request's error (boxed: large, and this path is cold).
        error: Box<KafkaError>,
    },
    /// Kafka rejected a record for a reason retrying cannot fix.
    #[error("Kafka rejected a record for topic `{topic}` (key {key}): {error}; the relay stopped so nothing is skipped")]
    Permanent {
        /// The record's topic.
        topic: String,
        /// The record's key, lossy UTF-8, for the operator.
        key: String,
        /// What Kafka said (boxed: it is large and this path is cold).
        error: Box<KafkaError>,
    },
}

/// What the sink did before it returned normally.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SinkSummary {
    /// Records acknowledged and reported.
    pub delivered: u64,
    /// Records still unacked when the shutdown deadline passed (never reported).
    pub abandoned: usize,
}

/// How a failed delivery is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// Retry after a backoff.
    Transient,
    /// Rebuild the producer, resend everything unacked.
    Fatal,
    /// Stop the relay.
    Permanent,
}

/// Classifies a delivery error.
pub fn classify_delivery_error(error: &KafkaError) -> FailureKind {
    use RDKafkaErrorCode as C;
    match error.rdkafka_error_code() {
        Some(C::Fatal) => FailureKind::Fatal,
        Some(
            C::MessageSizeTooLarge
            | C::InvalidMessageSize
            | C::InvalidMessage
            | C::InvalidRecord
            | C::TopicAuthorizationFailed
            | C::ClusterAuthorizationFailed
            | C::TransactionalIdAuthorizationFailed
            | C::InvalidTopic
            | C::UnsupportedVersion
            | C::UnsupportedCompressionType
            | C::UnsupportedForMessageFormat
            | C::InvalidRequiredAcks
            | C::PolicyViolation,
        ) => FailureKind::Permanent,
        _ => FailureKind::Transient,
    }
}

/// A record taken from the input and not yet acked.
struct Pending<T> {
    /// The record, kept for resends (replaced by its dead letter when dead-lettered).
    record: OutboundRecord,
    /// The caller's ticket, handed back on ack.
    ticket: T,
    /// Binlog origin, for the dead letter.
    origin: RecordOrigin,
    /// Permanent failures so far, against `dead_letter.max_attempts`.
    permanent_failures: u32,
    /// When the first permanent failure happened (ms since the epoch), for the dead letter.
    first_failure_ms: i64,
}

/// What to do after a permanent failure that did not stop the sink.
enum PermanentAction {
    /// Resend the same record after the backoff (budget not used up).
    Resend,
    /// The record was replaced by its dead letter: make sure the topic exists, then send.
    DeadLettered,
}

/// Applies the dead-letter policy to a permanent failure of `sequence`.
fn on_permanent_failure<T>(
    pending: &mut BTreeMap<u64, Pending<T>>,
    sequence: u64,
    error: KafkaError,
    dead_letter: &DeadLetterConfig,
    metrics: &Metrics,
) -> Result<PermanentAction, SinkError> {
    let Some(item) = pending.get_mut(&sequence) else {
        return Ok(PermanentAction::Resend);
    };
    let class = kafka_error_class(&error);
    metrics
        .delivery_errors
        .with_label_values(&["permanent"])
        .inc();
    let is_dead_letter = dead_letter.enabled && item.record.topic == dead_letter.topic;
    if is_dead_letter || !dead_letter.dead_letters(class) {
        return Err(SinkError::Permanent {
            topic: item.record.topic.clone(),
            key: item
                .record
                .key
                .as_deref()
                .map(describe_key)
                .unwrap_or_else(|| "<none>".into()),
            error: Box::new(error),
        });
    }
    let now = now_millis();
    if item.permanent_failures == 0 {
        item.first_failure_ms = now;
    }
    item.permanent_failures += 1;
    if item.permanent_failures < dead_letter.max_attempts {
        tracing::warn!(topic = %item.record.topic, class, %error, attempt = item.permanent_failures, max_attempts = dead_letter.max_attempts, "Kafka rejected a record permanently; resending before dead-lettering it");
        return Ok(PermanentAction::Resend);
    }
    let failure = FailureReport {
        class,
        message: error.to_string(),
        attempts: item.permanent_failures,
        first_failure_ms: item.first_failure_ms,
        last_failure_ms: now,
    };
    let letter = dead_letter_for_record(&item.record, &item.origin, &failure, dead_letter);
    let id = item
        .record
        .headers
        .iter()
        .find(|(key, _)| key == "id")
        .map(|(_, value)| String::from_utf8_lossy(value).into_owned());
    DeadLettered {
        class,
        id: id.as_deref(),
        original_topic: &item.record.topic,
        dead_letter_topic: &dead_letter.topic,
        attempts: failure.attempts,
        error: &failure.message,
    }
    .emit(metrics);
    item.record = letter;
    Ok(PermanentAction::DeadLettered)
}

type DeliveryOutcome = (u64, u64, Result<(), KafkaError>);

/// The producer type of the sink: librdkafka's logs go through [`RelayClientContext`].
type RelayProducer = FutureProducer<RelayClientContext>;

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
    let mut producer: RelayProducer = settings
        .client_config()
        .create_with_context(RelayClientContext::default())
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
                        let fatal = producer.client().fatal_error();
                        let kind = if fatal.is_some() { FailureKind::Fatal } else { classify_delivery_error(&error) };
                        match kind {
                            FailureKind::Permanent => {
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
                    let fresh = settings
                        .client_config()
                        .create_with_context(RelayClientContext::default())
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

/// Puts one record in the producer's queue; the future resolves with its delivery result.
fn enqueue(
    producer: &RelayProducer,
    record: &OutboundRecord,
    sequence: u64,
    generation: u64,
) -> Result<futures_util::future::BoxFuture<'static, DeliveryOutcome>, KafkaError> {
    let mut future_record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&record.topic);
    if let Some(key) = &record.key {
        future_record = future_record.key(key.as_slice());
    }
    if let Some(payload) = &record.payload {
        future_record = future_record.payload(payload.as_slice());
    }
    if let Some(partition) = record.partition {
        future_record = future_record.partition(partition);
    }
    if let Some(timestamp) = record.timestamp_ms {
        future_record = future_record.timestamp(timestamp);
    }
    if !record.headers.is_empty() {
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
        for (key, value) in &record.headers {
            headers = headers.insert(Header {
                key,
                value: Some(value.as_slice()),
            });
        }
        future_record = future_record.headers(headers);
    }
    crate::crash_points::crash_if_armed(crate::crash_points::CrashPoint::BeforePublish);
    match producer.send_result(future_record) {
        Ok(delivery) => Ok(delivery
            .map(move |result| {
                let outcome = match result {
                    Ok(Ok(_delivery)) => Ok(()),
                    Ok(Err((error, _message))) => Err(error),
                    Err(_canceled) => Err(KafkaError::Canceled),
                };
                (sequence, generation, outcome)
            })
            .boxed()),
        Err((error, _record)) => Err(error),
    }
}

/// Knows which topics exist; checks and creates them before the first send.
struct TopicManager {
    /// Topics confirmed to exist.
    known: HashSet<String>,
    /// Admin client, created only when topics may be created.
    admin: Option<AdminClient<RelayClientContext>>,
    /// Settings for checking and creating.
    create_topics: bool,
    /// Partitions of created topics.
    partitions: i32,
    /// Replication factor of created topics.
    replication: i32,
    /// Configs of created topics.
    topic_config: BTreeMap<String, String>,
    /// Request timeout.
    timeout: Duration,
    /// Backoff between metadata attempts while the cluster is unreachable.
    retry_initial: Duration,
    /// Largest delay between metadata attempts.
    retry_max: Duration,
}

impl TopicManager {
    fn new(settings: &KafkaSinkSettings) -> Result<Self, SinkError> {
        let admin = if settings.create_topics {
            Some(
                settings
                    .client_config()
                    .create_with_context(RelayClientContext::default())
                    .map_err(SinkError::Client)?,
            )
        } else {
            None
        };
        Ok(Self {
            known: HashSet::new(),
            admin,
            create_topics: settings.create_topics,
            partitions: settings.topic_partitions,
            replication: settings.topic_replication_factor,
            topic_config: settings.topic_config.clone(),
            timeout: settings.admin_timeout,
            retry_initial: settings.retry_initial_backoff,
            retry_max: settings.retry_max_backoff,
        })
    }

    fn is_known(&self, topic: &str) -> bool {
        self.known.contains(topic)
    }

    /// Makes sure `topic` exists (creating it if allowed); retries while the cluster is
    /// unreachable.
    async fn ensure(
        &mut self,
        topic: &str,
        producer: &RelayProducer,
        metrics: &Metrics,
    ) -> Result<(), SinkError> {
        let mut backoff = Backoff::new(self.retry_initial, self.retry_max);
        loop {
            match topic_exists(producer, topic, self.timeout).await {
                Ok(true) => {
                    self.known.insert(topic.to_owned());
                    return Ok(());
                }
                Ok(false) if !self.create_topics => {
                    return Err(SinkError::TopicMissing {
                        topic: topic.to_owned(),
                    })
                }
                Ok(false) => match self.create(topic).await {
                    Ok(created) => {
                        if created {
                            TopicCreated {
                                topic,
                                partitions: self.partitions,
                            }
                            .emit(metrics);
                        }
                        // Loop to confirm through metadata that it is visible.
                    }
                    Err(CreateFailure::Definite(message)) => {
                        return Err(SinkError::TopicCreation {
                            topic: topic.to_owned(),
                            message,
                        })
                    }
                    Err(CreateFailure::Transient(message)) => {
                        let delay = backoff.next_delay();
                        tracing::warn!(topic, error = %message, retry_in_ms = delay.as_millis() as u64, "creating Kafka topic failed; retrying");
                        tokio::time::sleep(delay).await;
                    }
                },
                Err(error) => {
                    let delay = backoff.next_delay();
                    tracing::warn!(topic, %error, retry_in_ms = delay.as_millis() as u64, "cannot read Kafka metadata; retrying");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// Creates the topic; `Ok(false)` when it already existed.
    async fn create(&self, topic: &str) -> Result<bool, CreateFailure> {
        let Some(admin) = &self.admin else {
            return Err(CreateFailure::Definite(
                "no admin client (create_topics is off)".into(),
            ));
        };
        let mut new_topic = NewTopic::new(
            topic,
            self.partitions,
            TopicReplication::Fixed(self.replication),
        );
        for (key, value) in &self.topic_config {
            new_topic = new_topic.set(key, value);
        }
        let options = AdminOptions::new()
            .operation_timeout(Some(self.timeout))
            .request_timeout(Some(self.timeout));
        match admin.create_topics([&new_topic], &options).await {
            Ok(results) => {
                match results.into_iter().next() {
                    None | Some(Ok(_)) => Ok(true),
                    Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => Ok(false),
                    Some(Err((
                        _,
                        code @ (RDKafkaErrorCode::RequestTimedOut
                        | RDKafkaErrorCode::NotController
                        | RDKafkaErrorCode::BrokerTransportFailure
                        | RDKafkaErrorCode::AllBrokersDown
                        | RDKafkaErrorCode::OperationTimedOut),
                    ))) => Err(CreateFailure::Transient(format!("{code:?}"))),
                    Some(Err((_, code))) => Err(CreateFailure::Definite(format!(
                        "{code} (partitions {}, replication factor {}: check kafka.topic_partitions, kafka.topic_replication_factor, kafka.topic_config)",
                        self.partitions, self.replication
                    ))),
                }
            }
            Err(error) => Err(CreateFailure::Transient(error.to_string())),
        }
    }
}

/// Why creating a topic failed.
enum CreateFailure {
    /// Worth retrying (timeouts, no controller yet).
    Transient(String),
    /// Retrying will not help.
    Definite(String),
}

/// Asks the cluster for its metadata until a broker answers, with backoff, logging each
/// failure; gives up with [`SinkError::Unreachable`] after `settings.startup_attempts`.
/// `false` when shutdown was requested meanwhile.
async fn reach_cluster_at_startup(
    producer: &RelayProducer,
    settings: &KafkaSinkSettings,
    shutdown: &mut Shutdown,
) -> Result<bool, SinkError> {
    let brokers = settings
        .client_properties
        .iter()
        .find(|(key, _)| key == "bootstrap.servers")
        .map(|(_, value)| value.clone())
        .unwrap_or_default();
    let mut backoff = Backoff::new(settings.retry_initial_backoff, settings.retry_max_backoff);
    let started = std::time::Instant::now();
    let mut attempts: u32 = 0;
    loop {
        let probe = {
            let producer = producer.clone();
            let timeout = settings.admin_timeout;
            tokio::task::spawn_blocking(move || {
                producer.client().fetch_metadata(None, timeout).map(|_| ())
            })
        };
        let outcome = tokio::select! {
            _ = shutdown.recv() => return Ok(false),
            outcome = probe => outcome,
        };
        attempts = attempts.saturating_add(1);
        let error = match outcome {
            Ok(Ok(())) => {
                tracing::info!(brokers = %brokers, attempts, "Kafka cluster reachable");
                return Ok(true);
            }
            Ok(Err(error)) => error,
            Err(_join_error) => KafkaError::MetadataFetch(RDKafkaErrorCode::Fail),
        };
        if settings.startup_attempts != 0 && attempts >= settings.startup_attempts {
            return Err(SinkError::Unreachable {
                brokers,
                attempts,
                waited: started.elapsed(),
                error: Box::new(error),
            });
        }
        let delay = backoff.next_delay();
        tracing::warn!(brokers = %brokers, %error, attempt = attempts, max_attempts = settings.startup_attempts, retry_in_ms = delay.as_millis() as u64, "cannot reach the Kafka cluster at startup; retrying");
        tokio::select! {
            _ = shutdown.recv() => return Ok(false),
            _ = tokio::time::sleep(delay) => {}
        }
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

/// Checks the cluster metadata for `topic` without triggering broker auto-creation.
async fn topic_exists(
    producer: &RelayProducer,
    topic: &str,
    timeout: Duration,
) -> Result<bool, KafkaError> {
    let producer = producer.clone();
    let topic = topic.to_owned();
    let lookup = tokio::task::spawn_blocking(move || {
        let metadata = producer.client().fetch_metadata(None, timeout)?;
        Ok::<bool, KafkaError>(
            metadata
                .topics()
                .iter()
                .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty()),
        )
    });
    match lookup.await {
        Ok(result) => result,
        Err(join_error) => Err(KafkaError::MetadataFetch(match join_error.is_cancelled() {
            true => RDKafkaErrorCode::OperationTimedOut,
            false => RDKafkaErrorCode::Fail,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shutdown::ShutdownController;
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    use std::sync::Mutex;

    fn settings(brokers: &str) -> KafkaSinkSettings {
        KafkaSinkSettings {
            startup_attempts: 0,
            client_properties: vec![
                ("bootstrap.servers".into(), brokers.into()),
                ("enable.idempotence".into(), "true".into()),
                ("acks".into(), "all".into()),
                ("linger.ms".into(), "1".into()),
                ("message.timeout.ms".into(), "1000".into()),
            ],
            create_topics: false,
            topic_partitions: 1,
            topic_replication_factor: 1,
            topic_config: BTreeMap::new(),
            admin_timeout: Duration::from_secs(5),
            retry_initial_backoff: Duration::from_millis(50),
            retry_max_backoff: Duration::from_millis(200),
            max_in_flight: 16,
            drain_timeout: Duration::from_secs(5),
            dead_letter: DeadLetterConfig {
                enabled: false,
                ..DeadLetterConfig::default()
            },
        }
    }

    fn record(topic: &str, n: u32) -> OutboundRecord {
        OutboundRecord {
            topic: topic.into(),
            key: Some(format!("key-{}", n % 3).into_bytes()),
            payload: Some(format!("payload-{n}").into_bytes()),
            headers: vec![("id".into(), format!("event-{n}").into_bytes())],
            timestamp_ms: None,
            partition: None,
        }
    }

    /// Runs the sink over `count` records; returns the delivered tickets (in ack order).
    async fn run_with(
        settings: KafkaSinkSettings,
        topic: &str,
        count: u32,
        during: impl std::future::Future<Output = ()>,
        metrics: Arc<Metrics>,
    ) -> (Result<SinkSummary, SinkError>, Vec<u32>) {
        let delivered = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel(4);
        let controller = ShutdownController::new();
        let sink_delivered = delivered.clone();
        let sink = tokio::spawn(run_kafka_sink(
            settings,
            rx,
            move |ticket: u32| sink_delivered.lock().unwrap().push(ticket),
            metrics,
            controller.subscribe(),
        ));
        let topic = topic.to_owned();
        let feeder = tokio::spawn(async move {
            for n in 0..count {
                if tx
                    .send(SinkItem {
                        record: record(&topic, n),
                        ticket: n,
                        origin: RecordOrigin::default(),
                    })
                    .await
                    .is_err()
                {
                    break;
                }
            }
        });
        during.await;
        feeder.await.unwrap();
        let result = tokio::time::timeout(Duration::from_secs(60), sink)
            .await
            .expect("sink finishes")
            .unwrap();
        let tickets = delivered.lock().unwrap().clone();
        (result, tickets)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn delivers_every_record_and_reports_each_ticket_once() {
        let cluster = MockCluster::new(1).unwrap();
        cluster.create_topic("sink.ok", 3, 1).unwrap();
        let metrics = Metrics::new();
        let (result, mut tickets) = run_with(
            settings(&cluster.bootstrap_servers()),
            "sink.ok",
            200,
            async {},
            metrics.clone(),
        )
        .await;
        let summary = result.unwrap();
        assert_eq!(summary.delivered, 200);
        assert_eq!(summary.abandoned, 0);
        tickets.sort_unstable();
        assert_eq!(tickets, (0..200).collect::<Vec<_>>());
        assert_eq!(metrics.records_delivered.get(), 200);
        assert_eq!(metrics.in_flight.get(), 0);
    }

    /// With a slow broker, many records are in flight at once (sends never wait for the
    /// previous ack) but never more than `max_in_flight`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keeps_many_records_in_flight_up_to_the_limit() {
        let cluster = MockCluster::new(1).unwrap();
        cluster.create_topic("sink.slow", 4, 1).unwrap();
        cluster
            .broker_round_trip_time(1, Duration::from_millis(100))
            .unwrap();
        let metrics = Metrics::new();
        let mut limited = settings(&cluster.bootstrap_servers());
        limited.max_in_flight = 8;
        let sampled_max = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let metrics = metrics.clone();
            let sampled_max = sampled_max.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    sampled_max.fetch_max(
                        metrics.in_flight.get(),
                        std::sync::atomic::Ordering::Relaxed,
                    );
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
        };
        let (result, tickets) = run_with(limited, "sink.slow", 64, async {}, metrics.clone()).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        sampler.await.unwrap();
        assert_eq!(result.unwrap().delivered, 64);
        assert_eq!(tickets.len(), 64);
        let max = sampled_max.load(std::sync::atomic::Ordering::Relaxed);
        assert!(max <= 8, "in flight reached {max} with a limit of 8");
        assert!(max >= 4, "only {max} in flight: sends are not pipelined");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn missing_topic_without_creation_is_an_error_naming_it() {
        let cluster = MockCluster::new(1).unwrap();
        let (result, tickets) = run_with(
            settings(&cluster.bootstrap_servers()),
            "sink.absent",
            1,
            async {},
            Metrics::new(),
        )
        .await;
        let error = result.unwrap_err();
        assert!(matches!(error, SinkError::TopicMissing { ref topic } if topic == "sink.absent"));
        assert!(error.to_string().contains("sink.absent"), "{error}");
        assert!(tickets.is_empty());
    }

    /// Produce requests fail with retriable errors for longer than `message.timeout.ms`,
    /// so librdkafka gives up and the sink's own backoff resends; nothing is reported
    /// while the errors last, and everything once they clear.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn retriable_errors_hold_tickets_back_until_they_clear() {
        let run = run_through_outage(
            "sink.flaky",
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
            20,
            false,
        )
        .await;
        let metrics = run.metrics;
        assert_eq!(run.delivered_during_outage, Some(0));
        assert_eq!(run.result.unwrap().delivered, 20);
        assert_eq!(run.tickets, (0..20).collect::<Vec<_>>());
        assert!(
            metrics
                .delivery_errors
                .with_label_values(&["transient"])
                .get()
                > 0,
            "the sink's own retry path ran"
        );
        assert!(
            metrics.producer_recreations.get() > 0,
            "delivery timeouts rebuild the producer"
        );
    }

    /// An idempotence sequence error the producer cannot recover from raises a fatal
    /// error: the sink rebuilds the producer and resends, losing nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fatal_producer_error_rebuilds_the_producer_and_resends() {
        let cluster = MockCluster::new(1).unwrap();
        cluster.create_topic("sink.fatal", 1, 1).unwrap();
        cluster.request_errors(
            RDKafkaApiKey::Produce,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER; 3],
        );
        let metrics = Metrics::new();
        let (result, mut tickets) = run_with(
            settings(&cluster.bootstrap_servers()),
            "sink.fatal",
            10,
            async {},
            metrics.clone(),
        )
        .await;
        assert_eq!(result.unwrap().delivered, 10);
        tickets.sort_unstable();
        assert_eq!(tickets, (0..10).collect::<Vec<_>>());
        assert!(metrics.producer_recreations.get() > 0);
        assert!(metrics.delivery_errors.with_label_values(&["fatal"]).get() > 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_record_kafka_rejects_for_good_stops_the_sink() {
        let run = run_with_errors(
            "sink.reject",
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE,
            5,
            false,
        )
        .await;
        let error = run.result.unwrap_err();
        assert!(
            matches!(error, SinkError::Permanent { ref topic, .. } if topic == "sink.reject"),
            "{error:?}"
        );
        assert!(run.tickets.is_empty());
    }

    fn dead_letter_settings(brokers: &str) -> KafkaSinkSettings {
        KafkaSinkSettings {
            startup_attempts: 0,
            dead_letter: DeadLetterConfig::default(),
            ..settings(brokers)
        }
    }

    async fn read_topic(
        brokers: &str,
        topic: &str,
        count: usize,
    ) -> Vec<crate::demo::ConsumedRecord> {
        crate::demo::consume_records(brokers, topic, count, Duration::from_secs(10))
            .await
            .unwrap_or_default()
    }

    /// A sink run of one record to `topic` with dead letters on, against a mock cluster
    /// (with `topic` and `outbox.dlq`) whose next `rejections` produce requests fail with
    /// MSG_SIZE_TOO_LARGE.
    struct RejectionRun {
        /// Kept alive for reading the topics back.
        _cluster: MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
        /// The cluster's bootstrap servers.
        brokers: String,
        /// What the sink returned.
        result: Result<SinkSummary, SinkError>,
        /// Tickets reported, in order.
        tickets: Vec<u32>,
        /// The run's counters.
        metrics: Arc<Metrics>,
        /// Records delivered while the errors lasted (with an outage that clears).
        delivered_during_outage: Option<u64>,
    }

    async fn run_with_rejections(topic: &str, rejections: usize) -> RejectionRun {
        run_with_errors(
            topic,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE,
            rejections,
            true,
        )
        .await
    }

    /// `records` records to `topic` while every produce request fails with `error` for
    /// 2.5 s (then the errors are cleared); counts what was delivered meanwhile.
    async fn run_through_outage(
        topic: &str,
        error: RDKafkaRespErr,
        records: u32,
        dead_letters: bool,
    ) -> RejectionRun {
        run_with_error_setup(topic, error, 100_000, dead_letters, records, true).await
    }

    /// [`run_with_rejections`] with any produce error, with dead letters on or off.
    async fn run_with_errors(
        topic: &str,
        error: RDKafkaRespErr,
        count: usize,
        dead_letters: bool,
    ) -> RejectionRun {
        run_with_error_setup(topic, error, count, dead_letters, 1, false).await
    }

    /// The common body: a mock cluster with `topic` and `outbox.dlq` whose next `count`
    /// produce requests fail with `error` (cleared after 2.5 s when `clear` is set), and
    /// `records` records sent through the sink.
    async fn run_with_error_setup(
        topic: &str,
        error: RDKafkaRespErr,
        count: usize,
        dead_letters: bool,
        records: u32,
        clear: bool,
    ) -> RejectionRun {
        let cluster = MockCluster::new(1).unwrap();
        cluster.create_topic(topic, 1, 1).unwrap();
        cluster.create_topic("outbox.dlq", 1, 1).unwrap();
        cluster.request_errors(RDKafkaApiKey::Produce, &vec![error; count]);
        let metrics = Metrics::new();
        let brokers = cluster.bootstrap_servers();
        let settings = if dead_letters {
            dead_letter_settings(&brokers)
        } else {
            settings(&brokers)
        };
        let seen = Arc::new(Mutex::new(None));
        let during = {
            let (observer, seen, cluster) = (metrics.clone(), seen.clone(), &cluster);
            async move {
                if clear {
                    tokio::time::sleep(Duration::from_millis(2500)).await;
                    *seen.lock().unwrap() = Some(observer.records_delivered.get());
                    cluster.clear_request_errors(RDKafkaApiKey::Produce);
                }
            }
        };
        let (result, mut tickets) =
            run_with(settings, topic, records, during, metrics.clone()).await;
        tickets.sort_unstable();
        let delivered_during_outage = *seen.lock().unwrap();
        RejectionRun {
            _cluster: cluster,
            brokers,
            result,
            tickets,
            metrics,
            delivered_during_outage,
        }
    }

    /// Permanent rejections for fewer sends than the budget: resent and delivered to the
    /// original topic, no dead letter.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn permanent_rejections_within_the_budget_are_resent_not_dead_lettered() {
        let run = run_with_rejections("sink.budget", 2).await;
        assert_eq!(run.result.unwrap().delivered, 1);
        assert_eq!(run.tickets, vec![0]);
        assert_eq!(
            run.metrics
                .dead_lettered
                .with_label_values(&["message_too_large"])
                .get(),
            0
        );
        let delivered = read_topic(&run.brokers, "sink.budget", 1).await;
        assert_eq!(delivered.len(), 1);
        assert_eq!(delivered[0].value.as_deref(), Some("payload-0"));
    }

    /// Failure test 3 with dead letters on: retriable errors for far more than
    /// `max_attempts` sends never count against the budget: nothing is reported while they
    /// last, everything is delivered to its own topic once they clear, no dead letter.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn retriable_errors_are_never_dead_lettered() {
        let run = run_through_outage(
            "sink.retry",
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            5,
            true,
        )
        .await;
        let (metrics, brokers) = (run.metrics, run.brokers);
        assert_eq!(
            run.delivered_during_outage,
            Some(0),
            "held back during the errors"
        );
        assert_eq!(run.result.unwrap().delivered, 5);
        assert_eq!(run.tickets, vec![0, 1, 2, 3, 4]);
        assert!(
            metrics
                .delivery_errors
                .with_label_values(&["transient"])
                .get()
                >= 3
        );
        assert_eq!(
            metrics
                .delivery_errors
                .with_label_values(&["permanent"])
                .get(),
            0
        );
        assert_eq!(read_topic(&brokers, "sink.retry", 5).await.len(), 5);
        assert!(
            read_topic(&brokers, "outbox.dlq", 1).await.is_empty(),
            "no dead letter"
        );
    }

    /// Rejected on every one of `max_attempts` sends: the record goes to the dead-letter
    /// topic with its key, a bounded payload prefix and the failure headers, and its ticket
    /// is reported only then.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_record_rejected_for_the_whole_budget_is_dead_lettered_then_acked() {
        let run = run_with_rejections("sink.dead", 3).await;
        let brokers = run.brokers;
        assert_eq!(run.result.unwrap().delivered, 1);
        assert_eq!(run.tickets, vec![0]);
        assert_eq!(
            run.metrics
                .dead_lettered
                .with_label_values(&["message_too_large"])
                .get(),
            1
        );
        let letters = read_topic(&brokers, "outbox.dlq", 1).await;
        assert_eq!(letters.len(), 1, "one dead letter");
        let header = |name: &str| letters[0].header(name).map(str::to_owned);
        assert_eq!(letters[0].key.as_deref(), Some("key-0"));
        assert_eq!(header("id").as_deref(), Some("event-0"));
        assert_eq!(header("dlq.original_topic").as_deref(), Some("sink.dead"));
        assert_eq!(header("dlq.attempts").as_deref(), Some("3"));
        assert_eq!(
            header("dlq.error_class").as_deref(),
            Some("message_too_large")
        );
        assert_eq!(header("dlq.payload_size").as_deref(), Some("9"));
        assert!(read_topic(&brokers, "sink.dead", 1).await.is_empty());
    }

    /// `dlq replay` on the original topic: a dead letter whose payload was kept whole
    /// (it fits the prefix) goes back with the same key, payload and `id`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dead_letter_is_replayed_to_its_original_topic_with_the_same_id() {
        let run = run_with_rejections("sink.auth", 3).await;
        let brokers = run.brokers;
        assert_eq!(run.result.unwrap().delivered, 1);
        let kafka: KafkaConfig = toml::from_str(&format!("brokers = \"{brokers}\"")).unwrap();
        let letters =
            crate::dead_letter::read_dead_letters(&kafka, "outbox.dlq", Duration::from_secs(20))
                .await
                .unwrap();
        assert_eq!(letters.len(), 1);
        assert_eq!(letters[0].original_topic.as_deref(), Some("sink.auth"));
        assert_eq!(letters[0].error_class, "message_too_large");
        assert!(!letters[0].payload_truncated);
        let selection = crate::dead_letter::ReplaySelection::Id("event-0".into());
        let report = crate::dead_letter::replay_dead_letters(&letters, &selection, None, &kafka)
            .await
            .unwrap();
        assert!(
            matches!(report.as_slice(), [(_, crate::dead_letter::ReplayOutcome::Published { topic, .. })] if topic == "sink.auth"),
            "{report:?}"
        );
        let replayed = read_topic(&brokers, "sink.auth", 1).await;
        assert_eq!(replayed.len(), 1);
        assert_eq!(replayed[0].key.as_deref(), Some("key-0"));
        assert_eq!(replayed[0].value.as_deref(), Some("payload-0"));
        assert_eq!(
            replayed[0].headers,
            vec![("id".to_string(), "event-0".to_string())]
        );
    }

    /// The dead letter itself rejected: the sink stops naming the dead-letter topic and
    /// reports nothing (never a drop).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rejected_dead_letter_stops_the_sink() {
        let run = run_with_errors(
            "sink.dead2",
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
            10,
            true,
        )
        .await;
        let error = run.result.unwrap_err();
        assert!(
            matches!(error, SinkError::Permanent { ref topic, .. } if topic == "outbox.dlq"),
            "{error:?}"
        );
        assert!(run.tickets.is_empty());
    }

    /// A record above the producer's `message.max.bytes` is refused before it is sent; it
    /// is dead-lettered with a bounded prefix like a broker rejection.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_record_above_message_max_bytes_is_dead_lettered_with_a_prefix() {
        let cluster = MockCluster::new(1).unwrap();
        cluster.create_topic("sink.big", 1, 1).unwrap();
        cluster.create_topic("outbox.dlq", 1, 1).unwrap();
        let brokers = cluster.bootstrap_servers();
        let mut settings = dead_letter_settings(&brokers);
        settings
            .client_properties
            .push(("message.max.bytes".into(), "10000".into()));
        settings.dead_letter.payload_prefix_bytes = 100;
        let metrics = Metrics::new();
        let (tx, rx) = mpsc::channel(4);
        let controller = ShutdownController::new();
        let delivered = Arc::new(Mutex::new(Vec::new()));
        let sink_delivered = delivered.clone();
        let sink = tokio::spawn(run_kafka_sink(
            settings,
            rx,
            move |ticket: u32| sink_delivered.lock().unwrap().push(ticket),
            metrics.clone(),
            controller.subscribe(),
        ));
        let mut big = record("sink.big", 0);
        big.payload = Some(vec![b'z'; 50_000]);
        tx.send(SinkItem {
            record: big,
            ticket: 0,
            origin: RecordOrigin::default(),
        })
        .await
        .unwrap();
        tx.send(SinkItem {
            record: record("sink.big", 1),
            ticket: 1,
            origin: RecordOrigin::default(),
        })
        .await
        .unwrap();
        drop(tx);
        let summary = tokio::time::timeout(Duration::from_secs(30), sink)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(summary.delivered, 2);
        let mut tickets = delivered.lock().unwrap().clone();
        tickets.sort_unstable();
        assert_eq!(
            tickets,
            vec![0, 1],
            "acks to different topics may come in any order"
        );
        let letters = read_topic(&brokers, "outbox.dlq", 1).await;
        assert_eq!(letters.len(), 1);
        assert_eq!(letters[0].value.as_ref().map(String::len), Some(100));
        assert!(letters[0]
            .headers
            .contains(&("dlq.payload_size".into(), "50000".into())));
        assert!(letters[0]
            .headers
            .contains(&("dlq.payload_truncated".into(), "true".into())));
        let later = read_topic(&brokers, "sink.big", 1).await;
        assert_eq!(later[0].value.as_deref(), Some("payload-1"));
    }

    #[test]
    fn protected_properties_win_over_pass_through() {
        let mut kafka: KafkaConfig = toml::from_str(
            "brokers = \"b:1\"\n[properties]\n\"linger.ms\" = \"50\"\n\"client.id\" = \"x\"",
        )
        .unwrap();
        kafka.properties.insert("acks".into(), "1".into());
        let properties: BTreeMap<String, String> =
            producer_properties(&kafka).into_iter().collect();
        assert_eq!(properties["bootstrap.servers"], "b:1");
        assert_eq!(properties["linger.ms"], "50");
        assert_eq!(properties["client.id"], "x");
        assert_eq!(properties["acks"], "all");
        assert_eq!(properties["enable.idempotence"], "true");
    }

    #[test]
    fn error_classes() {
        use RDKafkaErrorCode as C;
        for (code, expected) in [
            (C::MessageTimedOut, FailureKind::Transient),
            (C::NotLeaderForPartition, FailureKind::Transient),
            (C::Fatal, FailureKind::Fatal),
            (C::MessageSizeTooLarge, FailureKind::Permanent),
            (C::TopicAuthorizationFailed, FailureKind::Permanent),
        ] {
            assert_eq!(
                classify_delivery_error(&KafkaError::MessageProduction(code)),
                expected,
                "{code:?}"
            );
        }
    }
}
