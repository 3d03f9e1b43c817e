//! The relay's TOML configuration: one file, six sections (`[source]`, `[[outbox]]`,
//! `[route]`, `[kafka]`, `[checkpoint]`, `[metrics]`, `[pipeline]`).
//!
//! # Contract
//! * Unknown keys are errors everywhere (`deny_unknown_fields`): a typo never silently falls
//!   back to a default.
//! * Every key has a documented default except `source.url`, `kafka.brokers` and at least one
//!   `[[outbox]]` table.
//! * [`RelayConfig::validate`] checks what serde cannot (ranges, formats, combinations) and
//!   names the key and the fix in its message.
//! * The source password may come from the environment variable
//!   [`SOURCE_PASSWORD_ENV`]; it is merged into the connection URL by
//!   [`SourceConfig::connection_url`] and never appears in logs
//!   ([`SourceConfig::redacted_url`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use outbox_binlog::{BinlogPosition, Flavor, GtidSet, TableFilter, TableName};
use serde::Deserialize;

pub use outbox_kafka::config::{
    check_protected_property, DeadLetterConfig, DeliveryMode, KafkaConfig,
    DEAD_LETTER_ERROR_CLASSES, KAFKA_COMPRESSIONS, PROTECTED_KAFKA_PROPERTIES,
};
use outbox_kafka::config::{
    default_dead_letter_max_attempts, default_stall_timeout_ms, default_topic_partitions,
    default_topic_replication_factor,
};

/// Environment variable that supplies the source password, so it need not be in the file.
pub const SOURCE_PASSWORD_ENV: &str = "OUTBOX_RELAY_SOURCE_PASSWORD";

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file that was read.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or does not have the expected shape.
    #[error("config file {path} is invalid: {message}")]
    Parse {
        /// The file that was parsed.
        path: PathBuf,
        /// The parser's message (names the key and line).
        message: String,
    },
    /// A value is out of range or inconsistent with another one.
    #[error("config key `{key}`: {message}")]
    Invalid {
        /// Dotted name of the offending key, e.g. `pipeline.max_in_flight`.
        key: String,
        /// What is wrong and how to fix it.
        message: String,
    },
}

/// A refusal of `key`; `message` goes through [`crate::redact::redact_secrets`], as it may
/// quote the value.
fn invalid(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        message: crate::redact::redact_secrets(&message.into()),
    }
}

/// `PREFIX_initial_backoff_ms` must be at least 1 and `PREFIX_max_backoff_ms` at least that
/// (`prefix` is the key path without the suffix, e.g. `kafka.retry`).
fn check_backoff(prefix: &str, initial_ms: u64, max_ms: u64) -> Result<(), ConfigError> {
    if initial_ms == 0 || max_ms < initial_ms {
        let name = prefix.rsplit('.').next().unwrap_or(prefix);
        return Err(invalid(
            &format!("{prefix}_max_backoff_ms"),
            format!(
                "needs {name}_initial_backoff_ms >= 1 and {name}_max_backoff_ms >= {name}_initial_backoff_ms"
            ),
        ));
    }
    Ok(())
}

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayConfig {
    /// Where the binlog comes from.
    pub source: SourceConfig,
    /// The outbox tables to watch and how their columns map to records; one entry each.
    pub outbox: Vec<outbox_router::OutboxTableConfig>,
    /// How a routed row becomes a Kafka topic, key and headers (all keys have defaults).
    #[serde(default)]
    pub route: outbox_router::RouteConfig,
    /// Where records go.
    pub kafka: KafkaConfig,
    /// Where the relay remembers how far it got (binlog mode; poll mode keeps its state in
    /// the outbox table and takes only `connector` from here).
    #[serde(default)]
    pub checkpoint: CheckpointConfig,
    /// Prometheus endpoint; absent means no metrics listener.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// Flow control and timing of the pipeline.
    #[serde(default)]
    pub pipeline: PipelineConfig,
    /// What happens to an event that fails permanently (dead-letter topic or stop).
    #[serde(default)]
    pub dead_letter: DeadLetterConfig,
    /// Standby failover (`[ha]`): several relays, one publishing (see [`crate::ha`]).
    #[serde(default)]
    pub ha: crate::ha_config::HaConfig,
    /// Debezium-format heartbeat records (`[heartbeat]`, off by default), for consumers and
    /// monitors that watch Debezium's `__debezium-heartbeat.<prefix>` topic.
    #[serde(default)]
    pub heartbeat: HeartbeatConfig,
}

/// Debezium's default `topic.heartbeat.prefix`: the heartbeat topic is this, a dot, and
/// the `topic.prefix`.
pub const DEFAULT_HEARTBEAT_TOPIC_PREFIX: &str = "__debezium-heartbeat";

/// Shortest `heartbeat.interval_ms`: more than ten heartbeats a second are load on the
/// topic, not a better liveness signal.
pub const MIN_HEARTBEAT_INTERVAL_MS: u64 = 100;

/// `[heartbeat]`: one Debezium-format heartbeat record per interval (see
/// [`crate::heartbeat`]); only the leader sends them under `[ha]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatConfig {
    /// Time between two heartbeat records (Debezium's `heartbeat.interval.ms`); 0 or absent
    /// turns heartbeats off, as in Debezium, so nothing new appears on an upgrade.
    #[serde(default)]
    pub interval_ms: u64,
    /// Debezium's `topic.prefix`: the key's `serverName` and the default topic's suffix, so
    /// monitors keyed on the old connector's name keep working. Defaults to
    /// `route.debezium_topic_prefix` (the same Debezium setting), one of them is required
    /// when heartbeats are on.
    #[serde(default)]
    pub topic_prefix: Option<String>,
    /// The topic (Debezium's `topic.heartbeat.name`); default
    /// `__debezium-heartbeat.<topic_prefix>`, Debezium's default, so existing consumers
    /// find it without a change.
    #[serde(default)]
    pub topic: Option<String>,
}

impl HeartbeatConfig {
    /// Whether heartbeat records are sent.
    pub fn enabled(&self) -> bool {
        self.interval_ms > 0
    }

    /// The `topic.prefix` in effect: `topic_prefix`, else `route.debezium_topic_prefix`.
    pub fn effective_topic_prefix<'a>(
        &'a self,
        route: &'a outbox_router::RouteConfig,
    ) -> Option<&'a str> {
        self.topic_prefix
            .as_deref()
            .or(route.debezium_topic_prefix.as_deref())
    }

    /// The topic in effect: `topic`, else `__debezium-heartbeat.<topic_prefix>` (`None`
    /// without a prefix).
    pub fn effective_topic(&self, route: &outbox_router::RouteConfig) -> Option<String> {
        match &self.topic {
            Some(topic) => Some(topic.clone()),
            None => self
                .effective_topic_prefix(route)
                .map(|prefix| format!("{DEFAULT_HEARTBEAT_TOPIC_PREFIX}.{prefix}")),
        }
    }

    /// Checks `[heartbeat]` against `[route]` (where the prefix may come from).
    pub fn validate(&self, route: &outbox_router::RouteConfig) -> Result<(), ConfigError> {
        if let (Some(ours), Some(routes)) = (&self.topic_prefix, &route.debezium_topic_prefix) {
            if ours != routes {
                return Err(invalid(
                    "heartbeat.topic_prefix",
                    format!("`{ours}` differs from route.debezium_topic_prefix `{routes}`; both are Debezium's one topic.prefix: set the same value, or only route.debezium_topic_prefix"),
                ));
            }
        }
        if !self.enabled() {
            return Ok(());
        }
        if self.interval_ms < MIN_HEARTBEAT_INTERVAL_MS {
            return Err(invalid(
                "heartbeat.interval_ms",
                format!(
                    "{} is below the minimum {MIN_HEARTBEAT_INTERVAL_MS} ms; use e.g. 10000, or 0 to turn heartbeats off",
                    self.interval_ms
                ),
            ));
        }
        let Some(prefix) = self.effective_topic_prefix(route) else {
            return Err(invalid(
                "heartbeat.topic_prefix",
                "is required when heartbeat.interval_ms > 0: set it to the Debezium connector's topic.prefix (the heartbeat key's serverName), or set route.debezium_topic_prefix",
            ));
        };
        outbox_router::check_topic_name(prefix).map_err(|problem| {
            invalid(
                "heartbeat.topic_prefix",
                format!("`{prefix}`: {problem} (Debezium's topic.prefix allows the same characters as a topic name)"),
            )
        })?;
        let key = if self.topic.is_some() {
            "heartbeat.topic"
        } else {
            "heartbeat.topic_prefix"
        };
        if let Some(topic) = self.effective_topic(route) {
            outbox_router::check_topic_name(&topic)
                .map_err(|problem| invalid(key, format!("topic `{topic}`: {problem}")))?;
        }
        Ok(())
    }
}

