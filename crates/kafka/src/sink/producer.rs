//! The producer: its librdkafka properties, creating Kafka clients (with librdkafka's own
//! reason when that fails), and putting one record in its queue.

use std::collections::BTreeMap;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use rdkafka::client::{Client, ClientContext};
use rdkafka::config::{ClientConfig, FromClientConfigAndContext, RDKafkaLogLevel};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{
    BaseProducer, BaseRecord, DeliveryResult, FutureProducer, FutureRecord, Producer,
    ProducerContext, PurgeConfig,
};
use tokio::sync::mpsc;

use super::task::HAND_OVER_PAYLOAD_BYTES;
use super::OutboundRecord;
use crate::config::{KafkaConfig, PROTECTED_KAFKA_PROPERTIES};
use crate::kafka_context::RelayClientContext;

/// The librdkafka properties for `[kafka]`: bootstrap, the relay's tuning keys, then
/// `[kafka.properties]`, then `[kafka.security]`, then the protected idempotence settings.
pub fn producer_properties(kafka: &KafkaConfig) -> Vec<(String, String)> {
    let mut properties: BTreeMap<String, String> = BTreeMap::new();
    properties.insert("bootstrap.servers".into(), kafka.brokers.clone());
    properties.insert("compression.type".into(), kafka.compression.clone());
    properties.insert("linger.ms".into(), kafka.linger_ms.to_string());
    properties.insert(
        "batch.num.messages".into(),
        kafka.batch_num_messages.to_string(),
    );
    // The Java producer's partitioner (murmur2 of the key), which Kafka Connect and so
    // Debezium use: an aggregate's events land on the same partition as before a cutover
    // from Debezium, so its order holds across the switch. librdkafka's own default
    // (`consistent_random`, CRC32) puts most keys elsewhere. `[kafka.properties]` may set
    // another.
    properties.insert("partitioner".into(), "murmur2_random".into());
    properties.extend(kafka_client_properties(kafka));
    for (key, value) in PROTECTED_KAFKA_PROPERTIES {
        properties.insert((*key).into(), (*value).into());
    }
    properties.into_iter().collect()
}

/// The librdkafka properties every client of `[kafka]` shares, producer or consumer:
/// `bootstrap.servers`, then `[kafka.properties]`, then `[kafka.security]` (validation
/// refuses the same keys in both). Other Kafka clients of the relay (the Kafka checkpoint
/// store) start from these and add their own settings. A password file that became
/// unreadable after validation leaves `sasl.password` unset, which librdkafka refuses by
/// name when the client is created.
pub fn kafka_client_properties(kafka: &KafkaConfig) -> Vec<(String, String)> {
    let mut properties: BTreeMap<String, String> = BTreeMap::new();
    properties.insert("bootstrap.servers".into(), kafka.brokers.clone());
    for (key, value) in &kafka.properties {
        properties.insert(key.clone(), value.clone());
    }
    match kafka.security.properties() {
        Ok(security) => properties.extend(security),
        Err(message) => tracing::error!("{message}"),
    }
    properties.into_iter().collect()
}

/// librdkafka refused a client configuration; `reason` is librdkafka's own words.
#[derive(Debug, thiserror::Error)]
#[error("librdkafka refused the configuration: {reason}")]
pub struct KafkaClientError {
    /// librdkafka's message, with the property and value it names (e.g. `Unsupported value
    /// "zstd" for configuration property "compression.codec": libzstd not available at
    /// build time`): without it the operator cannot tell which setting is wrong.
    pub reason: String,
    /// The property librdkafka refused while setting it, when it was a single one
    /// (`None` for a combination refused when the client was created).
    pub property: Option<String>,
}

impl KafkaClientError {
    /// The reason inside a client-creation error of rdkafka.
    pub fn from_kafka_error(error: &KafkaError) -> Self {
        match error {
            KafkaError::ClientConfig(_, description, key, value) => {
                // A secret's value is shown nowhere, not even where librdkafka quotes it.
                let secret = crate::security::is_secret_property(key) && !value.is_empty();
                let (description, shown) = if secret {
                    (description.replace(value.as_str(), "***"), "***")
                } else {
                    (description.clone(), value.as_str())
                };
                Self {
                    reason: format!("{description} (`{key}` = `{shown}`)"),
                    property: Some(key.clone()),
                }
            }
            KafkaError::ClientCreation(message) => Self {
                reason: message.clone(),
                property: None,
            },
            other => Self {
                reason: other.to_string(),
                property: None,
            },
        }
    }
}

