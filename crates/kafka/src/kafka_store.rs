//! The Kafka checkpoint store: the checkpoint as a record on a compacted topic.
//!
//! # Records
//! * Topic: [`DEFAULT_CHECKPOINT_TOPIC`] unless configured, **one partition**, created with
//!   `cleanup.policy=compact` by [`ensure_checkpoint_topic`] when the relay may create
//!   topics (`kafka.create_topics`); without that a missing topic is
//!   [`CheckpointStoreError::KafkaTopicMissing`], naming the topic and the fix.
//! * Partition 0, always (records are sent to it explicitly, so a topic created by hand
//!   with more partitions still works).
//! * Key: the connector name in UTF-8 ([`checkpoint_record_key`]), so several relays can
//!   share the topic and compaction keeps the last record per connector.
//! * Value: [`Checkpoint::to_json`] in UTF-8 ([`checkpoint_record_value`]); a tombstone
//!   (null value) is a reset: `load` is then `None`.
//!
//! Other writers (the exactly-once sink, which writes the checkpoint record inside its own
//! producer transaction together with the events) use the same three functions, and this
//! store's `load` reads what they committed.
//!
//! # Reading
//! `load` reads partition 0 from the beginning with `isolation.level=read_committed`, so a
//! record of an open or aborted transaction is never read. With `read_committed` the end of
//! the readable log is the **last stable offset** (the first offset of the oldest open
//! transaction), not the high watermark: librdkafka reports partition EOF when the fetch
//! position reaches it. The store also takes the high watermark (a `read_uncommitted` offset
//! query) when the load starts: reaching it means every transaction begun before the load
//! was resolved. If the EOF comes below it (a transaction is still open, or its markers are
//! still being written), the store waits up to [`OPEN_TRANSACTION_WAIT`] for the last stable
//! offset to move on, then returns what is committed and emits
//! [`CheckpointTopicTransactionOpen`]: an open transaction holds nothing committed, and
//! waiting for it would hang a restart until the broker's transaction timeout. The whole
//! load is bounded by the operation timeout: an unreachable cluster is
//! [`CheckpointStoreError::Kafka`] naming the brokers, never `None`.
//!
//! # Writing
//! `commit`, `set` and `reset` each write one record in one transaction of a transactional
//! producer (`transactional.id` = [`checkpoint_transactional_id`], `acks=all`): durable
//! when the transaction committed. The producer is created, and `init_transactions` called,
//! at the first write, or earlier by [`KafkaCheckpointStore::claim_writer`] (what
//! `outbox-relay run` does before its first load: it also aborts a transaction a crashed
//! writer left open, so that load need not wait for it). `load` alone (e.g. `outbox-relay
//! checkpoint show` next to a running relay) never creates it and never disturbs the writer.
//! The transactional id is per connector name, not per topic: connector names must be
//! unique per Kafka cluster. A second process with the same connector
//! name that writes fences the first: its next write fails with
//! [`CheckpointStoreError::ProducerFenced`], and so does every later one of that instance
//! (it never takes the id back). Other failures drop the producer; the next write builds a
//! new one, whose `init_transactions` resolves whatever the old one left open.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_checkpoint::{
    reject_regression, Checkpoint, CheckpointStore, CheckpointStoreError, StoreFuture,
};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use crate::kafka_store_context::StoreClientContext;
use crate::kafka_store_events::{CheckpointTopicCreated, CheckpointTopicTransactionOpen};

/// The checkpoint topic unless `[checkpoint] topic` says otherwise.
pub const DEFAULT_CHECKPOINT_TOPIC: &str = "outbox-relay-checkpoints";

/// The prefix of the store's `transactional.id`; the connector name follows.
pub const CHECKPOINT_TRANSACTIONAL_ID_PREFIX: &str = "outbox-relay-checkpoint-";

/// How long `load` waits, once it reached the last stable offset, for transactions open
/// below the high watermark to resolve before it returns what is committed.
pub const OPEN_TRANSACTION_WAIT: Duration = Duration::from_secs(2);

/// The partition every checkpoint record goes to and is read from.
pub const CHECKPOINT_PARTITION: i32 = 0;

