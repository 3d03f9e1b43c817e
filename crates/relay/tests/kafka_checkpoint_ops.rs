//! Checkpoint operations as an operator runs them (`checkpoint set` / `reset` between runs)
//! with the file and the Kafka store, and the MySQL and Kafka checkpoint stores under
//! `kill -9`.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;

fn checkpoint_command(args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["checkpoint"];
    all.extend_from_slice(args);
    run_relay_command(&all)
}

async fn write_batch(writer: &mut ShopWriter, kind: &str, transactions: u32) -> BinlogPoint {
    for index in 0..transactions {
        writer
            .transaction(
                kind,
                &format!("{kind}-{}", index % 3),
                1,
                index % 5 != 4,
                false,
            )
            .await;
    }
    writer.master_position().await
}

async fn read_topics(
    db: &outbox_testkit::ScratchMariadb,
    bootstrap: &str,
) -> Vec<outbox_testkit::consume::ConsumedRecord> {
    let topics = [
        topic_for(db, "order"),
        topic_for(db, "customer"),
        topic_for(db, "invoice"),
    ];
    read_until_quiet(
        bootstrap,
        &topics,
        Duration::from_millis(1000),
        Duration::from_secs(20),
    )
    .await
}

/// `checkpoint set --position` skips what lies before it; `checkpoint reset` makes the next run
/// start at `source.start` (earliest) again, so everything is delivered (again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_set_and_reset_decide_where_the_next_run_starts() {
    set_and_reset_decide_where_the_next_run_starts(false).await;
}

/// The same with `[checkpoint] store = "kafka"`: `show`, `set` and `reset` work on the
/// compacted topic (reset is a tombstone: `show` prints `null`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_store_checkpoint_set_and_reset_decide_where_the_next_run_starts() {
    set_and_reset_decide_where_the_next_run_starts(true).await;
}

async fn set_and_reset_decide_where_the_next_run_starts(kafka_store: bool) {
    let (db, broker) = start_shop_database_and_broker().await;
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    if kafka_store {
        setup.kafka_checkpoint_topic = Some(format!("{}.checkpoints", db.tag()));
    }
    let mut relay = Relay::prepare(&setup);
    let config = relay.config_path.display().to_string();

    let mut first = ShopWriter::connect(&db, "ops-a").await;
    relay.start();
    let end_a = write_batch(&mut first, "order", 6).await;
    wait_for_checkpoint(&relay, &end_a, Duration::from_secs(30)).await;
    relay.stop_gracefully("graceful stop").await;

    let mut skipped = ShopWriter::connect(&db, "ops-b").await;
    let end_b = write_batch(&mut skipped, "customer", 6).await;
    let mut last = ShopWriter::connect(&db, "ops-c").await;
    let end_c = write_batch(&mut last, "invoice", 6).await;

    let position = format!("{}:{}", end_b.file, end_b.position);
    let (code, stdout, stderr) =
        checkpoint_command(&["set", "--config", &config, "--position", &position]);
    assert_eq!(code, 0, "checkpoint set failed: {stdout}\n{stderr}");
    let shown = relay.checkpoint();
    assert_eq!(
        shown.position.as_ref(),
        Some(&end_b),
        "checkpoint show after set: {}",
        shown.raw
    );

    relay.start();
    wait_for_checkpoint(&relay, &end_c, Duration::from_secs(30)).await;
    relay.stop_gracefully("graceful stop").await;
    let records = read_topics(&db, &broker.bootstrap()).await;
    let mut committed = first.committed.clone();
    committed.extend(last.committed.iter().cloned());
    let mut forbidden = skipped.committed.clone();
    forbidden.extend(first.rolled_back.iter().cloned());
    forbidden.extend(skipped.rolled_back.iter().cloned());
    forbidden.extend(last.rolled_back.iter().cloned());
    let summary = assert_delivery(
        "after checkpoint set past batch B",
        &committed,
        &forbidden,
        &records,
        &relay,
    );
    assert_eq!(summary.duplicates, 0, "{summary:?}");

    let (code, stdout, stderr) = checkpoint_command(&["reset", "--config", &config]);
    assert_eq!(code, 0, "checkpoint reset failed: {stdout}\n{stderr}");
    let shown = relay.checkpoint();
    assert!(
        shown.position.is_none(),
        "checkpoint still there after reset: {}",
        shown.raw
    );

    relay.start();
    wait_for_checkpoint(&relay, &end_c, Duration::from_secs(30)).await;
    let records = read_topics(&db, &broker.bootstrap()).await;
    let mut everything = first.committed.clone();
    everything.extend(skipped.committed.iter().cloned());
    everything.extend(last.committed.iter().cloned());
    let mut rolled_back = first.rolled_back.clone();
    rolled_back.extend(skipped.rolled_back.iter().cloned());
    rolled_back.extend(last.rolled_back.iter().cloned());
    // Batch B (skipped before) now arrives too; A and C come a second time.
    let summary = assert_delivery(
        "after checkpoint reset (start = earliest)",
        &everything,
        &rolled_back,
        &records,
        &relay,
    );
    assert_eq!(
        summary.duplicates,
        first.committed.len() + last.committed.len(),
        "{summary:?}"
    );
    relay.stop_gracefully("graceful stop").await;
}