/// `[source]`: the MySQL/MariaDB server to replicate from.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// `mysql://user[:password]@host:port`: the replication connection. The password may
    /// instead come from `OUTBOX_RELAY_SOURCE_PASSWORD` so it is not stored in the file.
    pub url: String,
    /// Replica server id the relay announces; must be unique among the server's replicas.
    #[serde(default = "default_server_id")]
    pub server_id: u32,
    /// Where the first run (no checkpoint yet) starts: `earliest`, `latest`,
    /// `file:NAME:POS` or `gtid:SET`. Ignored once a checkpoint exists.
    #[serde(default = "default_start")]
    pub start: String,
    /// How often the server sends a heartbeat while idle, so positions advance and dead
    /// connections are noticed.
    #[serde(default = "default_heartbeat_interval_ms")]
    pub heartbeat_interval_ms: u64,
    /// How long the stream may be silent (not even a heartbeat) before it counts as lost
    /// and is reconnected.
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// How long one connection attempt may take.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// First delay before reconnecting after a transient source error; doubles each try.
    #[serde(default = "default_reconnect_initial_backoff_ms")]
    pub reconnect_initial_backoff_ms: u64,
    /// Upper bound of the reconnect delay, so an outage is noticed soon after it ends.
    #[serde(default = "default_reconnect_max_backoff_ms")]
    pub reconnect_max_backoff_ms: u64,
    /// How many times the relay tries to reach the source at startup before it stops with
    /// an error (0 = forever). A source never reached is more often a wrong `url` or a
    /// firewall than an outage, and an operator should hear about it; once streaming, the
    /// relay reconnects without limit.
    #[serde(default = "default_startup_attempts")]
    pub startup_attempts: u32,
    /// A file holding the source password (trailing newline ignored), re-read at every
    /// connect so a rotated password applies at the next reconnect. Overrides the URL's
    /// password and `OUTBOX_RELAY_SOURCE_PASSWORD`.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// `[source.tls]`: TLS of every connection to the source (replication stream, checks,
    /// column lookups).
    #[serde(default)]
    pub tls: crate::security::MysqlTlsConfig,
    /// `binlog` (the default: tail the binlog) or `poll` (poll the outbox table, for a user
    /// without replication grants; see [`crate::poll_config`]).
    #[serde(default)]
    pub mode: crate::poll_config::SourceMode,
    /// `[source.poll]`: the polling source's settings (used with `mode = "poll"`).
    #[serde(default)]
    pub poll: crate::poll_config::PollConfig,
    /// What the relay does when the stored checkpoint's binlog position is purged from
    /// the server: `"stop"` (a definite error naming the ways out) or `"fill_from_table"`
    /// (publish the outbox rows written since the checkpoint, then stream on from the
    /// server's current position).
    #[serde(default)]
    pub on_purged: OnPurged,
    /// With `on_purged = "fill_from_table"`: the fill publishes the rows whose timestamp
    /// column is at most this many seconds older than the checkpoint's time, to cover
    /// transactions that were open that long. Keep it below the writer cleanup's
    /// `safety_margin` (default 3600 s): the cleanup keeps the rows between the two, which
    /// proves that it deleted nothing the gap needs.
    #[serde(default = "default_fill_margin_s")]
    pub fill_margin_s: u64,
}

/// `[source] on_purged`: the way out of a purged checkpoint position.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnPurged {
    /// Stop with a definite error naming `recover` (archived binlog files) and
    /// `fill_from_table`: the operator decides.
    #[default]
    Stop,
    /// Publish the outbox rows committed after the checkpoint from the table itself (at
    /// least once: some may reach Kafka twice, with the same id), then stream from the
    /// server's current position.
    FillFromTable,
}

fn default_fill_margin_s() -> u64 {
    1800
}

impl std::fmt::Debug for SourceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceConfig")
            .field("url", &self.redacted_url())
            .field("server_id", &self.server_id)
            .field("start", &self.start)
            .field("heartbeat_interval_ms", &self.heartbeat_interval_ms)
            .field("idle_timeout_ms", &self.idle_timeout_ms)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("startup_attempts", &self.startup_attempts)
            .field("password_file", &self.password_file)
            .field("tls", &self.tls)
            .field("mode", &self.mode)
            .field("poll", &self.poll)
            .field("on_purged", &self.on_purged)
            .field("fill_margin_s", &self.fill_margin_s)
            .finish_non_exhaustive()
    }
}

fn default_server_id() -> u32 {
    4242
}
fn default_start() -> String {
    "latest".to_owned()
}
fn default_heartbeat_interval_ms() -> u64 {
    1000
}
fn default_idle_timeout_ms() -> u64 {
    30_000
}
fn default_connect_timeout_ms() -> u64 {
    10_000
}
fn default_reconnect_initial_backoff_ms() -> u64 {
    200
}
fn default_reconnect_max_backoff_ms() -> u64 {
    10_000
}
fn default_startup_attempts() -> u32 {
    10
}

/// Where the first run starts reading, parsed from `source.start`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartSetting {
    /// The oldest binlog the server still has.
    Earliest,
    /// The server's current end of the binlog (only new transactions).
    Latest,
    /// An explicit binlog file and byte offset (a transaction boundary).
    Position(BinlogPosition),
    /// A GTID set, kept as text: its flavor is known only once connected.
    Gtid(String),
}

impl StartSetting {
    /// Parses `earliest`, `latest`, `file:NAME:POS` or `gtid:SET`.
    pub fn parse(text: &str) -> Result<StartSetting, String> {
        match text {
            "earliest" => Ok(StartSetting::Earliest),
            "latest" => Ok(StartSetting::Latest),
            _ => {
                if let Some(rest) = text.strip_prefix("file:") {
                    parse_file_position(rest).map(StartSetting::Position)
                } else if let Some(set) = text.strip_prefix("gtid:") {
                    if set.trim().is_empty() {
                        return Err("`gtid:` needs a GTID set, e.g. `gtid:0-1-5`".into());
                    }
                    for flavor in [Flavor::Mariadb, Flavor::Mysql] {
                        if GtidSet::parse(flavor, set).is_ok() {
                            return Ok(StartSetting::Gtid(set.to_owned()));
                        }
                    }
                    Err(format!(
                        "`{set}` is neither a MariaDB (`0-1-5`) nor a MySQL (`uuid:1-5`) GTID set"
                    ))
                } else {
                    Err(format!(
                        "`{text}` is not one of `earliest`, `latest`, `file:NAME:POS`, `gtid:SET`"
                    ))
                }
            }
        }
    }

