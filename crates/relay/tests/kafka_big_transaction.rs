//! One transaction with 20 000 outbox rows, and the relay killed (`kill -9`) while it is
//! being delivered: after a restart every event arrives at least once, in per-key order, and
//! the checkpoint never lands inside the transaction.

mod common;

use std::time::{Duration, Instant};

use common::*;
use mysql_async::prelude::Queryable;

const ROWS: u32 = 20_000;

fn big_event(topic_tag: &str, seq: u32) -> Event {
    Event {
        id: format!("big-{seq:06}"),
        aggregate_type: "order".to_string(),
        aggregate_id: format!("order-big-{}", seq % 10),
        event_type: "BulkImported".to_string(),
        payload: format!("{{\"n\": {seq}, \"pad\": \"{}\"}}", "x".repeat(100)),
        topic_tag: topic_tag.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_transaction_survives_a_kill_in_the_middle() {
    let (db, broker) = start_shop_database_and_broker().await;
    let mut relay = Relay::prepare(&RelaySetup::new(&db, &broker.bootstrap()));
    let mut writer = ShopWriter::connect(&db, "bigbefore").await;
    writer
        .transaction("order", "order-big-1", 1, true, false)
        .await;
    relay.start();

    let mut conn = db.conn().await.unwrap();
    let before_big = master_position(&mut conn).await;
    conn.query_drop("START TRANSACTION").await.unwrap();
    conn.query_drop(format!(
        "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
         SELECT CONCAT('big-', LPAD(seq, 6, '0')), 'order', CONCAT('order-big-', seq % 10), \
         'BulkImported', CONCAT('{{\"n\": ', seq, ', \"pad\": \"', REPEAT('x', 100), '\"}}') \
         FROM shop.seq_1_to_{ROWS}"
    ))
    .await
    .unwrap();
    conn.query_drop("COMMIT").await.unwrap();
    let after_big = master_position(&mut conn).await;
    drop(conn);
    writer
        .transaction("order", "order-big-2", 1, true, false)
        .await;

    let mut committed = vec![writer.committed[0].clone()];
    committed.extend((1..=ROWS).map(|seq| big_event(db.tag(), seq)));
    committed.push(writer.committed[1].clone());

    // Kill while the big transaction is (most likely) still being delivered.
    tokio::time::sleep(Duration::from_millis(400)).await;
    relay.assert_running("before the kill");
    relay.kill9();
    let at_kill = relay.checkpoint();
    let inside = at_kill
        .position
        .as_ref()
        .is_some_and(|p| *p > before_big && *p < after_big);
    assert!(
        !inside,
        "the checkpoint landed inside the big transaction ({before_big} .. {after_big}): {}",
        at_kill.raw
    );

    let restarted = Instant::now();
    relay.start();
    let end = writer.master_position().await;
    wait_for_checkpoint(&relay, &end, Duration::from_secs(60)).await;
    let caught_up_after = restarted.elapsed();
    let records = read_until_ids_then_settled(
        &broker.bootstrap(),
        &[topic_for(&db, "order")],
        &committed,
        Duration::from_secs(30),
    )
    .await;
    let summary = assert_delivery(
        "20 000-row transaction, kill -9 mid-delivery",
        &committed,
        &[],
        &records,
        &relay,
    );
    eprintln!(
        "big transaction: {} events, {summary:?}; checkpoint at the kill {:?} (transaction spans \
         {before_big} .. {after_big}); caught up {caught_up_after:?} after the restart",
        committed.len(),
        at_kill.position
    );
    relay.stop_gracefully("graceful stop").await;
    writer.close().await;
}
