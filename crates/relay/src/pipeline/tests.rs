//! In-process pipeline tests: a real scratch MariaDB, rdkafka's in-process mock cluster,
//! and [`run_relay`] in a task. Process-level end-to-end tests (the binary, Apache Kafka, crashes)
//! live in `crates/relay/tests/`.

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use outbox_checkpoint::Checkpoint;
use outbox_testkit::ScratchMariadb;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

use crate::config::RelayConfig;
use crate::demo::{consume_records, demo_config_text, write_sample_order, DEMO_SCHEMA, DEMO_TOPIC};
use crate::pipeline::{run_relay, RelayError, RelayHandles, RelaySummary};
use crate::stores::open_checkpoint_store;

/// A scratch server with the demo schema, a mock cluster with the demo topic, and a config
/// pointing at both with a checkpoint file in a temporary directory.
struct Fixture {
    /// The source server.
    server: ScratchMariadb,
    /// The in-process Kafka.
    cluster: MockCluster<'static, DefaultProducerContext>,
    /// Holds the checkpoint file.
    _dir: tempfile::TempDir,
    /// The relay config.
    config: RelayConfig,
}

async fn fixture(extra_kafka: &str) -> Fixture {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let server = ScratchMariadb::start().await.unwrap();
    server.exec(DEMO_SCHEMA).await.unwrap();
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(DEMO_TOPIC, 1, 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = demo_config_text(
        &server.url(),
        &cluster.bootstrap_servers(),
        &dir.path().join("checkpoint.json").display().to_string(),
    )
    .replace(
        "[kafka.properties]",
        &format!("{extra_kafka}\n[kafka.properties]"),
    );
    let config = RelayConfig::parse(&text).unwrap();
    Fixture {
        server,
        cluster,
        _dir: dir,
        config,
    }
}

impl Fixture {
    async fn stored(&self) -> Option<Checkpoint> {
        open_checkpoint_store(&self.config.checkpoint, &self.config.kafka)
            .await
            .unwrap()
            .load()
            .await
            .unwrap()
    }

    async fn stored_gtid_set(&self) -> String {
        self.stored()
            .await
            .map(|c| c.position.gtid_set.to_string())
            .unwrap_or_default()
    }

    async fn write_orders(&self, numbers: std::ops::RangeInclusive<u32>) {
        let mut conn = self.server.conn().await.unwrap();
        for n in numbers {
            write_sample_order(&mut conn, n).await.unwrap();
        }
        conn.disconnect().await.unwrap();
    }

    fn start_relay(
        &self,
    ) -> (
        RelayHandles,
        tokio::task::JoinHandle<Result<RelaySummary, RelayError>>,
    ) {
        let handles = RelayHandles::default();
        let task = tokio::spawn(run_relay(self.config.clone(), handles.clone()));
        (handles, task)
    }

    /// Writes order 1 (transaction 0-1-4), starts the relay and waits until the checkpoint
    /// covers it.
    async fn start_after_first_order(
        &self,
    ) -> (
        RelayHandles,
        tokio::task::JoinHandle<Result<RelaySummary, RelayError>>,
    ) {
        self.write_orders(1..=1).await;
        let (handles, task) = self.start_relay();
        self.wait_for_checkpoint("0-1-4", Duration::from_secs(30))
            .await;
        (handles, task)
    }

    /// Reads `count` records of `topic` from the mock cluster (30 s at most).
    async fn consume(&self, topic: &str, count: usize) -> Vec<crate::demo::ConsumedRecord> {
        consume_records(
            &self.cluster.bootstrap_servers(),
            topic,
            count,
            Duration::from_secs(30),
        )
        .await
        .unwrap()
    }

    /// Waits until the stored checkpoint's GTID set is `expected`.
    async fn wait_for_checkpoint(&self, expected: &str, timeout: Duration) {
        let started = Instant::now();
        loop {
            let stored = self.stored_gtid_set().await;
            if stored == expected {
                return;
            }
            assert!(
                started.elapsed() < timeout,
                "checkpoint stayed at `{stored}`, expected `{expected}`"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn stop(
    handles: RelayHandles,
    task: tokio::task::JoinHandle<Result<RelaySummary, RelayError>>,
) -> Result<RelaySummary, RelayError> {
    handles.shutdown.trigger();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("relay stops after shutdown")
        .unwrap()
}

// The schema is 3 transactions (0-1-1..0-1-3); order n is transaction 0-1-(3+n).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_flow_delivers_every_order_and_stores_the_checkpoint() {
    let outcome = crate::demo::run_demo(3).await.unwrap();
    assert_eq!(outcome.delivered, 3);
    let keys: Vec<_> = outcome.records.iter().map(|r| r.key.clone()).collect();
    assert_eq!(
        keys,
        vec![Some("1".into()), Some("2".into()), Some("3".into())]
    );
    for (n, record) in (1..).zip(&outcome.records) {
        assert_eq!(record.topic, DEMO_TOPIC);
        let id = record
            .headers
            .iter()
            .find(|(k, _)| k == "id")
            .map(|(_, v)| v.clone());
        assert_eq!(id, Some(format!("00000000-0000-4000-8000-{n:012}")));
        assert!(record
            .value
            .as_deref()
            .unwrap()
            .contains(&format!("\"order_id\":{n}")));
    }
    let checkpoint = outcome.checkpoint.expect("a checkpoint is stored");
    assert_eq!(checkpoint.position.gtid_set.to_string(), "0-1-6");
    assert!(checkpoint.position.binlog.position > 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_outage_holds_the_checkpoint_back_until_delivery() {
    let fixture = fixture("stall_timeout_ms = 1000").await;
    let (handles, task) = fixture.start_relay();
    // Caught up with the schema (no records) before the outage.
    fixture
        .wait_for_checkpoint("0-1-3", Duration::from_secs(20))
        .await;
    fixture.cluster.broker_down(1).unwrap();
    fixture.write_orders(1..=3).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        fixture.stored_gtid_set().await,
        "0-1-3",
        "checkpoint moved past unacked records during the outage"
    );
    assert_eq!(handles.metrics.records_delivered.get(), 0);
    fixture.cluster.broker_up(1).unwrap();
    fixture
        .wait_for_checkpoint("0-1-6", Duration::from_secs(30))
        .await;
    let records = fixture.consume(DEMO_TOPIC, 3).await;
    let mut ids: Vec<String> = records
        .iter()
        .map(|r| r.key.clone().unwrap_or_default())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids, vec!["1", "2", "3"]);
    let summary = stop(handles, task).await.unwrap();
    assert_eq!(summary.delivered, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_resumes_from_the_checkpoint_without_replaying_acked_events() {
    let fixture = fixture("").await;
    fixture.write_orders(1..=2).await;
    let (handles, task) = fixture.start_relay();
    fixture
        .wait_for_checkpoint("0-1-5", Duration::from_secs(30))
        .await;
    let first = stop(handles, task).await.unwrap();
    assert_eq!(first.delivered, 2);
    assert_eq!(
        first.checkpoint.map(|c| c.position.gtid_set.to_string()),
        Some("0-1-5".into())
    );

    fixture.write_orders(3..=4).await;
    let (handles, task) = fixture.start_relay();
    fixture
        .wait_for_checkpoint("0-1-7", Duration::from_secs(30))
        .await;
    let second = stop(handles, task).await.unwrap();
    assert_eq!(second.delivered, 2, "only the orders after the checkpoint");
    let records = fixture.consume(DEMO_TOPIC, 4).await;
    let keys: Vec<_> = records.iter().filter_map(|r| r.key.clone()).collect();
    assert_eq!(keys, vec!["1", "2", "3", "4"]);
}

async fn insert_row_without_aggregate_id(fixture: &Fixture, event_id: &str) {
    let mut conn = fixture.server.conn().await.unwrap();
    conn.query_drop("ALTER TABLE shop.outbox MODIFY aggregate_id VARCHAR(255) NULL")
        .await
        .unwrap();
    conn.query_drop(format!(
        "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
         VALUES ('{event_id}', 'order', NULL, 'order_created', '{{\"n\":7}}')"
    ))
    .await
    .unwrap();
    conn.disconnect().await.unwrap();
}

/// Default policy: an unroutable row becomes a dead letter (after one attempt: routing is
/// deterministic), later events flow, and the checkpoint passes the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_that_cannot_be_routed_is_dead_lettered_and_later_events_flow() {
    let fixture = fixture("").await;
    fixture.cluster.create_topic("outbox.dlq", 1, 1).unwrap();
    fixture.write_orders(1..=1).await;
    // ALTER is 0-1-5, the bad row 0-1-6, order 2 is 0-1-7.
    insert_row_without_aggregate_id(&fixture, "bad-event-7").await;
    fixture.write_orders(2..=2).await;
    let (handles, task) = fixture.start_relay();
    fixture
        .wait_for_checkpoint("0-1-7", Duration::from_secs(30))
        .await;
    let summary = stop(handles.clone(), task).await.unwrap();
    assert_eq!(summary.delivered, 3, "two orders and one dead letter");
    assert_eq!(
        handles
            .metrics
            .dead_lettered
            .with_label_values(&["routing"])
            .get(),
        1
    );
    let letters = fixture.consume("outbox.dlq", 1).await;
    let header = |name: &str| letters[0].header(name).map(str::to_owned);
    assert_eq!(header("id").as_deref(), Some("bad-event-7"));
    assert_eq!(header("dlq.error_class").as_deref(), Some("routing"));
    assert_eq!(header("dlq.original_topic_known").as_deref(), Some("false"));
    assert_eq!(header("dlq.table").as_deref(), Some("shop.outbox"));
    assert_eq!(header("dlq.attempts").as_deref(), Some("1"));
    assert!(header("dlq.binlog_file").is_some() && header("dlq.binlog_position").is_some());
    assert_eq!(header("dlq.binlog_gtid").as_deref(), Some("0-1-6"));
    assert!(
        header("dlq.error_message").is_some_and(|m| m.contains("aggregate_id")),
        "{:?}",
        letters[0].headers
    );
    assert_eq!(
        letters[0].value.as_deref(),
        Some("{\"n\":7}"),
        "the row's payload"
    );
    assert!(header("dlq.row").is_some_and(|row| row.contains("bad-event-7")));
    let records = fixture.consume(DEMO_TOPIC, 2).await;
    let keys: Vec<_> = records.iter().filter_map(|r| r.key.clone()).collect();
    assert_eq!(keys, vec!["1", "2"]);
}

/// A dead letter that cannot be written (here: the dead-letter topic is missing and topic
/// creation is off) stops the relay, and the checkpoint stays before the failed event: it
/// counts as acked only once its dead letter is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_dead_letter_stops_the_relay_before_the_checkpoint_passes_the_event() {
    let fixture = fixture("").await;
    fixture.write_orders(1..=1).await;
    insert_row_without_aggregate_id(&fixture, "bad-event-8").await;
    fixture.write_orders(2..=2).await;
    let (_handles, task) = fixture.start_relay();
    let result = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the relay stops by itself")
        .unwrap();
    let error = result.expect_err("an unwritable dead letter stops the relay");
    assert!(error.to_string().contains("outbox.dlq"), "{error}");
    let stored = fixture.stored_gtid_set().await;
    let sequence: u64 = stored
        .rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        sequence < 6,
        "checkpoint `{stored}` must stop before the dead-lettered row (0-1-6)"
    );
}

/// Policy `fail` for routing errors keeps the old behaviour: stop, naming the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_that_cannot_be_routed_stops_the_relay_naming_event_table_and_column() {
    let mut fixture = fixture("").await;
    fixture.config.dead_letter.fail_on = vec!["routing".into()];
    fixture.write_orders(1..=1).await;
    let mut conn = fixture.server.conn().await.unwrap();
    conn.query_drop("ALTER TABLE shop.outbox MODIFY aggregate_id VARCHAR(255) NULL")
        .await
        .unwrap();
    conn.query_drop(
        "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
         VALUES ('bad-event-7', 'order', NULL, 'order_created', '{}')",
    )
    .await
    .unwrap();
    conn.disconnect().await.unwrap();
    let (_handles, task) = fixture.start_relay();
    let result = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the relay stops by itself")
        .unwrap();
    let error = result.expect_err("routing error stops the relay");
    assert!(matches!(error, RelayError::Routing(_)), "{error:?}");
    let message = error.to_string();
    for needle in ["bad-event-7", "shop.outbox", "aggregate_id"] {
        assert!(message.contains(needle), "`{message}` lacks {needle}");
    }
    // The good order before it was delivered and checkpointed; the bad row's transaction
    // (0-1-6, after the ALTER at 0-1-5) was not.
    let stored = fixture.stored_gtid_set().await;
    assert!(
        stored == "0-1-4" || stored == "0-1-5",
        "checkpoint `{stored}` must stop before the unroutable row"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_during_an_outage_abandons_unacked_records_and_keeps_them_out_of_the_checkpoint() {
    // 2 s: a fresh idempotent producer needs its producer id from the mock cluster before
    // the first send; with 0.5 s that sometimes took longer than the stall timeout on an
    // idle machine, and every recreated producer stalled again.
    let fixture = fixture("stall_timeout_ms = 2000").await;
    let config_timeout = fixture.config.pipeline.shutdown_timeout_ms;
    assert_eq!(config_timeout, 5000);
    fixture.write_orders(1..=1).await;
    let (handles, task) = fixture.start_relay();
    // Order 1 delivered (the topic is known), then the broker goes away.
    fixture
        .wait_for_checkpoint("0-1-4", Duration::from_secs(20))
        .await;
    fixture.cluster.broker_down(1).unwrap();
    fixture.write_orders(2..=3).await;
    // Wait until records are in flight.
    let started = Instant::now();
    while handles.metrics.in_flight.get() < 1 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "records never got in flight"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stopping = Instant::now();
    let summary = stop(handles, task).await.unwrap();
    assert!(
        stopping.elapsed() < Duration::from_secs(15),
        "shutdown waited {:?}",
        stopping.elapsed()
    );
    assert_eq!(summary.delivered, 1);
    assert!(summary.abandoned >= 1, "{summary:?}");
    assert_eq!(fixture.stored_gtid_set().await, "0-1-4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_restart_reconnects_and_resumes_without_loss() {
    let mut fixture = fixture("").await;
    fixture.write_orders(1..=2).await;
    let (handles, task) = fixture.start_relay();
    fixture
        .wait_for_checkpoint("0-1-5", Duration::from_secs(30))
        .await;
    fixture.server.restart().await.unwrap();
    fixture.write_orders(3..=4).await;
    fixture
        .wait_for_checkpoint("0-1-7", Duration::from_secs(60))
        .await;
    assert!(handles.metrics.source_reconnects.get() >= 1);
    let summary = stop(handles, task).await.unwrap();
    assert!(summary.delivered >= 4, "{summary:?}");
    let records = fixture
        .consume(DEMO_TOPIC, summary.delivered as usize)
        .await;
    let mut keys: Vec<String> = records.iter().filter_map(|r| r.key.clone()).collect();
    keys.dedup();
    assert_eq!(keys, vec!["1", "2", "3", "4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_reports_the_pipeline() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut fixture = fixture("").await;
    fixture.config.metrics.listen = Some(format!("127.0.0.1:{port}"));
    fixture.write_orders(1..=2).await;
    let (handles, task) = fixture.start_relay();
    fixture
        .wait_for_checkpoint("0-1-5", Duration::from_secs(30))
        .await;
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    for line in [
        "outbox_relay_events_read_total 2",
        "outbox_relay_events_routed_total 2",
        "outbox_relay_records_delivered_total 2",
        "outbox_relay_in_flight 0",
        "outbox_relay_checkpoint_binlog_file_number 1",
    ] {
        assert!(response.contains(line), "no `{line}` in:\n{response}");
    }
    // The reader's and the checkpoint crate's own counters are served too (process-wide
    // counters: other tests in this process add to them, so only their presence is fixed).
    for name in [
        "outbox_binlog_rows_decoded_total",
        "outbox_binlog_transactions_committed_total",
        "outbox_checkpoint_",
    ] {
        assert!(response.contains(name), "no `{name}` in:\n{response}");
    }
    assert!(handles.metrics.checkpoint_binlog_offset.get() > 4);
    assert!(handles.metrics.transactions_read.get() >= 5);
    stop(handles, task).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mysql_checkpoint_store_is_chosen_by_config() {
    let mut fixture = fixture("").await;
    fixture
        .server
        .exec(&["CREATE DATABASE outbox_relay"])
        .await
        .unwrap();
    fixture.config.checkpoint = toml::from_str(&format!(
        "store = \"mysql\"\nurl = \"{}\"\nconnector = \"pipeline-test\"",
        fixture.server.url()
    ))
    .unwrap();
    fixture.config.validate().unwrap();
    fixture.write_orders(1..=2).await;
    let (handles, task) = fixture.start_relay();
    // Schema 0-1-1..3, CREATE DATABASE 0-1-4, orders 0-1-5..6; after that the store's own
    // commits are transactions on the same server (sequence keeps growing, slowly).
    let started = Instant::now();
    let sequence = |set: &str| -> u64 {
        set.rsplit('-')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    while sequence(&fixture.stored_gtid_set().await) < 6 {
        assert!(started.elapsed() < Duration::from_secs(30), "no checkpoint");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The store's own writes must not drive a commit per interval (200 ms): idle-only
    // progress is committed at most every 5 s.
    let settled = sequence(&fixture.stored_gtid_set().await);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = sequence(&fixture.stored_gtid_set().await);
    assert!(
        later <= settled + 2,
        "checkpoint went {settled} -> {later} in 3 s"
    );
    let summary = stop(handles, task).await.unwrap();
    assert_eq!(summary.delivered, 2);
    let mut conn = fixture.server.conn().await.unwrap();
    let connectors: Vec<String> = conn
        .query("SELECT connector_name FROM outbox_relay.relay_checkpoints")
        .await
        .unwrap();
    assert_eq!(connectors, vec!["pipeline-test".to_owned()]);
    conn.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_of_another_server_resumes_by_gtid_or_refuses_without_one() {
    use outbox_binlog::{BinlogPosition, Flavor, GtidSet};
    use outbox_checkpoint::{CheckpointPosition, SourceIdentity};
    let fixture = fixture("").await;
    fixture.write_orders(1..=3).await;
    let store = open_checkpoint_store(&fixture.config.checkpoint, &fixture.config.kafka)
        .await
        .unwrap();
    let other_server = SourceIdentity {
        flavor: Flavor::Mariadb,
        server_id: 99,
        server_uuid: None,
    };
    // No GTID set: the relay cannot know where it is on this server.
    let without_gtid = Checkpoint::new(
        other_server.clone(),
        CheckpointPosition::at(BinlogPosition::new("binlog.000050", 1000)),
    );
    store.set(&without_gtid).await.unwrap();
    let (_handles, task) = fixture.start_relay();
    let error = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .unwrap()
        .unwrap()
        .expect_err("a foreign checkpoint without GTIDs is refused");
    assert!(
        matches!(error, RelayError::ForeignCheckpoint { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("server_id 99"), "{error}");

    // With a GTID set (a failover): resume after 0-1-4 (order 1), on this server's files.
    let with_gtid = Checkpoint::new(
        other_server,
        CheckpointPosition {
            gtid_set: GtidSet::parse(Flavor::Mariadb, "0-1-4").unwrap(),
            ..CheckpointPosition::at(BinlogPosition::new("binlog.000050", 1000))
        },
    );
    store.set(&with_gtid).await.unwrap();
    let (handles, task) = fixture.start_relay();
    fixture
        .wait_for_checkpoint("0-1-6", Duration::from_secs(30))
        .await;
    let summary = stop(handles, task).await.unwrap();
    assert_eq!(summary.delivered, 2, "orders 2 and 3 only");
    let stored = fixture.stored().await.unwrap();
    assert_eq!(stored.source.server_id, 1);
    assert_eq!(stored.position.binlog.file, "binlog.000001");
}

/// With no outbox traffic the checkpoint still advances: over transactions on other tables,
/// and over a binlog rotation with no transaction at all (server heartbeats), so the server
/// can purge the old file while the relay runs, a restart then still resumes, and the lag
/// reads zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_outbox_still_advances_the_checkpoint_so_old_binlogs_can_be_purged() {
    let fixture = fixture("").await;
    let (handles, task) = fixture.start_after_first_order().await;

    // Ten transactions on a table the relay does not watch: 0-1-5..0-1-14.
    let mut conn = fixture.server.conn().await.unwrap();
    for n in 0..10u64 {
        conn.exec_drop(
            "INSERT INTO shop.orders (id, customer, total) VALUES (?, 'idle', 1.00)",
            (1000 + n,),
        )
        .await
        .unwrap();
    }
    // Idle-only progress is committed at most every 5 s.
    fixture
        .wait_for_checkpoint("0-1-14", Duration::from_secs(15))
        .await;

    // A rotation with no transaction after it: only heartbeats can move the checkpoint into
    // the new file.
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    let (new_file, _): (String, u64) = conn
        .query_first::<mysql_async::Row, _>("SHOW MASTER STATUS")
        .await
        .unwrap()
        .map(|row| (row.get(0).unwrap(), row.get(1).unwrap()))
        .unwrap();
    let started = Instant::now();
    loop {
        let stored = fixture.stored().await.unwrap();
        if stored.position.binlog.file == new_file {
            assert_eq!(stored.position.gtid_set.to_string(), "0-1-14");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the checkpoint stayed in {} after the rotation to {new_file}",
            stored.position.binlog
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(handles.metrics.checkpoint_lag_seconds.get(), 0.0);
    // Nothing the relay needs is in the old file any more.
    conn.query_drop(format!("PURGE BINARY LOGS TO '{new_file}'"))
        .await
        .unwrap();
    let summary = stop(handles, task).await.unwrap();
    assert_eq!(summary.delivered, 1);

    // A restart resumes in the new file: no purged-position error, later events flow.
    fixture.write_orders(2..=2).await;
    let (handles, task) = fixture.start_relay();
    fixture
        .wait_for_checkpoint("0-1-15", Duration::from_secs(30))
        .await;
    let summary = stop(handles, task).await.unwrap();
    assert_eq!(summary.delivered, 1);
    let oldest: String = conn
        .query_first::<mysql_async::Row, _>("SHOW BINARY LOGS")
        .await
        .unwrap()
        .and_then(|row| row.get(0))
        .unwrap();
    assert_eq!(oldest, new_file, "the old binlog file was purged");
    conn.disconnect().await.unwrap();
}

/// `ALTER TABLE` on the outbox table while the relay runs: a new column in front and a
/// reordered column are picked up from the next TABLE_MAP (every record still carries the
/// right key and payload); a renamed payload column no longer resolves, so that row becomes
/// a dead letter naming the column (never a record with some other column as payload), and
/// once the name is back, events flow again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_table_mid_stream_never_mis_maps_a_column() {
    let fixture = fixture("").await;
    fixture.cluster.create_topic("outbox.dlq", 1, 1).unwrap();
    let (handles, task) = fixture.start_after_first_order().await;
    let mut conn = fixture.server.conn().await.unwrap();
    // 0-1-5: a column in front shifts every other column's index; order 2 is 0-1-6.
    conn.query_drop(
        "ALTER TABLE shop.outbox ADD COLUMN tenant VARCHAR(20) NOT NULL DEFAULT 'acme' FIRST",
    )
    .await
    .unwrap();
    fixture.write_orders(2..=2).await;
    // 0-1-7: aggregate_id moves behind payload; order 3 is 0-1-8.
    conn.query_drop(
        "ALTER TABLE shop.outbox MODIFY aggregate_id VARCHAR(255) NOT NULL AFTER payload",
    )
    .await
    .unwrap();
    fixture.write_orders(3..=3).await;
    // 0-1-9: the payload column is renamed; the row at 0-1-10 cannot be mapped.
    conn.query_drop("ALTER TABLE shop.outbox CHANGE payload body JSON")
        .await
        .unwrap();
    conn.query_drop(
        "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, body) \
         VALUES ('renamed-10', 'order', '10', 'order_created', '{\"n\":10}')",
    )
    .await
    .unwrap();
    // 0-1-11: renamed back; order 4 is 0-1-12.
    conn.query_drop("ALTER TABLE shop.outbox CHANGE body payload JSON")
        .await
        .unwrap();
    fixture.write_orders(4..=4).await;
    fixture
        .wait_for_checkpoint("0-1-12", Duration::from_secs(30))
        .await;
    let summary = stop(handles.clone(), task).await.unwrap();
    assert_eq!(summary.delivered, 5, "four orders and one dead letter");
    conn.disconnect().await.unwrap();

    let records = fixture.consume(DEMO_TOPIC, 4).await;
    let seen: Vec<(Option<String>, Option<String>)> = records
        .iter()
        .map(|record| (record.key.clone(), record.value.clone()))
        .collect();
    let expected: Vec<(Option<String>, Option<String>)> = (1..=4u32)
        .map(|n| {
            let total = format!("{}.{:02}", 10 + n, n % 100);
            (
                Some(n.to_string()),
                Some(format!(
                    r#"{{"order_id":{n},"customer":"customer-{n}","total":"{total}"}}"#
                )),
            )
        })
        .collect();
    assert_eq!(
        seen, expected,
        "keys and payloads across the schema changes"
    );
    let letters = fixture.consume("outbox.dlq", 1).await;
    assert_eq!(letters.len(), 1);
    let header = |name: &str| letters[0].header(name).map(str::to_owned);
    assert_eq!(header("id").as_deref(), Some("renamed-10"));
    assert_eq!(header("dlq.binlog_gtid").as_deref(), Some("0-1-10"));
    assert_eq!(header("dlq.error_class").as_deref(), Some("routing"));
    let message = header("dlq.error_message").unwrap_or_default();
    assert!(message.contains("payload"), "{message}");
}

/// A TCP proxy whose upstream can be switched: stands in for a DNS name or virtual IP that
/// moves to another server at failover. Switching drops the open connections.
struct SwitchableProxy {
    /// Where clients connect.
    port: u16,
    /// The upstream port new connections go to.
    target: std::sync::Arc<std::sync::atomic::AtomicU16>,
    /// Open connections, aborted (closed) on a switch.
    connections: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    /// The accept loop.
    accept: tokio::task::JoinHandle<()>,
}

impl SwitchableProxy {
    async fn start(target: u16) -> SwitchableProxy {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(target));
        let connections = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let accept = {
            let target = target.clone();
            let connections = connections.clone();
            tokio::spawn(async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    let upstream_port = target.load(Ordering::SeqCst);
                    let connection = tokio::spawn(async move {
                        if let Ok(mut upstream) =
                            tokio::net::TcpStream::connect(("127.0.0.1", upstream_port)).await
                        {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                        }
                    });
                    connections.lock().unwrap().push(connection);
                }
            })
        };
        SwitchableProxy {
            port,
            target,
            connections,
            accept,
        }
    }

    /// New connections go to `target`; the open ones are closed.
    fn switch(&self, target: u16) {
        self.target
            .store(target, std::sync::atomic::Ordering::SeqCst);
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }
}

impl Drop for SwitchableProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.switch(0);
    }
}

/// Failover while streaming: the address the relay reads from moves from the primary to its
/// replica (which has the same GTIDs, and a binlog of its own with other file offsets). The
/// relay notices the other server on reconnect and resumes by GTID set instead of by the
/// old server's file+position, so the events written on the new primary arrive and nothing
/// is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_behind_the_same_address_resumes_by_gtid_without_loss() {
    let mut fixture = fixture("").await;
    let replica = ScratchMariadb::start_with(outbox_testkit::ScratchOptions {
        server_id: 2,
        extra_args: vec!["--log-slave-updates=ON".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    replica
        .exec(&[
            &format!(
                "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={}, \
                 MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos",
                fixture.server.port()
            ),
            "START SLAVE",
        ])
        .await
        .unwrap();
    let proxy = SwitchableProxy::start(fixture.server.port()).await;
    fixture.config.source.url = format!("mysql://root@127.0.0.1:{}", proxy.port);
    fixture.config.source.reconnect_initial_backoff_ms = 50;
    fixture.write_orders(1..=2).await;
    let (handles, task) = fixture.start_relay();
    fixture
        .wait_for_checkpoint("0-1-5", Duration::from_secs(30))
        .await;

    // The replica caught up; it becomes the primary, and the address moves to it.
    let mut replica_conn = replica.conn().await.unwrap();
    let started = Instant::now();
    loop {
        let position: Option<String> = replica_conn
            .query_first("SELECT @@gtid_current_pos")
            .await
            .unwrap();
        if position.as_deref() == Some("0-1-5") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "replica at {position:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    replica_conn.query_drop("STOP SLAVE").await.unwrap();
    proxy.switch(replica.port());
    for n in 3..=4 {
        write_sample_order(&mut replica_conn, n).await.unwrap();
    }
    // Written by server 2 in the same domain: 0-2-6 and 0-2-7.
    fixture
        .wait_for_checkpoint("0-2-7", Duration::from_secs(30))
        .await;
    let summary = stop(handles.clone(), task).await.unwrap();
    assert!(handles.metrics.source_reconnects.get() >= 1);
    let stored = fixture.stored().await.unwrap();
    assert_eq!(
        stored.source.server_id, 2,
        "the checkpoint names the new server"
    );
    let records = fixture.consume(DEMO_TOPIC, 4).await;
    let keys: std::collections::BTreeSet<String> =
        records.iter().filter_map(|r| r.key.clone()).collect();
    assert_eq!(
        keys,
        ["1", "2", "3", "4"].map(String::from).into(),
        "every order, before and after the failover ({} delivered)",
        summary.delivered
    );
    replica_conn.disconnect().await.unwrap();
}

/// Failover while streaming before any transaction was handed out (started at `latest` on a
/// server with no GTID history: `RESET MASTER` emptied it, so not even the start's history
/// gives a set): a file+position of the old server means nothing on the new one, so the
/// relay stops with a definite error naming both servers and the fix, instead of reading
/// the new server's binlog from an unrelated offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_without_any_gtid_to_move_over_with_is_refused() {
    let mut fixture = fixture("").await;
    fixture.server.exec(&["RESET MASTER"]).await.unwrap();
    let other = ScratchMariadb::start_with(outbox_testkit::ScratchOptions {
        server_id: 2,
        ..Default::default()
    })
    .await
    .unwrap();
    let proxy = SwitchableProxy::start(fixture.server.port()).await;
    fixture.config.source.url = format!("mysql://root@127.0.0.1:{}", proxy.port);
    fixture.config.source.start = "latest".into();
    fixture.config.source.reconnect_initial_backoff_ms = 50;
    let (handles, task) = fixture.start_relay();
    // Streaming (heartbeats only) before the address moves.
    let started = Instant::now();
    while handles.metrics.transactions_read.get() == 0 && started.elapsed() < Duration::from_secs(2)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proxy.switch(other.port());
    let result = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the relay stops by itself")
        .unwrap();
    let error = result.expect_err("a file+position on another server is refused");
    assert!(
        matches!(error, RelayError::SourceChanged { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    for needle in ["server_id 1", "server_id 2", "checkpoint set --gtid"] {
        assert!(message.contains(needle), "`{needle}` missing: {message}");
    }
    assert!(
        fixture
            .stored()
            .await
            .is_none_or(|c| c.source.server_id == 1),
        "no checkpoint names the other server"
    );
}

/// Started at `latest` on a server with history in two replication domains, checkpoints hold
/// the server's whole GTID state (both domains), not only the transactions read since: a
/// resume or failover by GTID set then asks for exactly what follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_start_at_latest_checkpoints_the_server_history_of_every_domain() {
    let mut fixture = fixture("").await;
    let mut conn = fixture.server.conn().await.unwrap();
    conn.query_drop("SET SESSION gtid_domain_id = 7")
        .await
        .unwrap();
    conn.query_drop("INSERT INTO shop.orders (id, customer, total) VALUES (900, 'x', 1.00)")
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    fixture.config.source.start = "latest".into();
    let (handles, task) = fixture.start_relay();
    // The first checkpoint (a heartbeat at the start) already names both domains.
    let started = Instant::now();
    while fixture.stored().await.is_none() {
        assert!(started.elapsed() < Duration::from_secs(30), "no checkpoint");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(fixture.stored_gtid_set().await, "0-1-3,7-1-1");
    fixture.write_orders(1..=1).await;
    fixture
        .wait_for_checkpoint("0-1-4,7-1-1", Duration::from_secs(30))
        .await;
    let summary = stop(handles, task).await.unwrap();
    assert_eq!(summary.delivered, 1);
}

/// One transaction of 600 outbox rows of ~8 KiB each: about 5 MB, five times a 1 MiB
/// in-flight byte budget, and more rows than one source batch holds. The source must hand
/// on the rows it batched before it waits for budget (only their acks free it), and a
/// transaction cut into several batches ends once: every record arrives, in order, and the
/// checkpoint covers the transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_larger_than_the_byte_budget_and_a_source_batch_is_delivered_in_order() {
    let mut fixture = fixture("").await;
    fixture.config.pipeline.max_in_flight_bytes = 1024 * 1024;
    let rows: u32 = 600;
    let padding = "x".repeat(8000);
    let mut conn = fixture.server.conn().await.unwrap();
    let mut transaction = conn
        .start_transaction(mysql_async::TxOpts::default())
        .await
        .unwrap();
    for n in 1..=rows {
        transaction
            .exec_drop(
                "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, 'order', 'big', 'order_created', ?)",
                (
                    format!("00000000-0000-4000-8000-{n:012}"),
                    format!(r#"{{"n":{n},"padding":"{padding}"}}"#),
                ),
            )
            .await
            .unwrap();
    }
    transaction.commit().await.unwrap();
    conn.disconnect().await.unwrap();
    let (handles, task) = fixture.start_relay();
    fixture
        .wait_for_checkpoint("0-1-4", Duration::from_secs(60))
        .await;
    let records = fixture.consume(DEMO_TOPIC, rows as usize).await;
    let ids: Vec<String> = records
        .iter()
        .map(|record| {
            let id = record.headers.iter().find(|(key, _)| key == "id");
            id.map(|(_, value)| value.clone()).unwrap_or_default()
        })
        .collect();
    let expected: Vec<String> = (1..=rows)
        .map(|n| format!("00000000-0000-4000-8000-{n:012}"))
        .collect();
    assert_eq!(ids, expected, "one key: the records arrive in binlog order");
    let summary = stop(handles, task).await.unwrap();
    assert_eq!(summary.delivered, u64::from(rows));
    assert_eq!(
        summary.checkpoint.map(|c| c.position.gtid_set.to_string()),
        Some("0-1-4".to_owned())
    );
}

#[path = "xa_tests.rs"]
mod xa;
