//! End to end through real processes: scratch MariaDB -> `outbox-relay run` -> Apache Kafka,
//! read back with an independent rdkafka consumer and with Kafka's own console consumer.

mod common;

use std::time::Duration;

use common::*;
use outbox_testkit::consume::{read_all, ReadStop};

/// Orders + outbox rows committed together arrive on `outbox.event.<type>`, key = aggregate
/// id, header `id` = event id, payload byte-exact; other tables' rows and rolled-back
/// transactions never arrive; the checkpoint ends at the server's binlog position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_outbox_rows_arrive_routed_and_byte_exact() {
    let (db, broker) = start_shop_database_and_broker().await;
    let mut relay = Relay::prepare(&RelaySetup::new(&db, &broker.bootstrap()));

    let mut writer = ShopWriter::connect(&db, "e2e").await;
    // Written before the relay starts (start = earliest picks them up) ...
    writer.transaction("order", "order-1", 1, true, true).await;
    writer.transaction("order", "order-2", 3, true, false).await;
    writer.transaction("order", "order-3", 2, false, true).await;
    relay.start();
    // ... and while it runs.
    writer
        .transaction("customer", "customer-9", 2, true, true)
        .await;
    writer.transaction("order", "order-1", 2, true, false).await;
    writer
        .transaction("ghost", "ghost-1", 2, false, false)
        .await;
    writer.transaction("order", "order-2", 1, true, false).await;
    let end = writer.master_position().await;

    let topics = vec![
        topic_for(&db, "order"),
        topic_for(&db, "customer"),
        topic_for(&db, "ghost"),
    ];
    let records = read_until_ids(
        &broker.bootstrap(),
        &topics,
        &writer.committed,
        Duration::from_secs(30),
    )
    .await;
    relay.assert_running("after delivery");
    // Nothing more may trickle in (no rolled-back or archive-table events, no duplicates).
    let settled = read_until_quiet(
        &broker.bootstrap(),
        &topics,
        Duration::from_millis(1500),
        Duration::from_secs(20),
    )
    .await;
    assert!(settled.len() >= records.len());
    let summary = assert_writer_delivery("end to end", &writer, &settled, &relay);
    // The same verdict from Kafka's own console consumer.
    let console = assert_console_consumer_agrees(&broker.bootstrap(), &settled).await;
    assert_writer_delivery(
        "end to end (kafka-console-consumer)",
        &writer,
        &console,
        &relay,
    );
    assert_eq!(
        summary.records,
        writer.committed.len(),
        "a clean run delivers each event exactly once: {summary:?}"
    );
    assert!(
        settled.iter().all(|r| r.topic != topic_for(&db, "ghost")),
        "rolled-back aggregate type reached Kafka"
    );

    let checkpoint = wait_for_checkpoint(&relay, &end, Duration::from_secs(15)).await;
    let status = relay.terminate(Duration::from_secs(20)).await;
    assert!(
        status.success(),
        "graceful stop exit status {status}; log:\n{}",
        relay.log_tail(30)
    );
    let after_stop = relay.checkpoint();
    assert!(
        after_stop.position >= checkpoint.position,
        "checkpoint went back on stop: {} -> {}",
        checkpoint.raw,
        after_stop.raw
    );
    writer.close().await;
}

/// SIGTERM stops gracefully (exit 0, final checkpoint committed); a new process resumes
/// from it: every event delivered exactly once across the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_restart_neither_loses_nor_duplicates() {
    let (db, broker) = start_shop_database_and_broker().await;
    let mut relay = Relay::prepare(&RelaySetup::new(&db, &broker.bootstrap()));
    let mut writer = ShopWriter::connect(&db, "restart").await;
    let topics = [topic_for(&db, "order"), topic_for(&db, "customer")];

    relay.start();
    for round in 0..3u32 {
        // The relay is up and has caught up with the backlog (its signal handler is in place:
        // a SIGTERM during process startup is not a graceful stop) ...
        writer
            .transaction("order", "order-probe", 1, true, false)
            .await;
        let caught_up = writer.master_position().await;
        wait_for_checkpoint(&relay, &caught_up, Duration::from_secs(30)).await;
        // ... then a burst, and the stop comes while its last events may still be in flight.
        for index in 0..20u32 {
            let aggregate = format!("order-{}", index % 5);
            let kind = if index % 4 == 0 { "customer" } else { "order" };
            writer
                .transaction(
                    kind,
                    &aggregate,
                    1 + (index % 3) as usize,
                    index % 7 != 3,
                    index % 5 == 0,
                )
                .await;
        }
        let status = relay.terminate(Duration::from_secs(30)).await;
        assert!(
            status.success(),
            "round {round}: SIGTERM exit status {status}; log:\n{}",
            relay.log_tail(30)
        );
        let stored = relay.checkpoint();
        assert!(
            stored.position.is_some(),
            "round {round}: no checkpoint after a graceful stop: {}",
            stored.raw
        );
        // More work while the relay is down.
        for index in 0..10u32 {
            writer
                .transaction(
                    "order",
                    &format!("order-{}", index % 5),
                    1,
                    index % 6 != 2,
                    false,
                )
                .await;
        }
        relay.start();
    }
    let end = writer.master_position().await;
    wait_for_checkpoint(&relay, &end, Duration::from_secs(30)).await;
    let records = read_until_quiet(
        &broker.bootstrap(),
        &topics,
        Duration::from_millis(1000),
        Duration::from_secs(30),
    )
    .await;
    let summary = assert_writer_delivery("graceful restarts", &writer, &records, &relay);
    assert_eq!(
        summary.duplicates, 0,
        "graceful stops commit the final checkpoint, so nothing is sent twice: {summary:?}; checkpoint {}",
        relay.checkpoint().raw
    );
    relay.stop_gracefully("final stop").await;
    writer.close().await;
}