/// The MySQL checkpoint store (a table on the source server itself) under 8 kill -9 restarts
/// while a writer streams: at-least-once, per-key order, nothing rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_checkpoint_store_survives_kill_nine() {
    let (db, broker) = start_shop_database_and_broker().await;
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    // The store creates its table, not the database (an operator's decision).
    db.exec(&["CREATE DATABASE outbox_relay"]).await.unwrap();
    setup.mysql_checkpoint_url = Some(db.url());
    survives_kill_nine("mysql checkpoint store", 300, db, broker, setup).await;
}

/// `[checkpoint] store = "kafka"` end to end: events published, the relay killed -9 and
/// restarted 8 times while a writer streams, each run resuming from the checkpoint record
/// on the compacted topic (the relay creates the topic): nothing lost, per-key order, nothing
/// rolled back, the checkpoint never backwards, and it moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_checkpoint_store_survives_kill_nine() {
    let (db, broker) = start_shop_database_and_broker().await;
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    let topic = format!("{}.checkpoints", db.tag());
    setup.kafka_checkpoint_topic = Some(topic.clone());
    let relay = survives_kill_nine("kafka checkpoint store", 3000, db, broker, setup).await;
    // Every restart resumed from the record on the topic, not from `source.start`.
    let resumed = log_count(&relay, "resuming from the stored checkpoint");
    let from_topic = relay
        .log()
        .lines()
        .filter(|line| {
            line.contains("resuming from the stored checkpoint") && line.contains(&topic)
        })
        .count();
    assert!(
        resumed >= 6 && from_topic == resumed,
        "{resumed} resumes, {from_topic} naming the topic {topic}; log tail:\n{}",
        relay.log_tail(30)
    );
    let topics = broker.topics().await.unwrap();
    assert_eq!(topics.get(&topic), Some(&1), "checkpoint topic: {topics:?}");
}

/// `min_lifetime_ms`: the shortest run before a kill (the Kafka store's first commit waits
/// for its transactional producer's id: a second or two after a kill -9).
async fn survives_kill_nine(
    what: &str,
    min_lifetime_ms: u64,
    db: outbox_testkit::ScratchMariadb,
    broker: &outbox_testkit::kafka::KafkaBroker,
    setup: RelaySetup,
) -> Relay {
    let mut relay = Relay::prepare(&setup);

    let stop = Arc::new(AtomicBool::new(false));
    let writer = ShopWriter::connect(&db, "mysqlstore").await;
    let streaming = {
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let mut writer = writer;
            let mut index = 0u32;
            while !stop.load(Ordering::Relaxed) {
                index += 1;
                let kind = if matches!(index % 3, 0) {
                    "customer"
                } else {
                    "order"
                };
                writer
                    .transaction(
                        kind,
                        &format!("{kind}-{}", index % 5),
                        1 + (index % 2) as usize,
                        index % 6 != 2,
                        false,
                    )
                    .await;
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            writer
        })
    };
    let mut positions = Vec::new();
    for kill in 0..8 {
        relay.start();
        tokio::time::sleep(Duration::from_millis(
            min_lifetime_ms + rand::random::<u64>() % 900,
        ))
        .await;
        relay.assert_running(&format!("before kill #{kill}"));
        relay.kill9();
        let view = relay.checkpoint();
        if let Some(previous) = positions.last() {
            assert!(
                view.position >= *previous,
                "checkpoint went backwards after kill #{kill}: {previous:?} -> {}",
                view.raw
            );
        }
        positions.push(view.position);
    }
    relay.start();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let mut writer = streaming.await.unwrap();
    let end = writer.master_position().await;
    // The store's own writes go to the same binlog; the checkpoint only has to reach `end`.
    wait_for_checkpoint(&relay, &end, Duration::from_secs(40)).await;
    let records = read_until_ids(
        &broker.bootstrap(),
        &[topic_for(&db, "order"), topic_for(&db, "customer")],
        &writer.committed,
        Duration::from_secs(30),
    )
    .await;
    let summary = assert_delivery(
        &format!("{what}, 8 x kill -9"),
        &writer.committed,
        &writer.rolled_back,
        &records,
        &relay,
    );
    let distinct: std::collections::BTreeSet<_> = positions.iter().collect();
    assert!(
        distinct.len() > 2,
        "the {what}'s checkpoint barely moved over 8 runs: {positions:?}"
    );
    eprintln!(
        "{what}: {} committed, {summary:?}, checkpoints after each kill {positions:?}",
        writer.committed.len()
    );
    relay.stop_gracefully("graceful stop").await;
    writer.close().await;
    relay
}

