//! Dead letters: what a per-event permanent failure becomes instead of a stop, and the
//! `dlq list` / `dlq replay` side that reads them back.
//!
//! # Contract
//! * A dead letter is an ordinary Kafka record on `dead_letter.topic`, sent by the same sink
//!   with the failed event's ack ticket: the event counts as acked for the checkpoint only
//!   once the **dead-letter write** is acked. A dead letter that cannot be written stops the
//!   relay ([`crate::sink::SinkError::Permanent`] naming the dead-letter topic): never a drop.
//! * It keeps the original key, payload and headers (so `id` survives), except when the
//!   payload is what Kafka rejected (`message_too_large`, `corrupt_record`): then only
//!   `dead_letter.payload_prefix_bytes` of it, plus its size and FNV-1a 64 hash.
//! * It adds the `dlq.*` headers listed in [`headers`]. A routing error has no record:
//!   its dead letter's payload is the row's `payload` column (the whole row as JSON when
//!   there is none), header `dlq.row` carries the whole row as a JSON object, the key is the
//!   row's `aggregate_id` text when readable, and `dlq.original_topic_known = false`.
//!   Its payload (and a key longer than the limit) is cut to
//!   `dead_letter.payload_prefix_bytes` with size and hash headers, like a rejected
//!   payload: the row may be as large as the broker's limit.
//!   (Column names `payload`/`aggregate_id` are the seeds/Debezium defaults; with other
//!   column names the key is absent and the payload is the row JSON.)
//! * Headers name where the event is in the binlog: the rows event's file and position,
//!   and the transaction's GTID when the server assigns GTIDs.
//! * Routing errors are deterministic (the same row fails the same way every time): they
//!   are dead-lettered after one attempt. Kafka rejections are resent up to
//!   `dead_letter.max_attempts` times with the sink's backoff first.
//!
//! # Replay
//! [`read_dead_letters`] reads the whole topic (offset 0 to the high watermark, read
//! uncommitted); [`replay_dead_letters`] republishes the chosen ones to their original (or
//! an override) topic with the original key, payload and non-`dlq.*` headers (`id`
//! included), through an idempotent producer. Replaying twice publishes twice with the
//! same `id`: safe for a consumer that deduplicates by `id`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use outbox_binlog::{RowChange, Value};
use outbox_router::RoutingError;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

use crate::config::{DeadLetterConfig, KafkaConfig};
use crate::sink::OutboundRecord;

/// Header names of a dead letter (besides the original record's headers).
pub mod headers {
    /// The topic the event was meant for (empty when unknown).
    pub const ORIGINAL_TOPIC: &str = "dlq.original_topic";
    /// `true`, or `false` for a routing error (no topic was ever computed).
    pub const ORIGINAL_TOPIC_KNOWN: &str = "dlq.original_topic_known";
    /// One of [`crate::config::DEAD_LETTER_ERROR_CLASSES`].
    pub const ERROR_CLASS: &str = "dlq.error_class";
    /// The error text.
    pub const ERROR_MESSAGE: &str = "dlq.error_message";
    /// Sends tried before dead-lettering.
    pub const ATTEMPTS: &str = "dlq.attempts";
    /// First failure, ms since the epoch.
    pub const FIRST_FAILURE_MS: &str = "dlq.first_failure_ms";
    /// Last failure, ms since the epoch.
    pub const LAST_FAILURE_MS: &str = "dlq.last_failure_ms";
    /// Binlog file of the rows event that carried the event.
    pub const BINLOG_FILE: &str = "dlq.binlog_file";
    /// Position of that rows event in the file.
    pub const BINLOG_POSITION: &str = "dlq.binlog_position";
    /// GTID of the event's transaction (when the server assigns GTIDs).
    pub const BINLOG_GTID: &str = "dlq.binlog_gtid";
    /// The outbox table.
    pub const TABLE: &str = "dlq.table";
    /// With a rejected payload: `true` when the dead letter keeps a prefix only.
    pub const PAYLOAD_TRUNCATED: &str = "dlq.payload_truncated";
    /// Size of the original payload in bytes (with a truncated payload).
    pub const PAYLOAD_SIZE: &str = "dlq.payload_size";
    /// FNV-1a 64 of the original payload, 16 hex digits (with a truncated payload).
    pub const PAYLOAD_FNV1A64: &str = "dlq.payload_fnv1a64";
    /// With a rejected record: `true` when the dead letter keeps a prefix of the key only
    /// (a key longer than `dead_letter.payload_prefix_bytes`).
    pub const KEY_TRUNCATED: &str = "dlq.key_truncated";
    /// Size of the original key in bytes (with a truncated key).
    pub const KEY_SIZE: &str = "dlq.key_size";
    /// FNV-1a 64 of the original key, 16 hex digits (with a truncated key).
    pub const KEY_FNV1A64: &str = "dlq.key_fnv1a64";
    /// Routing errors only: the whole row as a JSON object (column -> value), cut to
    /// `dead_letter.payload_prefix_bytes` (at a character boundary) when longer.
    pub const ROW: &str = "dlq.row";
    /// Routing errors only: `true` when `dlq.row` was cut.
    pub const ROW_TRUNCATED: &str = "dlq.row_truncated";
    /// With a rejected record: the names of original headers whose values were cut to
    /// `dead_letter.payload_prefix_bytes` (comma-separated), e.g. an `aggregate_id` header
    /// as gigantic as the key it repeats.
    pub const TRUNCATED_HEADERS: &str = "dlq.truncated_headers";
    /// Prefix of every header the relay adds; replay drops these.
    pub const PREFIX: &str = "dlq.";
}

