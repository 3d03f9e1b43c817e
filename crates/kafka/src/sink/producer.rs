//! The producer: its librdkafka properties, creating Kafka clients (with librdkafka's own
//! reason when that fails), and putting one record in its queue.

use std::collections::BTreeMap;

use futures_util::FutureExt;
use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, FromClientConfigAndContext};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

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
            KafkaError::ClientConfig(_, description, key, value) => Self {
                reason: format!("{description} (`{key}` = `{value}`)"),
                property: Some(key.clone()),
            },
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
    /// The record's payload as librdkafka held it, when [`enqueue`] was asked to hand it
    /// back: the sink drops its own copy of a big payload once librdkafka copied it, and
    /// needs this one to resend or dead-letter the record. `None` when not asked, for a
    /// tombstone, or when the report came without the message (the producer went away).
    pub(super) payload: Option<Vec<u8>>,
}

/// The producer type of the sink: librdkafka's logs go through [`RelayClientContext`].
pub(super) type RelayProducer = FutureProducer<RelayClientContext>;

/// Puts one record in the producer's queue; the future resolves with its delivery result.
/// With `return_payload` a failed report carries the payload back
/// ([`DeliveryFailure::payload`]).
pub(super) fn enqueue(
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
    let header_count = record.headers.len() + record.null_headers.len();
    if header_count > 0 {
        let mut headers = OwnedHeaders::new_with_capacity(header_count);
        for (key, value) in record.headers_to_send() {
            headers = headers.insert(Header { key, value });
        }
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
