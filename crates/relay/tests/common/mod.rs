//! Shared harness of the relay's process-level tests: a shop schema on a scratch MariaDB, a
//! transaction writer that remembers what it committed and rolled back, the relay binary as a
//! child process (`outbox-relay run --config FILE`), `checkpoint show`, and the delivery
//! verdict (no loss, no rolled-back event, duplicates identical, per-key order) computed from
//! an independent rdkafka consumer's view ([`outbox_testkit::consume::read_all`]).
//!
//! # Topics
//! Tests share one Kafka broker per test binary ([`KafkaBroker::shared`]), so each test's
//! topics carry its scratch database's unique tag: `TAG.outbox.event.TYPE` ([`topic_for`])
//! and `TAG.outbox.dlq` ([`dlq_topic`]). Tests that stop, kill or freeze their broker start a
//! private one ([`start_shop_database_and_private_broker`]).
//!
//! Every failure message carries the evidence: counts, missing ids, the checkpoint, the tail of
//! the relay's log.
//!
//! # Knobs for a post-mortem (environment variables)
//! * `OUTBOX_TEST_KEEP=1`: keep each relay's directory (config, checkpoint, full log); failure
//!   messages print its path.
//! * `OUTBOX_TEST_RELAY_LOG=info,librdkafka=debug`: the relay's `RUST_LOG` (default `info`).
//! * `OUTBOX_TEST_KAFKA_DEBUG=eos,msg,broker`: librdkafka's `debug` property for the relay
//!   (its lines need `librdkafka=debug` in the log filter to show).
//! * `OUTBOX_TEST_KAFKA_BOOTSTRAP=host:port`: use that cluster as the shared broker instead
//!   of starting one (see `outbox_testkit::kafka`).
//!
//! # Needs
//! A JRE and the Kafka jars (`scripts/test.sh` installs them; `scripts/fetch-jars.sh` resolves
//! the jars) and MariaDB server binaries; every test starts its own scratch MariaDB, and
//! shares a broker on free loopback ports with the other tests of its binary.

#![allow(dead_code)] // Each test binary uses a different part of the harness.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use outbox_testkit::consume::{console_consume, read_all, ConsumedRecord, ReadStop};
use outbox_testkit::kafka::KafkaBroker;
use outbox_testkit::ScratchMariadb;

/// The relay binary under test.
pub const RELAY_BIN: &str = env!("CARGO_BIN_EXE_outbox-relay");

/// The schema every test uses: an orders table, the outbox, and a look-alike table that is
/// **not** configured as an outbox (its rows must never reach Kafka).
pub const SHOP_SCHEMA: &[&str] = &[
    "CREATE DATABASE shop",
    "CREATE TABLE shop.orders (id BIGINT NOT NULL PRIMARY KEY, customer VARCHAR(64) NOT NULL, \
     total DECIMAL(12,2) NOT NULL) ENGINE=InnoDB",
    "CREATE TABLE shop.outbox (event_id VARCHAR(64) NOT NULL PRIMARY KEY, \
     aggregate_type VARCHAR(64) NOT NULL, aggregate_id VARCHAR(64) NOT NULL, \
     event_type VARCHAR(64) NOT NULL, payload JSON NOT NULL, \
     created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), \
     KEY outbox_created_at_idx (created_at)) ENGINE=InnoDB",
    "CREATE TABLE shop.outbox_archive LIKE shop.outbox",
];

/// The topic the relay's route template gives an aggregate type in the test of `db`.
pub fn topic_for(db: &ScratchMariadb, aggregate_type: &str) -> String {
    topic_in(db.tag(), aggregate_type)
}

/// `TAG.outbox.event.TYPE`: the topic of an aggregate type under a test's topic tag.
pub fn topic_in(tag: &str, aggregate_type: &str) -> String {
    format!("{tag}.outbox.event.{aggregate_type}")
}

/// The dead-letter topic of the test of `db`.
pub fn dlq_topic(db: &ScratchMariadb) -> String {
    format!("{}.outbox.dlq", db.tag())
}

/// Starts a scratch MariaDB with [`SHOP_SCHEMA`].
pub async fn start_shop_database() -> ScratchMariadb {
    let db = ScratchMariadb::start()
        .await
        .expect("scratch MariaDB starts");
    db.exec(SHOP_SCHEMA).await.expect("shop schema");
    db
}

/// Starts a scratch MariaDB with [`SHOP_SCHEMA`], and the shared broker if it is not running
/// yet, side by side.
pub async fn start_shop_database_and_broker() -> (ScratchMariadb, &'static KafkaBroker) {
    let (db, broker) = tokio::join!(start_shop_database(), KafkaBroker::shared());
    (db, broker.expect("the shared Kafka broker starts"))
}

/// Starts a scratch MariaDB with [`SHOP_SCHEMA`] and a private Kafka broker (for tests that
/// stop, kill or freeze it) side by side.
pub async fn start_shop_database_and_private_broker() -> (ScratchMariadb, KafkaBroker) {
    let (db, broker) = tokio::join!(start_shop_database(), KafkaBroker::start());
    (db, broker.expect("a private Kafka broker starts"))
}

/// One outbox event as the test wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// `event_id`: expected as header `id`.
    pub id: String,
    /// `aggregate_type`: selects the topic.
    pub aggregate_type: String,
    /// `aggregate_id`: expected as the record key.
    pub aggregate_id: String,
    /// `event_type`.
    pub event_type: String,
    /// `payload`: expected byte-exact as the record value.
    pub payload: String,
    /// The test's topic tag ([`ScratchMariadb::tag`]): the event's topic is
    /// `TAG.outbox.event.TYPE`.
    pub topic_tag: String,
}

impl Event {
    /// The topic this event must arrive on.
    pub fn topic(&self) -> String {
        topic_in(&self.topic_tag, &self.aggregate_type)
    }
}

