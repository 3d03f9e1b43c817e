//! The live cutover (issue 12): Debezium 3.6.1 (a Kafka Connect standalone worker with the
//! MySQL connector and the Outbox Event Router) relays the first part of a stream of outbox
//! rows and is stopped while rows are still being committed; `outbox-relay checkpoint
//! import-debezium --offsets-file` takes the connector's offset from the worker's offsets
//! file; outbox-relay then writes the same topics (StringConverter-compatible raw records,
//! murmur2 partitioning) from there on.
//!
//! What a consumer of those topics must see: every committed event at least once; an event
//! twice only if it was committed before Debezium stopped (the overlap), both copies with
//! the same key, value and `id` header; each key on one partition (the one Debezium used);
//! per key, first arrivals in commit order. Run twice: with a clean stop (SIGTERM flushes
//! the offsets file: usually no duplicates) and with the worker killed (the file lags by up
//! to a flush interval: the relay sends those events again).
//!
//! What the offset looks like here: Debezium's MySQL connector reads MariaDB in this
//! harness (see `outbox_testkit::connect`) and does not take MariaDB's GTID event for a
//! transaction start, so its offset names the position after the last row event it sent
//! (that transaction's XID) with `row: 1`, not the transaction's BEGIN. With one outbox row
//! per transaction the relay resumes at that XID and loses nothing; a transaction with
//! several outbox row events, stopped between them, is not covered.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use mysql_async::prelude::Queryable;
use outbox_testkit::connect::{DebeziumConnect, DebeziumOptions};
use outbox_testkit::consume::ConsumedRecord;
use outbox_testkit::kafka::KafkaBroker;
use outbox_testkit::ScratchMariadb;

/// Partitions of the topics: keys must hash to the same one from both producers.
const PARTITIONS: i32 = 3;

/// Rows committed while only Debezium runs (waited for on its topics).
const BEFORE_STOP: u32 = 12;
/// Rows committed after Debezium stopped, before the relay starts.
const AFTER_STOP: u32 = 4;
/// Rows committed once the relay runs.
const WITH_RELAY: u32 = 8;

/// When a row was committed, relative to the cutover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Its transaction began before Debezium's worker had exited: Debezium may have sent it,
    /// and the relay may send it again (the overlap).
    Overlap,
    /// Begun after the worker exited: only the relay can send it.
    AfterStop,
}

/// One committed outbox row.
#[derive(Debug, Clone)]
struct Row {
    /// `id`: the `id` header.
    id: String,
    /// `aggregatetype`: the topic.
    aggregate_type: String,
    /// `aggregateid`: the key.
    aggregate_id: String,
    /// `payload`: the value, byte for byte.
    payload: String,
    /// Whether Debezium may have sent it.
    phase: Phase,
}

/// Commits outbox rows one transaction each (with an order row), in a known order.
struct Writer {
    /// One connection: transactions are sequential, so commit order is the list's order.
    conn: mysql_async::Conn,
    /// Next row number.
    next: u32,
    /// Rows committed so far, in commit order.
    committed: Vec<Row>,
}

impl Writer {
    async fn connect(db: &ScratchMariadb) -> Writer {
        Writer {
            conn: db.conn().await.expect("writer connects"),
            next: 0,
            committed: Vec::new(),
        }
    }

    /// Commits one row: aggregate types alternate, six aggregates in all.
    async fn row(&mut self, phase: Phase) {
        let index = self.next;
        self.next += 1;
        let aggregate_type = ["order", "customer"][(index % 2) as usize];
        let aggregate_id = format!("{aggregate_type}-{}", index % 3);
        let id = format!("cutover-{index:04}");
        let payload = tricky_payload(u64::from(index), u64::from(index));
        self.conn.query_drop("START TRANSACTION").await.unwrap();
        self.conn
            .exec_drop(
                "INSERT INTO shop.orders (id, customer, total) VALUES (?, 'c', 1.00)",
                (u64::from(index) + 1,),
            )
            .await
            .unwrap();
        self.conn
            .exec_drop(
                "INSERT INTO shop.outbox_debezium (id, aggregatetype, aggregateid, type, payload) \
                 VALUES (?, ?, ?, 'OrderCreated', ?)",
                (&id, aggregate_type, &aggregate_id, &payload),
            )
            .await
            .unwrap();
        self.conn.query_drop("COMMIT").await.unwrap();
        self.committed.push(Row {
            id,
            aggregate_type: aggregate_type.to_string(),
            aggregate_id,
            payload,
            phase,
        });
    }
}