/// Where an event came from in the binlog, carried with its record for dead letters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordOrigin {
    /// The outbox table (shown as `schema.table`); shared with the row, so carrying it costs
    /// no formatting per record, only when a dead letter is written.
    pub table: Option<std::sync::Arc<outbox_binlog::TableName>>,
    /// The binlog file of the rows event.
    pub binlog_file: Option<String>,
    /// The rows event's position in that file.
    pub binlog_position: Option<u64>,
    /// The GTID of the event's transaction, when the server assigned one (shared with the
    /// row: formatted only if a dead letter is written).
    pub transaction_gtid: Option<std::sync::Arc<outbox_binlog::Gtid>>,
    /// The rows event's server timestamp (epoch seconds), for the end-to-end latency
    /// histogram.
    pub event_timestamp: Option<u32>,
}

impl RecordOrigin {
    /// The origin of a row change.
    pub fn of_row(row: &RowChange) -> Self {
        Self {
            table: Some(std::sync::Arc::clone(&row.table)),
            binlog_file: Some(row.event_position.file.clone()),
            binlog_position: Some(row.event_position.position),
            transaction_gtid: row.transaction_gtid.clone(),
            event_timestamp: Some(row.event_timestamp),
        }
    }
}

/// Why an event failed for good, and how often it was tried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureReport {
    /// One of [`crate::config::DEAD_LETTER_ERROR_CLASSES`].
    pub class: &'static str,
    /// The error text.
    pub message: String,
    /// Sends tried.
    pub attempts: u32,
    /// First failure, ms since the epoch.
    pub first_failure_ms: i64,
    /// Last failure, ms since the epoch.
    pub last_failure_ms: i64,
}

/// Milliseconds since the epoch now (0 if the clock is before 1970).
pub fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Every dead-letter error class ([`kafka_error_class`]'s and `routing`), so the metrics
/// can start each at 0.
pub const DEAD_LETTER_CLASSES: [&str; 6] = [
    "routing",
    "message_too_large",
    "authorization",
    "invalid_topic",
    "corrupt_record",
    "other",
];

/// The dead-letter error class of a Kafka error.
pub fn kafka_error_class(error: &KafkaError) -> &'static str {
    use RDKafkaErrorCode as C;
    match error.rdkafka_error_code() {
        Some(C::MessageSizeTooLarge | C::InvalidMessageSize) => "message_too_large",
        Some(
            C::TopicAuthorizationFailed
            | C::ClusterAuthorizationFailed
            | C::TransactionalIdAuthorizationFailed,
        ) => "authorization",
        // A partition beyond the topic's count: the topic cannot take the record as routed.
        Some(C::InvalidTopic | C::UnknownPartition) => "invalid_topic",
        Some(C::InvalidMessage | C::InvalidRecord) => "corrupt_record",
        _ => "other",
    }
}

/// FNV-1a 64 (stable across Rust versions, unlike `DefaultHasher`).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

fn push(headers: &mut Vec<(String, Vec<u8>)>, name: &str, value: impl ToString) {
    headers.push((name.to_owned(), value.to_string().into_bytes()));
}

