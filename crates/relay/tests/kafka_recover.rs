//! The first way out of a purged checkpoint, end to end: the events the relay never read
//! are in binlog files the server purged, but an operator kept copies. `outbox-relay
//! recover` publishes them from the copies with their ids, `checkpoint set` moves the
//! checkpoint to the oldest file the server still has, and the relay carries on: every
//! committed event arrives, the recovered ones exactly once.

mod common;

use std::time::Duration;

use common::*;
use mysql_async::prelude::Queryable;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purged_gap_is_recovered_from_archived_binlogs_and_the_relay_carries_on() {
    let (db, broker) = start_shop_database_and_broker().await;
    let mut relay = Relay::prepare(&RelaySetup::new(&db, &broker.bootstrap()));
    let config = relay.config_path.to_str().expect("utf-8 path").to_string();
    let mut writer = ShopWriter::connect(&db, "recover").await;
    relay.start();
    writer.transaction("order", "order-1", 2, true, false).await;
    let end = writer.master_position().await;
    wait_for_checkpoint(&relay, &end, Duration::from_secs(30)).await;
    relay.stop_gracefully("stop before the gap").await;
    let stored = relay.checkpoint().position.expect("a stored checkpoint");

    // The gap: written while the relay is stopped, archived, then purged from the server.
    let gap_start = writer.committed.len();
    writer.transaction("order", "order-2", 3, true, false).await;
    writer
        .transaction("customer", "customer-1", 1, true, true)
        .await;
    writer
        .transaction("order", "order-2", 2, false, false)
        .await;
    let gap: Vec<Event> = writer.committed[gap_start..].to_vec();
    let archive = tempfile::tempdir().expect("archive dir");
    let mut conn = db.conn().await.expect("connect");
    conn.query_drop("FLUSH BINARY LOGS").await.expect("flush");
    let basename: String = conn
        .query_first("SELECT @@log_bin_basename")
        .await
        .expect("log_bin_basename")
        .expect("binlog on");
    let files: Vec<String> = conn
        .query_map("SHOW BINARY LOGS", |row: mysql_async::Row| {
            row.get::<String, _>(0).unwrap_or_default()
        })
        .await
        .expect("show binary logs");
    let base_dir = std::path::Path::new(&basename)
        .parent()
        .expect("binlog directory")
        .to_path_buf();
    let mut archived = Vec::new();
    for file in &files {
        let copy = archive.path().join(file);
        std::fs::copy(base_dir.join(file), &copy).expect("archive a binlog file");
        archived.push(copy.to_str().expect("utf-8 path").to_string());
    }
    drop(conn);
    let kept = purge_binlogs_until_gone(&db, &stored.file).await;
    writer.transaction("order", "order-3", 1, true, false).await;

    // The relay refuses, and names the way out.
    relay.start();
    let status = relay.wait_for_exit(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(1), "log:\n{}", relay.log_tail(10));
    assert_eq!(log_count(&relay, "outbox-relay recover"), 1);

    // Way out 1: publish the gap from the archive, then move the checkpoint.
    let after = stored.to_string();
    let mut args = vec![
        "recover",
        "--config",
        config.as_str(),
        "--after",
        after.as_str(),
    ];
    args.extend(archived.iter().map(String::as_str));
    let (code, stdout, stderr) = run_relay_command(&args);
    assert_eq!(code, 0, "recover failed: {stdout}{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(stdout.trim()).expect("one JSON summary line");
    assert_eq!(summary["records"], gap.len(), "{summary}");
    assert_eq!(summary["acknowledged"], gap.len(), "{summary}");
    assert_eq!(
        summary["routing_errors"],
        serde_json::json!([]),
        "{summary}"
    );
    assert!(
        summary["rows_before_after"].as_u64() >= Some(2),
        "{summary}"
    );
    let (code, stdout, stderr) = run_relay_command(&[
        "checkpoint",
        "set",
        "--config",
        &config,
        "--position",
        &format!("{}:4", kept.file),
    ]);
    assert_eq!(code, 0, "checkpoint set failed: {stdout}{stderr}");

    relay.start();
    let end = writer.master_position().await;
    wait_for_checkpoint(&relay, &end, Duration::from_secs(30)).await;
    let records = read_until_ids_then_settled(
        &broker.bootstrap(),
        &[topic_for(&db, "order"), topic_for(&db, "customer")],
        &writer.committed,
        Duration::from_secs(30),
    )
    .await;
    relay.stop_gracefully("final stop").await;
    assert_delivery(
        "recovered gap, then the relay",
        &writer.committed,
        &writer.must_not_arrive(),
        &records,
        &relay,
    );
    for event in &gap {
        let copies = records
            .iter()
            .filter(|r| r.header_str("id").as_deref() == Some(event.id.as_str()))
            .count();
        assert_eq!(
            copies, 1,
            "recovered event {} arrived {copies} times",
            event.id
        );
    }
    writer.close().await;
}