    /// The GTID set in the given flavor's syntax, for [`StartSetting::Gtid`].
    pub fn gtid_set(text: &str, flavor: Flavor) -> Result<GtidSet, String> {
        GtidSet::parse(flavor, text).map_err(|e| e.to_string())
    }
}

/// Parses `NAME:POS` (e.g. `binlog.000001:4`) into a position.
pub fn parse_file_position(text: &str) -> Result<BinlogPosition, String> {
    let Some((file, position)) = text.rsplit_once(':') else {
        return Err(format!(
            "`{text}` is not `FILE:POSITION`, e.g. `binlog.000001:4`"
        ));
    };
    if file.is_empty() {
        return Err(format!("`{text}` has no binlog file name"));
    }
    let position: u64 = position
        .parse()
        .map_err(|_| format!("`{position}` in `{text}` is not a byte offset"))?;
    if position < 4 {
        return Err(format!(
            "offset {position} in `{text}` is inside the binlog magic header; the first event starts at 4"
        ));
    }
    Ok(BinlogPosition::new(file, position))
}

impl SourceConfig {
    /// The URL with the password from `OUTBOX_RELAY_SOURCE_PASSWORD` merged in (when set and
    /// the URL has none). Never log this; log [`SourceConfig::redacted_url`].
    pub fn connection_url(&self) -> String {
        match std::env::var(SOURCE_PASSWORD_ENV) {
            Ok(password) if !password.is_empty() => with_password(&self.url, &password),
            _ => self.url.clone(),
        }
    }

    /// The URL with any password replaced by `***`, safe for logs and reports.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }

    /// TLS and credential-file settings of every connection to the source.
    pub fn tls_options(&self) -> outbox_binlog::TlsOptions {
        self.tls.options(self.password_file.as_deref())
    }

    /// `source.start`, parsed (validated by [`RelayConfig::validate`]).
    pub fn start_setting(&self) -> Result<StartSetting, ConfigError> {
        StartSetting::parse(&self.start).map_err(|m| invalid("source.start", m))
    }
}

pub use crate::redact::redact_url;

/// Puts `password` (percent-encoded) into a URL that has a user but no password.
pub(crate) fn with_password(url: &str, password: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) if !userinfo.contains(':') => {
            format!(
                "{scheme}://{userinfo}:{}@{host}{tail}",
                percent_encode(password)
            )
        }
        _ => url.to_owned(),
    }
}

fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `[checkpoint]`: where the relay stores its position.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointConfig {
    /// `file` (a JSON file, written atomically), `mysql` (a row in a table) or `kafka` (a
    /// record on a compacted topic, keyed by `connector`).
    #[serde(default = "default_store")]
    pub store: String,
    /// File store: the checkpoint file's path.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// MySQL store: connection URL (password from `OUTBOX_RELAY_SOURCE_PASSWORD` is not
    /// applied here; put it in the URL or use a socket).
    #[serde(default)]
    pub url: Option<String>,
    /// MySQL store: database holding the checkpoint table.
    #[serde(default = "default_checkpoint_database")]
    pub database: String,
    /// MySQL store: table name.
    #[serde(default = "default_checkpoint_table")]
    pub table: String,
    /// MySQL store: row key; Kafka store: record key and `transactional.id` suffix
    /// (`outbox-relay-checkpoint-NAME`). Several relays can share one table or topic.
    #[serde(default = "default_connector")]
    pub connector: String,
    /// Kafka store: the compacted topic holding the checkpoint records (default
    /// `outbox-relay-checkpoints`; created with one partition and `cleanup.policy=compact`
    /// when `kafka.create_topics`). `None` when not set, so a file or MySQL store that sets
    /// it is refused instead of ignoring it.
    #[serde(default)]
    pub topic: Option<String>,
    /// MySQL and Kafka stores: how long one operation (a commit, a load) may take before it
    /// fails as transient and is retried at the next commit: a hung server or a half-open
    /// connection must not hold the relay or its shutdown.
    #[serde(default = "default_checkpoint_operation_timeout_ms")]
    pub operation_timeout_ms: u64,
    /// MySQL store: a file holding the password, read when the store is opened (at start):
    /// the store's connection pool keeps it for the process's life.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// MySQL store: `[checkpoint.tls]`, the same keys as `[source.tls]`.
    #[serde(default)]
    pub tls: crate::security::MysqlTlsConfig,
}

/// No `[checkpoint]` section: the file store without a path, which binlog mode refuses
/// naming `checkpoint.path`; poll mode needs none.
impl Default for CheckpointConfig {
    fn default() -> Self {
        Self {
            store: default_store(),
            path: None,
            url: None,
            database: default_checkpoint_database(),
            table: default_checkpoint_table(),
            connector: default_connector(),
            topic: None,
            operation_timeout_ms: default_checkpoint_operation_timeout_ms(),
            password_file: None,
            tls: crate::security::MysqlTlsConfig::default(),
        }
    }
}

fn default_store() -> String {
    "file".to_owned()
}
fn default_checkpoint_database() -> String {
    "outbox_relay".to_owned()
}
fn default_checkpoint_table() -> String {
    "relay_checkpoints".to_owned()
}
fn default_connector() -> String {
    "default".to_owned()
}
fn default_checkpoint_operation_timeout_ms() -> u64 {
    10_000
}

impl CheckpointConfig {
    /// The Kafka store's topic: `topic`, or `outbox-relay-checkpoints`.
    pub fn kafka_topic(&self) -> &str {
        self.topic
            .as_deref()
            .unwrap_or(outbox_kafka::DEFAULT_CHECKPOINT_TOPIC)
    }
}

/// Whether `name` is a legal Kafka topic name (1 to 249 of `[a-zA-Z0-9._-]`, not `.`/`..`).
fn is_legal_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// Default of `metrics.ready_max_backoff_ms`.
pub const DEFAULT_READY_MAX_BACKOFF_MS: u64 = 60_000;

/// `[metrics]`: the Prometheus and health endpoint.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// `host:port` to serve `GET /metrics`, `/healthz` and `/readyz` on; absent means no
    /// listener.
    #[serde(default)]
    pub listen: Option<String>,
    /// `/readyz` reports not ready once the source or the sink has been retrying this long
    /// without success: a short outage is ridden out, a retry loop pages (via the
    /// `OutboxRelayNotReady` alert) before anyone notices the lag.
    #[serde(default = "default_ready_max_backoff_ms")]
    pub ready_max_backoff_ms: u64,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            listen: None,
            ready_max_backoff_ms: DEFAULT_READY_MAX_BACKOFF_MS,
        }
    }
}

fn default_ready_max_backoff_ms() -> u64 {
    DEFAULT_READY_MAX_BACKOFF_MS
}