/// A JSON payload with characters that catch re-encoding: odd whitespace, escapes, non-ASCII.
pub fn tricky_payload(order_id: u64, sequence: u64) -> String {
    format!(
        "{{\"orderId\": {order_id},  \"seq\":{sequence}, \"note\": \"caf\u{e9} \u{2603} \\\"quoted\\\" \\n tab\\t\", \
         \"amount\": 12.50, \"tags\": [ \"a\",\"b\" ]}}"
    )
}

/// The aggregate types [`ShopWriter::alternating_transaction`] alternates between.
pub const ALTERNATING_AGGREGATE_TYPES: [&str; 2] = ["order", "customer"];

/// The seeds schema's event columns, in the order [`insert_event`] takes them.
pub const SEEDS_EVENT_COLUMNS: [&str; 5] = [
    "event_id",
    "aggregate_type",
    "aggregate_id",
    "event_type",
    "payload",
];

/// Inserts `event` into `table` on `conn` (inside whatever transaction `conn` has open);
/// `columns` names the table's event id, aggregate type, aggregate id, event type and payload
/// columns, in this order.
pub async fn insert_event(
    conn: &mut mysql_async::Conn,
    table: &str,
    columns: [&str; 5],
    event: &Event,
) -> mysql_async::Result<()> {
    conn.exec_drop(
        format!(
            "INSERT INTO {table} ({}) VALUES (?, ?, ?, ?, ?)",
            columns.join(", ")
        ),
        (
            &event.id,
            &event.aggregate_type,
            &event.aggregate_id,
            &event.event_type,
            &event.payload,
        ),
    )
    .await
}

/// Commits (or rolls back) shop transactions on one connection and remembers every event it
/// wrote, in commit order.
pub struct ShopWriter {
    /// The writer's own connection: transactions are sequential, so commit order is known.
    conn: mysql_async::Conn,
    /// Makes ids unique across writers and test phases.
    prefix: String,
    /// The test's topic tag, copied into every [`Event`] it writes.
    topic_tag: String,
    /// Next order id / event sequence number.
    next: u64,
    /// Events of committed transactions, in commit order.
    pub committed: Vec<Event>,
    /// Events of rolled-back transactions: must never arrive.
    pub rolled_back: Vec<Event>,
    /// Rows written to `shop.outbox_archive` (not an outbox table): must never arrive.
    pub not_outbox: Vec<Event>,
}

impl ShopWriter {
    /// Connects to the scratch database.
    pub async fn connect(db: &ScratchMariadb, prefix: &str) -> ShopWriter {
        let conn = mysql_async::Conn::from_url(db.url())
            .await
            .expect("writer connects");
        ShopWriter {
            conn,
            prefix: prefix.to_string(),
            topic_tag: db.tag().to_string(),
            next: 0,
            committed: Vec::new(),
            rolled_back: Vec::new(),
            not_outbox: Vec::new(),
        }
    }

    /// One business transaction: an order row plus `events` outbox rows for aggregate
    /// `aggregate_type`/`aggregate_id`, and (when `with_archive_row`) a row in the non-outbox
    /// look-alike table; committed or rolled back.
    pub async fn transaction(
        &mut self,
        aggregate_type: &str,
        aggregate_id: &str,
        events: usize,
        commit: bool,
        with_archive_row: bool,
    ) -> Vec<Event> {
        self.next += 1;
        let order_id = self.next;
        let mut written = Vec::with_capacity(events);
        self.conn
            .query_drop("START TRANSACTION")
            .await
            .expect("begin");
        self.conn
            .exec_drop(
                "INSERT INTO shop.orders (id, customer, total) VALUES (?, ?, ?)",
                (
                    order_id + hash_prefix(&self.prefix),
                    format!("customer-{aggregate_id}"),
                    "19.99",
                ),
            )
            .await
            .expect("insert order");
        for _ in 0..events {
            self.next += 1;
            let event = Event {
                id: format!("{}-{:07}", self.prefix, self.next),
                aggregate_type: aggregate_type.to_string(),
                aggregate_id: aggregate_id.to_string(),
                event_type: if commit {
                    "OrderCreated"
                } else {
                    "OrderDoomed"
                }
                .to_string(),
                payload: tricky_payload(order_id, self.next),
                topic_tag: self.topic_tag.clone(),
            };
            insert_event(&mut self.conn, "shop.outbox", SEEDS_EVENT_COLUMNS, &event)
                .await
                .expect("insert outbox row");
            written.push(event);
        }
        if with_archive_row {
            self.next += 1;
            let archived = Event {
                id: format!("{}-archive-{:07}", self.prefix, self.next),
                aggregate_type: aggregate_type.to_string(),
                aggregate_id: aggregate_id.to_string(),
                event_type: "Archived".to_string(),
                payload: "{\"archived\":true}".to_string(),
                topic_tag: self.topic_tag.clone(),
            };
            insert_event(
                &mut self.conn,
                "shop.outbox_archive",
                SEEDS_EVENT_COLUMNS,
                &archived,
            )
            .await
            .expect("insert archive row");
            if commit {
                self.not_outbox.push(archived);
            }
        }
        if commit {
            self.conn.query_drop("COMMIT").await.expect("commit");
            self.committed.extend(written.iter().cloned());
        } else {
            self.conn.query_drop("ROLLBACK").await.expect("rollback");
            self.rolled_back.extend(written.iter().cloned());
        }
        written
    }

    /// Transaction number `index` of a mixed workload: aggregate type `order` for even
    /// indexes and `customer` for odd ones, aggregate id `<type>-<index % 3>`; the rest as in
    /// [`ShopWriter::transaction`].
    pub async fn alternating_transaction(
        &mut self,
        index: u32,
        events: usize,
        commit: bool,
        with_archive_row: bool,
    ) -> Vec<Event> {
        let aggregate_type = ALTERNATING_AGGREGATE_TYPES[(index % 2) as usize];
        self.transaction(
            aggregate_type,
            &format!("{aggregate_type}-{}", index % 3),
            events,
            commit,
            with_archive_row,
        )
        .await
    }

