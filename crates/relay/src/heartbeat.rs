//! `[heartbeat]`: Debezium-format heartbeat records on `__debezium-heartbeat.<prefix>`, for
//! consumers and monitors that watch the topic a Debezium connector wrote them to.
//!
//! # Contract
//! * The record is Debezium 3.6's (`HeartbeatImpl`), checked against a running Debezium in
//!   `tests/debezium_heartbeat.rs`: key struct `io.debezium.connector.common.ServerNameKey`
//!   `{serverName: <topic.prefix>}`, value struct `io.debezium.connector.common.Heartbeat`
//!   `{ts_ms: <now, epoch ms>}`, written by the converter `route.key_format` /
//!   `route.value_format` name (as the outbox records); partition 0 (Debezium sets it
//!   explicitly), no headers (Debezium's `__debezium.context.*` headers are not on its
//!   heartbeats), no record timestamp (the producer stamps it, as Kafka Connect's does).
//! * One record per `heartbeat.interval_ms` on a timer, while the source is connected
//!   (`/readyz`'s source check: the binlog reader, or in poll mode the claims connection):
//!   a heartbeat then says "this relay is alive, leads, and reads its source". In poll
//!   mode without `[ha]` every relay beats. Debezium's MySQL connector beats only when a binlog
//!   event arrives (the server's own replication heartbeat every ~48 s while idle), at most
//!   once per interval; the relay's timer beats at the interval even while idle.
//! * Its own small producer (the `[kafka]` connection, security and pass-through
//!   properties; `acks=all`; a bounded delivery timeout), so a heartbeat never waits behind
//!   outbox records and never touches the sink, the ack tracker or the checkpoint. A failed
//!   heartbeat is logged and counted (`outbox_relay_heartbeats_total{outcome}`) and the
//!   next one is tried at the next tick; it never stops the relay.
//! * Started by [`crate::run_relay`] (once per leadership term under `[ha]`, so only the
//!   leader sends them); stops when the run's shutdown fires.

use std::sync::Arc;
use std::time::Duration;

use outbox_router::RecordFormat;
use rdkafka::admin::AdminClient;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::config::RelayConfig;
use crate::internal_events::InternalEvent;
use crate::kafka_context::RelayClientContext;
use crate::metrics::Metrics;
use crate::shutdown::{Shutdown, ShutdownController};
use crate::sink::{create_kafka_client, kafka_client_properties};

/// Schema name of Debezium's heartbeat key struct.
pub const KEY_SCHEMA_NAME: &str = "io.debezium.connector.common.ServerNameKey";

/// Schema name of Debezium's heartbeat value struct.
pub const VALUE_SCHEMA_NAME: &str = "io.debezium.connector.common.Heartbeat";

/// The partition Debezium writes every heartbeat to.
pub const HEARTBEAT_PARTITION: i32 = 0;

/// Shortest delivery timeout of a heartbeat: long enough to ride out a leader election,
/// short enough that an outage shows up as failed heartbeats, not as a silent queue.
const MIN_DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// The key bytes: the `ServerNameKey` struct as the converter for `format` writes it.
pub fn heartbeat_key(format: RecordFormat, server_name: &str) -> Vec<u8> {
    let name = json_string(server_name);
    match format {
        RecordFormat::Raw => format!("Struct{{serverName={server_name}}}"),
        RecordFormat::Json => format!("{{\"serverName\":{name}}}"),
        RecordFormat::JsonWithSchema => format!(
            "{{\"schema\":{{\"type\":\"struct\",\"fields\":[{{\"type\":\"string\",\"optional\":false,\"field\":\"serverName\"}}],\"optional\":false,\"name\":\"{KEY_SCHEMA_NAME}\",\"version\":1}},\"payload\":{{\"serverName\":{name}}}}}"
        ),
    }
    .into_bytes()
}

/// The value bytes: the `Heartbeat` struct (`ts_ms`) as the converter for `format` writes it.
pub fn heartbeat_value(format: RecordFormat, ts_ms: i64) -> Vec<u8> {
    match format {
        RecordFormat::Raw => format!("Struct{{ts_ms={ts_ms}}}"),
        RecordFormat::Json => format!("{{\"ts_ms\":{ts_ms}}}"),
        RecordFormat::JsonWithSchema => format!(
            "{{\"schema\":{{\"type\":\"struct\",\"fields\":[{{\"type\":\"int64\",\"optional\":false,\"field\":\"ts_ms\"}}],\"optional\":false,\"name\":\"{VALUE_SCHEMA_NAME}\",\"version\":1}},\"payload\":{{\"ts_ms\":{ts_ms}}}}}"
        ),
    }
    .into_bytes()
}