fn push_origin_and_failure(
    headers: &mut Vec<(String, Vec<u8>)>,
    origin: &RecordOrigin,
    failure: &FailureReport,
) {
    push(headers, headers::ERROR_CLASS, failure.class);
    push(headers, headers::ERROR_MESSAGE, &failure.message);
    push(headers, headers::ATTEMPTS, failure.attempts);
    push(headers, headers::FIRST_FAILURE_MS, failure.first_failure_ms);
    push(headers, headers::LAST_FAILURE_MS, failure.last_failure_ms);
    if let Some(table) = &origin.table {
        push(headers, headers::TABLE, table);
    }
    if let Some(file) = &origin.binlog_file {
        push(headers, headers::BINLOG_FILE, file);
    }
    if let Some(position) = origin.binlog_position {
        push(headers, headers::BINLOG_POSITION, position);
    }
    if let Some(gtid) = &origin.transaction_gtid {
        push(headers, headers::BINLOG_GTID, gtid.to_string());
    }
}

/// The dead letter of a record Kafka rejected permanently.
pub fn dead_letter_for_record(
    original: &OutboundRecord,
    origin: &RecordOrigin,
    failure: &FailureReport,
    config: &DeadLetterConfig,
) -> OutboundRecord {
    let payload_is_the_problem = matches!(failure.class, "message_too_large" | "corrupt_record");
    let mut headers = original.headers.clone();
    if payload_is_the_problem {
        let mut cut = Vec::new();
        for (name, value) in &mut headers {
            if value.len() > config.payload_prefix_bytes {
                value.truncate(config.payload_prefix_bytes);
                cut.push(name.clone());
            }
        }
        if !cut.is_empty() {
            push(&mut headers, headers::TRUNCATED_HEADERS, cut.join(","));
        }
    }
    push(&mut headers, headers::ORIGINAL_TOPIC, &original.topic);
    push(&mut headers, headers::ORIGINAL_TOPIC_KNOWN, true);
    push_origin_and_failure(&mut headers, origin, failure);
    let payload = match &original.payload {
        Some(payload) if payload_is_the_problem => {
            let truncated = payload.len() > config.payload_prefix_bytes;
            push(&mut headers, headers::PAYLOAD_TRUNCATED, truncated);
            push(&mut headers, headers::PAYLOAD_SIZE, payload.len());
            push(
                &mut headers,
                headers::PAYLOAD_FNV1A64,
                format!("{:016x}", fnv1a64(payload)),
            );
            Some(payload[..payload.len().min(config.payload_prefix_bytes)].to_vec())
        }
        other => other.clone(),
    };
    // A gigantic key is just as much "what Kafka rejected": keep a prefix, size and hash.
    let key = match &original.key {
        Some(key) if payload_is_the_problem && key.len() > config.payload_prefix_bytes => {
            push(&mut headers, headers::KEY_TRUNCATED, true);
            push(&mut headers, headers::KEY_SIZE, key.len());
            push(
                &mut headers,
                headers::KEY_FNV1A64,
                format!("{:016x}", fnv1a64(key)),
            );
            Some(key[..config.payload_prefix_bytes].to_vec())
        }
        other => other.clone(),
    };
    OutboundRecord {
        topic: config.topic.clone(),
        key,
        payload,
        headers,
        // The original's null headers keep their places: the `dlq.*` headers come after.
        null_headers: original.null_headers.clone(),
        timestamp_ms: original.timestamp_ms,
        // The dead-letter topic has its own partitions.
        partition: None,
    }
}