fn client_config(properties: &[(String, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (key, value) in properties {
        config.set(key, value);
    }
    config
}

/// Creates a Kafka client (producer, admin client) from `properties` with `context`; every
/// client the relay makes from `[kafka]` goes through here, so a refusal always carries
/// librdkafka's reason.
pub fn create_kafka_client<C, T>(
    properties: &[(String, String)],
    context: C,
) -> Result<T, KafkaClientError>
where
    C: ClientContext,
    T: FromClientConfigAndContext<C>,
{
    client_config(properties)
        .create_with_context(context)
        .map_err(|error| KafkaClientError::from_kafka_error(&error))
}

/// Checks every property against librdkafka without creating a client (no threads, no
/// connections): an unknown property, a malformed value, or a codec this build lacks is
/// refused with librdkafka's reason. Combinations librdkafka checks only when a client is
/// created are reported by [`create_kafka_client`].
pub fn check_client_properties(properties: &[(String, String)]) -> Result<(), KafkaClientError> {
    client_config(properties)
        .create_native_config()
        .map(drop)
        .map_err(|error| KafkaClientError::from_kafka_error(&error))
}

/// A record's delivery report: its sequence, the producer generation it was sent with,
/// and the outcome.
pub(super) type DeliveryOutcome = (u64, u64, Result<(), DeliveryFailure>);

/// A delivery that failed.
#[derive(Debug)]
pub(super) struct DeliveryFailure {
    /// What librdkafka reported.
    pub(super) error: KafkaError,
    /// The record's payload as librdkafka held it, for a big one (at least
    /// [`HAND_OVER_PAYLOAD_BYTES`], from the sink's producer; from [`enqueue_with_future`]
    /// only when asked with `return_payload`): the sink drops its own copy of a big payload
    /// once librdkafka copied it, and needs this one to resend or dead-letter the record.
    /// `None` for a small payload (the sink kept its copy), a tombstone, or when the report
    /// came without the message (the producer went away).
    pub(super) payload: Option<Vec<u8>>,
}

/// The producer type of the exactly-once sink (and of the Kafka clients that only read
/// metadata): librdkafka's logs go through [`RelayClientContext`], each record's delivery
/// report through a future of its own.
pub(super) type RelayProducer = FutureProducer<RelayClientContext>;

/// Where the at-least-once sink's producer sends its delivery reports: one channel for
/// every record (and every producer generation) instead of a future per record.
pub(super) type DeliveryReports = mpsc::UnboundedSender<DeliveryOutcome>;

/// The librdkafka context of the at-least-once sink's producer: logs and client errors as
/// [`RelayClientContext`] handles them, and each delivery report pushed into the sink's
/// report channel with the producer's generation.
pub(super) struct SinkProducerContext {
    /// The relay's logging (rate-limited repeats) for librdkafka's log lines and errors:
    /// the same behaviour as every other Kafka client of the relay.
    relay: RelayClientContext,
    /// The sink's count of producers made before this one: a report carries it so the sink
    /// recognises (and ignores) the late reports of a producer it already replaced.
    generation: u64,
    /// The sink's report channel; a send fails only once the sink stopped, when no report
    /// matters any more (its records were not acked, so not checkpointed).
    reports: DeliveryReports,
}

impl SinkProducerContext {
    /// The relay's context inside: its log rate limits and its last broker failure.
    pub(super) fn relay_context(&self) -> &RelayClientContext {
        &self.relay
    }
}

impl ClientContext for SinkProducerContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        self.relay.log(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.relay.error(error, reason);
    }
}

impl ProducerContext for SinkProducerContext {
    /// The record's sequence number (see [`enqueue`]).
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, sequence: usize) {
        let outcome = match result {
            Ok(_) => Ok(()),
            Err((error, message)) => Err(DeliveryFailure {
                error: error.clone(),
                payload: message
                    .payload()
                    .filter(|payload| payload.len() >= HAND_OVER_PAYLOAD_BYTES)
                    .map(<[u8]>::to_vec),
            }),
        };
        // usize -> u64 is lossless on every target this compiles for (the
        // assertion on `usize::BITS` below).
        let sequence = sequence as u64;
        // Err: the sink stopped and dropped its receiver; nothing waits for this report.
        let _ = self.reports.send((sequence, self.generation, outcome));
    }
}

