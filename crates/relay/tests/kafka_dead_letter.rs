//! Dead letters and replay through real processes: scratch MariaDB -> `outbox-relay run`
//! -> Apache Kafka, then `outbox-relay dlq list` / `dlq replay`, read back with an independent
//! rdkafka consumer.

mod common;

use std::time::Duration;

use common::*;
use mysql_async::prelude::Queryable;
use outbox_testkit::consume::{read_all, ConsumedRecord, ReadStop};
use outbox_testkit::kafka::KafkaBroker;

/// The producer's `message.max.bytes` in this test: anything larger is refused at once.
const MESSAGE_MAX_BYTES: usize = 10_000;

/// Inserts `order` events `(event_id, aggregate_id, payload)`, each in its own autocommit
/// transaction, and returns the server's binlog position after them.
async fn insert_order_events(
    conn: &mut mysql_async::Conn,
    events: &[(&str, Option<&str>, String)],
) -> BinlogPoint {
    for (event_id, aggregate_id, payload) in events {
        conn.exec_drop(
            "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES (?, 'order', ?, 'order_created', ?)",
            (event_id, aggregate_id, payload),
        )
        .await
        .unwrap();
    }
    master_position(conn).await
}

fn header(record: &ConsumedRecord, name: &str) -> Option<String> {
    record.header_str(name)
}