/// A JSON string literal. The server name is a valid topic name (`[a-zA-Z0-9._-]`, checked
/// at config load), which Jackson and serde_json write alike: no escapes.
fn json_string(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// What the heartbeat task needs from the config, resolved once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatSettings {
    /// Time between two heartbeats.
    pub interval: Duration,
    /// The topic written to.
    pub topic: String,
    /// The key bytes (constant: the server name does not change).
    pub key: Vec<u8>,
    /// How the value is written (it changes with every beat).
    pub value_format: RecordFormat,
    /// librdkafka properties of the heartbeat producer.
    pub client_properties: Vec<(String, String)>,
    /// Create the topic if missing (`kafka.create_topics`), as the sink does for its own.
    pub create_topic: bool,
    /// Partitions of a created topic (`kafka.topic_partitions`).
    pub topic_partitions: i32,
    /// Replication factor of a created topic.
    pub topic_replication_factor: i32,
    /// Configs of a created topic.
    pub topic_config: std::collections::BTreeMap<String, String>,
    /// Bound of an admin request (`kafka.admin_timeout_ms`).
    pub admin_timeout: Duration,
}

impl HeartbeatSettings {
    /// The settings of `config`, `None` when heartbeats are off (or, which validation
    /// refuses, on without a topic prefix).
    pub fn from_config(config: &RelayConfig) -> Option<HeartbeatSettings> {
        let heartbeat = &config.heartbeat;
        if !heartbeat.enabled() {
            return None;
        }
        let prefix = heartbeat.effective_topic_prefix(&config.route)?;
        let topic = heartbeat.effective_topic(&config.route)?;
        let interval = Duration::from_millis(heartbeat.interval_ms);
        let delivery_timeout = interval.max(MIN_DELIVERY_TIMEOUT);
        let mut client_properties = kafka_client_properties(&config.kafka);
        client_properties.retain(|(key, _)| key != "acks" && key != "message.timeout.ms");
        client_properties.push(("acks".into(), "all".into()));
        client_properties.push((
            "message.timeout.ms".into(),
            delivery_timeout.as_millis().to_string(),
        ));
        Some(HeartbeatSettings {
            interval,
            topic,
            key: heartbeat_key(config.route.key_format, prefix),
            value_format: config.route.value_format,
            client_properties,
            create_topic: config.kafka.create_topics,
            topic_partitions: config.kafka.topic_partitions,
            topic_replication_factor: config.kafka.topic_replication_factor,
            topic_config: config.kafka.topic_config.clone(),
            admin_timeout: Duration::from_millis(config.kafka.admin_timeout_ms),
        })
    }
}

/// A heartbeat record was acked by Kafka.
#[derive(Debug)]
pub struct HeartbeatSent<'a> {
    /// Its topic.
    pub topic: &'a str,
    /// Its `ts_ms`.
    pub ts_ms: i64,
}

impl InternalEvent for HeartbeatSent<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.heartbeats.with_label_values(&["sent"]).inc();
        tracing::debug!(topic = self.topic, ts_ms = self.ts_ms, "heartbeat sent");
    }
}

/// A heartbeat could not be sent (or its topic not created); the next tick tries again.
#[derive(Debug)]
pub struct HeartbeatFailed<'a> {
    /// Its topic.
    pub topic: &'a str,
    /// Why.
    pub error: &'a str,
}

impl InternalEvent for HeartbeatFailed<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.heartbeats.with_label_values(&["failed"]).inc();
        tracing::warn!(
            topic = self.topic,
            error = self.error,
            "heartbeat not sent; trying again at the next interval"
        );
    }
}

/// A heartbeat was due while the binlog source was not connected: not sent, since a
/// heartbeat says the relay reads the binlog.
#[derive(Debug)]
pub struct HeartbeatSkipped<'a> {
    /// Its topic.
    pub topic: &'a str,
}

impl InternalEvent for HeartbeatSkipped<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.heartbeats.with_label_values(&["skipped"]).inc();
        tracing::debug!(
            topic = self.topic,
            "heartbeat skipped: the binlog source is not connected"
        );
    }
}

