//! The examples' end-to-end harness: a scratch MariaDB with both services' schemas, the
//! shared real Kafka broker, the relay binary (`example-relay`, the relay's own `main`) as a
//! child process, and the inventory consumer as a tokio task.
//!
//! Topics carry the scratch database's tag, as in the relay's tests, so tests share one
//! broker: `TAG.outbox.event.order` and the consumer's dead-letter topic `TAG.inventory.dlq`.
//! `OUTBOX_TEST_KEEP=1` keeps the relay's directory (config, checkpoint, log).

#![allow(dead_code)] // Each test uses a different part of the harness.

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use outbox_consumer::{ConsumerConfig, ConsumerError, ConsumerMetrics, CrashPoint, OutboxConsumer};
use outbox_examples::inventory_service::ReserveStock;
use outbox_examples::order_service::{OrderCreated, OrderService};
use outbox_examples::schema::{inventory_schema, shop_outbox_table, shop_schema};
use outbox_testkit::consume::{read_all, ConsumedRecord, ReadStop};
use outbox_testkit::kafka::KafkaBroker;
use outbox_testkit::ScratchMariadb;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The relay binary built from this package.
pub const RELAY_BIN: &str = env!("CARGO_BIN_EXE_example-relay");

/// One test's world.
pub struct World {
    /// The scratch server holding `shop` and `inventory`.
    pub db: ScratchMariadb,
    /// The shared broker.
    pub broker: &'static KafkaBroker,
    /// The order service.
    pub orders: OrderService,
    /// Connections to the inventory database (the consumer's pool).
    pub inventory_pool: mysql_async::Pool,
}

impl World {
    /// Starts the database (both schemas, stock of `apple` = 100) and the shared broker, and
    /// creates the order topic and the dead-letter topic.
    pub async fn start() -> World {
        let (db, broker) = tokio::join!(ScratchMariadb::start(), KafkaBroker::shared());
        let db = db.expect("scratch MariaDB starts");
        let broker = broker.expect("the shared Kafka broker starts");
        let mut statements = shop_schema().expect("shop schema");
        statements.extend(inventory_schema());
        statements
            .push("INSERT INTO inventory.stock (sku, available) VALUES ('apple', 100)".into());
        let statements: Vec<&str> = statements.iter().map(String::as_str).collect();
        db.exec(&statements).await.expect("schemas");
        let world_tag = db.tag().to_string();
        broker
            .create_topic(&format!("{world_tag}.outbox.event.order"), 1)
            .await
            .expect("order topic");
        broker
            .create_topic(&format!("{world_tag}.inventory.dlq"), 1)
            .await
            .expect("dead-letter topic");
        let shop_pool = mysql_async::Pool::new(db.url().as_str());
        let inventory_pool = mysql_async::Pool::new(db.url_with_db("inventory").as_str());
        World {
            orders: OrderService::new(shop_pool, shop_outbox_table().expect("outbox table")),
            inventory_pool,
            db,
            broker,
        }
    }

    /// Adds the poll-mode columns to `shop.outbox` (for a relay in poll mode).
    pub async fn add_poll_columns(&self) {
        let statements = outbox_poll::poll_mode_ddl(
            &shop_outbox_table().expect("outbox table"),
            &outbox_poll::PollColumns::default(),
        );
        let statements: Vec<&str> = statements.iter().map(String::as_str).collect();
        self.db.exec(&statements).await.expect("the poll-mode DDL");
    }

    /// `TAG.outbox.event.order`.
    pub fn order_topic(&self) -> String {
        format!("{}.outbox.event.order", self.db.tag())
    }

    /// `TAG.inventory.dlq`.
    pub fn dead_letter_topic(&self) -> String {
        format!("{}.inventory.dlq", self.db.tag())
    }

    /// The consumer's settings (fast backoff for tests).
    pub fn consumer_config(&self) -> ConsumerConfig {
        let mut config = ConsumerConfig::new(
            &self.broker.bootstrap(),
            &format!("{}.inventory", self.db.tag()),
            &[&self.order_topic()],
        );
        config.consumer_name = "inventory".to_owned();
        config.dead_letter_topic = self.dead_letter_topic();
        config.backoff_initial = Duration::from_millis(20);
        config.backoff_max = Duration::from_millis(100);
        config.max_attempts = 5;
        config.kafka_properties = vec![
            ("session.timeout.ms".into(), "6000".into()),
            ("heartbeat.interval.ms".into(), "500".into()),
        ];
        config
    }