fn dlq(config: &std::path::Path, args: &[&str]) -> (bool, String) {
    let config = config.to_str().expect("utf-8 config path");
    let mut all = vec!["dlq"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--config", config]);
    let (code, stdout, stderr) = run_relay_command(&all);
    (code == 0, format!("{stdout}{stderr}"))
}

/// Failure tests 4 and 5: a row with a NULL `aggregate_id` (routing error) and a payload
/// above `message.max.bytes` land in `outbox.dlq` with the failure headers; the events
/// around them flow; the checkpoint passes them (only possible once their dead letters are
/// acked: a dead-lettered event's ticket is reported by the sink only then); `dlq list`
/// shows both; `dlq replay --id --topic` republishes the routing failure with the same id
/// and payload; the truncated one is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_failures_are_dead_lettered_and_can_be_replayed() {
    let (db, broker) = tokio::join!(start_shop_database(), KafkaBroker::shared());
    let broker = broker.expect("the shared Kafka broker starts");
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup
        .kafka_properties
        .push(("message.max.bytes".into(), MESSAGE_MAX_BYTES.to_string()));
    let mut relay = Relay::prepare(&setup);

    let mut conn = db.conn().await.expect("connect");
    conn.query_drop("ALTER TABLE shop.outbox MODIFY aggregate_id VARCHAR(64) NULL")
        .await
        .unwrap();
    let big_payload = format!("{{\"blob\":\"{}\"}}", "x".repeat(MESSAGE_MAX_BYTES * 3));
    let end = insert_order_events(
        &mut conn,
        &[
            ("good-1", Some("order-1"), "{\"n\":1}".to_string()),
            ("null-key-2", None, "{\"n\":2}".to_string()),
            ("too-big-3", Some("order-3"), big_payload.clone()),
            ("good-4", Some("order-4"), "{\"n\":4}".to_string()),
        ],
    )
    .await;
    conn.disconnect().await.unwrap();

    relay.start();
    let letters = read_all(
        &broker.bootstrap(),
        &[&dlq_topic(&db)],
        ReadStop::Count(2),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert_eq!(
        letters.len(),
        2,
        "two dead letters; relay log:\n{}",
        relay.log_tail(40)
    );
    let delivered = read_all(
        &broker.bootstrap(),
        &[&topic_for(&db, "order")],
        ReadStop::Count(2),
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let ids: Vec<_> = delivered.iter().filter_map(|r| header(r, "id")).collect();
    assert_eq!(ids, vec!["good-1", "good-4"], "later events flow");
    relay.assert_running("after dead-lettering");
    // The checkpoint passes both failed events.
    wait_for_checkpoint(&relay, &end, Duration::from_secs(20)).await;

    let routing = letters
        .iter()
        .find(|r| header(r, "id").as_deref() == Some("null-key-2"))
        .expect("routing failure dead-lettered");
    assert_eq!(
        header(routing, "dlq.error_class").as_deref(),
        Some("routing")
    );
    assert_eq!(
        header(routing, "dlq.original_topic_known").as_deref(),
        Some("false")
    );
    assert_eq!(header(routing, "dlq.attempts").as_deref(), Some("1"));
    assert_eq!(header(routing, "dlq.table").as_deref(), Some("shop.outbox"));
    assert!(header(routing, "dlq.binlog_file").is_some());
    assert!(header(routing, "dlq.binlog_position").is_some());
    assert!(header(routing, "dlq.first_failure_ms").is_some());
    assert!(header(routing, "dlq.last_failure_ms").is_some());
    assert!(header(routing, "dlq.error_message").is_some_and(|m| m.contains("aggregate_id")));
    assert_eq!(routing.key, None, "the row had no aggregate id");
    assert_eq!(routing.value.as_deref(), Some(&b"{\"n\":2}"[..]));

    let big = letters
        .iter()
        .find(|r| header(r, "id").as_deref() == Some("too-big-3"))
        .expect("oversized event dead-lettered");
    assert_eq!(
        header(big, "dlq.error_class").as_deref(),
        Some("message_too_large")
    );
    assert_eq!(header(big, "dlq.attempts").as_deref(), Some("3"));
    assert_eq!(
        header(big, "dlq.original_topic").as_deref(),
        Some(topic_for(&db, "order").as_str())
    );
    assert_eq!(big.key_str().as_deref(), Some("order-3"));
    assert_eq!(
        header(big, "dlq.payload_size"),
        Some(big_payload.len().to_string())
    );
    assert_eq!(
        header(big, "dlq.payload_truncated").as_deref(),
        Some("true")
    );
    assert_eq!(
        big.value.as_deref(),
        Some(&big_payload.as_bytes()[..1024]),
        "a bounded prefix"
    );
    assert!(
        log_count(&relay, "dead-letter topic") >= 2,
        "{}",
        relay.log_tail(40)
    );

    // dlq list shows both.
    let (ok, listed) = dlq(&relay.config_path, &["list"]);
    assert!(ok, "{listed}");
    assert!(
        listed.contains("null-key-2") && listed.contains("too-big-3"),
        "{listed}"
    );

    // A routing failure has no original topic: replay needs --topic.
    let (ok, refused) = dlq(&relay.config_path, &["replay", "--id", "null-key-2"]);
    assert!(!ok && refused.contains("--topic"), "{refused}");
    let replay_topic = topic_for(&db, "replayed");
    let (ok, replayed) = dlq(
        &relay.config_path,
        &["replay", "--id", "null-key-2", "--topic", &replay_topic],
    );
    assert!(ok && replayed.contains("\"replayed\":true"), "{replayed}");
    // Twice: same id again (an idempotent consumer deduplicates by id).
    let (ok, again) = dlq(
        &relay.config_path,
        &["replay", "--id", "null-key-2", "--topic", &replay_topic],
    );
    assert!(ok, "{again}");
    let republished = read_all(
        &broker.bootstrap(),
        &[replay_topic.as_str()],
        ReadStop::Count(2),
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert_eq!(republished.len(), 2);
    for record in &republished {
        assert_eq!(header(record, "id").as_deref(), Some("null-key-2"));
        assert_eq!(record.value.as_deref(), Some(&b"{\"n\":2}"[..]));
        assert!(
            record
                .headers
                .iter()
                .all(|(key, _)| !key.starts_with("dlq.")),
            "replay drops the dlq.* headers: {:?}",
            record.headers
        );
    }

    // The truncated payload cannot be replayed faithfully: refused, with the reason.
    let (ok, truncated) = dlq(&relay.config_path, &["replay", "--id", "too-big-3"]);
    assert!(!ok && truncated.contains("truncated"), "{truncated}");

    let status = relay.terminate(Duration::from_secs(20)).await;
    assert!(status.success(), "{status}");
}

/// A record the *broker* rejects for good (the topic's `max.message.bytes` is below the
/// record, while the client's limit is not) is dead-lettered like a client-side rejection;
/// the events after it flow and the checkpoint passes it. (With librdkafka's gapless
/// guarantee on, the broker's MSG_SIZE_TOO_LARGE used to surface as a fatal producer error:
/// the relay rebuilt its producer and resent the record forever, the checkpoint frozen.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_the_broker_rejects_for_good_is_dead_lettered() {
    let (db, broker) = start_shop_database_and_broker().await;
    broker
        .create_topic_with_config(
            &topic_for(&db, "order"),
            1,
            &[("max.message.bytes", "4096")],
        )
        .await
        .expect("topic with a small record limit");
    let mut relay = Relay::prepare(&RelaySetup::new(&db, &broker.bootstrap()));
    let mut conn = db.conn().await.expect("connect");
    let big_payload = format!("{{\"blob\":\"{}\"}}", "y".repeat(20_000));
    let end = insert_order_events(
        &mut conn,
        &[
            ("small-1", Some("order-1"), "{\"n\":1}".to_string()),
            ("broker-rejects-2", Some("order-1"), big_payload),
            ("small-3", Some("order-1"), "{\"n\":3}".to_string()),
        ],
    )
    .await;
    conn.disconnect().await.unwrap();

    relay.start();
    let letters = read_all(
        &broker.bootstrap(),
        &[&dlq_topic(&db)],
        ReadStop::Count(1),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert_eq!(
        letters.len(),
        1,
        "one dead letter for the record the broker rejects; relay log:\n{}",
        relay.log_tail(40)
    );
    assert_eq!(
        header(&letters[0], "id").as_deref(),
        Some("broker-rejects-2")
    );
    assert_eq!(
        header(&letters[0], "dlq.error_class").as_deref(),
        Some("message_too_large")
    );
    let delivered = read_all(
        &broker.bootstrap(),
        &[&topic_for(&db, "order")],
        ReadStop::Count(2),
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let ids: Vec<_> = delivered.iter().filter_map(|r| header(r, "id")).collect();
    assert_eq!(ids, vec!["small-1", "small-3"], "later events flow");
    wait_for_checkpoint(&relay, &end, Duration::from_secs(30)).await;
    relay.stop_gracefully("after the broker's rejection").await;
}