/// The dead letter of a row the router could not route (see the module docs).
pub fn dead_letter_for_routing_error(
    error: &RoutingError,
    row: &RowChange,
    config: &DeadLetterConfig,
) -> OutboundRecord {
    let now = now_millis();
    let failure = FailureReport {
        class: "routing",
        message: error.to_string(),
        attempts: 1,
        first_failure_ms: now,
        last_failure_ms: now,
    };
    let image = row.after.as_ref().or(row.before.as_ref());
    let mut object = serde_json::Map::new();
    if let Some(image) = image {
        for (column, value) in image.columns.iter().zip(&image.values) {
            object.insert(column.to_string(), value_to_json(value));
        }
    }
    let key = image
        .and_then(|image| image.get("aggregate_id"))
        .and_then(value_text)
        .map(String::into_bytes);
    // The original payload when the row has a readable `payload` column (so a replay
    // publishes the event's own payload); the whole row otherwise.
    let row_json = serde_json::Value::Object(object).to_string();
    let payload = match image.and_then(|image| image.get("payload")) {
        Some(Value::Json(json)) => json.to_string().into_bytes(),
        Some(Value::Bytes(bytes)) => bytes.clone(),
        Some(value) => match value_text(value) {
            Some(text) => text.into_bytes(),
            None => row_json.clone().into_bytes(),
        },
        None => row_json.clone().into_bytes(),
    };
    let mut headers = Vec::new();
    if let Some(id) = &error.event_id {
        push(&mut headers, "id", id);
    }
    push(&mut headers, headers::ORIGINAL_TOPIC, "");
    push(&mut headers, headers::ORIGINAL_TOPIC_KNOWN, false);
    push_origin_and_failure(&mut headers, &RecordOrigin::of_row(row), &failure);
    // A row that cannot be routed can be as large as any event: kept whole, a payload over
    // the broker's limit would make the dead letter itself fail on every restart. Bounded
    // like a rejected payload (prefix, size, hash), and the key likewise.
    let payload = bounded_prefix(
        payload,
        config.payload_prefix_bytes,
        &mut headers,
        [
            headers::PAYLOAD_TRUNCATED,
            headers::PAYLOAD_SIZE,
            headers::PAYLOAD_FNV1A64,
        ],
    );
    let key = key.map(|key| {
        if key.len() <= config.payload_prefix_bytes {
            return key;
        }
        bounded_prefix(
            key,
            config.payload_prefix_bytes,
            &mut headers,
            [
                headers::KEY_TRUNCATED,
                headers::KEY_SIZE,
                headers::KEY_FNV1A64,
            ],
        )
    });
    // The row can be as large as the event (twice over with its payload): the header keeps
    // a bounded prefix, the payload above carries the event itself.
    if row_json.len() > config.payload_prefix_bytes {
        let mut cut = config.payload_prefix_bytes;
        while !row_json.is_char_boundary(cut) {
            cut -= 1;
        }
        push(&mut headers, headers::ROW, &row_json[..cut]);
        push(&mut headers, headers::ROW_TRUNCATED, true);
    } else {
        push(&mut headers, headers::ROW, row_json);
    }
    OutboundRecord {
        topic: config.topic.clone(),
        key,
        payload: Some(payload),
        headers,
        null_headers: Vec::new(),
        timestamp_ms: None,
        partition: None,
    }
}

/// `bytes` cut to `limit`, recording in `headers` (named `[truncated, size, hash]`) whether
/// it was cut, its full size and its FNV-1a 64 hash.
fn bounded_prefix(
    mut bytes: Vec<u8>,
    limit: usize,
    headers: &mut Vec<(String, Vec<u8>)>,
    [truncated, size, hash]: [&str; 3],
) -> Vec<u8> {
    push(headers, truncated, bytes.len() > limit);
    push(headers, size, bytes.len());
    push(headers, hash, format!("{:016x}", fnv1a64(&bytes)));
    bytes.truncate(limit);
    bytes
}

fn value_text(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::Int(v) => Some(v.to_string()),
        Value::UInt(v) => Some(v.to_string()),
        Value::Decimal(v) | Value::Text(v) => Some(v.clone()),
        Value::Bytes(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        _ => None,
    }
}

fn value_to_json(value: &Value) -> serde_json::Value {
    match value {
        Value::Null => serde_json::Value::Null,
        Value::Json(json) => json
            .document()
            .unwrap_or_else(|_| serde_json::Value::String(json.to_string())),
        other => match value_text(other) {
            Some(text) => serde_json::Value::String(text),
            None => serde_json::Value::String(format!("{other:?}")),
        },
    }
}

/// Why reading or replaying dead letters failed.
#[derive(Debug, thiserror::Error)]
pub enum DeadLetterError {
    /// A Kafka client call failed.
    #[error("{action}: {source}")]
    Kafka {
        /// What was being done.
        action: &'static str,
        /// The client error.
        source: KafkaError,
    },
    /// The topic did not show up in the metadata.
    #[error("dead-letter topic `{0}` does not exist (nothing was ever dead-lettered?)")]
    TopicMissing(String),
    /// Reading stopped before the high watermark.
    #[error("timed out reading dead-letter topic `{0}` up to its end")]
    ReadTimeout(String),
    /// A blocking task failed.
    #[error("background task failed: {0}")]
    Join(String),
}

fn kafka_failure(action: &'static str) -> impl FnOnce(KafkaError) -> DeadLetterError {
    move |source| DeadLetterError::Kafka { action, source }
}