/// The record key of `connector`'s checkpoint: the name's UTF-8 bytes.
pub fn checkpoint_record_key(connector: &str) -> Vec<u8> {
    connector.as_bytes().to_vec()
}

/// The record value of `checkpoint`: [`Checkpoint::to_json`]'s UTF-8 bytes (what `load`
/// parses). A reset is a tombstone: no value at all.
pub fn checkpoint_record_value(checkpoint: &Checkpoint) -> Vec<u8> {
    checkpoint.to_json().into_bytes()
}

/// The store's `transactional.id` for `connector`: one per connector name, so a second
/// relay with the same name fences the first.
pub fn checkpoint_transactional_id(connector: &str) -> String {
    format!("{CHECKPOINT_TRANSACTIONAL_ID_PREFIX}{connector}")
}

/// The exactly-once sink's `transactional.id` for `connector`: its transactions carry the
/// events and the checkpoint record together.
pub fn exactly_once_transactional_id(connector: &str) -> String {
    format!("outbox-relay-{connector}")
}

/// `bootstrap.servers` of `properties` (for messages), or `?` when absent.
fn brokers_of(properties: &[(String, String)]) -> String {
    properties
        .iter()
        .find(|(key, _)| key == "bootstrap.servers")
        .map_or_else(|| "?".to_owned(), |(_, value)| value.clone())
}

fn client_config(properties: &[(String, String)], overrides: &[(&str, &str)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (key, value) in properties {
        config.set(key, value);
    }
    for (key, value) in overrides {
        config.set(*key, *value);
    }
    config
}

/// Makes sure the checkpoint topic exists: when it does not and `create` is set, creates it
/// with one partition, `replication_factor` replicas and `cleanup.policy=compact`; when it
/// does not and `create` is not set, [`CheckpointStoreError::KafkaTopicMissing`].
/// `properties` are the relay's client properties (`bootstrap.servers` and security);
/// every request is bounded by `timeout`, and a cluster that does not answer is
/// [`CheckpointStoreError::Kafka`] naming the brokers.
pub async fn ensure_checkpoint_topic(
    properties: &[(String, String)],
    topic: &str,
    create: bool,
    replication_factor: i32,
    timeout: Duration,
) -> Result<(), CheckpointStoreError> {
    let brokers = brokers_of(properties);
    let location = format!("topic `{topic}` on {brokers}");
    let failed =
        |operation: &'static str, error: &dyn std::fmt::Display| CheckpointStoreError::Kafka {
            location: location.clone(),
            operation,
            message: error.to_string(),
        };
    if topic_exists(properties, topic, timeout)
        .await
        .map_err(|message| failed("checking the topic", &message))?
    {
        return Ok(());
    }
    if !create {
        return Err(CheckpointStoreError::KafkaTopicMissing {
            topic: topic.to_owned(),
            brokers,
        });
    }
    let admin: AdminClient<DefaultClientContext> = client_config(properties, &[])
        .create()
        .map_err(|error| failed("creating an admin client", &error))?;
    let new_topic = NewTopic::new(topic, 1, TopicReplication::Fixed(replication_factor))
        .set("cleanup.policy", "compact");
    let options = AdminOptions::new()
        .request_timeout(Some(timeout))
        .operation_timeout(Some(timeout));
    let results = tokio::time::timeout(timeout, admin.create_topics([&new_topic], &options))
        .await
        .map_err(|_| {
            failed(
                "creating the topic",
                &format!("no answer within {timeout:?}"),
            )
        })?
        .map_err(|error| failed("creating the topic", &error))?;
    for result in results {
        match result {
            Ok(_) => CheckpointTopicCreated {
                topic,
                replication_factor,
            }
            .emit(),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => return Err(failed("creating the topic", &code)),
        }
    }
    // A new topic's partition has no leader in the metadata for a moment; offset queries
    // and sends before that fail with "unknown partition".
    let deadline = Instant::now() + timeout;
    loop {
        match topic_exists(properties, topic, timeout).await {
            Ok(true) => return Ok(()),
            Ok(false) | Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(false) => {
                return Err(failed(
                    "creating the topic",
                    &format!("created, but no leader for partition 0 within {timeout:?}"),
                ))
            }
            Err(message) => return Err(failed("creating the topic", &message)),
        }
    }
}