/// The rows as the harness's [`Event`]s (for [`read_until_ids_then_settled`]).
fn as_events(db: &ScratchMariadb, rows: &[Row]) -> Vec<Event> {
    rows.iter()
        .map(|row| Event {
            id: row.id.clone(),
            aggregate_type: row.aggregate_type.clone(),
            aggregate_id: row.aggregate_id.clone(),
            event_type: "OrderCreated".to_string(),
            payload: row.payload.clone(),
            topic_tag: db.tag().to_string(),
        })
        .collect()
}

/// (topic, partition, offset): where a record sits, to tell whose it is.
fn place(record: &ConsumedRecord) -> (String, i32, i64) {
    (record.topic.clone(), record.partition, record.offset)
}

/// How Debezium's worker ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// SIGTERM: the worker flushes its offsets file on the way out (the runbook's way).
    Clean,
    /// SIGKILL: the file holds the offsets of the last periodic flush (every second), so
    /// records Debezium sent after it are sent again by the relay (the overlap's duplicates).
    Kill,
}

/// A clean stop: the offsets file is flushed on shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_stops_and_outbox_relay_continues_from_its_offsets_file() {
    cutover(Stop::Clean).await;
}

/// Debezium's worker is killed: its offsets file lags what it sent, the relay sends those
/// events again, with the same ids, keys, values and partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_is_killed_and_outbox_relay_resends_only_the_overlap() {
    cutover(Stop::Kill).await;
}