/// `[pipeline]`: flow control and commit timing.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    /// Most records sent to Kafka and not yet acknowledged; bounds memory and the replay
    /// after a crash.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// Most bytes of row data between the binlog reader and Kafka's acknowledgement (rows
    /// waiting to be routed, records queued or unacked). Bounds memory when rows are big:
    /// `max_in_flight` alone would allow 10 000 rows of 64 MiB. A row larger than the whole
    /// budget still passes, alone. Resident memory stays within about this (the Kafka
    /// client's copy of the unacked records: the relay hands payloads of 1 MiB and more
    /// over to it) plus the row waiting for budget and the reader's packet buffer.
    /// Default 64 MiB.
    #[serde(default = "default_max_in_flight_bytes")]
    pub max_in_flight_bytes: u64,
    /// How long a graceful shutdown waits for outstanding acks before it commits what is
    /// acked and exits.
    #[serde(default = "default_shutdown_timeout_ms")]
    pub shutdown_timeout_ms: u64,
    /// Longest time between checkpoint commits while records are acked. Once every record
    /// read is acked (the relay caught up: a backlog drained, a quiet moment), the newest
    /// position is stored at once, at most once per tenth of this.
    #[serde(default = "default_commit_interval_ms")]
    pub commit_interval_ms: u64,
    /// Commit early once this many transactions were acked since the last commit (bounds the
    /// replay after a crash when traffic is fast). Default 10 000.
    #[serde(default = "default_commit_max_transactions")]
    pub commit_max_transactions: u64,
    /// Capacity of each channel between tasks (items), for backpressure.
    #[serde(default = "default_channel_capacity")]
    pub channel_capacity: usize,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            max_in_flight: default_max_in_flight(),
            max_in_flight_bytes: default_max_in_flight_bytes(),
            shutdown_timeout_ms: default_shutdown_timeout_ms(),
            commit_interval_ms: default_commit_interval_ms(),
            commit_max_transactions: default_commit_max_transactions(),
            channel_capacity: default_channel_capacity(),
        }
    }
}

fn default_max_in_flight() -> usize {
    10_000
}
fn default_max_in_flight_bytes() -> u64 {
    // 64 MiB: far above what `max_in_flight` records of ordinary rows take (10 000 rows
    // of 1 KiB are 10 MiB), so it only binds with big rows, where it keeps the relay near
    // 256 MiB resident with 64 MiB payloads.
    64 * 1024 * 1024
}
fn default_shutdown_timeout_ms() -> u64 {
    30_000
}
fn default_commit_interval_ms() -> u64 {
    1000
}
fn default_commit_max_transactions() -> u64 {
    // As `outbox_checkpoint::CommitPolicy::default`. At a drain's pace (~150 000
    // transactions/s on 2 cores) 1 000 meant 150 store writes (write, fsync, rename) a
    // second, ~8% of the relay's CPU; 10 000 bounds the replay after a crash to well under
    // the one-second interval's worth.
    10_000
}
fn default_channel_capacity() -> usize {
    1024
}