/// A dead letter read back from the topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// Partition of the dead-letter topic (with `offset`, where it is).
    pub partition: i32,
    /// Offset in that partition.
    pub offset: i64,
    /// The event id (header `id`), when known.
    pub id: Option<String>,
    /// The topic the event was meant for, `None` when unknown (routing error).
    pub original_topic: Option<String>,
    /// The error class.
    pub error_class: String,
    /// The error text.
    pub error_message: String,
    /// Last failure, ms since the epoch (0 when missing).
    pub last_failure_ms: i64,
    /// The original key.
    pub key: Option<Vec<u8>>,
    /// The payload as stored (a prefix when truncated).
    pub payload: Option<Vec<u8>>,
    /// Whether `payload` is only a prefix (such a dead letter is not replayed).
    pub payload_truncated: bool,
    /// Whether `key` (or an original header) is only a prefix (such a dead letter is not
    /// replayed either).
    pub key_truncated: bool,
    /// The original record's headers (everything but `dlq.*`), `id` included.
    pub original_headers: Vec<(String, Vec<u8>)>,
}

/// A consumer reading a topic from its start without a group commit (also used by the
/// relay's `checkpoint import-debezium` for the Kafka Connect offsets topic).
pub fn consumer_config(kafka: &KafkaConfig) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (key, value) in &kafka.properties {
        config.set(key, value);
    }
    match kafka.security.properties() {
        Ok(security) => {
            for (key, value) in security {
                config.set(key, value);
            }
        }
        Err(message) => tracing::error!("{message}"),
    }
    config
        .set("bootstrap.servers", &kafka.brokers)
        .set(
            "group.id",
            format!("outbox-relay-dlq-{}", std::process::id()),
        )
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_uncommitted")
        .set("auto.offset.reset", "earliest");
    config
}

/// Reads every dead letter of `topic` (offset 0 up to the high watermark at the start).
pub async fn read_dead_letters(
    kafka: &KafkaConfig,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<DeadLetter>, DeadLetterError> {
    let config = consumer_config(kafka);
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || read_blocking(config, &topic, timeout))
        .await
        .map_err(|e| DeadLetterError::Join(e.to_string()))?
}

fn read_blocking(
    config: ClientConfig,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<DeadLetter>, DeadLetterError> {
    let started = Instant::now();
    let consumer: BaseConsumer = config
        .create()
        .map_err(kafka_failure("creating the consumer"))?;
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(kafka_failure("reading metadata"))?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic && t.error().is_none())
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    if partitions.is_empty() {
        return Err(DeadLetterError::TopicMissing(topic.to_owned()));
    }
    // Next offset to read per partition, and where to stop.
    let mut remaining: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
    let mut assignment = TopicPartitionList::new();
    for partition in partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, partition, timeout)
            .map_err(kafka_failure("reading watermarks"))?;
        if high > low {
            remaining.insert(partition, (low, high));
            assignment
                .add_partition_offset(topic, partition, Offset::Offset(low))
                .map_err(kafka_failure("building the assignment"))?;
        }
    }
    let mut letters = Vec::new();
    if remaining.is_empty() {
        return Ok(letters);
    }
    consumer
        .assign(&assignment)
        .map_err(kafka_failure("assigning partitions"))?;
    while !remaining.is_empty() {
        if started.elapsed() > timeout {
            return Err(DeadLetterError::ReadTimeout(topic.to_owned()));
        }
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = message.map_err(kafka_failure("reading a dead letter"))?;
        let partition = message.partition();
        let Some((_, high)) = remaining.get(&partition).copied() else {
            continue;
        };
        if message.offset() >= high {
            remaining.remove(&partition);
            continue;
        }
        letters.push(decode(&message));
        if message.offset() + 1 >= high {
            remaining.remove(&partition);
        }
    }
    Ok(letters)
}

fn decode(message: &rdkafka::message::BorrowedMessage<'_>) -> DeadLetter {
    let mut dlq: BTreeMap<String, String> = BTreeMap::new();
    let mut original_headers = Vec::new();
    if let Some(all) = message.headers() {
        for header in all.iter() {
            let value = header.value.unwrap_or_default().to_vec();
            if header.key.starts_with(headers::PREFIX) {
                dlq.insert(
                    header.key.to_owned(),
                    String::from_utf8_lossy(&value).into_owned(),
                );
            } else {
                original_headers.push((header.key.to_owned(), value));
            }
        }
    }
    let id = original_headers
        .iter()
        .find(|(key, _)| key == "id")
        .map(|(_, value)| String::from_utf8_lossy(value).into_owned());
    let known = dlq.get(headers::ORIGINAL_TOPIC_KNOWN).map(String::as_str) != Some("false");
    let original_topic = dlq
        .get(headers::ORIGINAL_TOPIC)
        .filter(|topic| known && !topic.is_empty())
        .cloned();
    DeadLetter {
        partition: message.partition(),
        offset: message.offset(),
        id,
        original_topic,
        error_class: dlq.get(headers::ERROR_CLASS).cloned().unwrap_or_default(),
        error_message: dlq.get(headers::ERROR_MESSAGE).cloned().unwrap_or_default(),
        last_failure_ms: dlq
            .get(headers::LAST_FAILURE_MS)
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(0),
        key: message.key().map(<[u8]>::to_vec),
        payload: message.payload().map(<[u8]>::to_vec),
        payload_truncated: dlq.get(headers::PAYLOAD_TRUNCATED).map(String::as_str) == Some("true"),
        key_truncated: dlq.get(headers::KEY_TRUNCATED).map(String::as_str) == Some("true")
            || dlq.contains_key(headers::TRUNCATED_HEADERS),
        original_headers,
    }
}