/// Whether `topic` exists (metadata request bounded by `timeout`); `Err` with librdkafka's
/// reason when the cluster did not answer.
async fn topic_exists(
    properties: &[(String, String)],
    topic: &str,
    timeout: Duration,
) -> Result<bool, String> {
    let config = client_config(properties, &[]);
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer<StoreClientContext> = config
            .create_with_context(StoreClientContext)
            .map_err(|error| error.to_string())?;
        let metadata = consumer
            .fetch_metadata(Some(&topic), timeout)
            .map_err(|error| format!("no metadata within {timeout:?}: {error}"))?;
        let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
            return Ok(false);
        };
        match found.error() {
            None => Ok(found.partitions().iter().any(|partition| {
                partition.id() == CHECKPOINT_PARTITION && partition.leader() >= 0
            })),
            Some(code) => match RDKafkaErrorCode::from(code) {
                RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic => {
                    Ok(false)
                }
                other => Err(format!("metadata of `{topic}`: {other}")),
            },
        }
    })
    .await
    .map_err(|error| format!("metadata task failed: {error}"))?
}

/// What the Kafka store needs to know.
#[derive(Clone)]
pub struct KafkaStoreSettings {
    /// The relay's common client properties (`bootstrap.servers`, security, pass-through
    /// properties); the store adds its consumer and producer settings on top.
    pub client_properties: Vec<(String, String)>,
    /// The compacted topic holding the checkpoints ([`DEFAULT_CHECKPOINT_TOPIC`]).
    pub topic: String,
    /// The record key and the transactional id's suffix: several relays share a topic.
    pub connector: String,
    /// Create the topic when it is missing (`kafka.create_topics`).
    pub create_topic: bool,
    /// Replicas of a created topic (`kafka.topic_replication_factor`).
    pub replication_factor: i32,
    /// Bound of each operation (a load, a commit with its `init_transactions`): a cluster
    /// that does not answer fails the call, never hangs the relay or its shutdown.
    pub operation_timeout: Duration,
}

impl std::fmt::Debug for KafkaStoreSettings {
    /// The client properties may hold a SASL password: only the brokers are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaStoreSettings")
            .field("brokers", &brokers_of(&self.client_properties))
            .field("topic", &self.topic)
            .field("connector", &self.connector)
            .field("create_topic", &self.create_topic)
            .field("replication_factor", &self.replication_factor)
            .field("operation_timeout", &self.operation_timeout)
            .finish()
    }
}

/// A checkpoint kept as the last record of its connector's key on a compacted topic. See
/// the module docs.
#[derive(Debug, Clone)]
pub struct KafkaCheckpointStore {
    /// Shared with the blocking tasks that run librdkafka's blocking calls.
    inner: Arc<KafkaStoreInner>,
}

#[derive(Debug)]
struct KafkaStoreInner {
    /// Topic, connector, clients and bounds.
    settings: KafkaStoreSettings,
    /// `topic T on BROKERS (connector `C`)`, for errors and logs.
    location: String,
    /// Set once the topic is known to exist in this process (checked or created).
    topic_ready: tokio::sync::OnceCell<()>,
    /// The transactional producer, created at the first write; `None` again after a
    /// failure (the next write builds a new one). Held across a whole write, which also
    /// serializes this instance's writes.
    producer: Mutex<Option<ProducerSlot>>,
    /// librdkafka's words once this instance was fenced: every later write fails with
    /// them, so a fenced instance never takes the transactional id back.
    fenced: Mutex<Option<String>>,
    /// The last checkpoint read or written (`Some(None)`: known absent), for the
    /// regression check without a read before every commit; `None` until known.
    last_stored: Mutex<Option<Option<Checkpoint>>>,
}

/// The producer with its `Debug` (librdkafka's handle has none).
struct ProducerSlot(BaseProducer);