    /// The server's binlog position now (after everything this writer committed).
    pub async fn master_position(&mut self) -> BinlogPoint {
        master_position(&mut self.conn).await
    }

    /// Everything this writer wrote that must never reach Kafka: events of rolled-back
    /// transactions, then rows of the non-outbox look-alike table.
    pub fn must_not_arrive(&self) -> Vec<Event> {
        let mut forbidden = self.rolled_back.clone();
        forbidden.extend(self.not_outbox.iter().cloned());
        forbidden
    }

    /// Closes the connection.
    pub async fn close(self) {
        let _ = self.conn.disconnect().await;
    }
}

/// Spreads order ids of different writers apart (orders.id is a primary key).
fn hash_prefix(prefix: &str) -> u64 {
    prefix.bytes().fold(0u64, |acc, b| {
        acc.wrapping_mul(31).wrapping_add(u64::from(b))
    }) % 1_000_000
        * 1_000_000
}

/// A binlog file + position, comparable (binlog file names are zero-padded).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BinlogPoint {
    /// e.g. `binlog.000001`.
    pub file: String,
    /// Byte offset.
    pub position: u64,
}

impl std::fmt::Display for BinlogPoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.position)
    }
}

/// `SHOW MASTER STATUS` on `conn`.
pub async fn master_position(conn: &mut mysql_async::Conn) -> BinlogPoint {
    let row: mysql_async::Row = conn
        .query_first("SHOW MASTER STATUS")
        .await
        .expect("SHOW MASTER STATUS")
        .expect("binlog enabled");
    BinlogPoint {
        file: row.get::<String, _>(0).expect("File column"),
        position: row.get::<u64, _>(1).expect("Position column"),
    }
}

