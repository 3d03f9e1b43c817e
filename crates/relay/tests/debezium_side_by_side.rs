//! The reference beside us: Debezium 3.6.1's MySQL connector + Outbox Event Router (in a
//! Kafka Connect worker) and outbox-relay read the same committed outbox rows from the same
//! MariaDB binlog into the same Apache Kafka broker. With the converters a Debezium user
//! picks for text payloads (StringConverter for key and value), a consumer must see the same
//! key, value and `id` header from both. The test prints both records side by side.
//!
//! This is the harness test the Debezium drop-in work builds its differential tests on;
//! [`debezium_json_converter_records_are_read_back`] shows the harness's other converter
//! choice working (what outbox-relay must produce for it is that work's subject).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use mysql_async::prelude::Queryable;
use outbox_testkit::connect::{
    Converter, DebeziumConnect, DebeziumOptions, DEBEZIUM_SERVER_VERSION_ARG,
};
use outbox_testkit::consume::{console_consume, read_all, ConsumedRecord, ReadStop};
use outbox_testkit::kafka::KafkaBroker;
use outbox_testkit::{ScratchMariadb, ScratchOptions};

/// Debezium's documented outbox table (its default column names), beside the shop schema.
const DEBEZIUM_OUTBOX_TABLE: &str = "CREATE TABLE shop.outbox_debezium (\
     id VARCHAR(64) NOT NULL PRIMARY KEY, aggregatetype VARCHAR(64) NOT NULL, \
     aggregateid VARCHAR(64) NOT NULL, type VARCHAR(64) NOT NULL, payload JSON, \
     timestamp DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB";

/// A scratch MariaDB that Debezium's MySQL connector accepts, with the shop schema and the
/// Debezium-style outbox table.
async fn start_database_for_debezium() -> ScratchMariadb {
    let db = ScratchMariadb::start_with(ScratchOptions {
        extra_args: vec![DEBEZIUM_SERVER_VERSION_ARG.to_string()],
        ..ScratchOptions::default()
    })
    .await
    .expect("scratch MariaDB starts");
    db.exec(SHOP_SCHEMA).await.expect("shop schema");
    db.exec(&[DEBEZIUM_OUTBOX_TABLE])
        .await
        .expect("outbox table");
    db
}

/// Commits `count` outbox rows (aggregate types `order`/`customer`, one aggregate each), one
/// transaction each with an order row, plus one rolled-back transaction; returns the
/// committed rows as (id, aggregate type, aggregate id, payload).
async fn write_outbox_rows(
    db: &ScratchMariadb,
    count: u32,
) -> Vec<(String, String, String, String)> {
    let mut conn = db.conn().await.expect("connect");
    let mut committed = Vec::new();
    for index in 0..count {
        let aggregate_type = ["order", "customer"][(index % 2) as usize];
        let aggregate_id = format!("{aggregate_type}-{index}");
        let id = format!("dbz-side-{index:04}");
        let payload = tricky_payload(u64::from(index), u64::from(index));
        conn.query_drop("START TRANSACTION").await.unwrap();
        conn.exec_drop(
            "INSERT INTO shop.orders (id, customer, total) VALUES (?, 'c', 1.00)",
            (u64::from(index) + 1,),
        )
        .await
        .unwrap();
        conn.exec_drop(
            "INSERT INTO shop.outbox_debezium (id, aggregatetype, aggregateid, type, payload) \
             VALUES (?, ?, ?, 'OrderCreated', ?)",
            (&id, aggregate_type, &aggregate_id, &payload),
        )
        .await
        .unwrap();
        conn.query_drop("COMMIT").await.unwrap();
        committed.push((id, aggregate_type.to_string(), aggregate_id, payload));
    }
    conn.query_drop("START TRANSACTION").await.unwrap();
    conn.exec_drop(
        "INSERT INTO shop.outbox_debezium (id, aggregatetype, aggregateid, type, payload) \
         VALUES ('dbz-side-doomed', 'order', 'order-0', 'OrderDoomed', '{}')",
        (),
    )
    .await
    .unwrap();
    conn.query_drop("ROLLBACK").await.unwrap();
    conn.disconnect().await.unwrap();
    committed
}

