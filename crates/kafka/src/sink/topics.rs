//! Topics: reaching the cluster at startup, checking that a topic exists before the first
//! send to it, and creating it when allowed.

use std::collections::{BTreeMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::metadata::Metadata;
use rdkafka::producer::Producer;

use super::producer::create_kafka_client;
use super::producer::{RelayProducer, SinkProducer};
use super::{KafkaSinkSettings, ShutdownSignal, SinkError, SinkObserver};
use crate::backoff::Backoff;
use crate::internal_events::{InternalEvent, TopicCreated};
use crate::kafka_context::{LastClientFailure, RelayClientContext};

/// A producer the sink can ask for the cluster's metadata, off the runtime (a clone goes to
/// a blocking task): the at-least-once sink's [`SinkProducer`] and the exactly-once sink's
/// [`RelayProducer`].
pub(super) trait MetadataSource: Clone + Send + 'static {
    /// The cluster's metadata (every topic), waiting at most `timeout`. Blocks.
    fn fetch_metadata(&self, timeout: Duration) -> Result<Metadata, KafkaError>;
}

impl MetadataSource for RelayProducer {
    fn fetch_metadata(&self, timeout: Duration) -> Result<Metadata, KafkaError> {
        self.client().fetch_metadata(None, timeout)
    }
}

impl MetadataSource for SinkProducer {
    fn fetch_metadata(&self, timeout: Duration) -> Result<Metadata, KafkaError> {
        self.client().fetch_metadata(None, timeout)
    }
}

/// FNV-1a over a topic name: a few instructions a byte where SipHash costs hundreds a
/// lookup. The set holds only topics confirmed to exist in the cluster, so collisions
/// crafted through outbox rows could at worst slow lookups among those, never change them.
pub(super) struct TopicNameHasher {
    /// The hash so far, starting at FNV's offset basis.
    state: u64,
}

impl Default for TopicNameHasher {
    fn default() -> Self {
        Self {
            state: 0xcbf2_9ce4_8422_2325,
        }
    }
}

impl Hasher for TopicNameHasher {
    fn write(&mut self, bytes: &[u8]) {
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        for &byte in bytes {
            self.state = (self.state ^ u64::from(byte)).wrapping_mul(PRIME);
        }
    }

    fn finish(&self) -> u64 {
        self.state
    }
}