/// A record's sequence number travels to its delivery report as librdkafka's per-message
/// opaque pointer (a `usize`, no allocation per record): that needs all 64 bits.
const _: () = assert!(
    usize::BITS >= u64::BITS,
    "the sink's sequence numbers need a 64-bit usize"
);

/// The at-least-once sink's producer: a [`BaseProducer`] whose delivery reports go into the
/// sink's report channel ([`SinkProducerContext`]), served by a poll thread of its own
/// (`sink-reports`). Cloning shares it; dropping the last clone stops and joins the
/// thread, then the producer purges and flushes (up to 500 ms: drop it off the runtime).
#[derive(Clone)]
pub(super) struct SinkProducer {
    /// Stops and joins the poll thread when the last clone goes; declared before
    /// `producer` so the thread is gone before the producer's own drop purges and flushes
    /// (which serves the remaining reports itself).
    _poll_thread: Arc<PollThread>,
    /// The librdkafka producer, shared with the poll thread and with work run off the
    /// runtime (purge, metadata requests).
    producer: Arc<BaseProducer<SinkProducerContext>>,
}

/// The thread that serves a [`SinkProducer`]'s events (delivery reports, client errors).
struct PollThread {
    /// Set when the producer is dropped; the thread checks it after each poll.
    stop: Arc<AtomicBool>,
    /// The thread, joined on drop; `None` once joined.
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Drop for PollThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(handle) = self.handle.take() {
            if handle.join().is_err() {
                tracing::warn!("the Kafka sink's report thread panicked");
            }
        }
    }
}

/// How long one poll of the report thread waits for an event: the longest a dropped
/// producer's thread takes to notice the stop.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

impl SinkProducer {
    /// The librdkafka client (metadata, fatal error).
    pub(super) fn client(&self) -> &Client<SinkProducerContext> {
        self.producer.client()
    }

    /// Purges the producer's queue and/or requests in flight (`PurgeConfig`); each purged
    /// record is reported as failed. Blocks on librdkafka's threads.
    pub(super) fn purge(&self, flags: PurgeConfig) {
        self.producer.purge(flags);
    }
}

/// Creates the at-least-once sink's producer of `generation` from `properties`, reporting
/// every delivery into `reports`, and starts its report thread.
pub(super) fn create_sink_producer(
    properties: &[(String, String)],
    generation: u64,
    reports: DeliveryReports,
) -> Result<SinkProducer, KafkaClientError> {
    let context = SinkProducerContext {
        relay: RelayClientContext::default(),
        generation,
        reports,
    };
    let producer: Arc<BaseProducer<SinkProducerContext>> =
        Arc::new(create_kafka_client(properties, context)?);
    let stop = Arc::new(AtomicBool::new(false));
    let handle = {
        let producer = Arc::clone(&producer);
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            // Linux keeps 15 bytes of a thread name.
            .name("sink-reports".into())
            .spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    producer.poll(POLL_INTERVAL);
                }
            })
            .map_err(|error| KafkaClientError {
                reason: format!("cannot start the producer's report thread: {error}"),
                property: None,
            })?
    };
    Ok(SinkProducer {
        _poll_thread: Arc::new(PollThread {
            stop,
            handle: Some(handle),
        }),
        producer,
    })
}

/// The headers of `record` as librdkafka takes them; `None` without any.
fn headers_of(record: &OutboundRecord) -> Option<OwnedHeaders> {
    let header_count = record.headers.len() + record.null_headers.len();
    if header_count == 0 {
        return None;
    }
    let mut headers = OwnedHeaders::new_with_capacity(header_count);
    for (key, value) in record.headers_to_send() {
        headers = headers.insert(Header { key, value });
    }
    Some(headers)
}