/// Sends SIGKILL to `pid` and waits until it is dead (gone or a zombie), at most 30 s.
async fn kill_and_wait(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -KILL {pid}: {status}");
    for _ in 0..300 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return,
            // The state follows the command name in parentheses.
            Ok(stat)
                if stat
                    .rsplit(')')
                    .next()
                    .is_some_and(|rest| rest.trim_start().starts_with('Z')) =>
            {
                return
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    panic!("the worker {pid} did not die within 30 s of SIGKILL");
}

/// Waits (at most 60 s) until the worker's offsets file holds an offset of `connector`.
async fn wait_for_flushed_offset(path: &std::path::Path, connector: &str) {
    for _ in 0..600 {
        if let Ok(Some(_)) =
            outbox_relay::connect_offsets_file::read_offsets_file(path, connector, Some(connector))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "the worker flushed no offset of {connector} to {} within 60 s",
        path.display()
    );
}

async fn cutover(stop: Stop) {
    let (db, broker) = tokio::join!(start_database_for_debezium(), KafkaBroker::shared());
    let broker = broker.expect("the shared Kafka broker starts");
    let tag = db.tag().to_string();
    let topics: Vec<String> = ["order", "customer"]
        .iter()
        .map(|kind| topic_for(&db, kind))
        .collect();

    // Debezium writes the topics the relay's route template names: TAG.outbox.event.TYPE.
    let connector = format!("{tag}-dbz");
    let mut options = DebeziumOptions::outbox(&connector, "shop.outbox_debezium");
    options.extra.push((
        "transforms.outbox.route.topic.replacement".into(),
        format!("{tag}.outbox.event.${{routedByValue}}"),
    ));
    options.extra.push((
        "topic.creation.default.partitions".into(),
        PARTITIONS.to_string(),
    ));
    let mut debezium = DebeziumConnect::start(&db, broker, options)
        .await
        .expect("Debezium streams");
    let offsets_file = debezium.offsets_path();

    // 1. Debezium alone.
    let mut writer = Writer::connect(&db).await;
    for _ in 0..BEFORE_STOP {
        writer.row(Phase::Overlap).await;
    }
    let first = read_until_ids(
        &broker.bootstrap(),
        &topics,
        &as_events(&db, &writer.committed),
        Duration::from_secs(90),
    )
    .await;
    assert!(
        first.len() >= BEFORE_STOP as usize,
        "Debezium delivered {} of {BEFORE_STOP} rows; its log: {}",
        first.len(),
        debezium.log_path().display()
    );

    // 2. Rows keep being committed while Debezium is stopped (SIGTERM: it flushes its
    // offsets), and after.
    let stopped = Arc::new(AtomicBool::new(false));
    let writing = {
        let stopped = Arc::clone(&stopped);
        tokio::spawn(async move {
            let mut during = 0;
            // Bounded: the stop takes at most 30 s.
            while !stopped.load(Ordering::SeqCst) && during < 300 {
                writer.row(Phase::Overlap).await;
                during += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            for _ in 0..AFTER_STOP {
                // Phase read before the transaction begins: the worker has exited by then.
                let phase = if stopped.load(Ordering::SeqCst) {
                    Phase::AfterStop
                } else {
                    Phase::Overlap
                };
                writer.row(phase).await;
            }
            writer
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    match stop {
        Stop::Clean => tokio::task::block_in_place(|| debezium.stop()),
        Stop::Kill => {
            // A kill before the first periodic flush leaves no file at all: wait for one
            // that holds the connector's offset (a precondition, not a timing assertion).
            wait_for_flushed_offset(&offsets_file, &connector).await;
            kill_and_wait(debezium.pid().expect("the worker runs")).await
        }
    }
    stopped.store(true, Ordering::SeqCst);
    let mut writer = writing.await.expect("the writer task");
    let overlap_rows = writer
        .committed
        .iter()
        .filter(|row| row.phase == Phase::Overlap)
        .count();

    // Everything on the topics now is Debezium's (the relay has not started).
    let debezium_records = read_until_quiet(
        &broker.bootstrap(),
        &topics,
        Duration::from_secs(2),
        Duration::from_secs(30),
    )
    .await;
    let debezium_places: BTreeSet<_> = debezium_records.iter().map(place).collect();

    // 3. The cutover: the offset from the worker's file, then the relay on the same topics.
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup.topic_partitions = PARTITIONS;
    setup.extra_outbox_tables = vec![("shop.outbox_debezium".to_string(), "debezium".to_string())];
    let mut relay = Relay::prepare(&setup);
    let config = relay.config_path.display().to_string();
    let offsets = offsets_file.display().to_string();
    let (code, stdout, stderr) = run_relay_command(&[
        "checkpoint",
        "import-debezium",
        "--config",
        &config,
        "--offsets-file",
        &offsets,
        "--connector",
        &connector,
        "--server",
        &connector,
    ]);
    println!("import-debezium --offsets-file {offsets}:\n{stdout}{stderr}");
    assert_eq!(
        code,
        0,
        "import-debezium failed:\n{stdout}\n{stderr}\nDebezium log: {}",
        debezium.log_path().display()
    );
    relay.start();
    for _ in 0..WITH_RELAY {
        writer.row(Phase::AfterStop).await;
    }
    let committed = writer.committed.clone();
    let records = read_until_ids_then_settled(
        &broker.bootstrap(),
        &topics,
        &as_events(&db, &committed),
        Duration::from_secs(90),
    )
    .await;
    relay.stop_gracefully("after the cutover").await;

    // The verdict.
    let mut failures = Vec::new();
    let rows: BTreeMap<&str, &Row> = committed.iter().map(|row| (row.id.as_str(), row)).collect();
    // id -> (Debezium's copies, the relay's copies).
    let mut copies: BTreeMap<String, (Vec<&ConsumedRecord>, Vec<&ConsumedRecord>)> =
        BTreeMap::new();
    for record in &records {
        let Some(id) = record.header_str("id") else {
            failures.push(format!("a record without an `id` header: {record:?}"));
            continue;
        };
        let Some(row) = rows.get(id.as_str()) else {
            failures.push(format!("{id} was never committed: {record:?}"));
            continue;
        };
        if record.key_str().as_deref() != Some(row.aggregate_id.as_str())
            || record.value.as_deref() != Some(row.payload.as_bytes())
            || !record
                .topic
                .ends_with(&format!(".outbox.event.{}", row.aggregate_type))
        {
            failures.push(format!(
                "{id}: topic {} key {:?} value {:?}, expected key {} and the payload",
                record.topic,
                record.key_str(),
                record.value.as_deref().map(String::from_utf8_lossy),
                row.aggregate_id
            ));
        }
        let entry = copies.entry(id).or_default();
        if debezium_places.contains(&place(record)) {
            entry.0.push(record);
        } else {
            entry.1.push(record);
        }
    }
    let mut duplicates = 0;
    for row in &committed {
        let Some((theirs, ours)) = copies.get(&row.id) else {
            failures.push(format!("{} ({:?}) never arrived", row.id, row.phase));
            continue;
        };
        if theirs.len() > 1 || ours.len() > 1 {
            failures.push(format!(
                "{}: {} copies from Debezium, {} from the relay",
                row.id,
                theirs.len(),
                ours.len()
            ));
        }
        if row.phase == Phase::AfterStop && !theirs.is_empty() {
            failures.push(format!(
                "{} was committed after Debezium stopped, yet Debezium sent it",
                row.id
            ));
        }
        if let (Some(theirs), Some(ours)) = (theirs.first(), ours.first()) {
            duplicates += 1;
            if row.phase != Phase::Overlap {
                failures.push(format!("{} is a duplicate outside the overlap", row.id));
            }
            if theirs.key != ours.key
                || theirs.value != ours.value
                || theirs.header("id") != ours.header("id")
            {
                failures.push(format!(
                    "{}: the copies differ: Debezium {theirs:?} / relay {ours:?}",
                    row.id
                ));
            }
        }
    }
    // Per key: one partition, first arrivals in commit order.
    let mut keys: BTreeMap<(&str, &str), Vec<&Row>> = BTreeMap::new();
    for row in &committed {
        keys.entry((row.aggregate_type.as_str(), row.aggregate_id.as_str()))
            .or_default()
            .push(row);
    }
    for ((aggregate_type, key), key_rows) in &keys {
        let key_records: Vec<&ConsumedRecord> = records
            .iter()
            .filter(|r| {
                r.topic
                    .ends_with(&format!(".outbox.event.{aggregate_type}"))
                    && r.key_str().as_deref() == Some(*key)
            })
            .collect();
        let partitions: BTreeSet<i32> = key_records.iter().map(|r| r.partition).collect();
        if partitions.len() != 1 {
            failures.push(format!(
                "key {key} ({aggregate_type}) is on partitions {partitions:?}"
            ));
            continue;
        }
        let mut in_offset_order = key_records.clone();
        in_offset_order.sort_by_key(|r| r.offset);
        let mut first_arrivals: Vec<String> = Vec::new();
        for record in in_offset_order {
            if let Some(id) = record.header_str("id") {
                if !first_arrivals.contains(&id) {
                    first_arrivals.push(id);
                }
            }
        }
        let commit_order: Vec<String> = key_rows.iter().map(|row| row.id.clone()).collect();
        if first_arrivals != commit_order {
            failures.push(format!(
                "key {key}: first arrivals {first_arrivals:?}, commit order {commit_order:?}"
            ));
        }
    }
    let from_debezium = debezium_records.len();
    let from_relay = records
        .iter()
        .filter(|record| !debezium_places.contains(&place(record)))
        .count();
    println!(
        "cutover ({stop:?}): {} rows committed ({overlap_rows} before Debezium stopped, {} after); \
         Debezium sent {from_debezium}, outbox-relay {from_relay}, duplicates {duplicates}; \
         {} keys on {PARTITIONS} partitions",
        committed.len(),
        committed.len() - overlap_rows,
        keys.len()
    );
    // Debezium sent at least what was waited for; the relay at least the rows after it.
    if from_debezium < BEFORE_STOP as usize {
        failures.push(format!("Debezium sent only {from_debezium} records"));
    }
    if from_relay < (AFTER_STOP + WITH_RELAY) as usize {
        failures.push(format!("the relay sent only {from_relay} records"));
    }
    assert!(
        failures.is_empty(),
        "the cutover lost, reordered or misplaced events:\n{}\nDebezium log: {}\nrelay log:\n{}",
        failures.join("\n"),
        debezium.log_path().display(),
        relay.log_tail(30)
    );
}