impl RelayConfig {
    /// Reads, parses and validates a config file.
    pub fn load(path: &Path) -> Result<RelayConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let config = RelayConfig::parse(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.to_owned(),
                message,
            },
            other => other,
        })?;
        Ok(config)
    }

    /// Parses and validates config text (the path in errors is `<text>`).
    pub fn parse(text: &str) -> Result<RelayConfig, ConfigError> {
        let config: RelayConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: PathBuf::from("<text>"),
            // The parser quotes the line it stopped at: a password may be on it.
            message: crate::redact::redact_secrets(&e.to_string()),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks ranges and combinations; the message names the key and the fix.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let source = &self.source;
        if !source.url.starts_with("mysql://") {
            return Err(invalid(
                "source.url",
                format!(
                    "`{}` must start with `mysql://`, e.g. `mysql://repl@db:3306`",
                    source.redacted_url()
                ),
            ));
        }
        if source.server_id == 0 {
            return Err(invalid(
                "source.server_id",
                "0 is not allowed: pick a number unique among the server's replicas, e.g. 4242",
            ));
        }
        StartSetting::parse(&source.start).map_err(|m| invalid("source.start", m))?;
        self.check_lower_bounds()?;
        self.ha.validate()?;
        if source.idle_timeout_ms <= source.heartbeat_interval_ms {
            return Err(invalid(
                "source.idle_timeout_ms",
                format!(
                    "must be larger than source.heartbeat_interval_ms ({}), or every idle pause looks like a lost connection; use several heartbeats, e.g. {}",
                    source.heartbeat_interval_ms,
                    source.heartbeat_interval_ms.saturating_mul(5)
                ),
            ));
        }
        check_backoff(
            "source.reconnect",
            source.reconnect_initial_backoff_ms,
            source.reconnect_max_backoff_ms,
        )?;

        if self.outbox.is_empty() {
            return Err(invalid(
                "outbox",
                "no outbox table configured: add a `[[outbox]]` section with `table = \"db.outbox\"`",
            ));
        }
        outbox_router::validate_router_config(&self.outbox, &self.route)
            .map_err(|e| invalid("outbox/route", e.to_string()))?;

        let kafka = &self.kafka;
        if kafka.brokers.trim().is_empty() {
            return Err(invalid(
                "kafka.brokers",
                "is empty: list at least one `host:port`",
            ));
        }
        if let Some((key, message)) = kafka.security.validate().into_iter().next() {
            return Err(invalid(key, message));
        }
        if !kafka.security.is_default() {
            if let Some(property) = crate::security::KAFKA_SECURITY_PROPERTIES
                .iter()
                .find(|property| kafka.properties.contains_key(**property))
            {
                return Err(invalid(
                    format!("kafka.properties.\"{property}\"").as_str(),
                    "is also set by [kafka.security]; set it in one place ([kafka.security])",
                ));
            }
        }
        for (key, tls, password_file) in [
            ("source.tls", &self.source.tls, &self.source.password_file),
            (
                "checkpoint.tls",
                &self.checkpoint.tls,
                &self.checkpoint.password_file,
            ),
        ] {
            tls.options(password_file.as_deref())
                .validate()
                .map_err(|message| invalid(key, message))?;
            for (field, path) in [
                ("ca_file", &tls.ca_file),
                ("cert_file", &tls.cert_file),
                ("key_file", &tls.key_file),
                ("server_public_key_path", &tls.server_public_key_path),
            ] {
                if let Some(path) = path.as_ref().filter(|path| !path.is_file()) {
                    return Err(invalid(
                        format!("{key}.{field}").as_str(),
                        format!("{} is not a readable file", path.display()),
                    ));
                }
            }
        }
        for (key, path) in [
            ("source.password_file", &self.source.password_file),
            ("checkpoint.password_file", &self.checkpoint.password_file),
        ] {
            if let Some(path) = path.as_ref().filter(|path| !path.is_file()) {
                return Err(invalid(
                    key,
                    format!("{} is not a readable file", path.display()),
                ));
            }
        }
        if !KAFKA_COMPRESSIONS.contains(&kafka.compression.as_str()) {
            return Err(invalid(
                "kafka.compression",
                format!(
                    "`{}` is not one of {}",
                    kafka.compression,
                    KAFKA_COMPRESSIONS.join(", ")
                ),
            ));
        }
        check_backoff(
            "kafka.retry",
            kafka.retry_initial_backoff_ms,
            kafka.retry_max_backoff_ms,
        )?;
        if kafka.message_timeout_ms.is_some() {
            return Err(invalid(
                "kafka.message_timeout_ms",
                "was replaced by `kafka.stall_timeout_ms` (librdkafka's delivery timeout is now infinite, so a record never expires behind a younger one of its key; the relay rebuilds a producer whose oldest record has had no ack for stall_timeout_ms); rename the key",
            ));
        }
        for (key, value) in &kafka.properties {
            if let Some(reason) = check_protected_property(key, value) {
                return Err(invalid(&format!("kafka.properties.\"{key}\""), reason));
            }
        }
        if kafka.properties.contains_key("bootstrap.servers") {
            return Err(invalid(
                "kafka.properties.\"bootstrap.servers\"",
                "set `kafka.brokers` instead",
            ));
        }
        // Every property through librdkafka itself: an unknown name, a malformed value or a
        // codec this build lacks is refused now, with librdkafka's reason, not at the first
        // client creation.
        if let Err(error) =
            crate::sink::check_client_properties(&crate::sink::producer_properties(kafka))
        {
            let key = match error.property.as_deref() {
                Some(property) if kafka.properties.contains_key(property) => {
                    format!("kafka.properties.\"{property}\"")
                }
                Some("compression.type") => "kafka.compression".to_owned(),
                Some("linger.ms") => "kafka.linger_ms".to_owned(),
                Some("batch.num.messages") => "kafka.batch_num_messages".to_owned(),
                _ => "kafka.properties".to_owned(),
            };
            return Err(invalid(&key, error.to_string()));
        }

        self.source.poll.validate()?;
        match self.source.mode {
            crate::poll_config::SourceMode::Binlog => {
                self.validate_checkpoint()?;
                self.validate_on_purged()?;
            }
            crate::poll_config::SourceMode::Poll => self.validate_poll_mode()?,
        }
        self.heartbeat.validate(&self.route)?;

        if let Some(listen) = &self.metrics.listen {
            listen.parse::<SocketAddr>().map_err(|_| {
                invalid(
                    "metrics.listen",
                    format!("`{listen}` is not `ip:port`, e.g. `127.0.0.1:9187`"),
                )
            })?;
        }

        let dead_letter = &self.dead_letter;
        if dead_letter.topic.trim().is_empty() {
            return Err(invalid(
                "dead_letter.topic",
                "must not be empty (default `outbox.dlq`)",
            ));
        }
        if let Some(unknown) = dead_letter
            .fail_on
            .iter()
            .find(|class| !DEAD_LETTER_ERROR_CLASSES.contains(&class.as_str()))
        {
            return Err(invalid(
                "dead_letter.fail_on",
                format!(
                    "unknown error class `{unknown}`; use any of {}",
                    DEAD_LETTER_ERROR_CLASSES.join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// `[checkpoint]`: the keys each store needs, and none of another store's.
    /// What poll mode refuses: a checkpoint store (its state is in the outbox table, so a
    /// store set up here would be silently unused) and exactly-once delivery (claims are
    /// at-least-once: a publish and its mark are not one transaction).
    fn validate_poll_mode(&self) -> Result<(), ConfigError> {
        let checkpoint = &self.checkpoint;
        let unused = [
            ("checkpoint.store", checkpoint.store != default_store()),
            ("checkpoint.path", checkpoint.path.is_some()),
            ("checkpoint.url", checkpoint.url.is_some()),
            ("checkpoint.topic", checkpoint.topic.is_some()),
        ];
        if let Some((key, _)) = unused.iter().find(|(_, set)| *set) {
            return Err(invalid(
                key,
                "is a checkpoint store setting, but [source] mode = \"poll\" keeps each event's state in the outbox table and stores no checkpoint; remove it (only checkpoint.connector is used), or use mode = \"binlog\"",
            ));
        }
        if self.source.on_purged != OnPurged::Stop {
            return Err(invalid(
                "source.on_purged",
                "is the way out of a purged binlog position, but [source] mode = \"poll\" reads no binlog; remove it, or use mode = \"binlog\"",
            ));
        }
        if self.kafka.delivery == DeliveryMode::ExactlyOnce {
            return Err(invalid(
                "kafka.delivery",
                "\"exactly_once\" is not available with [source] mode = \"poll\": a row's publish and its SENT mark are not one transaction, so a crash between them publishes it again (same id); use delivery = \"at_least_once\" with idempotent consumers, or mode = \"binlog\"",
            ));
        }
        Ok(())
    }

    /// `on_purged = "fill_from_table"` publishes rows the relay may have sent already:
    /// at least once, which exactly-once delivery must not be.
    fn validate_on_purged(&self) -> Result<(), ConfigError> {
        if self.source.on_purged == OnPurged::FillFromTable
            && self.kafka.delivery == DeliveryMode::ExactlyOnce
        {
            return Err(invalid(
                "source.on_purged",
                "\"fill_from_table\" publishes the outbox rows written since the checkpoint, some of which may be in Kafka already (at least once, same ids), which kafka.delivery = \"exactly_once\" promises never to do; use on_purged = \"stop\" (then `outbox-relay recover` from archived binlogs), or delivery = \"at_least_once\"",
            ));
        }
        Ok(())
    }

    fn validate_checkpoint(&self) -> Result<(), ConfigError> {
        let checkpoint = &self.checkpoint;
        let store = checkpoint.store.as_str();
        // Keys that belong to one store only, refused with the others: a key that would be
        // silently ignored usually means the store line is wrong.
        let set_keys: [(&str, bool, &str); 3] = [
            ("checkpoint.path", checkpoint.path.is_some(), "file"),
            ("checkpoint.url", checkpoint.url.is_some(), "mysql"),
            ("checkpoint.topic", checkpoint.topic.is_some(), "kafka"),
        ];
        if ["file", "mysql", "kafka"].contains(&store) {
            if let Some((key, _, owner)) = set_keys
                .iter()
                .find(|(_, set, owner)| *set && *owner != store)
            {
                return Err(invalid(
                    key,
                    format!(
                        "is a key of store = \"{owner}\", but store = \"{store}\"; remove it, or set store = \"{owner}\""
                    ),
                ));
            }
        }
        match store {
            "file" => {
                if checkpoint
                    .path
                    .as_deref()
                    .is_none_or(|p| p.as_os_str().is_empty())
                {
                    return Err(invalid(
                        "checkpoint.path",
                        "is required with store = \"file\", e.g. `/var/lib/outbox-relay/checkpoint.json`",
                    ));
                }
            }
            "mysql" => {
                if checkpoint.url.as_deref().is_none_or(str::is_empty) {
                    return Err(invalid(
                        "checkpoint.url",
                        "is required with store = \"mysql\", e.g. `mysql://relay@db:3306`",
                    ));
                }
                for (key, value) in [
                    ("checkpoint.database", &checkpoint.database),
                    ("checkpoint.table", &checkpoint.table),
                ] {
                    if value.is_empty()
                        || !value
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
                    {
                        return Err(invalid(
                            key,
                            format!("`{value}` must be a plain identifier (letters, digits, `_`)"),
                        ));
                    }
                }
                if checkpoint.connector.is_empty() {
                    return Err(invalid("checkpoint.connector", "must not be empty"));
                }
            }
            "kafka" => {
                let topic = checkpoint.kafka_topic();
                if !is_legal_topic_name(topic) {
                    return Err(invalid(
                        "checkpoint.topic",
                        format!(
                            "`{topic}` is not a Kafka topic name (1 to 249 letters, digits, `.`, `_`, `-`), e.g. `{}`",
                            outbox_kafka::DEFAULT_CHECKPOINT_TOPIC
                        ),
                    ));
                }
                if checkpoint.connector.is_empty() {
                    return Err(invalid(
                        "checkpoint.connector",
                        "must not be empty (it is the record key and names the transactional id)",
                    ));
                }
                if checkpoint.password_file.is_some()
                    || checkpoint.tls != crate::security::MysqlTlsConfig::default()
                {
                    return Err(invalid(
                        "checkpoint.tls",
                        "[checkpoint.tls] and checkpoint.password_file are for store = \"mysql\"; the Kafka store connects as [kafka] and [kafka.security] say",
                    ));
                }
            }
            other => {
                return Err(invalid(
                    "checkpoint.store",
                    format!("`{other}` is not `file`, `mysql` or `kafka`"),
                ))
            }
        }

        if self.kafka.delivery == DeliveryMode::ExactlyOnce {
            if checkpoint.store != "kafka" {
                return Err(invalid(
                    "kafka.delivery",
                    format!("\"exactly_once\" commits the checkpoint in the same Kafka transaction as the events, so it needs [checkpoint] store = \"kafka\" (now \"{}\"); set store = \"kafka\", or use delivery = \"at_least_once\"", checkpoint.store),
                ));
            }
            if self.kafka.transaction_max_records == 0 || self.kafka.transaction_max_bytes == 0 {
                return Err(invalid(
                    "kafka.transaction_max_records",
                    "kafka.transaction_max_records and kafka.transaction_max_bytes must be above 0",
                ));
            }
            if self.kafka.transaction_timeout_ms < 1_000 {
                return Err(invalid(
                    "kafka.transaction_timeout_ms",
                    format!("{} ms is too short for a transaction to be committed; use at least 1000 (default 60000)", self.kafka.transaction_timeout_ms),
                ));
            }
        }

        Ok(())
    }

    /// Settings that only need a lower bound, checked from one table: the key, its value,
    /// the minimum, and the default the fix suggests.
    fn check_lower_bounds(&self) -> Result<(), ConfigError> {
        let wide = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        let (source, kafka, pipeline) = (&self.source, &self.kafka, &self.pipeline);
        let bounds: [(&str, i64, i64, i64); 12] = [
            (
                "checkpoint.operation_timeout_ms",
                wide(self.checkpoint.operation_timeout_ms),
                1,
                wide(default_checkpoint_operation_timeout_ms()),
            ),
            (
                "source.heartbeat_interval_ms",
                wide(source.heartbeat_interval_ms),
                1,
                wide(default_heartbeat_interval_ms()),
            ),
            (
                "source.connect_timeout_ms",
                wide(source.connect_timeout_ms),
                1,
                wide(default_connect_timeout_ms()),
            ),
            (
                "kafka.topic_partitions",
                i64::from(kafka.topic_partitions),
                1,
                i64::from(default_topic_partitions()),
            ),
            (
                "kafka.topic_replication_factor",
                i64::from(kafka.topic_replication_factor),
                1,
                i64::from(default_topic_replication_factor()),
            ),
            (
                "kafka.stall_timeout_ms",
                wide(kafka.stall_timeout_ms),
                // Below about a second a rebuilt producer can stall before it even gets
                // its producer id, and the sink would rebuild it forever.
                1000,
                wide(default_stall_timeout_ms()),
            ),
            (
                "pipeline.max_in_flight",
                wide(pipeline.max_in_flight as u64),
                1,
                wide(default_max_in_flight() as u64),
            ),
            (
                "pipeline.max_in_flight_bytes",
                wide(pipeline.max_in_flight_bytes),
                1024 * 1024,
                wide(default_max_in_flight_bytes()),
            ),
            (
                "pipeline.commit_interval_ms",
                wide(pipeline.commit_interval_ms),
                1,
                wide(default_commit_interval_ms()),
            ),
            (
                "pipeline.commit_max_transactions",
                wide(pipeline.commit_max_transactions),
                1,
                wide(default_commit_max_transactions()),
            ),
            (
                "pipeline.channel_capacity",
                wide(pipeline.channel_capacity as u64),
                1,
                wide(default_channel_capacity() as u64),
            ),
            (
                "dead_letter.max_attempts",
                i64::from(self.dead_letter.max_attempts),
                1,
                i64::from(default_dead_letter_max_attempts()),
            ),
        ];
        match bounds
            .into_iter()
            .find(|(_, value, minimum, _)| value < minimum)
        {
            Some((key, value, minimum, default)) => Err(invalid(
                key,
                format!(
                    "{value} is too small: must be at least {minimum} ({default} is the default)"
                ),
            )),
            None => Ok(()),
        }
    }

    /// The tables the reader must decode: the configured outbox tables.
    pub fn table_filter(&self) -> TableFilter {
        TableFilter::tables(self.outbox_tables())
    }

    /// The configured outbox table names.
    pub fn outbox_tables(&self) -> Vec<TableName> {
        self.outbox.iter().map(|t| t.table.clone()).collect()
    }

    /// `[metrics] listen`, parsed.
    pub fn metrics_listen(&self) -> Option<SocketAddr> {
        self.metrics.listen.as_deref().and_then(|l| l.parse().ok())
    }
}

impl PipelineConfig {
    /// `shutdown_timeout_ms` as a duration.
    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_millis(self.shutdown_timeout_ms)
    }

    /// `commit_interval_ms` as a duration.
    pub fn commit_interval(&self) -> Duration {
        Duration::from_millis(self.commit_interval_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
[source]
url = "mysql://root@127.0.0.1:3306"

[[outbox]]
table = "shop.outbox"

[kafka]
brokers = "127.0.0.1:9092"

[checkpoint]
path = "/tmp/checkpoint.json"
"#;

    const FULL: &str = r#"
[source]
url = "mysql://root@127.0.0.1:3306"
server_id = 4242
start = "latest"
heartbeat_interval_ms = 1000
idle_timeout_ms = 30000

[[outbox]]
table = "shop.outbox"
preset = "seeds"

[route]
topic = "outbox.event.${aggregate_type}"

[kafka]
brokers = "127.0.0.1:9092"
create_topics = true
topic_partitions = 1
topic_replication_factor = 1
[kafka.properties]
"linger.ms" = "5"

[checkpoint]
store = "file"
path = "/var/lib/outbox-relay/checkpoint.json"

[metrics]
listen = "127.0.0.1:9187"

[pipeline]
max_in_flight = 10000
shutdown_timeout_ms = 30000
commit_interval_ms = 1000
commit_max_transactions = 1000
"#;

    #[test]
    fn the_documented_example_parses_with_its_values() {
        let config = RelayConfig::parse(FULL).unwrap();
        assert_eq!(config.source.server_id, 4242);
        assert_eq!(config.source.start_setting().unwrap(), StartSetting::Latest);
        assert_eq!(config.outbox.len(), 1);
        assert_eq!(
            config.outbox_tables(),
            vec![TableName::new("shop", "outbox")]
        );
        assert!(config.table_filter().matches("shop", "outbox"));
        assert!(!config.table_filter().matches("shop", "orders"));
        assert!(config.kafka.create_topics);
        assert_eq!(config.kafka.properties["linger.ms"], "5");
        assert_eq!(
            config.metrics_listen(),
            Some("127.0.0.1:9187".parse().unwrap())
        );
        assert_eq!(config.pipeline.max_in_flight, 10_000);
        assert_eq!(config.pipeline.commit_interval(), Duration::from_secs(1));
    }

    #[test]
    fn the_deploy_example_config_is_valid() {
        let text = include_str!("../../../deploy/outbox-relay.toml");
        let config = RelayConfig::parse(text).unwrap();
        assert_eq!(config.kafka.compression, "lz4");
        assert_eq!(config.dead_letter.topic, "outbox.dlq");
    }

    /// Issue 11 item 12: a property librdkafka refuses is refused at config load, naming
    /// the key and librdkafka's own reason.
    #[test]
    fn an_invalid_kafka_property_is_refused_at_load_with_librdkafkas_reason() {
        for (properties, key, reason) in [
            (
                "\"linger.ms\" = \"soon\"",
                "kafka.properties.\"linger.ms\"",
                "Invalid value for configuration property \"queue.buffering.max.ms\" (`linger.ms` = `soon`)",
            ),
            (
                "\"no.such.property\" = \"1\"",
                "kafka.properties.\"no.such.property\"",
                "No such configuration property: \"no.such.property\"",
            ),
        ] {
            let text = MINIMAL.replacen(
                "brokers = \"127.0.0.1:9092\"",
                &format!("brokers = \"127.0.0.1:9092\"\n[kafka.properties]\n{properties}"),
                1,
            );
            let error = RelayConfig::parse(&text).expect_err(properties).to_string();
            assert!(
                error.contains(key) && error.contains(reason),
                "`{error}` does not name {key} and `{reason}`"
            );
        }
    }

    /// Issue 11 item 1: properties that would bring back a delivery timeout or break
    /// ordering or idempotence are refused at load with the reason; harmless spellings of
    /// the protected values pass.
    #[test]
    fn order_breaking_kafka_properties_are_refused_with_the_reason() {
        let with_properties = |properties: &str| {
            MINIMAL.replacen(
                "brokers = \"127.0.0.1:9092\"",
                &format!("brokers = \"127.0.0.1:9092\"\n[kafka.properties]\n{properties}"),
                1,
            )
        };
        for (properties, reason) in [
            (
                "\"message.timeout.ms\" = \"30000\"",
                "kafka.stall_timeout_ms",
            ),
            (
                "\"delivery.timeout.ms\" = \"120000\"",
                "delivery timeout infinite",
            ),
            ("\"enable.idempotence\" = \"false\"", "must stay `true`"),
            ("\"acks\" = \"1\"", "must stay `all`"),
            ("\"request.required.acks\" = \"0\"", "must stay `all`"),
            (
                "\"enable.gapless.guarantee\" = \"false\"",
                "must stay `true`",
            ),
            ("\"max.in.flight\" = \"6\"", "1 to 5 requests in flight"),
            (
                "\"max.in.flight.requests.per.connection\" = \"100\"",
                "1 to 5 requests in flight",
            ),
            ("\"retries\" = \"3\"", "retry without limit"),
            ("\"transactional.id\" = \"relay\"", "outside transactions"),
        ] {
            let error = RelayConfig::parse(&with_properties(properties))
                .expect_err(properties)
                .to_string();
            let key = properties.split('"').nth(1).unwrap_or_default();
            assert!(
                error.contains(&format!("kafka.properties.\"{key}\"")) && error.contains(reason),
                "`{error}` does not name {key} and `{reason}`"
            );
        }
        for properties in [
            "\"acks\" = \"-1\"",
            "\"max.in.flight\" = \"1\"",
            "\"message.timeout.ms\" = \"0\"",
        ] {
            RelayConfig::parse(&with_properties(properties)).expect(properties);
        }
        let error = RelayConfig::parse(&MINIMAL.replacen(
            "brokers = \"127.0.0.1:9092\"",
            "brokers = \"127.0.0.1:9092\"\nmessage_timeout_ms = 30000",
            1,
        ))
        .expect_err("message_timeout_ms")
        .to_string();
        assert!(error.contains("stall_timeout_ms"), "{error}");
    }

    #[test]
    fn dead_letter_defaults_and_validation() {
        let config = RelayConfig::parse(MINIMAL).unwrap();
        assert!(config.dead_letter.enabled);
        assert_eq!(config.dead_letter.topic, "outbox.dlq");
        assert_eq!(config.dead_letter.max_attempts, 3);
        assert!(config.dead_letter.dead_letters("routing"));
        let with =
            |section: &str| RelayConfig::parse(&format!("{MINIMAL}\n[dead_letter]\n{section}"));
        let policy = with("fail_on = [\"routing\"]").unwrap();
        assert!(!policy.dead_letter.dead_letters("routing"));
        assert!(policy.dead_letter.dead_letters("message_too_large"));
        assert!(!with("enabled = false")
            .unwrap()
            .dead_letter
            .dead_letters("other"));
        for (section, key) in [
            ("max_attempts = 0", "dead_letter.max_attempts"),
            ("topic = \" \"", "dead_letter.topic"),
            ("fail_on = [\"routng\"]", "dead_letter.fail_on"),
        ] {
            let error = with(section).unwrap_err().to_string();
            assert!(error.contains(key), "{section}: {error}");
        }
        assert!(with("retries = 3")
            .unwrap_err()
            .to_string()
            .contains("retries"));
    }

    #[test]
    fn defaults_fill_every_optional_key() {
        let config = RelayConfig::parse(MINIMAL).unwrap();
        assert_eq!(config.source.server_id, 4242);
        assert_eq!(config.source.start, "latest");
        assert_eq!(config.source.heartbeat_interval_ms, 1000);
        assert_eq!(config.source.idle_timeout_ms, 30_000);
        assert!(!config.kafka.create_topics);
        assert_eq!(config.kafka.topic_partitions, 1);
        assert_eq!(config.checkpoint.store, "file");
        assert_eq!(config.checkpoint.database, "outbox_relay");
        assert_eq!(config.checkpoint.table, "relay_checkpoints");
        assert_eq!(config.checkpoint.connector, "default");
        assert_eq!(config.metrics.listen, None);
        assert_eq!(config.pipeline.max_in_flight, 10_000);
        assert_eq!(config.pipeline.shutdown_timeout_ms, 30_000);
        assert_eq!(config.pipeline.commit_max_transactions, 10_000);
    }

    #[test]
    fn the_kafka_store_needs_only_its_store_line() {
        let text = MINIMAL.replacen(
            "path = \"/tmp/checkpoint.json\"",
            "store = \"kafka\"\nconnector = \"orders\"",
            1,
        );
        let config = RelayConfig::parse(&text).unwrap();
        assert_eq!(config.checkpoint.kafka_topic(), "outbox-relay-checkpoints");
        let settings = crate::stores::kafka_store_settings(&config.checkpoint, &config.kafka);
        assert_eq!(settings.connector, "orders");
        assert_eq!(
            settings.replication_factor,
            config.kafka.topic_replication_factor
        );
        assert!(settings
            .client_properties
            .contains(&("bootstrap.servers".to_owned(), config.kafka.brokers.clone())));
        assert!(
            !settings
                .client_properties
                .iter()
                .any(|(key, _)| key == "enable.idempotence" || key == "linger.ms"),
            "producer settings of the sink leak into the store: {:?}",
            settings.client_properties
        );
        let named = text.replacen(
            "connector = \"orders\"",
            "connector = \"orders\"\ntopic = \"ops.checkpoints\"",
            1,
        );
        assert_eq!(
            RelayConfig::parse(&named).unwrap().checkpoint.kafka_topic(),
            "ops.checkpoints"
        );
    }

    /// Each case: a replacement applied to MINIMAL (or extra lines appended) and a piece
    /// of the expected error message (the key it names).
    #[test]
    fn invalid_values_name_the_key() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "url = \"mysql://root@127.0.0.1:3306\"",
                "url = \"postgres://x\"",
                "source.url",
            ),
            (
                "[source]\n",
                "[source]\nserver_id = 0\n",
                "source.server_id",
            ),
            (
                "[source]\n",
                "[source]\nstart = \"middle\"\n",
                "source.start",
            ),
            (
                "[source]\n",
                "[source]\nstart = \"file:binlog.000001\"\n",
                "source.start",
            ),
            (
                "[source]\n",
                "[source]\nstart = \"file:binlog.000001:2\"\n",
                "source.start",
            ),
            (
                "[source]\n",
                "[source]\nstart = \"gtid:nonsense\"\n",
                "source.start",
            ),
            (
                "[source]\n",
                "[source]\nheartbeat_interval_ms = 5000\nidle_timeout_ms = 1000\n",
                "source.idle_timeout_ms",
            ),
            (
                "brokers = \"127.0.0.1:9092\"",
                "brokers = \"127.0.0.1:9092\"\ndelivery = \"exactly_once\"",
                "kafka.delivery",
            ),
            (
                "brokers = \"127.0.0.1:9092\"",
                "brokers = \" \"",
                "kafka.brokers",
            ),
            (
                "brokers = \"127.0.0.1:9092\"",
                "brokers = \"b:9092\"\ntopic_partitions = 0",
                "kafka.topic_partitions",
            ),
            (
                "brokers = \"127.0.0.1:9092\"",
                "brokers = \"b:9092\"\ncompression = \"brotli\"",
                "kafka.compression",
            ),
            (
                "brokers = \"127.0.0.1:9092\"",
                "brokers = \"b:9092\"\n[kafka.properties]\n\"acks\" = \"1\"",
                "kafka.properties.\"acks\"",
            ),
            (
                "brokers = \"127.0.0.1:9092\"",
                "brokers = \"b:9092\"\nstall_timeout_ms = 500",
                "kafka.stall_timeout_ms",
            ),
            (
                "brokers = \"127.0.0.1:9092\"",
                "brokers = \"b:9092\"\nmessage_timeout_ms = 30000",
                "kafka.message_timeout_ms",
            ),
            (
                "brokers = \"127.0.0.1:9092\"",
                "brokers = \"b:9092\"\n[kafka.properties]\n\"enable.idempotence\" = \"false\"",
                "enable.idempotence",
            ),
            (
                "path = \"/tmp/checkpoint.json\"",
                "store = \"file\"",
                "checkpoint.path",
            ),
            (
                "path = \"/tmp/checkpoint.json\"",
                "store = \"mysql\"",
                "checkpoint.url",
            ),
            (
                "path = \"/tmp/checkpoint.json\"",
                "store = \"mysql\"\nurl = \"mysql://x@y\"\ntable = \"bad name\"",
                "checkpoint.table",
            ),
            (
                "path = \"/tmp/checkpoint.json\"",
                "store = \"redis\"",
                "checkpoint.store",
            ),
            (
                "path = \"/tmp/checkpoint.json\"",
                "store = \"kafka\"\npath = \"/tmp/checkpoint.json\"",
                "checkpoint.path",
            ),
            (
                "path = \"/tmp/checkpoint.json\"",
                "path = \"/tmp/checkpoint.json\"\ntopic = \"checkpoints\"",
                "checkpoint.topic",
            ),
            (
                "path = \"/tmp/checkpoint.json\"",
                "store = \"mysql\"\nurl = \"mysql://x@y\"\ntopic = \"checkpoints\"",
                "checkpoint.topic",
            ),
            (
                "path = \"/tmp/checkpoint.json\"",
                "store = \"kafka\"\nurl = \"mysql://x@y\"",
                "checkpoint.url",
            ),
            (
                "path = \"/tmp/checkpoint.json\"",
                "store = \"kafka\"\ntopic = \"bad topic\"",
                "checkpoint.topic",
            ),
            (
                "path = \"/tmp/checkpoint.json\"",
                "store = \"kafka\"\nconnector = \"\"",
                "checkpoint.connector",
            ),
        ];
        for (from, to, key) in cases {
            assert!(MINIMAL.contains(from), "case {to}: `{from}` not in MINIMAL");
            let text = MINIMAL.replacen(from, to, 1);
            let error = RelayConfig::parse(&text).expect_err(to).to_string();
            assert!(
                error.contains(key),
                "case {to}: `{error}` does not name {key}"
            );
        }
        let appended: &[(&str, &str)] = &[
            ("[metrics]\nlisten = \"localhost\"\n", "metrics.listen"),
            ("[pipeline]\nmax_in_flight = 0\n", "pipeline.max_in_flight"),
            (
                "[pipeline]\ncommit_interval_ms = 0\n",
                "pipeline.commit_interval_ms",
            ),
            (
                "[pipeline]\ncommit_max_transactions = 0\n",
                "pipeline.commit_max_transactions",
            ),
            (
                "[pipeline]\nchannel_capacity = 0\n",
                "pipeline.channel_capacity",
            ),
            (
                "[pipeline]\nmax_in_flight_bytes = 1000\n",
                "pipeline.max_in_flight_bytes",
            ),
            (
                "[dead_letter]\nmax_attempts = 0\n",
                "dead_letter.max_attempts",
            ),
        ];
        for (extra, key) in appended {
            let text = format!("{MINIMAL}{extra}");
            let error = RelayConfig::parse(&text).expect_err(extra).to_string();
            assert!(
                error.contains(key),
                "case {extra}: `{error}` does not name {key}"
            );
        }
    }

    #[test]
    fn unknown_keys_and_missing_sections_are_rejected() {
        let typo = MINIMAL.replace("[kafka]\n", "[kafka]\nbroker_list = \"x\"\n");
        let error = RelayConfig::parse(&typo).unwrap_err().to_string();
        assert!(error.contains("broker_list"), "{error}");
        let top = format!("{MINIMAL}\n[extra]\nx = 1\n");
        assert!(RelayConfig::parse(&top).is_err());
        let no_outbox = MINIMAL.replace("[[outbox]]\ntable = \"shop.outbox\"\n", "");
        let error = RelayConfig::parse(&no_outbox).unwrap_err().to_string();
        assert!(error.contains("outbox"), "{error}");
        let bad_table = MINIMAL.replace("shop.outbox", "outbox");
        assert!(RelayConfig::parse(&bad_table).is_err());
        let twice = MINIMAL.replace(
            "[[outbox]]\ntable = \"shop.outbox\"\n",
            "[[outbox]]\ntable = \"shop.outbox\"\n[[outbox]]\ntable = \"shop.outbox\"\n",
        );
        assert!(
            RelayConfig::parse(&twice).is_err(),
            "duplicate table accepted"
        );
    }

    #[test]
    fn start_settings_parse() {
        assert_eq!(StartSetting::parse("earliest"), Ok(StartSetting::Earliest));
        assert_eq!(
            StartSetting::parse("file:binlog.000001:4"),
            Ok(StartSetting::Position(BinlogPosition::new(
                "binlog.000001",
                4
            )))
        );
        assert_eq!(
            StartSetting::parse("gtid:0-1-5"),
            Ok(StartSetting::Gtid("0-1-5".into()))
        );
        assert_eq!(
            StartSetting::parse("gtid:3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"),
            Ok(StartSetting::Gtid(
                "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5".into()
            ))
        );
        assert!(StartSetting::parse("gtid:").is_err());
        assert!(StartSetting::parse("file::4").is_err());
    }

    #[test]
    fn passwords_are_merged_from_env_and_never_shown() {
        assert_eq!(
            redact_url("mysql://repl:s3cret@db:3306/x"),
            "mysql://repl:***@db:3306/x"
        );
        assert_eq!(redact_url("mysql://repl@db:3306"), "mysql://repl@db:3306");
        assert_eq!(
            with_password("mysql://repl@db:3306", "p@ss word"),
            "mysql://repl:p%40ss%20word@db:3306"
        );
        assert_eq!(
            with_password("mysql://repl:given@db:3306", "other"),
            "mysql://repl:given@db:3306"
        );
        let config = RelayConfig::parse(&MINIMAL.replace(
            "mysql://root@127.0.0.1:3306",
            "mysql://root:hunter2@127.0.0.1:3306",
        ))
        .unwrap();
        let debug = format!("{:?}", config.source);
        assert!(!debug.contains("hunter2"), "{debug}");
    }
}