/// `checkpoint import-debezium` reads a connector's newest offset from a Kafka Connect
/// offsets topic (keys `["<connector>",{"server":"<prefix>"}]`, JSON values as Debezium's
/// MySqlOffsetContext writes them: `file`, `pos`, `gtids`, `server_id`, `ts_sec`), stores
/// the checkpoint at that transaction boundary (with the GTID set), and the relay then
/// delivers exactly what follows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_debezium_continues_after_the_connector_offset() {
    use mysql_async::prelude::Queryable;
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let (db, broker) = start_shop_database_and_broker().await;
    let relay_setup = RelaySetup::new(&db, &broker.bootstrap());
    let mut relay = Relay::prepare(&relay_setup);
    let config = relay.config_path.to_str().unwrap().to_string();
    let mut writer = ShopWriter::connect(&db, "import").await;
    let before = write_batch(&mut writer, "order", 4).await;
    let delivered_by_debezium = writer.committed.len();
    let after = write_batch(&mut writer, "order", 4).await;
    assert!(after > before);

    // What Debezium's offset at `before` looks like.
    let mut conn = db.conn().await.unwrap();
    let server_id: u32 = conn
        .query_first("SELECT @@server_id")
        .await
        .unwrap()
        .unwrap();
    let gtids: String = conn
        .exec_first(
            "SELECT BINLOG_GTID_POS(?, ?)",
            (&before.file, before.position),
        )
        .await
        .unwrap()
        .unwrap();
    conn.disconnect().await.unwrap();
    let connector = format!("{}-dbz", db.tag());
    let key = format!("[\"{connector}\",{{\"server\":\"{connector}\"}}]");
    let offsets_topic = format!("{}.connect-offsets", db.tag());
    broker.create_topic(&offsets_topic, 1).await.unwrap();
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .create()
        .unwrap();
    let older = format!(
        "{{\"file\":\"{}\",\"pos\":4,\"server_id\":{server_id}}}",
        before.file
    );
    let newest = format!(
        "{{\"transaction_id\":null,\"ts_sec\":1764700000,\"file\":\"{}\",\"pos\":{},\"gtids\":\"{gtids}\",\"server_id\":{server_id}}}",
        before.file, before.position
    );
    let other_key = format!("[\"someone-else\",{{\"server\":\"{connector}\"}}]");
    for (key, value) in [(&key, &older), (&other_key, &older), (&key, &newest)] {
        producer
            .send(
                FutureRecord::to(&offsets_topic)
                    .key(key.as_str())
                    .payload(value.as_str()),
                Duration::from_secs(10),
            )
            .await
            .expect("offset record written");
    }

    let (code, stdout, stderr) = checkpoint_command(&[
        "import-debezium",
        "--config",
        &config,
        "--offsets-topic",
        &offsets_topic,
        "--connector",
        &connector,
        "--server",
        &connector,
    ]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let view = relay.checkpoint();
    assert_eq!(view.position, Some(before.clone()), "{}", view.raw);
    assert!(
        view.raw.contains(&format!("\"gtid_set\": \"{gtids}\"")),
        "{}",
        view.raw
    );

    relay.start();
    let topics = vec![topic_for(&db, "order")];
    let expected = writer.committed[delivered_by_debezium..].to_vec();
    let records = read_until_ids(
        &broker.bootstrap(),
        &topics,
        &expected,
        Duration::from_secs(60),
    )
    .await;
    let ids: Vec<String> = records.iter().filter_map(|r| r.header_str("id")).collect();
    for event in &writer.committed[..delivered_by_debezium] {
        assert!(
            !ids.contains(&event.id),
            "{} was before Debezium's offset but sent again: {ids:?}",
            event.id
        );
    }
    wait_for_checkpoint(&relay, &after, Duration::from_secs(30)).await;
    relay.stop_gracefully("graceful stop").await;
    writer.close().await;
}