/// Puts one record in the sink producer's queue; its delivery report comes through the
/// producer's report channel as `(sequence, generation, outcome)`, a failed one with a big
/// payload ([`HAND_OVER_PAYLOAD_BYTES`]) carrying it back ([`DeliveryFailure::payload`]).
pub(super) fn enqueue(
    producer: &SinkProducer,
    record: &OutboundRecord,
    sequence: u64,
) -> Result<(), KafkaError> {
    // Lossless: see the assertion on `usize::BITS`.
    let opaque = sequence as usize;
    let mut base_record: BaseRecord<'_, [u8], [u8], usize> =
        BaseRecord::with_opaque_to(&record.topic, opaque);
    if let Some(key) = &record.key {
        base_record = base_record.key(key.as_slice());
    }
    if let Some(payload) = &record.payload {
        base_record = base_record.payload(payload.as_slice());
    }
    if let Some(partition) = record.partition {
        base_record = base_record.partition(partition);
    }
    if let Some(timestamp) = record.timestamp_ms {
        base_record = base_record.timestamp(timestamp);
    }
    if let Some(headers) = headers_of(record) {
        base_record = base_record.headers(headers);
    }
    crate::crash_points::crash_if_armed(crate::crash_points::CrashPoint::BeforePublish);
    producer
        .producer
        .send(base_record)
        .map_err(|(error, _record)| error)
}

/// Puts one record in a [`RelayProducer`]'s queue (the exactly-once sink); the future
/// resolves with its delivery result. With `return_payload` a failed report carries the
/// payload back ([`DeliveryFailure::payload`]).
pub(super) fn enqueue_with_future(
    producer: &RelayProducer,
    record: &OutboundRecord,
    sequence: u64,
    generation: u64,
    return_payload: bool,
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
    if let Some(headers) = headers_of(record) {
        future_record = future_record.headers(headers);
    }
    crate::crash_points::crash_if_armed(crate::crash_points::CrashPoint::BeforePublish);
    match producer.send_result(future_record) {
        Ok(delivery) => Ok(delivery
            .map(move |result| {
                let outcome = match result {
                    Ok(Ok(_delivery)) => Ok(()),
                    Ok(Err((error, message))) => Err(DeliveryFailure {
                        error,
                        payload: if return_payload {
                            message.payload().map(<[u8]>::to_vec)
                        } else {
                            None
                        },
                    }),
                    Err(_canceled) => Err(DeliveryFailure {
                        error: KafkaError::Canceled,
                        payload: None,
                    }),
                };
                (sequence, generation, outcome)
            })
            .boxed()),
        Err((error, _record)) => Err(error),
    }
}

#[cfg(test)]
mod client_error_tests {
    use super::*;
    use rdkafka::types::RDKafkaConfRes;

    /// Issue 31 item 3: librdkafka's refusal of a secret property names the property, never
    /// its value (neither in the relay's `key = value` suffix nor where librdkafka quotes it).
    #[test]
    fn a_refused_secret_property_does_not_show_its_value() {
        let refused = check_client_properties(&[("bogus.secret".into(), "S3cr3t".into())])
            .expect_err("librdkafka refuses an unknown property");
        assert!(
            refused.reason.contains("bogus.secret"),
            "{}",
            refused.reason
        );
        assert!(!refused.reason.contains("S3cr3t"), "{}", refused.reason);

        let quoted = KafkaError::ClientConfig(
            RDKafkaConfRes::RD_KAFKA_CONF_INVALID,
            "Invalid value \"S3cr3t\" for configuration property \"ssl.key.password\"".into(),
            "ssl.key.password".into(),
            "S3cr3t".into(),
        );
        let error = KafkaClientError::from_kafka_error(&quoted);
        assert!(!error.reason.contains("S3cr3t"), "{}", error.reason);
        assert_eq!(error.property.as_deref(), Some("ssl.key.password"));

        let plain = KafkaError::ClientConfig(
            RDKafkaConfRes::RD_KAFKA_CONF_INVALID,
            "Invalid value".into(),
            "linger.ms".into(),
            "soon".into(),
        );
        let error = KafkaClientError::from_kafka_error(&plain);
        assert!(
            error.reason.contains("`linger.ms` = `soon`"),
            "{}",
            error.reason
        );
    }
}