/// A second outbox table with a binary payload column: arbitrary bytes (not UTF-8, NUL,
/// 0xFF) arrive byte-exact, with events of both tables routed by the same template.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_payloads_from_a_second_outbox_table_arrive_byte_exact() {
    use mysql_async::prelude::Queryable;
    let (db, broker) = start_shop_database_and_broker().await;
    db.exec(&[
        "CREATE TABLE shop.outbox_binary (event_id VARCHAR(64) NOT NULL PRIMARY KEY, \
         aggregate_type VARCHAR(64) NOT NULL, aggregate_id VARCHAR(64) NOT NULL, \
         event_type VARCHAR(64) NOT NULL, payload LONGBLOB NOT NULL, \
         created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB",
    ])
    .await
    .unwrap();
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup.extra_outbox_tables = vec![("shop.outbox_binary".to_string(), "seeds".to_string())];
    let mut relay = Relay::prepare(&setup);
    relay.start();

    let mut conn = db.conn().await.unwrap();
    let mut binary: Vec<(String, Vec<u8>)> = Vec::new();
    for index in 0..20u32 {
        let payload: Vec<u8> = (0..(index * 37 % 300 + 1))
            .map(|byte| (byte * 7 + index) as u8)
            .chain([0x00, 0xff, 0xfe, b'\'', b'\\'])
            .collect();
        let id = format!("bin-{index:04}");
        conn.exec_drop(
            "INSERT INTO shop.outbox_binary (event_id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES (?, 'blob', ?, 'Blob', ?)",
            (&id, format!("blob-{}", index % 3), &payload),
        )
        .await
        .unwrap();
        binary.push((id, payload));
    }
    let mut writer = ShopWriter::connect(&db, "text").await;
    writer.transaction("order", "order-1", 2, true, false).await;
    let end = writer.master_position().await;
    wait_for_checkpoint(&relay, &end, Duration::from_secs(30)).await;

    let records = read_all(
        &broker.bootstrap(),
        &[
            topic_for(&db, "blob").as_str(),
            topic_for(&db, "order").as_str(),
        ],
        ReadStop::Count(binary.len() + writer.committed.len()),
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    for (id, payload) in &binary {
        let record = records
            .iter()
            .find(|record| record.header_str("id").as_deref() == Some(id.as_str()))
            .unwrap_or_else(|| panic!("binary event {id} missing; got {} records", records.len()));
        assert_eq!(record.topic, topic_for(&db, "blob"));
        assert_eq!(
            record.value.as_deref(),
            Some(payload.as_slice()),
            "payload of {id} not byte-exact"
        );
    }
    let text_records: Vec<_> = records
        .iter()
        .filter(|record| record.topic == topic_for(&db, "order"))
        .cloned()
        .collect();
    assert_delivery(
        "text events next to binary ones",
        &writer.committed,
        &[],
        &text_records,
        &relay,
    );
    assert_eq!(records.len(), binary.len() + writer.committed.len());
    relay.stop_gracefully("graceful stop").await;
    writer.close().await;
}

/// A table with Debezium's Outbox Event Router column names (`id`, `aggregatetype`,
/// `aggregateid`, `type`, `payload`) and `preset = "debezium"` next to the seeds-preset
/// table: both route the same way (topic from the aggregate type, key, header `id`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debezium_preset_table_routes_like_the_seeds_one() {
    use mysql_async::prelude::Queryable;
    let (db, broker) = start_shop_database_and_broker().await;
    db.exec(&[
        "CREATE TABLE shop.outbox_debezium (id VARCHAR(64) NOT NULL PRIMARY KEY, \
         aggregatetype VARCHAR(64) NOT NULL, aggregateid VARCHAR(64) NOT NULL, \
         type VARCHAR(64) NOT NULL, payload JSON NOT NULL) ENGINE=InnoDB",
    ])
    .await
    .unwrap();
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup.extra_outbox_tables = vec![("shop.outbox_debezium".to_string(), "debezium".to_string())];
    let mut relay = Relay::prepare(&setup);
    relay.start();

    let mut conn = db.conn().await.unwrap();
    let mut debezium_events = Vec::new();
    for index in 0..10u32 {
        let event = Event {
            id: format!("dbz-{index:04}"),
            aggregate_type: "shipment".to_string(),
            aggregate_id: format!("shipment-{}", index % 3),
            event_type: "Shipped".to_string(),
            payload: tricky_payload(u64::from(index), u64::from(index)),
            topic_tag: db.tag().to_string(),
        };
        conn.query_drop("START TRANSACTION").await.unwrap();
        insert_event(
            &mut conn,
            "shop.outbox_debezium",
            ["id", "aggregatetype", "aggregateid", "type", "payload"],
            &event,
        )
        .await
        .unwrap();
        conn.query_drop("COMMIT").await.unwrap();
        debezium_events.push(event);
    }
    drop(conn);
    let mut writer = ShopWriter::connect(&db, "seeds").await;
    writer
        .transaction("shipment", "shipment-1", 2, true, false)
        .await;
    let end = writer.master_position().await;
    wait_for_checkpoint(&relay, &end, Duration::from_secs(30)).await;

    let mut committed = debezium_events;
    committed.extend(writer.committed.iter().cloned());
    let records = read_until_ids(
        &broker.bootstrap(),
        &[topic_for(&db, "shipment")],
        &committed,
        Duration::from_secs(20),
    )
    .await;
    let summary = assert_delivery(
        "debezium and seeds presets side by side",
        &committed,
        &[],
        &records,
        &relay,
    );
    assert_eq!(summary.duplicates, 0, "{summary:?}");
    relay.stop_gracefully("graceful stop").await;
    writer.close().await;
}