/// Runs `outbox-relay ARGS...` to completion: (exit code, stdout, stderr).
pub fn run_relay_command(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(RELAY_BIN)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run outbox-relay");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The relay's config file, written in the fixed shape the relay documents.
#[derive(Debug, Clone)]
pub struct RelaySetup {
    /// `[source] url`.
    pub mysql_url: String,
    /// `[kafka] brokers`.
    pub brokers: String,
    /// `[kafka] create_topics` (false against the mock cluster, which has no CreateTopics).
    pub create_topics: bool,
    /// Extra `[kafka.properties]` besides `linger.ms`.
    pub kafka_properties: Vec<(String, String)>,
    /// `[pipeline] commit_interval_ms`.
    pub commit_interval_ms: u64,
    /// The relay's `RUST_LOG` (default `info`, or `$OUTBOX_TEST_RELAY_LOG`).
    pub log_filter: String,
    /// `[pipeline] shutdown_timeout_ms` when set (the relay's default otherwise).
    pub shutdown_timeout_ms: Option<u64>,
    /// `[source] start` (first run only): `earliest`, `latest`, `file:NAME:POS`, `gtid:SET`.
    pub start: String,
    /// `[kafka] topic_partitions` for the topics the relay creates.
    pub topic_partitions: i32,
    /// `Some(url)`: `[checkpoint] store = "mysql"` on that server instead of the file store.
    pub mysql_checkpoint_url: Option<String>,
    /// `Some(topic)`: `[checkpoint] store = "kafka"` on that topic (connector: the topic
    /// name, unique per test) instead of the file store.
    pub kafka_checkpoint_topic: Option<String>,
    /// `Some(addr)`: `[metrics] listen = addr`.
    pub metrics_listen: Option<String>,
    /// More `[[outbox]]` tables besides `shop.outbox`: (table, preset).
    pub extra_outbox_tables: Vec<(String, String)>,
    /// More `[route]` lines (TOML), e.g. `payload = "require_json"`.
    pub route_extra: Vec<String>,
    /// The test's topic tag: the route template is `TAG.outbox.event.${aggregate_type}` and
    /// the dead-letter topic `TAG.outbox.dlq` (empty: no tag, the relay's own names).
    pub topic_tag: String,
    /// `Some(lines)`: `[source] mode = "poll"` with these `[source.poll]` lines, and no
    /// `[checkpoint]` section.
    pub poll: Option<Vec<String>>,
    /// More `[kafka]` lines (TOML), e.g. `stall_timeout_ms = 3000`.
    pub kafka_extra: Vec<String>,
}

impl RelaySetup {
    /// The producer takes records of up to 100 MB (`message.max.bytes`): big payloads.
    pub fn allow_big_records(&mut self) {
        self.kafka_properties
            .push(("message.max.bytes".into(), "100000000".into()));
    }

    /// The usual setup against `brokers`: earliest start, topics created by the relay.
    /// `OUTBOX_TEST_KAFKA_DEBUG=eos,msg,broker` adds librdkafka's `debug` property (for
    /// diagnosing a failing test from the relay log).
    pub fn new(db: &ScratchMariadb, brokers: &str) -> RelaySetup {
        let mut setup = RelaySetup::with_url(&db.url(), brokers);
        setup.topic_tag = db.tag().to_string();
        setup
    }

    /// [`RelaySetup::new`] for a source that is not a scratch database (an unreachable
    /// address, for the startup-failure tests); topics keep the relay's own names.
    pub fn with_url(mysql_url: &str, brokers: &str) -> RelaySetup {
        let mut kafka_properties = Vec::new();
        if let Ok(debug) = std::env::var("OUTBOX_TEST_KAFKA_DEBUG") {
            kafka_properties.push(("debug".to_string(), debug));
        }
        RelaySetup {
            mysql_url: mysql_url.to_string(),
            brokers: brokers.to_string(),
            create_topics: true,
            kafka_properties,
            commit_interval_ms: 200,
            log_filter: std::env::var("OUTBOX_TEST_RELAY_LOG")
                .unwrap_or_else(|_| "info".to_string()),
            shutdown_timeout_ms: None,
            start: "earliest".to_string(),
            topic_partitions: 1,
            mysql_checkpoint_url: None,
            kafka_checkpoint_topic: None,
            metrics_listen: None,
            extra_outbox_tables: Vec::new(),
            route_extra: Vec::new(),
            topic_tag: String::new(),
            poll: None,
            kafka_extra: Vec::new(),
        }
    }
}

/// A relay's working directory: config, checkpoint file, log; and the running process.
pub struct Relay {
    /// Owns config, checkpoint and log files for the test's lifetime.
    pub dir: tempfile::TempDir,
    /// The config file passed with `--config`.
    pub config_path: PathBuf,
    /// The checkpoint file the config names.
    pub checkpoint_path: PathBuf,
    /// All runs' stdout+stderr, appended (one log for the whole test).
    pub log_path: PathBuf,
    /// The running relay process, if any.
    child: Option<Child>,
    /// How many times the relay was started.
    pub starts: u32,
    /// `RUST_LOG` for the relay process (from [`RelaySetup::log_filter`]).
    log_filter: String,
}

impl Relay {
    /// Writes the config; does not start the process.
    pub fn prepare(setup: &RelaySetup) -> Relay {
        // OUTBOX_TEST_KEEP=1 keeps config, checkpoint and the full relay log for a post-mortem.
        let dir = tempfile::Builder::new()
            .prefix("outbox-relay-test-")
            .disable_cleanup(std::env::var_os("OUTBOX_TEST_KEEP").is_some())
            .tempdir()
            .expect("tempdir");
        let config_path = dir.path().join("relay.toml");
        let checkpoint_path = dir.path().join("checkpoint.json");
        let log_path = dir.path().join("relay.log");
        let mut properties = String::from("\"linger.ms\" = \"5\"\n");
        for (key, value) in &setup.kafka_properties {
            properties.push_str(&format!("\"{key}\" = \"{value}\"\n"));
        }
        let config = format!(
            r#"[source]
url = "{url}"
server_id = 4242
start = "{start}"
heartbeat_interval_ms = 1000
idle_timeout_ms = 30000
{source_mode}
[[outbox]]
table = "shop.outbox"
preset = "seeds"
{extra_outbox}
[route]
topic = "{topic_prefix}outbox.event.${{aggregate_type}}"
{route_extra}

[dead_letter]
topic = "{topic_prefix}outbox.dlq"

[kafka]
brokers = "{brokers}"
create_topics = {create_topics}
topic_partitions = {topic_partitions}
topic_replication_factor = 1
{kafka_extra}

[kafka.properties]
{properties}
{checkpoint_section}{metrics_section}
[pipeline]
max_in_flight = 10000
commit_interval_ms = {commit_interval_ms}
{shutdown_timeout}"#,
            url = setup.mysql_url,
            topic_prefix = if setup.topic_tag.is_empty() {
                String::new()
            } else {
                format!("{}.", setup.topic_tag)
            },
            brokers = setup.brokers,
            create_topics = setup.create_topics,
            extra_outbox = setup
                .extra_outbox_tables
                .iter()
                .map(|(table, preset)| {
                    format!("\n[[outbox]]\ntable = \"{table}\"\npreset = \"{preset}\"\n")
                })
                .collect::<String>(),
            route_extra = setup.route_extra.join("\n"),
            kafka_extra = setup.kafka_extra.join("\n"),
            metrics_section = setup
                .metrics_listen
                .as_ref()
                .map(|listen| format!("[metrics]\nlisten = \"{listen}\"\n"))
                .unwrap_or_default(),
            source_mode = match &setup.poll {
                Some(lines) => format!("mode = \"poll\"\n\n[source.poll]\n{}\n", lines.join("\n")),
                None => String::new(),
            },
            checkpoint_section = match (&setup.mysql_checkpoint_url, &setup.kafka_checkpoint_topic) {
                _ if setup.poll.is_some() => String::new(),
                (Some(url), _) => format!(
                    "[checkpoint]\nstore = \"mysql\"\nurl = \"{url}\"\ndatabase = \"outbox_relay\"\n\
                     table = \"relay_checkpoints\"\nconnector = \"test\"\n"
                ),
                // The connector names the store's transactional id: one per test (the topic
                // is), or tests on the shared broker would fence each other.
                (None, Some(topic)) => format!(
                    "[checkpoint]\nstore = \"kafka\"\ntopic = \"{topic}\"\nconnector = \"{topic}\"\n"
                ),
                (None, None) => format!(
                    "[checkpoint]\nstore = \"file\"\npath = \"{}\"\n",
                    checkpoint_path.display()
                ),
            },
            commit_interval_ms = setup.commit_interval_ms,
            start = setup.start,
            topic_partitions = setup.topic_partitions,
            shutdown_timeout = setup
                .shutdown_timeout_ms
                .map(|ms| format!("shutdown_timeout_ms = {ms}\n"))
                .unwrap_or_default(),
        );
        std::fs::write(&config_path, config).expect("write config");
        Relay {
            dir,
            config_path,
            checkpoint_path,
            log_path,
            child: None,
            starts: 0,
            log_filter: setup.log_filter.clone(),
        }
    }

    /// Starts `outbox-relay run --config FILE` (stdout/stderr appended to the log).
    pub fn start(&mut self) {
        self.start_with_env(&[]);
    }

    /// [`Relay::start`] with extra environment variables (e.g. a crash point).
    pub fn start_with_env(&mut self, vars: &[(&str, &str)]) {
        assert!(self.child.is_none(), "relay already running");
        self.starts += 1;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .expect("open relay log");
        use std::io::Write;
        writeln!(
            log,
            "===== test harness: relay start #{} =====",
            self.starts
        )
        .ok();
        let stderr = log.try_clone().expect("dup log");
        let child = Command::new(RELAY_BIN)
            .arg("run")
            .arg("--config")
            .arg(&self.config_path)
            .env("RUST_LOG", &self.log_filter)
            .env("NO_COLOR", "1")
            .envs(vars.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("spawn outbox-relay");
        self.child = Some(child);
    }

    /// The running process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// If the relay exited on its own, its status (and the process is forgotten).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().expect("try_wait")?;
        self.child = None;
        Some(status)
    }

    /// Panics with the log tail when the relay process died on its own.
    pub fn assert_running(&mut self, context: &str) {
        if let Some(status) = self.exited() {
            panic!(
                "{context}: the relay exited on its own with {status}; log tail:\n{}",
                self.log_tail(40)
            );
        }
    }

    /// SIGTERM, then waits up to `limit` for the exit status (SIGKILL and panic on timeout).
    pub async fn terminate(&mut self, limit: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("relay running");
        signal(child.id(), "TERM");
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return status;
            }
            if started.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "relay did not exit within {limit:?} after SIGTERM; log tail:\n{}",
                    self.log_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM (waiting up to 30 s) and asserts a successful exit; `context` leads the
    /// failure message.
    pub async fn stop_gracefully(&mut self, context: &str) {
        let status = self.terminate(Duration::from_secs(30)).await;
        assert!(status.success(), "{context}: {status}");
    }

    /// Sends `kill -NAME` to the running relay without waiting for it.
    pub fn send_signal(&self, name: &str) {
        signal(self.pid().expect("relay running"), name);
    }

    /// `kill -9`: a crash, no final checkpoint.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The last `lines` lines of the relay log, headed by the log's path.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        format!(
            "({}; OUTBOX_TEST_KEEP=1 keeps it)\n{}",
            self.log_path.display(),
            all[all.len().saturating_sub(lines)..].join("\n")
        )
    }

    /// `[pipeline] max_in_flight_bytes = bytes`.
    pub fn limit_in_flight_bytes(&self, bytes: u64) {
        self.edit_config(&[(
            "max_in_flight = 10000",
            &format!("max_in_flight = 10000\nmax_in_flight_bytes = {bytes}"),
        )]);
    }

    /// Rewrites the config file: each `(from, to)` replaces the first `from` (which must be
    /// there), for tests of settings the harness does not model.
    pub fn edit_config(&self, edits: &[(&str, &str)]) {
        let mut text = std::fs::read_to_string(&self.config_path).expect("read config");
        for (from, to) in edits {
            assert!(text.contains(from), "config has no `{from}`:\n{text}");
            text = text.replacen(from, to, 1);
        }
        std::fs::write(&self.config_path, text).expect("write config");
    }

    /// Waits up to `limit` for the relay to exit on its own; panics (killing it) if it is
    /// still running then.
    pub async fn wait_for_exit(&mut self, limit: Duration) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            if started.elapsed() > limit {
                let tail = self.log_tail(30);
                self.kill9();
                panic!("the relay still ran after {limit:?}; log tail:\n{tail}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The whole relay log (all runs).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// `outbox-relay checkpoint show --config FILE`.
    pub fn checkpoint(&self) -> CheckpointView {
        checkpoint_show(&self.config_path)
    }

    /// `checkpoint show`'s output or error, for a failure message (poll mode has none).
    pub fn checkpoint_evidence(&self) -> String {
        let (code, stdout, stderr) = run_relay_command(&[
            "checkpoint",
            "show",
            "--config",
            &self.config_path.to_string_lossy(),
        ]);
        format!("exit {code}: {stdout}{stderr}")
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid} failed: {status}");
}

/// What `checkpoint show` printed, and the binlog position found in it.
#[derive(Debug, Clone)]
pub struct CheckpointView {
    /// stdout, verbatim (evidence for messages).
    pub raw: String,
    /// The binlog file/position inside the JSON (`None` when no checkpoint exists).
    pub position: Option<BinlogPoint>,
}

/// Runs `outbox-relay checkpoint show --config FILE` and finds the binlog position in its JSON
/// (the first object with a string `binlog_file` and a numeric `binlog_position`, or
/// `file`/`position`).
pub fn checkpoint_show(config: &Path) -> CheckpointView {
    let output = Command::new(RELAY_BIN)
        .arg("checkpoint")
        .arg("show")
        .arg("--config")
        .arg(config)
        .output()
        .expect("run outbox-relay checkpoint show");
    let raw = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "checkpoint show failed ({}): stdout {raw} stderr {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let position = serde_json::from_str::<serde_json::Value>(raw.trim())
        .ok()
        .and_then(|json| find_binlog_point(&json));
    CheckpointView { raw, position }
}

fn find_binlog_point(json: &serde_json::Value) -> Option<BinlogPoint> {
    match json {
        serde_json::Value::Object(map) => {
            for (file_key, position_key) in
                [("binlog_file", "binlog_position"), ("file", "position")]
            {
                if let (Some(file), Some(position)) = (
                    map.get(file_key).and_then(|v| v.as_str()),
                    map.get(position_key).and_then(|v| v.as_u64()),
                ) {
                    return Some(BinlogPoint {
                        file: file.to_string(),
                        position,
                    });
                }
            }
            map.values().find_map(find_binlog_point)
        }
        serde_json::Value::Array(items) => items.iter().find_map(find_binlog_point),
        _ => None,
    }
}

/// Waits until the checkpoint reaches at least `target` (or panics after `limit`).
pub async fn wait_for_checkpoint(
    relay: &Relay,
    target: &BinlogPoint,
    limit: Duration,
) -> CheckpointView {
    match try_wait_for_checkpoint(relay, target, limit).await {
        Ok(view) => view,
        Err(view) => panic!(
            "checkpoint did not reach {target} within {limit:?}; checkpoint show: {}\nrelay log tail:\n{}",
            view.raw,
            relay.log_tail(30)
        ),
    }
}

/// Waits until the checkpoint reaches at least `target`; `Err` with the last view after
/// `limit`.
pub async fn try_wait_for_checkpoint(
    relay: &Relay,
    target: &BinlogPoint,
    limit: Duration,
) -> Result<CheckpointView, CheckpointView> {
    let started = Instant::now();
    loop {
        let view = relay.checkpoint();
        if view.position.as_ref().is_some_and(|p| p >= target) {
            return Ok(view);
        }
        if started.elapsed() > limit {
            return Err(view);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts `relay` and waits for it to refuse to run: exit status 1 within a minute, its final
/// error line holding every one of `needles`. Returns that line.
pub async fn run_is_refused(relay: &mut Relay, needles: &[&str]) -> String {
    relay.start();
    let status = relay.wait_for_exit(Duration::from_secs(60)).await;
    let log = relay.log();
    assert_eq!(status.code(), Some(1), "{log}");
    let final_error = final_error_line(&log);
    for needle in needles {
        assert!(final_error.contains(needle), "no `{needle}` in:\n{log}");
    }
    final_error.to_owned()
}

/// The relay's last `error: ` line: the final error an operator reads first (empty when the
/// log has none).
pub fn final_error_line(log: &str) -> &str {
    log.lines()
        .rev()
        .find(|line| line.starts_with("error: "))
        .unwrap_or_default()
}

/// Counts the lines of the relay log that contain `needle` (evidence for messages).
pub fn log_count(relay: &Relay, needle: &str) -> usize {
    std::fs::read_to_string(&relay.log_path)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains(needle))
        .count()
}

/// Topics of `events`' aggregate types (deduplicated).
pub fn topics_of(events: &[Event]) -> Vec<String> {
    let set: BTreeSet<String> = events.iter().map(Event::topic).collect();
    set.into_iter().collect()
}

/// [`read_until_ids`], then asserts that every one of `expected` arrived (with `relay`'s log
/// tail as the evidence when not).
pub async fn assert_all_arrive(
    relay: &Relay,
    bootstrap: &str,
    topics: &[String],
    expected: &[Event],
    limit: Duration,
) -> Vec<ConsumedRecord> {
    let records = read_until_ids(bootstrap, topics, expected, limit).await;
    let seen: BTreeSet<String> = records.iter().filter_map(|r| r.header_str("id")).collect();
    let missing: Vec<&str> = expected
        .iter()
        .map(|event| event.id.as_str())
        .filter(|id| !seen.contains(*id))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} events missing ({} records read), first: {:?}\n{}",
        missing.len(),
        expected.len(),
        records.len(),
        &missing[..missing.len().min(10)],
        relay.log_tail(30)
    );
    records
}

/// Reads `topics` until every id in `expected` was seen at least once (or `limit` passed),
/// then keeps reading for `linger` more to catch late duplicates or strays.
pub async fn read_until_ids(
    bootstrap: &str,
    topics: &[String],
    expected: &[Event],
    limit: Duration,
) -> Vec<ConsumedRecord> {
    let wanted: Arc<BTreeSet<String>> = Arc::new(expected.iter().map(|e| e.id.clone()).collect());
    let predicate = {
        let wanted = Arc::clone(&wanted);
        Arc::new(move |records: &[ConsumedRecord]| {
            let seen: BTreeSet<String> =
                records.iter().filter_map(|r| r.header_str("id")).collect();
            wanted.iter().all(|id| seen.contains(id))
        })
    };
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    read_all(bootstrap, &topic_refs, ReadStop::When(predicate), limit)
        .await
        .expect("read back from the broker")
}

/// Reads `topics` until no record arrived for `quiet` (or `limit` passed).
pub async fn read_until_quiet(
    bootstrap: &str,
    topics: &[String],
    quiet: Duration,
    limit: Duration,
) -> Vec<ConsumedRecord> {
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    read_all(bootstrap, &topic_refs, ReadStop::Quiet(quiet), limit)
        .await
        .expect("read back from the broker")
}

/// [`read_until_ids`], then a second read until 800 ms pass without a record (at most 20 s),
/// so records still in flight (late duplicates) reach the verdict; returns the longer read.
pub async fn read_until_ids_then_settled(
    bootstrap: &str,
    topics: &[String],
    expected: &[Event],
    limit: Duration,
) -> Vec<ConsumedRecord> {
    let records = read_until_ids(bootstrap, topics, expected, limit).await;
    let settled = read_until_quiet(
        bootstrap,
        topics,
        Duration::from_millis(800),
        Duration::from_secs(20),
    )
    .await;
    if settled.len() > records.len() {
        settled
    } else {
        records
    }
}

/// Reads the topics of `records` again with Apache Kafka's own console consumer (a client no
/// one here wrote) and asserts it sees exactly the same records: partition, offset, key,
/// value, headers and timestamp. Returns its records, so the delivery verdict can be computed
/// from them too. Values must be UTF-8 text (the console consumer prints text).
pub async fn assert_console_consumer_agrees(
    bootstrap: &str,
    records: &[ConsumedRecord],
) -> Vec<ConsumedRecord> {
    let mut by_topic: BTreeMap<&str, Vec<&ConsumedRecord>> = BTreeMap::new();
    for record in records {
        by_topic
            .entry(record.topic.as_str())
            .or_default()
            .push(record);
    }
    let mut console_records = Vec::new();
    for (topic, ours) in by_topic {
        let theirs = console_consume(bootstrap, topic, ours.len(), Duration::from_secs(60))
            .await
            .expect("kafka-console-consumer runs");
        let key = |record: &ConsumedRecord| {
            (
                record.partition,
                record.offset,
                record.key.clone(),
                record.value.clone(),
                record.headers.clone(),
                record.timestamp,
            )
        };
        let ours_set: BTreeSet<_> = ours.iter().map(|record| key(record)).collect();
        let theirs_set: BTreeSet<_> = theirs.iter().map(key).collect();
        assert_eq!(
            ours_set.len(),
            theirs_set.len(),
            "{topic}: our reader saw {} records, kafka-console-consumer {}",
            ours_set.len(),
            theirs_set.len()
        );
        let differ: Vec<_> = ours_set.symmetric_difference(&theirs_set).take(5).collect();
        assert!(
            differ.is_empty(),
            "{topic}: kafka-console-consumer and our reader disagree on {differ:?}"
        );
        console_records.extend(theirs);
    }
    console_records
}

/// The verdict on what the broker holds.
#[derive(Debug, Default)]
pub struct DeliverySummary {
    /// Records read.
    pub records: usize,
    /// Distinct event ids among them.
    pub distinct: usize,
    /// Records that repeat an id already seen (allowed: at-least-once).
    pub duplicates: usize,
}

/// Checks the records against what was committed (in commit order) and what must never
/// arrive. Returns the problems found (empty = all good) and a summary.
///
/// * every committed event arrived at least once;
/// * every record carries header `id` of a committed event (rolled-back and non-outbox rows
///   never arrive) on the right topic with key = aggregate id and the payload byte-exact (so
///   duplicates are identical);
/// * per key, the first occurrences of ids (in offset order) follow commit order.
pub fn check_delivery(
    committed: &[Event],
    must_not_arrive: &[Event],
    records: &[ConsumedRecord],
) -> (Vec<String>, DeliverySummary) {
    let mut problems = Vec::new();
    let by_id: HashMap<&str, &Event> = committed.iter().map(|e| (e.id.as_str(), e)).collect();
    let forbidden: HashMap<&str, &Event> =
        must_not_arrive.iter().map(|e| (e.id.as_str(), e)).collect();

    let mut sorted: Vec<&ConsumedRecord> = records.iter().collect();
    sorted
        .sort_by(|a, b| (&a.topic, a.partition, a.offset).cmp(&(&b.topic, b.partition, b.offset)));

    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut duplicates = 0usize;
    let mut bad_records = Vec::new();
    let mut first_order_per_key: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for record in &sorted {
        let Some(id) = record.header_str("id") else {
            bad_records.push(format!(
                "record without header id at {}/{}@{}",
                record.topic, record.partition, record.offset
            ));
            continue;
        };
        if let Some(event) = forbidden.get(id.as_str()) {
            bad_records.push(format!(
                "event {id} must never arrive (rolled back or not an outbox row: {:?}) but did at {}/{}@{}",
                event.event_type, record.topic, record.partition, record.offset
            ));
            continue;
        }
        let Some(event) = by_id.get(id.as_str()) else {
            bad_records.push(format!(
                "unknown event id {id} at {}/{}@{}",
                record.topic, record.partition, record.offset
            ));
            continue;
        };
        if record.topic != event.topic() {
            bad_records.push(format!(
                "event {id} on topic {} instead of {}",
                record.topic,
                event.topic()
            ));
        }
        if record.key.as_deref() != Some(event.aggregate_id.as_bytes()) {
            bad_records.push(format!(
                "event {id}: key {:?} instead of {:?}",
                record.key_str(),
                event.aggregate_id
            ));
        }
        if record.value.as_deref() != Some(event.payload.as_bytes()) {
            bad_records.push(format!(
                "event {id}: payload {:?} instead of {:?}",
                record.value.as_deref().map(String::from_utf8_lossy),
                event.payload
            ));
        }
        if seen.insert(id.clone()) {
            first_order_per_key
                .entry((record.topic.clone(), event.aggregate_id.clone()))
                .or_default()
                .push(id);
        } else {
            duplicates += 1;
        }
    }
    if !bad_records.is_empty() {
        problems.push(format!(
            "{} bad records, first: {:#?}",
            bad_records.len(),
            &bad_records[..bad_records.len().min(10)]
        ));
    }

    let missing: Vec<&str> = committed
        .iter()
        .map(|e| e.id.as_str())
        .filter(|id| !seen.contains(*id))
        .collect();
    if !missing.is_empty() {
        problems.push(format!(
            "{} of {} committed events missing, first: {:?}, last: {:?}",
            missing.len(),
            committed.len(),
            &missing[..missing.len().min(10)],
            missing.last()
        ));
    }

    let mut expected_per_key: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for event in committed {
        if seen.contains(&event.id) {
            expected_per_key
                .entry((event.topic(), event.aggregate_id.clone()))
                .or_default()
                .push(event.id.clone());
        }
    }
    for (key, expected_order) in &expected_per_key {
        let actual = first_order_per_key.get(key).cloned().unwrap_or_default();
        if &actual != expected_order {
            let first_difference = actual
                .iter()
                .zip(expected_order)
                .position(|(a, e)| a != e)
                .unwrap_or(actual.len().min(expected_order.len()));
            problems.push(format!(
                "per-key order broken for {key:?}: first difference at index {first_difference}: \
                 got {:?}, expected {:?}",
                actual.get(first_difference),
                expected_order.get(first_difference)
            ));
        }
    }

    let summary = DeliverySummary {
        records: records.len(),
        distinct: seen.len(),
        duplicates,
    };
    (problems, summary)
}

/// [`assert_delivery`] of everything `writer` wrote: its committed events must all arrive,
/// its [`ShopWriter::must_not_arrive`] ones never.
pub fn assert_writer_delivery(
    context: &str,
    writer: &ShopWriter,
    records: &[ConsumedRecord],
    relay: &Relay,
) -> DeliverySummary {
    assert_delivery(
        context,
        &writer.committed,
        &writer.must_not_arrive(),
        records,
        relay,
    )
}

/// Panics with all the evidence when [`check_delivery`] found problems.
pub fn assert_delivery(
    context: &str,
    committed: &[Event],
    must_not_arrive: &[Event],
    records: &[ConsumedRecord],
    relay: &Relay,
) -> DeliverySummary {
    let (problems, summary) = check_delivery(committed, must_not_arrive, records);
    assert!(
        problems.is_empty(),
        "{context}: delivery check failed: {summary:?}\n{}\ncheckpoint: {}\nrelay log tail:\n{}",
        problems.join("\n"),
        relay.checkpoint_evidence(),
        relay.log_tail(40)
    );
    summary
}

/// Rotates the binlog and purges every file before the new current one, retrying until
/// `gone` (a file the server may still hold open for a dump thread that has not noticed its
/// client left) is really gone; returns the position the purge kept from (its file is the
/// oldest one left).
pub async fn purge_binlogs_until_gone(db: &ScratchMariadb, gone: &str) -> BinlogPoint {
    db.exec(&["FLUSH BINARY LOGS", "FLUSH BINARY LOGS"])
        .await
        .expect("flush binary logs");
    let mut conn = db.conn().await.expect("connect");
    let current = master_position(&mut conn).await;
    let started = Instant::now();
    loop {
        conn.query_drop(format!("PURGE BINARY LOGS TO '{}'", current.file))
            .await
            .expect("purge binary logs");
        let files: Vec<String> = conn
            .query_map("SHOW BINARY LOGS", |row: mysql_async::Row| {
                row.get::<String, _>(0).unwrap_or_default()
            })
            .await
            .expect("show binary logs");
        if !files.iter().any(|file| file == gone) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "could not purge {gone}: binary logs {files:?}"
        );
        conn.query_drop("FLUSH BINARY LOGS").await.expect("flush");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = conn.disconnect().await;
    current
}

/// Keeps committing random transactions (1 to 3 events on 16 aggregates of two types, about
/// one in seven rolled back, with `with_archive_rows` some rows in a non-outbox table too)
/// until `stop` is set; returns the writer with its record of
/// what was committed and rolled back.
pub async fn stream_random_transactions(
    mut writer: ShopWriter,
    stop: Arc<std::sync::atomic::AtomicBool>,
    with_archive_rows: bool,
) -> ShopWriter {
    let mut index = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        index += 1;
        let dice = rand::random::<u32>();
        let kind = if matches!(dice % 3, 0) {
            "customer"
        } else {
            "order"
        };
        let aggregate = format!("{kind}-{}", (dice / 3) % 8);
        let events = 1 + (dice / 24 % 3) as usize;
        let commit = !matches!(dice / 72 % 7, 0); // about one in seven rolled back
        let archive = with_archive_rows && matches!(dice / 504 % 5, 0);
        writer
            .transaction(kind, &aggregate, events, commit, archive)
            .await;
        if matches!(index % 4, 0) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    writer
}

/// A free `127.0.0.1:PORT` for a relay's `[metrics] listen`.
pub fn free_loopback_address() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind a free port")
        .local_addr()
        .expect("its address")
        .port();
    format!("127.0.0.1:{port}")
}