/// Which dead letters to replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplaySelection {
    /// Every dead letter.
    All,
    /// Those whose `id` header equals this.
    Id(String),
    /// Those whose last failure is at or after this time (ms since the epoch).
    Since(i64),
}

impl ReplaySelection {
    /// Whether `letter` is selected.
    pub fn selects(&self, letter: &DeadLetter) -> bool {
        match self {
            ReplaySelection::All => true,
            ReplaySelection::Id(id) => letter.id.as_deref() == Some(id.as_str()),
            ReplaySelection::Since(ms) => letter.last_failure_ms >= *ms,
        }
    }
}

/// What happened to one selected dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayOutcome {
    /// Published to this topic (partition, offset).
    Published {
        /// The topic it went to.
        topic: String,
        /// Where it landed.
        partition: i32,
        /// Where it landed.
        offset: i64,
    },
    /// Not published, and why.
    Skipped(String),
}

/// Republishes the selected dead letters (see the module docs); returns each selected one
/// with its outcome, in the order read. With `kafka.create_topics` a missing destination
/// topic is created first.
pub async fn replay_dead_letters(
    letters: &[DeadLetter],
    selection: &ReplaySelection,
    topic_override: Option<&str>,
    kafka: &KafkaConfig,
) -> Result<Vec<(DeadLetter, ReplayOutcome)>, DeadLetterError> {
    let mut config = ClientConfig::new();
    for (key, value) in crate::sink::producer_properties(kafka) {
        config.set(key, value);
    }
    let producer: FutureProducer = config
        .create()
        .map_err(kafka_failure("creating the producer"))?;
    let admin: Option<AdminClient<DefaultClientContext>> = if kafka.create_topics {
        Some(
            config
                .create()
                .map_err(kafka_failure("creating the admin client"))?,
        )
    } else {
        None
    };
    let mut created: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut report = Vec::new();
    for letter in letters.iter().filter(|l| selection.selects(l)) {
        let topic = match (topic_override, &letter.original_topic) {
            (Some(topic), _) => topic.to_owned(),
            (None, Some(topic)) => topic.clone(),
            (None, None) => {
                report.push((
                    letter.clone(),
                    ReplayOutcome::Skipped(
                        "original topic unknown (routing error): pass --topic".into(),
                    ),
                ));
                continue;
            }
        };
        if letter.payload_truncated || letter.key_truncated {
            let what = if letter.payload_truncated {
                "payload"
            } else {
                "key"
            };
            report.push((
                letter.clone(),
                ReplayOutcome::Skipped(format!(
                    "{what} was truncated when dead-lettered; republish it from the outbox row"
                )),
            ));
            continue;
        }
        if let Some(admin) = &admin {
            if created.insert(topic.clone()) {
                ensure_topic(admin, &topic, kafka).await?;
            }
        }
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&topic);
        if let Some(key) = &letter.key {
            record = record.key(key.as_slice());
        }
        if let Some(payload) = &letter.payload {
            record = record.payload(payload.as_slice());
        }
        let mut record_headers = OwnedHeaders::new_with_capacity(letter.original_headers.len());
        for (key, value) in &letter.original_headers {
            record_headers = record_headers.insert(Header {
                key,
                value: Some(value.as_slice()),
            });
        }
        record = record.headers(record_headers);
        let outcome = match producer.send(record, Duration::from_secs(30)).await {
            Ok(delivery) => ReplayOutcome::Published {
                topic,
                partition: delivery.partition,
                offset: delivery.offset,
            },
            Err((error, _)) => {
                ReplayOutcome::Skipped(format!("publish to `{topic}` failed: {error}"))
            }
        };
        report.push((letter.clone(), outcome));
    }
    Ok(report)
}

