//! `outbox-relay recover` publishes only complete transactions: over an archived binlog file
//! that was cut inside a transaction (copied while the server wrote it) the torn one is not
//! published and the output says so; an XA transaction is published only when its XA COMMIT
//! is in the files. Kafka is librdkafka's in-process mock cluster.

mod common;

use std::time::Duration;

use common::*;
use mysql_async::prelude::Queryable;
use rdkafka::mocking::MockCluster;

/// `(path of the binlog directory, the current binlog file)` of `db`.
async fn binlog_file_of(db: &outbox_testkit::ScratchMariadb) -> (std::path::PathBuf, String) {
    let mut conn = db.conn().await.expect("connect");
    let basename: String = conn
        .query_first("SELECT @@log_bin_basename")
        .await
        .expect("log_bin_basename")
        .expect("binlog on");
    let end = master_position(&mut conn).await;
    conn.disconnect().await.expect("disconnect");
    let directory = std::path::Path::new(&basename)
        .parent()
        .expect("binlog directory")
        .to_path_buf();
    (directory, end.file)
}

/// An XA transaction committed in the files is published; one rolled back, or prepared
/// with its outcome not in the files, is not (the summary counts them, exit code 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xa_transactions_are_published_only_when_their_commit_is_in_the_files() {
    let db = start_shop_database().await;
    let cluster = MockCluster::new(1).expect("mock cluster");
    let topic = topic_for(&db, "order");
    cluster.create_topic(&topic, 1, 1).expect("mock topic");
    let mut setup = RelaySetup::new(&db, &cluster.bootstrap_servers());
    setup.create_topics = false;
    let relay = Relay::prepare(&setup);
    let event = |name: &str| Event {
        id: format!("xa-{name}"),
        aggregate_type: "order".into(),
        aggregate_id: format!("order-{name}"),
        event_type: "OrderCreated".into(),
        payload: "{}".into(),
        topic_tag: db.tag().to_string(),
    };
    let mut conn = db.conn().await.expect("connect");
    for (name, outcome) in [
        ("committed", Some("COMMIT")),
        ("rolled-back", Some("ROLLBACK")),
        ("unresolved", None),
    ] {
        conn.query_drop(format!("XA START '{name}'")).await.unwrap();
        insert_event(&mut conn, "shop.outbox", SEEDS_EVENT_COLUMNS, &event(name))
            .await
            .unwrap();
        conn.query_drop(format!("XA END '{name}'")).await.unwrap();
        conn.query_drop(format!("XA PREPARE '{name}'"))
            .await
            .unwrap();
        if let Some(outcome) = outcome {
            conn.query_drop(format!("XA {outcome} '{name}'"))
                .await
                .unwrap();
        }
    }
    let mut writer = ShopWriter::connect(&db, "xa-after").await;
    let ordinary = writer.transaction("order", "order-1", 1, true, false).await;
    let (directory, file) = binlog_file_of(&db).await;
    let archive = tempfile::tempdir().expect("archive dir");
    let copy = archive.path().join(&file);
    std::fs::copy(directory.join(&file), &copy).expect("archive the binlog file");

    let (code, stdout, stderr) = run_relay_command(&[
        "recover",
        "--config",
        relay.config_path.to_str().expect("utf-8 path"),
        copy.to_str().expect("utf-8 path"),
    ]);
    let records = read_until_quiet(
        &cluster.bootstrap_servers(),
        std::slice::from_ref(&topic),
        Duration::from_secs(2),
        Duration::from_secs(20),
    )
    .await;
    let ids: Vec<String> = records
        .iter()
        .filter_map(|record| record.header_str("id"))
        .collect();
    assert_eq!(ids, vec![event("committed").id, ordinary[0].id.clone()]);
    assert_eq!(code, 1, "an unresolved XA transaction:\n{stdout}\n{stderr}");
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).expect("JSON summary");
    assert_eq!(summary["records"], 2, "{summary}");
    assert_eq!(summary["xa_rolled_back_records"], 1, "{summary}");
    assert_eq!(summary["xa_unresolved_records"], 1, "{summary}");
    conn.query_drop("XA ROLLBACK 'unresolved'").await.unwrap();
    conn.disconnect().await.unwrap();
    writer.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_whose_commit_is_cut_off_is_not_published() {
    let db = start_shop_database().await;
    let cluster = MockCluster::new(1).expect("mock cluster");
    let topic = topic_for(&db, "order");
    cluster.create_topic(&topic, 1, 1).expect("mock topic");
    let mut setup = RelaySetup::new(&db, &cluster.bootstrap_servers());
    setup.create_topics = false;
    let relay = Relay::prepare(&setup);

    let mut writer = ShopWriter::connect(&db, "torn").await;
    let complete = writer.transaction("order", "order-1", 1, true, false).await;
    let torn = writer.transaction("order", "order-2", 1, true, false).await;
    let end = writer.master_position().await;

    // Copy the binlog file and cut it right before the last transaction's XID event: its
    // rows event is in the copy, its commit is not.
    let mut conn = db.conn().await.expect("connect");
    let basename: String = conn
        .query_first("SELECT @@log_bin_basename")
        .await
        .expect("log_bin_basename")
        .expect("binlog on");
    let events: Vec<(u64, String)> = conn
        .query_map(
            format!("SHOW BINLOG EVENTS IN '{}'", end.file),
            |row: mysql_async::Row| {
                (
                    row.get::<u64, _>(1).unwrap_or_default(),
                    row.get::<String, _>(2).unwrap_or_default(),
                )
            },
        )
        .await
        .expect("show binlog events");
    let last_xid = events
        .iter()
        .rev()
        .find(|(_, kind)| kind == "Xid")
        .map(|(position, _)| *position)
        .expect("an XID event");
    let source = std::path::Path::new(&basename)
        .parent()
        .expect("binlog directory")
        .join(&end.file);
    let archive = tempfile::tempdir().expect("archive dir");
    let copy = archive.path().join(&end.file);
    let bytes = std::fs::read(&source).expect("read the binlog file");
    std::fs::write(&copy, &bytes[..last_xid as usize]).expect("write the cut copy");

    let (code, stdout, stderr) = run_relay_command(&[
        "recover",
        "--config",
        relay.config_path.to_str().expect("utf-8 path"),
        copy.to_str().expect("utf-8 path"),
    ]);
    let records = read_until_quiet(
        &cluster.bootstrap_servers(),
        std::slice::from_ref(&topic),
        Duration::from_secs(2),
        Duration::from_secs(20),
    )
    .await;
    let ids: Vec<String> = records
        .iter()
        .filter_map(|record| record.header_str("id"))
        .collect();
    assert_eq!(
        ids,
        vec![complete[0].id.clone()],
        "only the complete transaction is published (torn one: {})",
        torn[0].id
    );
    assert_eq!(
        code, 1,
        "a torn file is not a complete recovery:\n{stdout}\n{stderr}"
    );
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).expect("JSON summary");
    assert_eq!(summary["records"], 1, "{summary}");
    assert_eq!(summary["acknowledged"], 1, "{summary}");
    assert_eq!(
        summary["incomplete_transaction"]["rows_not_published"], 1,
        "{summary}"
    );
    assert!(
        stderr.contains(&end.file) && stderr.contains("were not"),
        "the error names the file and what was not published:\n{stderr}"
    );

    writer.close().await;
}
