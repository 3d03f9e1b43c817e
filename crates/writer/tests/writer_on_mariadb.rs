//! The writer against a real scratch MariaDB: the DDL of both presets, appends inside the
//! caller's transaction (commit writes business row and events together, rollback neither),
//! one statement per batch, and the cleanup job's checkpoint rule.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::TxOpts;
use outbox_binlog::{BinlogPosition, Flavor};
use outbox_checkpoint::{
    Checkpoint, CheckpointPosition, CheckpointStore, FileCheckpointStore, SourceIdentity,
};
use outbox_testkit::ScratchMariadb;
use outbox_writer::{
    append_events, create_table_sql, delete_published_events, CleanupPolicy, ColumnPreset,
    OutboxEvent, OutboxTable, WriterError,
};

/// id, aggregatetype, aggregateid, type, payload, tenant, tracingspancontext.
type OutboxRow = (
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
);

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

async fn database_with(table: &OutboxTable) -> ScratchMariadb {
    let db = ScratchMariadb::start().await.expect("scratch MariaDB");
    db.exec(&[
        "CREATE DATABASE shop",
        "CREATE TABLE shop.orders (id BIGINT PRIMARY KEY, customer VARCHAR(64) NOT NULL)",
    ])
    .await
    .expect("schema");
    db.exec(&[create_table_sql(table).as_str()])
        .await
        .expect("the generated DDL runs");
    db
}

async fn count(conn: &mut mysql_async::Conn, sql: &str) -> u64 {
    conn.query_first::<u64, _>(sql)
        .await
        .expect("count")
        .expect("a row")
}

#[tokio::test]
async fn events_commit_with_the_business_row_in_one_statement_and_a_rollback_writes_neither() {
    let table = OutboxTable::new("outbox", ColumnPreset::Debezium)
        .unwrap()
        .in_database("shop")
        .unwrap()
        .with_header_column("tenant")
        .unwrap()
        .with_trace_context_column("tracingspancontext")
        .unwrap();
    let db = database_with(&table).await;
    let pool = mysql_async::Pool::new(db.url().as_str());

    // Commit: the order and three events, in one multi-row INSERT.
    let events: Vec<OutboxEvent> = (1..=3)
        .map(|n| {
            OutboxEvent::new("order", "1", "OrderLine", &serde_json::json!({"line": n}))
                .unwrap()
                .with_header("tenant", "acme")
        })
        .collect();
    let events = {
        let mut events = events;
        events[1] = events[1].clone().with_traceparent(TRACEPARENT).unwrap();
        events
    };
    let mut tx = pool.start_transaction(TxOpts::default()).await.unwrap();
    tx.exec_drop("INSERT INTO shop.orders VALUES (1, 'ann')", ())
        .await
        .unwrap();
    let inserts_before = {
        let (_, value): (String, u64) = tx
            .query_first("SHOW SESSION STATUS LIKE 'Com_insert'")
            .await
            .unwrap()
            .unwrap();
        value
    };
    append_events(&mut tx, &table, &events).await.unwrap();
    let inserts_after = {
        let (_, value): (String, u64) = tx
            .query_first("SHOW SESSION STATUS LIKE 'Com_insert'")
            .await
            .unwrap()
            .unwrap();
        value
    };
    assert_eq!(
        inserts_after - inserts_before,
        1,
        "a batch of three events is one INSERT statement"
    );
    tx.commit().await.unwrap();

    let mut conn = pool.get_conn().await.unwrap();
    let rows: Vec<OutboxRow> = conn
        .query(
            "SELECT id, aggregatetype, aggregateid, type, payload, tenant, tracingspancontext \
             FROM shop.outbox ORDER BY id",
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 3);
    for (row, event) in rows.iter().zip(&events) {
        assert_eq!(
            row.0,
            event.event_id().to_string(),
            "ids sort in creation order"
        );
        assert_eq!(
            (row.1.as_str(), row.2.as_str(), row.3.as_str()),
            ("order", "1", "OrderLine")
        );
        assert_eq!(row.4, event.payload_json());
        assert_eq!(row.5.as_deref(), Some("acme"));
        assert_eq!(row.6.as_deref(), event.traceparent());
    }
    assert_eq!(rows[1].6.as_deref(), Some(TRACEPARENT));

    // Rollback: neither the order nor its event.
    let mut tx = pool.start_transaction(TxOpts::default()).await.unwrap();
    tx.exec_drop("INSERT INTO shop.orders VALUES (2, 'bob')", ())
        .await
        .unwrap();
    let rolled_back = OutboxEvent::new("order", "2", "OrderCreated", &2).unwrap();
    append_events(&mut tx, &table, std::slice::from_ref(&rolled_back))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(
        count(&mut conn, "SELECT COUNT(*) FROM shop.orders").await,
        1
    );
    assert_eq!(
        count(&mut conn, "SELECT COUNT(*) FROM shop.outbox").await,
        3
    );

    // A repeated event id is refused by the primary key (not a transient error).
    let mut tx = pool.start_transaction(TxOpts::default()).await.unwrap();
    let error = append_events(&mut tx, &table, &events[..1])
        .await
        .unwrap_err();
    assert!(matches!(error, WriterError::Database { .. }), "{error}");
    assert!(!error.is_transient(), "{error}");
    tx.rollback().await.unwrap();
    drop(conn);
    pool.disconnect().await.unwrap();
}