/// Starts the heartbeat task when `[heartbeat]` is on; it stops when `controller` fires.
/// The task counts into `metrics.heartbeats` (`outbox_relay_heartbeats_total{outcome}`).
pub fn spawn_heartbeats(
    config: &RelayConfig,
    controller: &ShutdownController,
    metrics: &Arc<Metrics>,
) -> Option<tokio::task::JoinHandle<()>> {
    let settings = HeartbeatSettings::from_config(config)?;
    tracing::info!(
        topic = %settings.topic,
        interval_ms = settings.interval.as_millis() as u64,
        "sending Debezium-format heartbeats"
    );
    Some(crate::spawn_named(
        "heartbeat",
        run_heartbeats(settings, metrics.clone(), controller.subscribe()),
    ))
}

/// The heartbeat loop: a record per tick while the source is connected, until `shutdown`.
async fn run_heartbeats(
    settings: HeartbeatSettings,
    metrics: Arc<Metrics>,
    mut shutdown: Shutdown,
) {
    let producer: FutureProducer<RelayClientContext> =
        match create_kafka_client(&settings.client_properties, RelayClientContext::default()) {
            Ok(producer) => producer,
            Err(error) => {
                // The sink creates a client from the same properties and stops the relay.
                HeartbeatFailed {
                    topic: &settings.topic,
                    error: &error.to_string(),
                }
                .emit(&metrics);
                return;
            }
        };
    let mut topic_ready = !settings.create_topic;
    let mut ticker = tokio::time::interval_at(
        tokio::time::Instant::now() + settings.interval,
        settings.interval,
    );
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.recv() => break,
            _ = ticker.tick() => {}
        }
        if !metrics.health.report().source_connected.ok {
            HeartbeatSkipped {
                topic: &settings.topic,
            }
            .emit(&metrics);
            continue;
        }
        if !topic_ready {
            let created = tokio::select! {
                _ = shutdown.recv() => break,
                created = ensure_topic(&settings) => created,
            };
            match created {
                Ok(()) => topic_ready = true,
                Err(error) => {
                    HeartbeatFailed {
                        topic: &settings.topic,
                        error: &error,
                    }
                    .emit(&metrics);
                    continue;
                }
            }
        }
        let ts_ms = i64::try_from(crate::health::unix_millis_now()).unwrap_or(i64::MAX);
        let sent = tokio::select! {
            _ = shutdown.recv() => break,
            sent = send_heartbeat(&producer, &settings, ts_ms) => sent,
        };
        match sent {
            Ok(()) => HeartbeatSent {
                topic: &settings.topic,
                ts_ms,
            }
            .emit(&metrics),
            Err(error) => HeartbeatFailed {
                topic: &settings.topic,
                error: &error.to_string(),
            }
            .emit(&metrics),
        }
    }
    // librdkafka's destructor may block while it closes connections: not on the runtime.
    tokio::task::spawn_blocking(move || drop(producer));
}

/// Sends one heartbeat and waits for its ack.
async fn send_heartbeat(
    producer: &FutureProducer<RelayClientContext>,
    settings: &HeartbeatSettings,
    ts_ms: i64,
) -> Result<(), KafkaError> {
    let value = heartbeat_value(settings.value_format, ts_ms);
    let record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&settings.topic)
        .key(settings.key.as_slice())
        .payload(value.as_slice())
        .partition(HEARTBEAT_PARTITION);
    let delivery = producer
        .send_result(record)
        .map_err(|(error, _record)| error)?;
    match delivery.await {
        Ok(Ok(_delivered)) => Ok(()),
        Ok(Err((error, _message))) => Err(error),
        Err(_canceled) => Err(KafkaError::Canceled),
    }
}