impl std::fmt::Debug for ProducerSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("transactional producer")
    }
}

/// Whether `error` means another producer took this transactional id.
fn is_fenced(error: &KafkaError) -> bool {
    let code = match error {
        KafkaError::Transaction(error) => error.code(),
        other => match other.rdkafka_error_code() {
            Some(code) => code,
            None => return false,
        },
    };
    matches!(
        code,
        RDKafkaErrorCode::Fenced
            | RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
    )
}

impl KafkaCheckpointStore {
    /// A store with `settings`. No I/O happens until the first call.
    pub fn new(settings: KafkaStoreSettings) -> Self {
        let location = format!(
            "topic `{}` on {} (connector `{}`)",
            settings.topic,
            brokers_of(&settings.client_properties),
            settings.connector
        );
        Self {
            inner: Arc::new(KafkaStoreInner {
                settings,
                location,
                topic_ready: tokio::sync::OnceCell::new(),
                producer: Mutex::new(None),
                fenced: Mutex::new(None),
                last_stored: Mutex::new(None),
            }),
        }
    }

    /// The store's settings.
    pub fn settings(&self) -> &KafkaStoreSettings {
        &self.inner.settings
    }

    async fn ensure_topic(&self) -> Result<(), CheckpointStoreError> {
        let settings = &self.inner.settings;
        self.inner
            .topic_ready
            .get_or_try_init(|| {
                ensure_checkpoint_topic(
                    &settings.client_properties,
                    &settings.topic,
                    settings.create_topic,
                    settings.replication_factor,
                    settings.operation_timeout,
                )
            })
            .await
            .map(|_| ())
    }

    /// Runs `work` on the blocking pool (librdkafka's calls block).
    async fn blocking<T, F>(&self, work: F) -> Result<T, CheckpointStoreError>
    where
        T: Send + 'static,
        F: FnOnce(&KafkaStoreInner) -> Result<T, CheckpointStoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || work(&inner))
            .await
            .map_err(|error| CheckpointStoreError::Task {
                location: self.inner.location.clone(),
                message: error.to_string(),
            })?
    }

    async fn read(&self) -> Result<Option<Checkpoint>, CheckpointStoreError> {
        self.ensure_topic().await?;
        let checkpoint = self.blocking(KafkaStoreInner::read_blocking).await?;
        self.inner.remember(checkpoint.clone());
        Ok(checkpoint)
    }

    async fn write(&self, checkpoint: Option<Checkpoint>) -> Result<(), CheckpointStoreError> {
        self.ensure_topic().await?;
        let value = checkpoint.as_ref().map(checkpoint_record_value);
        self.blocking(move |inner| inner.write_blocking(value))
            .await?;
        self.inner.remember(checkpoint);
        Ok(())
    }

    /// Becomes the writer now instead of at the first write: creates the transactional
    /// producer and calls `init_transactions`, which fences any older instance with the same
    /// connector and aborts a transaction a crashed one left open (so the next `load` need
    /// not wait for it). For `outbox-relay run`; never for read-only users (`checkpoint
    /// show`, `status`), which would fence the running relay.
    pub async fn claim_writer(&self) -> Result<(), CheckpointStoreError> {
        self.ensure_topic().await?;
        self.blocking(|inner| {
            inner.check_not_fenced()?;
            let mut slot = inner.lock_producer();
            let outcome = inner.ensure_producer(&mut slot);
            inner.after_failure(&mut slot, &outcome);
            outcome
        })
        .await
    }

    /// Fences every older producer with `transactional_id` and aborts a transaction one left
    /// open (`init_transactions` of a short-lived producer with that id). In exactly-once
    /// mode the sink's transactions hold the checkpoint record: a new leader calls this with
    /// the sink's id before its first `load`, which would otherwise wait
    /// [`OPEN_TRANSACTION_WAIT`] for a crashed leader's open transaction and then return the
    /// checkpoint before it (more to resend, and a failover seconds longer).
    pub async fn fence_transactional_id(
        &self,
        transactional_id: &str,
    ) -> Result<(), CheckpointStoreError> {
        let transactional_id = transactional_id.to_owned();
        self.blocking(move |inner| {
            // While the broker aborts the old transaction it answers "concurrent
            // transactions": ask again soon, not after a growing backoff.
            let retry_soon = [("retry.backoff.ms", "20"), ("retry.backoff.max.ms", "100")];
            inner
                .initialized_transactional_producer(
                    &transactional_id,
                    &retry_soon,
                    "fencing older producers",
                )
                .map(drop)
        })
        .await
    }

    async fn commit_checked(&self, checkpoint: &Checkpoint) -> Result<(), CheckpointStoreError> {
        let stored = match self.inner.remembered() {
            Some(stored) => stored,
            None => self.read().await?,
        };
        reject_regression(&self.inner.location, stored.as_ref(), checkpoint)?;
        self.write(Some(checkpoint.clone())).await
    }
}