/// Knows which topics exist; checks and creates them before the first send.
pub(super) struct TopicManager {
    /// Topics confirmed to exist.
    /// Looked up once per record, so hashed with FNV-1a ([`TopicNameHasher`]) rather than
    /// SipHash (~450 instructions a lookup on the hot path).
    known: HashSet<String, BuildHasherDefault<TopicNameHasher>>,
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
    pub(super) fn new(settings: &KafkaSinkSettings) -> Result<Self, SinkError> {
        let admin = if settings.create_topics {
            Some(
                create_kafka_client(&settings.client_properties, RelayClientContext::default())
                    .map_err(SinkError::Client)?,
            )
        } else {
            None
        };
        Ok(Self {
            known: HashSet::default(),
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

    /// Whether `topic` was confirmed to exist (asked once per record).
    pub(super) fn is_known(&self, topic: &str) -> bool {
        self.known.contains(topic)
    }

    /// Makes sure `topic` exists (creating it if allowed); retries while the cluster is
    /// unreachable.
    pub(super) async fn ensure(
        &mut self,
        topic: &str,
        producer: &impl MetadataSource,
        metrics: &dyn SinkObserver,
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
        let created = create_topic(
            admin,
            topic,
            self.partitions,
            self.replication,
            &self.topic_config,
            self.timeout,
        )
        .await;
        match created {
            Ok(results) => {
                match results {
                    None | Some(Ok(())) => Ok(true),
                    Some(Err(RDKafkaErrorCode::TopicAlreadyExists)) => Ok(false),
                    Some(Err(
                        code @ (RDKafkaErrorCode::RequestTimedOut
                        | RDKafkaErrorCode::NotController
                        | RDKafkaErrorCode::BrokerTransportFailure
                        | RDKafkaErrorCode::AllBrokersDown
                        | RDKafkaErrorCode::OperationTimedOut),
                    )) => Err(CreateFailure::Transient(format!("{code:?}"))),
                    Some(Err(code)) => Err(CreateFailure::Definite(format!(
                        "{code} (partitions {}, replication factor {}: check kafka.topic_partitions, kafka.topic_replication_factor, kafka.topic_config)",
                        self.partitions, self.replication
                    ))),
                }
            }
            Err(error) => Err(CreateFailure::Transient(error.to_string())),
        }
    }
}

/// Creates one topic (`partitions`, `replication` of -1 = the broker's defaults, `config`)
/// through `admin`, with `timeout` as librdkafka's request and operation timeout and twice
/// it as an outer bound (against a reply that never comes, e.g. over a half-open
/// connection). `Ok(None | Some(Ok(())))`: created; `Ok(Some(Err(code)))`: the broker's
/// answer for the topic (`TopicAlreadyExists` among them); `Err`: the request failed.
/// Shared by the sink's topic checks and the heartbeat topic.
pub async fn create_topic<C: rdkafka::client::ClientContext + 'static>(
    admin: &AdminClient<C>,
    topic: &str,
    partitions: i32,
    replication: i32,
    config: &BTreeMap<String, String>,
    timeout: Duration,
) -> Result<Option<Result<(), RDKafkaErrorCode>>, KafkaError> {
    let mut new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(replication));
    for (key, value) in config {
        new_topic = new_topic.set(key, value);
    }
    let options = AdminOptions::new()
        .operation_timeout(Some(timeout))
        .request_timeout(Some(timeout));
    let results = tokio::time::timeout(
        timeout.saturating_mul(2),
        admin.create_topics([&new_topic], &options),
    )
    .await
    .unwrap_or(Err(KafkaError::AdminOp(
        RDKafkaErrorCode::OperationTimedOut,
    )))?;
    Ok(results
        .into_iter()
        .next()
        .map(|result| result.map(drop).map_err(|(_, code)| code)))
}

/// Why creating a topic failed.
enum CreateFailure {
    /// Worth retrying (timeouts, no controller yet).
    Transient(String),
    /// Retrying will not help.
    Definite(String),
}

/// Asks the cluster for its metadata until a broker answers, with backoff, logging each
/// failure with librdkafka's reason (`failures`, the producer's); gives up with
/// [`SinkError::Unreachable`] after `settings.startup_attempts`, and at once with
/// [`SinkError::Refused`] when the reason is definite (credentials, certificate).
/// `false` when shutdown was requested meanwhile.
pub(super) async fn reach_cluster_at_startup<S: ShutdownSignal>(
    producer: &impl MetadataSource,
    failures: &LastClientFailure,
    settings: &KafkaSinkSettings,
    shutdown: &mut S,
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
            tokio::task::spawn_blocking(move || producer.fetch_metadata(timeout).map(|_| ()))
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
        let failure = failures.get();
        if let Some(failure) = failure.as_ref().filter(|failure| failure.is_definite()) {
            return Err(SinkError::Refused {
                brokers,
                reason: failure.to_string(),
            });
        }
        let reason = failure.map_or_else(
            || "librdkafka reported no reason".to_owned(),
            |failure| failure.to_string(),
        );
        if settings.startup_attempts != 0 && attempts >= settings.startup_attempts {
            return Err(SinkError::Unreachable {
                brokers,
                attempts,
                waited: started.elapsed(),
                error: Box::new(error),
                reason,
            });
        }
        let delay = backoff.next_delay();
        tracing::warn!(brokers = %brokers, %error, %reason, attempt = attempts, max_attempts = settings.startup_attempts, retry_in_ms = delay.as_millis() as u64, "cannot reach the Kafka cluster at startup; retrying");
        tokio::select! {
            _ = shutdown.recv() => return Ok(false),
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// Checks the cluster metadata for `topic` without triggering broker auto-creation.
async fn topic_exists(
    producer: &impl MetadataSource,
    topic: &str,
    timeout: Duration,
) -> Result<bool, KafkaError> {
    let producer = producer.clone();
    let topic = topic.to_owned();
    let lookup = tokio::task::spawn_blocking(move || {
        let metadata = producer.fetch_metadata(timeout)?;
        Ok::<bool, KafkaError>(
            metadata
                .topics()
                .iter()
                .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty()),
        )
    });
    // fetch_metadata honours `timeout`; the outer bound guards against a call that does not.
    match tokio::time::timeout(timeout.saturating_mul(2), lookup).await {
        Err(_elapsed) => Err(KafkaError::MetadataFetch(
            RDKafkaErrorCode::OperationTimedOut,
        )),
        Ok(Ok(result)) => result,
        Ok(Err(join_error)) => Err(KafkaError::MetadataFetch(match join_error.is_cancelled() {
            true => RDKafkaErrorCode::OperationTimedOut,
            false => RDKafkaErrorCode::Fail,
        })),
    }
}