/// One line per record: partition@offset, key, the `id` header, all header names, the value.
fn describe(record: &ConsumedRecord) -> String {
    let header_names: Vec<&str> = record
        .headers
        .iter()
        .map(|(name, _)| name.as_str())
        .collect();
    format!(
        "{}@{} key={:?} id={:?} headers={header_names:?} value={}",
        record.partition,
        record.offset,
        record.key_str(),
        record.header_str("id"),
        String::from_utf8_lossy(record.value.as_deref().unwrap_or(b"<null>"))
    )
}

/// Records by their `id` header.
fn by_id(records: &[ConsumedRecord]) -> BTreeMap<String, &ConsumedRecord> {
    records
        .iter()
        .filter_map(|record| record.header_str("id").map(|id| (id, record)))
        .collect()
}

/// Starts outbox-relay on the same database and broker from the binlog's start, routing
/// `shop.outbox_debezium` (Debezium preset) to `TAG.outbox.event.TYPE`, topics created with
/// [`PARTITIONS`] partitions.
fn start_relay(db: &ScratchMariadb, broker: &KafkaBroker) -> Relay {
    let mut setup = RelaySetup::new(db, &broker.bootstrap());
    setup.topic_partitions = PARTITIONS;
    setup.extra_outbox_tables = vec![("shop.outbox_debezium".to_string(), "debezium".to_string())];
    let mut relay = Relay::prepare(&setup);
    relay.start();
    relay
}

/// Partitions of both sides' topics: an aggregate's events must land on the same partition
/// number from both (the Java producer's murmur2 partitioner), or per-aggregate order breaks
/// across a cutover.
const PARTITIONS: i32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_and_outbox_relay_deliver_the_same_records() {
    const ROWS: u32 = 12;
    let (db, broker) = tokio::join!(start_database_for_debezium(), KafkaBroker::shared());
    let broker = broker.expect("the shared Kafka broker starts");
    let tag = db.tag().to_string();
    // Debezium routes to its own copy of the topics, so both outputs can be compared.
    let mut options = DebeziumOptions::outbox(&format!("{tag}-dbz"), "shop.outbox_debezium");
    options.extra.push((
        "transforms.outbox.route.topic.replacement".into(),
        format!("{tag}.dbz.outbox.event.${{routedByValue}}"),
    ));
    options.extra.push((
        "topic.creation.default.partitions".into(),
        PARTITIONS.to_string(),
    ));
    let debezium = DebeziumConnect::start(&db, broker, options)
        .await
        .expect("Debezium streams");
    let mut relay = start_relay(&db, broker);

    let committed = write_outbox_rows(&db, ROWS).await;

    let mut failures = Vec::new();
    for aggregate_type in ["order", "customer"] {
        let ours_topic = topic_for(&db, aggregate_type);
        let theirs_topic = format!("{tag}.dbz.outbox.event.{aggregate_type}");
        let expected: Vec<_> = committed
            .iter()
            .filter(|(_, kind, _, _)| kind == aggregate_type)
            .collect();
        let ours = read_all(
            &broker.bootstrap(),
            &[ours_topic.as_str()],
            ReadStop::Count(expected.len()),
            Duration::from_secs(60),
        )
        .await
        .expect("read outbox-relay's records");
        // Debezium's side is read by Kafka's own console consumer (a client no one here wrote).
        let theirs = console_consume(
            &broker.bootstrap(),
            &theirs_topic,
            expected.len(),
            Duration::from_secs(60),
        )
        .await
        .expect("read Debezium's records");

        println!("== {aggregate_type}: outbox-relay ({ours_topic}) | Debezium ({theirs_topic})");
        let (ours_by_id, theirs_by_id) = (by_id(&ours), by_id(&theirs));
        for (id, kind, aggregate_id, payload) in &expected {
            let mine = ours_by_id.get(id.as_str());
            let reference = theirs_by_id.get(id.as_str());
            println!(
                "  {id}\n    relay:    {}\n    debezium: {}",
                mine.map_or("MISSING".to_string(), |r| describe(r)),
                reference.map_or("MISSING".to_string(), |r| describe(r)),
            );
            let (Some(mine), Some(reference)) = (mine, reference) else {
                failures.push(format!(
                    "{id} ({kind}): relay {mine:?}, debezium {reference:?}"
                ));
                continue;
            };
            if mine.key_str().as_deref() != Some(aggregate_id.as_str()) {
                failures.push(format!("{id}: relay key {:?}", mine.key_str()));
            }
            if mine.key != reference.key {
                failures.push(format!(
                    "{id}: keys differ: {:?} vs {:?}",
                    mine.key_str(),
                    reference.key_str()
                ));
            }
            if mine.value.as_deref() != Some(payload.as_bytes()) {
                failures.push(format!(
                    "{id}: relay value is not the payload byte for byte"
                ));
            }
            if mine.value != reference.value {
                failures.push(format!("{id}: values differ"));
            }
            if mine.partition != reference.partition {
                failures.push(format!(
                    "{id} (key {aggregate_id}): partition {} from the relay, {} from Debezium",
                    mine.partition, reference.partition
                ));
            }
        }
        if ours.len() != expected.len() || theirs.len() != expected.len() {
            failures.push(format!(
                "{aggregate_type}: {} committed, relay delivered {}, Debezium {}",
                expected.len(),
                ours.len(),
                theirs.len()
            ));
        }
        for record in ours.iter().chain(&theirs) {
            if record.header_str("id").as_deref() == Some("dbz-side-doomed") {
                failures.push(format!("a rolled-back row arrived: {}", describe(record)));
            }
        }
    }
    relay.stop_gracefully("after the comparison").await;
    assert!(
        failures.is_empty(),
        "outbox-relay and Debezium disagree:\n{}\nDebezium log: {}\nrelay log:\n{}",
        failures.join("\n"),
        debezium.log_path().display(),
        relay.log_tail(30)
    );
}