/// Creates the heartbeat topic unless it exists (`kafka.create_topics`); an error is text
/// for the log.
async fn ensure_topic(settings: &HeartbeatSettings) -> Result<(), String> {
    let admin: AdminClient<RelayClientContext> =
        create_kafka_client(&settings.client_properties, RelayClientContext::default())
            .map_err(|error| error.to_string())?;
    let created = crate::sink::create_topic(
        &admin,
        &settings.topic,
        settings.topic_partitions,
        settings.topic_replication_factor,
        &settings.topic_config,
        settings.admin_timeout,
    )
    .await;
    tokio::task::spawn_blocking(move || drop(admin));
    match created {
        Ok(None | Some(Ok(())) | Some(Err(RDKafkaErrorCode::TopicAlreadyExists))) => Ok(()),
        Ok(Some(Err(code))) => Err(format!("creating the topic failed: {code}")),
        Err(error) => Err(format!("creating the topic failed: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "dbserver1";

    #[test]
    fn string_converter_writes_struct_to_string() {
        assert_eq!(
            heartbeat_key(RecordFormat::Raw, PREFIX),
            b"Struct{serverName=dbserver1}"
        );
        assert_eq!(
            heartbeat_value(RecordFormat::Raw, 1_796_310_909_142),
            b"Struct{ts_ms=1796310909142}"
        );
    }

    #[test]
    fn json_converter_without_schemas_writes_the_payload() {
        assert_eq!(
            heartbeat_key(RecordFormat::Json, PREFIX),
            br#"{"serverName":"dbserver1"}"#
        );
        assert_eq!(heartbeat_value(RecordFormat::Json, 42), br#"{"ts_ms":42}"#);
    }

    /// The bytes are the ones Debezium 3.6.1 wrote in the exploratory run of
    /// `tests/debezium_heartbeat.rs` (key and value with `schemas.enable=true`).
    #[test]
    fn json_converter_with_schemas_writes_debeziums_envelope() {
        assert_eq!(
            String::from_utf8(heartbeat_key(
                RecordFormat::JsonWithSchema,
                "t16371p10892n0-dbz"
            ))
            .unwrap(),
            r#"{"schema":{"type":"struct","fields":[{"type":"string","optional":false,"field":"serverName"}],"optional":false,"name":"io.debezium.connector.common.ServerNameKey","version":1},"payload":{"serverName":"t16371p10892n0-dbz"}}"#
        );
        assert_eq!(
            String::from_utf8(heartbeat_value(
                RecordFormat::JsonWithSchema,
                1_796_310_909_142
            ))
            .unwrap(),
            r#"{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"ts_ms"}],"optional":false,"name":"io.debezium.connector.common.Heartbeat","version":1},"payload":{"ts_ms":1796310909142}}"#
        );
    }

    #[test]
    fn the_json_forms_parse_and_carry_the_fields() {
        let key: serde_json::Value =
            serde_json::from_slice(&heartbeat_key(RecordFormat::JsonWithSchema, PREFIX)).unwrap();
        assert_eq!(key["payload"]["serverName"], PREFIX);
        assert_eq!(key["schema"]["name"], KEY_SCHEMA_NAME);
        let value: serde_json::Value =
            serde_json::from_slice(&heartbeat_value(RecordFormat::JsonWithSchema, -1)).unwrap();
        assert_eq!(value["payload"]["ts_ms"], -1);
        assert_eq!(value["schema"]["fields"][0]["type"], "int64");
    }

    fn counted(metrics: &Metrics, outcome: &str) -> u64 {
        metrics.heartbeats.with_label_values(&[outcome]).get()
    }

    /// Waits (up to 30 s) until `outcome` was counted more than `before` times.
    async fn wait_counted(metrics: &Metrics, outcome: &str, before: u64) -> u64 {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while counted(metrics, outcome) <= before && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        counted(metrics, outcome)
    }

    /// The task skips beats while the source is not connected, counts a send that fails
    /// (no broker at the address) and goes on, and ends when its shutdown fires.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn skips_without_a_source_counts_failures_and_stops_on_shutdown() {
        let metrics = Metrics::new();
        let settings = HeartbeatSettings {
            interval: Duration::from_millis(100),
            topic: "unit-heartbeats".into(),
            key: heartbeat_key(RecordFormat::Raw, PREFIX),
            value_format: RecordFormat::Raw,
            client_properties: vec![
                // Nothing listens on port 1: every send fails after the delivery timeout.
                ("bootstrap.servers".into(), "127.0.0.1:1".into()),
                ("message.timeout.ms".into(), "300".into()),
            ],
            create_topic: false,
            topic_partitions: 1,
            topic_replication_factor: 1,
            topic_config: Default::default(),
            admin_timeout: Duration::from_secs(1),
        };
        let controller = ShutdownController::new();
        let (skipped, failed) = (counted(&metrics, "skipped"), counted(&metrics, "failed"));
        let task = tokio::spawn(run_heartbeats(
            settings,
            metrics.clone(),
            controller.subscribe(),
        ));
        assert!(
            wait_counted(&metrics, "skipped", skipped).await > skipped,
            "no beat skipped"
        );
        metrics.health.source_connected();
        assert!(
            wait_counted(&metrics, "failed", failed).await > failed,
            "no failure counted"
        );
        // Still beating after a failure: another one fails.
        let failed = counted(&metrics, "failed");
        assert!(
            wait_counted(&metrics, "failed", failed).await > failed,
            "stopped after a failure"
        );
        let text = metrics.render();
        assert!(
            text.contains("outbox_relay_heartbeats_total{outcome=\"failed\"}"),
            "{text}"
        );
        controller.trigger();
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("the task ends on shutdown")
            .expect("the task does not panic");
    }

    fn config(heartbeat: &str, route: &str) -> Result<RelayConfig, crate::ConfigError> {
        RelayConfig::parse(&format!(
            r#"
[source]
url = "mysql://repl@db:3306"
[[outbox]]
table = "shop.outbox"
[route]
{route}
[kafka]
brokers = "kafka:9092"
[checkpoint]
store = "file"
path = "/tmp/checkpoint.json"
{heartbeat}
"#
        ))
    }

    #[test]
    fn off_by_default_and_at_zero() {
        let relay = config("", "").unwrap();
        assert!(HeartbeatSettings::from_config(&relay).is_none());
        let relay = config("[heartbeat]\ninterval_ms = 0", "").unwrap();
        assert!(HeartbeatSettings::from_config(&relay).is_none());
    }

    #[test]
    fn the_topic_defaults_to_debeziums_and_the_formats_follow_the_route() {
        let relay = config(
            "[heartbeat]\ninterval_ms = 5000\ntopic_prefix = \"dbserver1\"",
            "key_format = \"json\"\nvalue_format = \"json_with_schema\"",
        )
        .unwrap();
        let settings = HeartbeatSettings::from_config(&relay).unwrap();
        assert_eq!(settings.topic, "__debezium-heartbeat.dbserver1");
        assert_eq!(settings.interval, Duration::from_secs(5));
        assert_eq!(settings.key, heartbeat_key(RecordFormat::Json, "dbserver1"));
        assert_eq!(settings.value_format, RecordFormat::JsonWithSchema);
        // A bounded delivery timeout (the sink's is infinite and protected).
        assert!(settings
            .client_properties
            .contains(&("message.timeout.ms".into(), "10000".into())));
        assert!(settings
            .client_properties
            .contains(&("bootstrap.servers".into(), "kafka:9092".into())));
    }

    #[test]
    fn the_prefix_may_come_from_the_route_and_the_topic_may_be_named() {
        let relay = config(
            "[heartbeat]\ninterval_ms = 1000\ntopic = \"beats\"",
            "debezium_topic_prefix = \"shop\"",
        )
        .unwrap();
        let settings = HeartbeatSettings::from_config(&relay).unwrap();
        assert_eq!(settings.topic, "beats");
        assert_eq!(settings.key, heartbeat_key(RecordFormat::Raw, "shop"));
    }

    #[test]
    fn bad_settings_are_refused_by_key() {
        for (heartbeat, route, key, says) in [
            (
                "[heartbeat]\ninterval_ms = 1000",
                "",
                "heartbeat.topic_prefix",
                "is required",
            ),
            (
                "[heartbeat]\ninterval_ms = 50\ntopic_prefix = \"p\"",
                "",
                "heartbeat.interval_ms",
                "minimum",
            ),
            (
                "[heartbeat]\ninterval_ms = 1000\ntopic_prefix = \"a b\"",
                "",
                "heartbeat.topic_prefix",
                "' '",
            ),
            (
                "[heartbeat]\ninterval_ms = 1000\ntopic_prefix = \"p\"\ntopic = \"x/y\"",
                "",
                "heartbeat.topic",
                "x/y",
            ),
            (
                "[heartbeat]\ntopic_prefix = \"a\"",
                "debezium_topic_prefix = \"b\"",
                "heartbeat.topic_prefix",
                "differs",
            ),
        ] {
            let error = config(heartbeat, route).unwrap_err().to_string();
            assert!(
                error.contains(key) && error.contains(says),
                "{heartbeat} / {route}: {error}"
            );
        }
        let error = config("[heartbeat]\ninterval = 1000", "")
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown field `interval`"), "{error}");
    }
}