#[tokio::test]
async fn the_seeds_preset_ddl_and_appends_work_too() {
    let table = OutboxTable::new("outbox", ColumnPreset::Seeds)
        .unwrap()
        .in_database("shop")
        .unwrap();
    let db = database_with(&table).await;
    let pool = mysql_async::Pool::new(db.url().as_str());
    let mut tx = pool.start_transaction(TxOpts::default()).await.unwrap();
    let event = OutboxEvent::new("customer", "c-9", "CustomerRegistered", &"caf\u{e9}").unwrap();
    append_events(&mut tx, &table, std::slice::from_ref(&event))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let mut conn = pool.get_conn().await.unwrap();
    let row: (String, String, String) = conn
        .query_first("SELECT event_id, aggregate_id, payload FROM shop.outbox")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        row,
        (
            event.event_id().to_string(),
            "c-9".into(),
            "\"caf\u{e9}\"".into()
        )
    );
    drop(conn);
    pool.disconnect().await.unwrap();
}

#[tokio::test]
async fn cleanup_deletes_only_rows_older_than_the_checkpoint_minus_the_margin_in_batches() {
    let table = OutboxTable::new("outbox", ColumnPreset::Seeds)
        .unwrap()
        .in_database("shop")
        .unwrap();
    let db = database_with(&table).await;
    let mut conn = db.conn().await.unwrap();
    // Checkpoint at a fixed second; rows relative to it (UTC session, like the cleanup).
    let checkpoint_seconds: u32 = 1_764_000_000;
    conn.query_drop("SET time_zone = '+00:00'").await.unwrap();
    for (id, seconds_before_checkpoint) in [
        ("old-1", 7200),
        ("old-2", 5000),
        ("old-3", 4000),
        ("old-4", 3700),
        ("old-5", 3601),
        ("inside-margin", 3599),
        ("after-checkpoint", -10),
    ] {
        conn.exec_drop(
            "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload, created_at) \
             VALUES (?, 'order', '1', 'E', '{}', FROM_UNIXTIME(?))",
            (id, i64::from(checkpoint_seconds) - seconds_before_checkpoint),
        )
        .await
        .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let store = FileCheckpointStore::new(dir.path().join("checkpoint.json"));
    let policy = CleanupPolicy {
        safety_margin: Duration::from_secs(3600),
        batch_size: 2,
        max_batches: 2,
    };

    // No checkpoint yet: nothing is deleted.
    let report = delete_published_events(&mut conn, &table, &store, &policy)
        .await
        .unwrap();
    assert_eq!((report.deleted_rows, report.batches), (0, 0), "{report:?}");

    let mut position = CheckpointPosition::at(BinlogPosition::new("mysql-bin.000001", 4));
    position.timestamp = checkpoint_seconds;
    let checkpoint = Checkpoint::new(
        SourceIdentity {
            flavor: Flavor::Mariadb,
            server_id: 1,
            server_uuid: None,
        },
        position,
    );
    store.commit(&checkpoint).await.unwrap();

    // Two batches of two: four rows, more remain.
    let report = delete_published_events(&mut conn, &table, &store, &policy)
        .await
        .unwrap();
    assert_eq!(report.deleted_rows, 4, "{report:?}");
    assert_eq!(report.batches, 2);
    assert!(!report.finished, "max_batches stopped the run: {report:?}");
    assert_eq!(
        report.cutoff_unix_seconds,
        Some(i64::from(checkpoint_seconds) - 3600)
    );
    // The next run takes the last eligible row and stops.
    let report = delete_published_events(&mut conn, &table, &store, &policy)
        .await
        .unwrap();
    assert_eq!((report.deleted_rows, report.batches), (1, 1), "{report:?}");
    assert!(report.finished);
    let left: Vec<String> = conn
        .query("SELECT event_id FROM shop.outbox ORDER BY created_at")
        .await
        .unwrap();
    assert_eq!(left, ["inside-margin", "after-checkpoint"]);
}
