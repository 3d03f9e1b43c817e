//! The first-run start setting (`latest`, `file:NAME:POS`, `gtid:SET`) decides where history
//! begins; once a checkpoint exists it always wins over the setting.

mod common;

use std::time::{Duration, Instant};

use common::*;
use mysql_async::prelude::Queryable;

async fn write_some(writer: &mut ShopWriter, transactions: u32) {
    for index in 0..transactions {
        writer
            .alternating_transaction(index, 1, index % 4 != 3, false)
            .await;
    }
}

/// Everything on the topics after a quiet period.
async fn read_everything(
    db: &outbox_testkit::ScratchMariadb,
    bootstrap: &str,
) -> Vec<outbox_testkit::consume::ConsumedRecord> {
    let topics: Vec<String> = ALTERNATING_AGGREGATE_TYPES
        .iter()
        .map(|kind| topic_for(db, kind))
        .collect();
    read_until_quiet(
        bootstrap,
        &topics,
        Duration::from_millis(1000),
        Duration::from_secs(20),
    )
    .await
}

/// Runs one scenario: history written, relay started with `start`, new events written; only
/// the new ones may arrive. Then a graceful restart with more events: the checkpoint wins.
async fn history_is_skipped(start_for: impl FnOnce(&BinlogPoint, &str) -> String, name: &str) {
    let (db, broker) = start_shop_database_and_broker().await;
    let mut writer = ShopWriter::connect(&db, &format!("{name}-old")).await;
    write_some(&mut writer, 8).await;
    let history_end = writer.master_position().await;
    let mut conn = db.conn().await.unwrap();
    let gtid: String = conn
        .query_first("SELECT @@gtid_binlog_pos")
        .await
        .unwrap()
        .unwrap();
    drop(conn);
    let history = writer.committed.clone();

    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup.start = start_for(&history_end, &gtid);
    let mut relay = Relay::prepare(&setup);
    relay.start();
    // `latest` is resolved when the relay connects: wait for that before writing.
    let connected = Instant::now();
    // Connected = the relay logged its binlog connection or already stored a checkpoint.
    while log_count(&relay, "binlog source connected") == 0 && relay.checkpoint().position.is_none()
    {
        relay.assert_running("waiting for the binlog connection");
        assert!(
            connected.elapsed() < Duration::from_secs(20),
            "relay never connected; log:\n{}",
            relay.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut new_writer = ShopWriter::connect(&db, &format!("{name}-new")).await;
    write_some(&mut new_writer, 8).await;
    let end = new_writer.master_position().await;
    wait_for_checkpoint(&relay, &end, Duration::from_secs(30)).await;
    let status = relay.terminate(Duration::from_secs(30)).await;
    assert!(status.success(), "{name}: graceful stop {status}");

    // Written while the relay is down; the restart resumes from the checkpoint, whatever
    // the start setting says.
    write_some(&mut new_writer, 6).await;
    relay.start();
    let end = new_writer.master_position().await;
    wait_for_checkpoint(&relay, &end, Duration::from_secs(30)).await;

    let records = read_everything(&db, &broker.bootstrap()).await;
    let mut forbidden = history.clone();
    forbidden.extend(writer.rolled_back.iter().cloned());
    forbidden.extend(new_writer.rolled_back.iter().cloned());
    let summary = assert_delivery(
        &format!("start = {:?}", setup.start),
        &new_writer.committed,
        &forbidden,
        &records,
        &relay,
    );
    assert_eq!(summary.duplicates, 0, "{name}: {summary:?}");
    let status = relay.terminate(Duration::from_secs(30)).await;
    assert!(status.success(), "{name}: final stop {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_latest_skips_history() {
    history_is_skipped(|_, _| "latest".to_string(), "latest").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_at_a_file_position_skips_what_is_before_it() {
    history_is_skipped(
        |end, _| format!("file:{}:{}", end.file, end.position),
        "file",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_at_a_gtid_set_skips_what_it_contains() {
    history_is_skipped(|_, gtid| format!("gtid:{gtid}"), "gtid").await;
}