/// Creates `topic` like the sink does (`kafka.topic_*`); an existing topic is fine.
async fn ensure_topic(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    kafka: &KafkaConfig,
) -> Result<(), DeadLetterError> {
    let mut new_topic = NewTopic::new(
        topic,
        kafka.topic_partitions,
        TopicReplication::Fixed(kafka.topic_replication_factor),
    );
    for (key, value) in &kafka.topic_config {
        new_topic = new_topic.set(key, value);
    }
    let timeout = Duration::from_millis(kafka.admin_timeout_ms);
    let options = AdminOptions::new()
        .operation_timeout(Some(timeout))
        .request_timeout(Some(timeout));
    let results = admin
        .create_topics([&new_topic], &options)
        .await
        .map_err(kafka_failure("creating the replay topic"))?;
    match results.into_iter().next() {
        None | Some(Ok(_)) | Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => Ok(()),
        Some(Err((_, code))) => Err(DeadLetterError::Kafka {
            action: "creating the replay topic",
            source: KafkaError::AdminOp(code),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> OutboundRecord {
        OutboundRecord {
            topic: "outbox.event.order".into(),
            key: Some(b"42".to_vec()),
            payload: Some(vec![b'x'; 5000]),
            headers: vec![("id".into(), b"event-1".to_vec())],
            null_headers: Vec::new(),
            timestamp_ms: Some(7),
            partition: Some(2),
        }
    }

    fn header<'a>(record: &'a OutboundRecord, name: &str) -> Option<&'a str> {
        record
            .headers
            .iter()
            .find(|(key, _)| key == name)
            .and_then(|(_, value)| std::str::from_utf8(value).ok())
    }

    fn failure(class: &'static str) -> FailureReport {
        FailureReport {
            class,
            message: "boom".into(),
            attempts: 3,
            first_failure_ms: 10,
            last_failure_ms: 20,
        }
    }

    #[test]
    fn a_rejected_payload_is_kept_as_a_bounded_prefix_with_size_and_hash() {
        let config = DeadLetterConfig {
            payload_prefix_bytes: 100,
            ..DeadLetterConfig::default()
        };
        let origin = RecordOrigin {
            table: Some(std::sync::Arc::new(outbox_binlog::TableName::new(
                "shop", "outbox",
            ))),
            binlog_file: Some("mysql-bin.000001".into()),
            binlog_position: Some(1234),
            transaction_gtid: Some(std::sync::Arc::new(outbox_binlog::Gtid::Mariadb {
                domain_id: 0,
                server_id: 1,
                sequence: 42,
            })),
            event_timestamp: None,
        };
        let original = record();
        let letter =
            dead_letter_for_record(&original, &origin, &failure("message_too_large"), &config);
        assert_eq!(letter.topic, "outbox.dlq");
        assert_eq!(letter.key, original.key);
        assert_eq!(letter.partition, None);
        assert_eq!(letter.payload.as_ref().map(Vec::len), Some(100));
        assert_eq!(header(&letter, "id"), Some("event-1"));
        assert_eq!(header(&letter, headers::PAYLOAD_SIZE), Some("5000"));
        assert_eq!(
            header(&letter, headers::PAYLOAD_FNV1A64),
            Some(format!("{:016x}", fnv1a64(&[b'x'; 5000])).as_str())
        );
        assert_eq!(
            header(&letter, headers::ORIGINAL_TOPIC),
            Some("outbox.event.order")
        );
        assert_eq!(header(&letter, headers::ATTEMPTS), Some("3"));
        assert_eq!(header(&letter, headers::BINLOG_POSITION), Some("1234"));
        assert_eq!(header(&letter, headers::BINLOG_GTID), Some("0-1-42"));
        assert_eq!(header(&letter, headers::TABLE), Some("shop.outbox"));
    }

    #[test]
    fn a_rejected_gigantic_key_is_kept_as_a_bounded_prefix_with_size_and_hash() {
        let config = DeadLetterConfig {
            payload_prefix_bytes: 64,
            ..DeadLetterConfig::default()
        };
        let original = OutboundRecord {
            key: Some(vec![b'k'; 3000]),
            headers: vec![
                ("id".into(), b"event-1".to_vec()),
                ("aggregate_id".into(), vec![b'k'; 3000]),
            ],
            ..record()
        };
        let letter = dead_letter_for_record(
            &original,
            &RecordOrigin::default(),
            &failure("message_too_large"),
            &config,
        );
        assert_eq!(letter.key.as_ref().map(Vec::len), Some(64));
        assert_eq!(header(&letter, headers::KEY_TRUNCATED), Some("true"));
        assert_eq!(header(&letter, headers::KEY_SIZE), Some("3000"));
        assert_eq!(
            header(&letter, headers::KEY_FNV1A64),
            Some(format!("{:016x}", fnv1a64(&[b'k'; 3000])).as_str())
        );
        assert_eq!(header(&letter, "id"), Some("event-1"));
        assert_eq!(header(&letter, "aggregate_id").map(str::len), Some(64));
        assert_eq!(
            header(&letter, headers::TRUNCATED_HEADERS),
            Some("aggregate_id")
        );
        // A short key stays whole.
        let letter = dead_letter_for_record(
            &record(),
            &RecordOrigin::default(),
            &failure("message_too_large"),
            &config,
        );
        assert_eq!(letter.key, record().key);
        assert_eq!(header(&letter, headers::KEY_TRUNCATED), None);
    }

    #[test]
    fn other_failures_keep_the_whole_payload() {
        let letter = dead_letter_for_record(
            &record(),
            &RecordOrigin::default(),
            &failure("authorization"),
            &DeadLetterConfig::default(),
        );
        assert_eq!(letter.payload, record().payload);
        assert_eq!(header(&letter, headers::PAYLOAD_TRUNCATED), None);
        assert_eq!(header(&letter, headers::PAYLOAD_SIZE), None);
    }

    /// A row of `payload_bytes` payload that cannot be routed (no event id column).
    fn unroutable_row(payload_bytes: usize) -> (RoutingError, RowChange) {
        let table = std::sync::Arc::new(outbox_binlog::TableName::new("shop", "outbox"));
        let row = RowChange {
            table: table.clone(),
            operation: outbox_binlog::RowOperation::Insert,
            before: None,
            after: Some(outbox_binlog::Row {
                columns: vec!["aggregate_id".to_owned(), "payload".to_owned()].into(),
                values: vec![
                    Value::Text("order-9".into()),
                    Value::Bytes(vec![b'p'; payload_bytes]),
                ],
                types: None,
            }),
            event_timestamp: 0,
            event_position: outbox_binlog::BinlogPosition::new("mysql-bin.000001", 4),
            transaction_gtid: None,
            in_xa_transaction: false,
        };
        let error = RoutingError {
            event_id: Some("event-9".into()),
            table,
            column: Some("id".into()),
            kind: outbox_router::RoutingErrorKind::UnknownTable,
        };
        (error, row)
    }

    /// Issue 11 item 4: a routing error's dead letter is bounded like a rejected payload,
    /// or a row over the broker's limit stops the relay on every restart.
    #[test]
    fn a_routing_error_dead_letter_keeps_a_bounded_payload_prefix() {
        let config = DeadLetterConfig {
            payload_prefix_bytes: 100,
            ..DeadLetterConfig::default()
        };
        let (error, row) = unroutable_row(50_000);
        let letter = dead_letter_for_routing_error(&error, &row, &config);
        assert_eq!(letter.payload.as_ref().map(Vec::len), Some(100));
        assert_eq!(header(&letter, headers::PAYLOAD_TRUNCATED), Some("true"));
        assert_eq!(header(&letter, headers::PAYLOAD_SIZE), Some("50000"));
        assert_eq!(
            header(&letter, headers::PAYLOAD_FNV1A64),
            Some(format!("{:016x}", fnv1a64(&[b'p'; 50_000])).as_str())
        );
        assert_eq!(letter.key.as_deref(), Some(b"order-9".as_slice()));
        assert_eq!(header(&letter, "id"), Some("event-9"));
        let total: usize = letter
            .headers
            .iter()
            .map(|(name, value)| name.len() + value.len())
            .sum();
        assert!(total < 1000, "headers stay bounded too: {total} bytes");
        // A small payload stays whole.
        let (error, row) = unroutable_row(10);
        let letter = dead_letter_for_routing_error(&error, &row, &config);
        assert_eq!(letter.payload, Some(vec![b'p'; 10]));
        assert_eq!(header(&letter, headers::PAYLOAD_TRUNCATED), Some("false"));
    }

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn kafka_errors_map_to_classes() {
        use RDKafkaErrorCode as C;
        let class = |code| kafka_error_class(&KafkaError::MessageProduction(code));
        assert_eq!(class(C::MessageSizeTooLarge), "message_too_large");
        assert_eq!(class(C::TopicAuthorizationFailed), "authorization");
        assert_eq!(class(C::InvalidTopic), "invalid_topic");
        assert_eq!(class(C::UnknownPartition), "invalid_topic");
        assert_eq!(class(C::InvalidRecord), "corrupt_record");
        assert_eq!(class(C::UnsupportedVersion), "other");
    }
}