impl KafkaStoreInner {
    fn remember(&self, checkpoint: Option<Checkpoint>) {
        if let Ok(mut last) = self.last_stored.lock() {
            *last = Some(checkpoint);
        }
    }

    fn remembered(&self) -> Option<Option<Checkpoint>> {
        self.last_stored.lock().ok().and_then(|last| last.clone())
    }

    fn kafka_error(&self, operation: &'static str, message: impl ToString) -> CheckpointStoreError {
        CheckpointStoreError::Kafka {
            location: self.location.clone(),
            operation,
            message: message.to_string(),
        }
    }

    /// Reads the committed log of partition 0 to its end (see the module docs).
    fn read_blocking(&self) -> Result<Option<Checkpoint>, CheckpointStoreError> {
        let settings = &self.settings;
        let deadline = Instant::now() + settings.operation_timeout;
        let remaining = || deadline.saturating_duration_since(Instant::now());
        let topic = settings.topic.as_str();
        let reader_group = format!("{CHECKPOINT_TRANSACTIONAL_ID_PREFIX}reader");
        let committed: BaseConsumer<StoreClientContext> = client_config(
            &settings.client_properties,
            &[
                ("group.id", reader_group.as_str()),
                ("isolation.level", "read_committed"),
                ("enable.partition.eof", "true"),
                // The end of the log is known by an empty fetch: answered at once, not after
                // the default 500 ms wait (a new leader's takeover waits for this load).
                ("fetch.wait.max.ms", "10"),
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
                ("auto.offset.reset", "earliest"),
            ],
        )
        .create_with_context(StoreClientContext)
        .map_err(|error| self.kafka_error("creating a consumer", error))?;
        let uncommitted: BaseConsumer<StoreClientContext> = client_config(
            &settings.client_properties,
            &[("isolation.level", "read_uncommitted")],
        )
        .create_with_context(StoreClientContext)
        .map_err(|error| self.kafka_error("creating a consumer", error))?;
        // Retried until the deadline: a partition just created, or whose leader moves,
        // answers "unknown partition" for a moment.
        let (low, high) = loop {
            match uncommitted.fetch_watermarks(topic, CHECKPOINT_PARTITION, remaining()) {
                Ok(watermarks) => break watermarks,
                Err(error) if remaining() > Duration::from_millis(100) => {
                    tracing::debug!(%error, "checkpoint topic offsets not known yet; retrying");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(error) => {
                    return Err(self.kafka_error(
                        "loading",
                        format!(
                            "no offsets within {:?}: {error}",
                            settings.operation_timeout
                        ),
                    ))
                }
            }
        };
        drop(uncommitted);
        if high <= low {
            return Ok(None);
        }
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(topic, CHECKPOINT_PARTITION, Offset::Beginning)
            .map_err(|error| self.kafka_error("loading", error))?;
        committed
            .assign(&assignment)
            .map_err(|error| self.kafka_error("loading", error))?;
        let key = checkpoint_record_key(&settings.connector);
        let mut last_value: Option<Option<Vec<u8>>> = None;
        let mut last_error: Option<String> = None;
        let mut waiting_since: Option<Instant> = None;
        loop {
            if remaining().is_zero() {
                return Err(self.kafka_error(
                    "loading",
                    format!(
                        "the committed log was not read to its end within {:?}{}",
                        settings.operation_timeout,
                        last_error.map(|e| format!(": {e}")).unwrap_or_default()
                    ),
                ));
            }
            match committed.poll(remaining().min(Duration::from_millis(100))) {
                Some(Ok(message)) => {
                    if message.key() == Some(key.as_slice()) {
                        last_value = Some(message.payload().map(<[u8]>::to_vec));
                    }
                    if message.offset() + 1 >= high {
                        break;
                    }
                }
                Some(Err(KafkaError::PartitionEOF(_))) => {
                    let position = committed
                        .position()
                        .ok()
                        .and_then(|list| {
                            list.find_partition(topic, CHECKPOINT_PARTITION)
                                .map(|element| element.offset())
                        })
                        .and_then(|offset| offset.to_raw())
                        .filter(|offset| *offset >= 0)
                        .unwrap_or(low);
                    if position >= high {
                        break;
                    }
                    waiting_since.get_or_insert_with(Instant::now);
                }
                Some(Err(error)) => last_error = Some(error.to_string()),
                None => {}
            }
            if let Some(since) = waiting_since {
                if since.elapsed() >= OPEN_TRANSACTION_WAIT {
                    let stable = committed
                        .position()
                        .ok()
                        .and_then(|list| {
                            list.find_partition(topic, CHECKPOINT_PARTITION)
                                .and_then(|element| element.offset().to_raw())
                        })
                        .unwrap_or(low);
                    CheckpointTopicTransactionOpen {
                        location: &self.location,
                        last_stable_offset: stable,
                        high_watermark: high,
                        waited: OPEN_TRANSACTION_WAIT,
                    }
                    .emit();
                    break;
                }
            }
        }
        match last_value {
            None | Some(None) => Ok(None),
            Some(Some(bytes)) => {
                let text = String::from_utf8(bytes).map_err(|_| CheckpointStoreError::Corrupt {
                    location: self.location.clone(),
                    source: outbox_checkpoint::CheckpointFormatError::Invalid {
                        reason: "the record value is not UTF-8 text".to_owned(),
                    },
                })?;
                Checkpoint::from_json(&text).map(Some).map_err(|source| {
                    CheckpointStoreError::Corrupt {
                        location: self.location.clone(),
                        source,
                    }
                })
            }
        }
    }

    fn fenced_error(&self, message: String) -> CheckpointStoreError {
        CheckpointStoreError::ProducerFenced {
            location: self.location.clone(),
            message,
        }
    }

    /// `Err(ProducerFenced)` once this instance was fenced: it never writes again.
    fn check_not_fenced(&self) -> Result<(), CheckpointStoreError> {
        match self.fenced.lock().ok().and_then(|fenced| fenced.clone()) {
            Some(message) => Err(self.fenced_error(message)),
            None => Ok(()),
        }
    }

    fn lock_producer(&self) -> std::sync::MutexGuard<'_, Option<ProducerSlot>> {
        self.producer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// After a failed write: a failed transaction leaves the producer in a state only a new
    /// one resolves, so it is dropped; a fencing is remembered for good.
    fn after_failure(
        &self,
        slot: &mut Option<ProducerSlot>,
        outcome: &Result<(), CheckpointStoreError>,
    ) {
        if let Err(error) = outcome {
            *slot = None;
            if let CheckpointStoreError::ProducerFenced { message, .. } = error {
                if let Ok(mut fenced) = self.fenced.lock() {
                    *fenced = Some(message.clone());
                }
            }
        }
    }

    /// One transaction writing `value` (a tombstone when `None`) under the connector's key.
    fn write_blocking(&self, value: Option<Vec<u8>>) -> Result<(), CheckpointStoreError> {
        self.check_not_fenced()?;
        let mut slot = self.lock_producer();
        let outcome = self.transaction(&mut slot, value.as_deref());
        self.after_failure(&mut slot, &outcome);
        outcome
    }

    /// [`CheckpointStoreError::ProducerFenced`] when `error` says another producer took the
    /// transactional id, else a transient [`CheckpointStoreError::Kafka`].
    fn classify(&self, operation: &'static str, error: KafkaError) -> CheckpointStoreError {
        if is_fenced(&error) {
            self.fenced_error(error.to_string())
        } else {
            self.kafka_error(operation, error)
        }
    }

    fn transaction(
        &self,
        slot: &mut Option<ProducerSlot>,
        value: Option<&[u8]>,
    ) -> Result<(), CheckpointStoreError> {
        self.ensure_producer(slot)?;
        let Some(ProducerSlot(producer)) = slot.as_ref() else {
            return Err(self.kafka_error("committing", "no producer"));
        };
        self.send_in_transaction(producer, value)
    }

    /// Creates the transactional producer and calls `init_transactions`, unless `slot`
    /// already holds one.
    /// A producer with `transactional_id` (idempotent, `acks=all`, plus `extra`) whose
    /// `init_transactions` returned: every older producer with the id is fenced and a
    /// transaction one left open is aborted. `operation` names the init in an error.
    fn initialized_transactional_producer(
        &self,
        transactional_id: &str,
        extra: &[(&str, &str)],
        operation: &'static str,
    ) -> Result<BaseProducer, CheckpointStoreError> {
        let timeout = self.settings.operation_timeout;
        // The broker aborts a transaction of this producer left open by a crash after
        // this long (a transaction here lasts milliseconds).
        let transaction_timeout = timeout.max(Duration::from_secs(1)).as_millis().to_string();
        let mut properties = vec![
            ("transactional.id", transactional_id),
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("transaction.timeout.ms", transaction_timeout.as_str()),
        ];
        properties.extend_from_slice(extra);
        let producer: BaseProducer = client_config(&self.settings.client_properties, &properties)
            .create()
            .map_err(|error| self.kafka_error("creating a transactional producer", error))?;
        producer
            .init_transactions(timeout)
            .map_err(|error| self.classify(operation, error))?;
        Ok(producer)
    }

    fn ensure_producer(&self, slot: &mut Option<ProducerSlot>) -> Result<(), CheckpointStoreError> {
        if slot.is_some() {
            return Ok(());
        }
        let transactional_id = checkpoint_transactional_id(&self.settings.connector);
        let producer = self.initialized_transactional_producer(
            &transactional_id,
            &[("linger.ms", "0")],
            "initializing transactions",
        )?;
        *slot = Some(ProducerSlot(producer));
        Ok(())
    }

    /// The second half of a write: begin, send, commit.
    fn send_in_transaction(
        &self,
        producer: &BaseProducer,
        value: Option<&[u8]>,
    ) -> Result<(), CheckpointStoreError> {
        let settings = &self.settings;
        let timeout = settings.operation_timeout;
        let classify = |operation: &'static str, error: KafkaError| self.classify(operation, error);
        let key = checkpoint_record_key(&settings.connector);
        producer
            .begin_transaction()
            .map_err(|error| classify("beginning a transaction", error))?;
        let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&settings.topic)
            .key(key.as_slice())
            .partition(CHECKPOINT_PARTITION);
        if let Some(value) = value {
            record = record.payload(value);
        }
        producer
            .send(record)
            .map_err(|(error, _)| classify("sending the checkpoint record", error))?;
        producer
            .commit_transaction(timeout)
            .map_err(|error| classify("committing the transaction", error))?;
        Ok(())
    }
}

impl CheckpointStore for KafkaCheckpointStore {
    fn describe(&self) -> String {
        self.inner.location.clone()
    }

    fn load(&self) -> StoreFuture<'_, Option<Checkpoint>> {
        Box::pin(self.read())
    }

    fn commit<'a>(&'a self, checkpoint: &'a Checkpoint) -> StoreFuture<'a, ()> {
        Box::pin(self.commit_checked(checkpoint))
    }

    fn set<'a>(&'a self, checkpoint: &'a Checkpoint) -> StoreFuture<'a, ()> {
        Box::pin(self.write(Some(checkpoint.clone())))
    }

    fn reset(&self) -> StoreFuture<'_, ()> {
        Box::pin(self.write(None))
    }
}