/// `GET PATH` (HTTP/1.0) of a relay's metrics listener: the status code and the body
/// (bounded waits: 2 s to connect, 2 s for the answer).
pub async fn http_get(address: &str, path: &str) -> Result<(u16, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let connect = tokio::net::TcpStream::connect(address);
    let mut stream = tokio::time::timeout(Duration::from_secs(2), connect)
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| format!("connect {address}: {e}"))?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(2), stream.read_to_string(&mut response))
        .await
        .map_err(|_| format!("GET {path} timed out"))?
        .map_err(|e| e.to_string())?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("not an HTTP response: {response:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("not an HTTP status line: {head:?}"))?;
    Ok((status, body.to_owned()))
}

/// `GET /readyz`: the HTTP status and the JSON body.
pub async fn get_readyz(address: &str) -> Result<(u16, String), String> {
    http_get(address, "/readyz").await
}

/// `GET /metrics`: sample (with labels) -> value ([`parse_metrics_text`]).
pub async fn scrape_metrics(
    address: &str,
) -> Result<std::collections::BTreeMap<String, f64>, String> {
    let (_, body) = http_get(address, "/metrics").await?;
    Ok(parse_metrics_text(&body))
}

/// Prometheus text exposition: sample name (with labels) -> value; comments, blank lines
/// and unparsable values are left out.
pub fn parse_metrics_text(body: &str) -> std::collections::BTreeMap<String, f64> {
    body.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// Debezium's documented outbox table (its default column names), beside the shop schema.
pub const DEBEZIUM_OUTBOX_TABLE: &str = "CREATE TABLE shop.outbox_debezium (\
     id VARCHAR(64) NOT NULL PRIMARY KEY, aggregatetype VARCHAR(64) NOT NULL, \
     aggregateid VARCHAR(64) NOT NULL, type VARCHAR(64) NOT NULL, payload JSON, \
     timestamp DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB";

/// A scratch MariaDB that Debezium's MySQL connector accepts, with the shop schema and the
/// Debezium-style outbox table.
pub async fn start_database_for_debezium() -> ScratchMariadb {
    let db = ScratchMariadb::start_with(outbox_testkit::ScratchOptions {
        extra_args: vec![outbox_testkit::connect::DEBEZIUM_SERVER_VERSION_ARG.to_string()],
        ..outbox_testkit::ScratchOptions::default()
    })
    .await
    .expect("scratch MariaDB starts");
    db.exec(SHOP_SCHEMA).await.expect("shop schema");
    db.exec(&[DEBEZIUM_OUTBOX_TABLE])
        .await
        .expect("outbox table");
    db
}

/// `VmHWM` (peak resident set) of a running process, in bytes.
pub fn peak_rss(pid: u32) -> u64 {
    try_peak_rss(pid).expect("VmHWM in /proc/PID/status")
}

/// [`peak_rss`], `None` once the process is gone.
pub fn try_peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map(|kib| kib * 1024)
}