    /// Starts an inventory consumer with `config`.
    pub fn start_consumer(&self, config: ConsumerConfig, handler: ReserveStock) -> RunningConsumer {
        let metrics = ConsumerMetrics::new(&config.consumer_name).expect("metrics");
        let consumer = OutboxConsumer::new(
            config,
            self.inventory_pool.clone(),
            handler,
            metrics.clone(),
        );
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(consumer.run(async move {
            let _ = stopped.await;
        }));
        RunningConsumer {
            metrics,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Places order `order_id` for `quantity` of `sku`; returns the event id.
    pub async fn place_order(&self, order_id: i64, sku: &str, quantity: i32) -> String {
        self.orders
            .place_order(&OrderCreated {
                order_id,
                sku: sku.into(),
                quantity,
            })
            .await
            .expect("order placed")
            .to_string()
    }

    /// The business state: (available, reserved) of `sku`.
    pub async fn stock(&self, sku: &str) -> (i64, i64) {
        let mut conn = self.inventory_pool.get_conn().await.expect("connect");
        conn.exec_first(
            "SELECT available, reserved FROM inventory.stock WHERE sku = ?",
            (sku,),
        )
        .await
        .expect("stock")
        .expect("sku exists")
    }

    /// Reservations as (order_id, quantity), by order.
    pub async fn reservations(&self) -> Vec<(i64, i64)> {
        let mut conn = self.inventory_pool.get_conn().await.expect("connect");
        conn.query("SELECT order_id, quantity FROM inventory.reservations ORDER BY order_id")
            .await
            .expect("reservations")
    }

    /// `processed_event` event ids of consumer `inventory`.
    pub async fn processed_events(&self) -> Vec<String> {
        let mut conn = self.inventory_pool.get_conn().await.expect("connect");
        conn.query(
            "SELECT event_id FROM inventory.processed_event WHERE consumer_name = 'inventory' \
             ORDER BY event_id",
        )
        .await
        .expect("processed_event")
    }

    /// Waits until `reservations()` has `count` rows (panics after 60 s with the state).
    pub async fn wait_for_reservations(&self, count: usize, relay: Option<&Relay>) {
        let started = Instant::now();
        loop {
            let reservations = self.reservations().await;
            if reservations.len() >= count {
                return;
            }
            if started.elapsed() > Duration::from_secs(60) {
                panic!(
                    "{count} reservation(s) expected, found {reservations:?}; relay log:\n{}",
                    relay.map(|relay| relay.log_tail(30)).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every record of `topic` (until `count` arrived, or 20 s).
    pub async fn records(&self, topic: &str, count: usize) -> Vec<ConsumedRecord> {
        read_all(
            &self.broker.bootstrap(),
            &[topic],
            ReadStop::Count(count),
            Duration::from_secs(20),
        )
        .await
        .expect("read topic")
    }

    /// Every record of `topic` until it was quiet for `quiet`.
    pub async fn records_until_quiet(&self, topic: &str, quiet: Duration) -> Vec<ConsumedRecord> {
        read_all(
            &self.broker.bootstrap(),
            &[topic],
            ReadStop::Quiet(quiet),
            Duration::from_secs(20),
        )
        .await
        .expect("read topic")
    }
}

/// A consumer task.
pub struct RunningConsumer {
    /// Its collectors (the test reads the counts).
    pub metrics: ConsumerMetrics,
    /// Completes the shutdown future.
    stop: Option<oneshot::Sender<()>>,
    /// The `run` task.
    task: Option<JoinHandle<Result<(), ConsumerError>>>,
}

impl RunningConsumer {
    /// Graceful stop; asserts `run` returned `Ok`.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let task = self.task.take().expect("running");
        let result = tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("consumer stops within 30 s")
            .expect("consumer task");
        assert!(result.is_ok(), "consumer run: {result:?}");
    }

    /// Waits for `run` to end on its own at `point` (a crash point).
    pub async fn wait_for_crash(mut self, point: CrashPoint) {
        let task = self.task.take().expect("running");
        let result = tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("the consumer reaches its crash point within 60 s")
            .expect("consumer task");
        match result {
            Err(ConsumerError::CrashPointReached(reached)) => assert_eq!(reached, point),
            other => panic!("expected crash point {point:?}, got {other:?}"),
        }
    }

    /// Waits for `run` to end on its own with an error (panics after 60 s or on `Ok`).
    pub async fn wait_for_error(mut self) -> ConsumerError {
        let task = self.task.take().expect("running");
        let result = tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("the consumer stops within 60 s")
            .expect("consumer task");
        result.expect_err("the consumer stops with an error")
    }

    /// Waits until `counter(metrics)` reaches `target` (panics after 60 s).
    pub async fn wait_for(&self, what: &str, target: u64, counter: fn(&ConsumerMetrics) -> u64) {
        let started = Instant::now();
        while counter(&self.metrics) < target {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{what}: {} after 60 s, expected {target}",
                counter(&self.metrics)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for RunningConsumer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Counter readers for [`RunningConsumer::wait_for`].
pub fn applied(metrics: &ConsumerMetrics) -> u64 {
    metrics.events_applied.get()
}
/// Duplicates skipped.
pub fn duplicates(metrics: &ConsumerMetrics) -> u64 {
    metrics.duplicates_skipped.get()
}
/// Dead letters.
pub fn dead_letters(metrics: &ConsumerMetrics) -> u64 {
    metrics.dead_letters.get()
}

/// The inventory handler without simulated failures.
pub fn reserve_stock() -> ReserveStock {
    handler_with_timeouts(0)
}

/// A handler that fails `timeouts` times first.
pub fn handler_with_timeouts(timeouts: u32) -> ReserveStock {
    ReserveStock {
        simulated_timeouts: Arc::new(AtomicU32::new(timeouts)),
    }
}

/// The relay process and its directory.
pub struct Relay {
    /// Config, checkpoint, log.
    pub dir: tempfile::TempDir,
    /// `relay.toml`.
    pub config_path: PathBuf,
    /// `relay.log` (all runs).
    pub log_path: PathBuf,
    /// The relay's file checkpoint store (`checkpoint.json`).
    pub checkpoint_path: PathBuf,
    /// The running process.
    child: Option<Child>,
}

impl Relay {
    /// Writes a config relaying `shop.outbox` (seeds preset) to `TAG.outbox.event.${aggregate_type}`
    /// with `dead_letter_topic` as its `[dead_letter] topic`.
    pub fn prepare(world: &World, dead_letter_topic: &str) -> Relay {
        Relay::prepare_with_source(world, dead_letter_topic, None)
    }

    /// [`Relay::prepare`] in poll mode (`[source] mode = "poll"`, a 2 s lease, no
    /// checkpoint store); the table needs [`World::add_poll_columns`].
    pub fn prepare_poll(world: &World, dead_letter_topic: &str) -> Relay {
        Relay::prepare_with_source(
            world,
            dead_letter_topic,
            Some("mode = \"poll\"\n\n[source.poll]\ninterval_ms = 50\nlease_ms = 2000\n"),
        )
    }

    fn prepare_with_source(world: &World, dead_letter_topic: &str, poll: Option<&str>) -> Relay {
        let dir = tempfile::Builder::new()
            .prefix("outbox-examples-relay-")
            .disable_cleanup(std::env::var_os("OUTBOX_TEST_KEEP").is_some())
            .tempdir()
            .expect("tempdir");
        let config_path = dir.path().join("relay.toml");
        let log_path = dir.path().join("relay.log");
        let checkpoint_path = dir.path().join("checkpoint.json");
        let config = format!(
            r#"[source]
url = "{url}"
server_id = 4343
start = "earliest"
heartbeat_interval_ms = 1000
{poll_lines}
[[outbox]]
table = "shop.outbox"
preset = "seeds"

[route]
topic = "{tag}.outbox.event.${{aggregate_type}}"

[dead_letter]
topic = "{dead_letter_topic}"

[kafka]
brokers = "{brokers}"
create_topics = true
topic_partitions = 1
topic_replication_factor = 1

[kafka.properties]
"linger.ms" = "5"

{checkpoint_section}
[pipeline]
commit_interval_ms = 200
"#,
            url = world.db.url(),
            tag = world.db.tag(),
            brokers = world.broker.bootstrap(),
            poll_lines = poll.unwrap_or_default(),
            checkpoint_section = if poll.is_some() {
                String::new()
            } else {
                format!(
                    "[checkpoint]\nstore = \"file\"\npath = \"{}\"\n",
                    checkpoint_path.display()
                )
            },
        );
        std::fs::write(&config_path, config).expect("write relay config");
        Relay {
            dir,
            config_path,
            log_path,
            checkpoint_path,
            child: None,
        }
    }

    /// Starts `example-relay run --config FILE` with extra environment variables.
    pub fn start_with_env(&mut self, vars: &[(&str, &str)]) {
        assert!(self.child.is_none(), "relay already running");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .expect("relay log");
        let stderr = log.try_clone().expect("dup log");
        self.child = Some(
            Command::new(RELAY_BIN)
                .arg("run")
                .arg("--config")
                .arg(&self.config_path)
                .env("RUST_LOG", "info")
                .env("NO_COLOR", "1")
                .envs(vars.iter().copied())
                .stdin(Stdio::null())
                .stdout(Stdio::from(log))
                .stderr(Stdio::from(stderr))
                .spawn()
                .expect("spawn the relay"),
        );
    }

    /// Starts the relay.
    pub fn start(&mut self) {
        self.start_with_env(&[]);
    }

    /// `kill -9`: a crash, no final checkpoint; the directory stays for a restart.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits for the relay to exit on its own (a crash point); panics after 60 s.
    pub async fn wait_for_exit(&mut self) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait().expect("try_wait") {
                    self.child = None;
                    return status;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the relay still runs after 60 s; log:\n{}",
                self.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Runs `example-relay ARGS... --config FILE`: (exit code, stdout, stderr).
    pub fn command(&self, args: &[&str]) -> (i32, String, String) {
        let output = Command::new(RELAY_BIN)
            .args(args)
            .arg("--config")
            .arg(&self.config_path)
            .env("NO_COLOR", "1")
            .output()
            .expect("run the relay command");
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// The last `lines` lines of the relay log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        format!(
            "({})\n{}",
            self.log_path.display(),
            all[all.len().saturating_sub(lines)..].join("\n")
        )
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The records of `records` whose header `id` is `event_id`.
pub fn with_id<'a>(records: &'a [ConsumedRecord], event_id: &str) -> Vec<&'a ConsumedRecord> {
    records
        .iter()
        .filter(|record| record.header_str("id").as_deref() == Some(event_id))
        .collect()
}