/// JsonConverter without schemas: Debezium's value is the payload as a JSON string literal
/// and its key a JSON string; the harness reads both back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_json_converter_records_are_read_back() {
    let (db, broker) = tokio::join!(start_database_for_debezium(), KafkaBroker::shared());
    let broker = broker.expect("the shared Kafka broker starts");
    let tag = db.tag().to_string();
    let mut options = DebeziumOptions::outbox(&format!("{tag}-dbzjson"), "shop.outbox_debezium");
    options.key_converter = Converter::Json { schemas: false };
    options.value_converter = Converter::Json { schemas: false };
    options.server_id = 54_322;
    options.extra.push((
        "transforms.outbox.route.topic.replacement".into(),
        format!("{tag}.dbz.outbox.event.${{routedByValue}}"),
    ));
    let _debezium = DebeziumConnect::start(&db, broker, options)
        .await
        .expect("Debezium streams");
    let committed = write_outbox_rows(&db, 2).await;
    let topic = format!("{tag}.dbz.outbox.event.order");
    let records = console_consume(&broker.bootstrap(), &topic, 1, Duration::from_secs(60))
        .await
        .expect("read Debezium's records");
    assert_eq!(records.len(), 1, "{records:?}");
    let (id, _, aggregate_id, payload) = &committed[0];
    println!(
        "Debezium with JsonConverter (schemas.enable=false): {}",
        describe(&records[0])
    );
    assert_eq!(records[0].header_str("id").as_deref(), Some(id.as_str()));
    let key: serde_json::Value =
        serde_json::from_slice(records[0].key.as_deref().unwrap_or_default()).expect("JSON key");
    assert_eq!(key, serde_json::Value::String(aggregate_id.clone()));
    let value: serde_json::Value =
        serde_json::from_slice(records[0].value.as_deref().unwrap_or_default())
            .expect("JSON value");
    assert_eq!(value, serde_json::Value::String(payload.clone()));
}
