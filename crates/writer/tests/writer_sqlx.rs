//! `append_events_sqlx` (feature `sqlx`) against a real scratch MariaDB: the events commit
//! with the business row in one statement, a rollback writes neither, the checks refuse a
//! header without a column. Run: `cargo test -p outbox-writer --features sqlx --test writer_sqlx`.

use outbox_testkit::ScratchMariadb;
use outbox_writer::{
    append_events_sqlx, create_table_sql, ColumnPreset, OutboxEvent, OutboxTable, WriterError,
};
use sqlx::Connection;

#[tokio::test]
async fn sqlx_transactions_commit_and_roll_back_events_with_the_business_row() {
    let table = OutboxTable::new("outbox", ColumnPreset::Seeds)
        .unwrap()
        .in_database("shop")
        .unwrap()
        .with_header_column("tenant")
        .unwrap();
    let db = ScratchMariadb::start().await.expect("scratch MariaDB");
    db.exec(&[
        "CREATE DATABASE shop",
        "CREATE TABLE shop.orders (id BIGINT PRIMARY KEY)",
        create_table_sql(&table).as_str(),
    ])
    .await
    .expect("schema");
    let mut conn = sqlx::MySqlConnection::connect(&db.url())
        .await
        .expect("sqlx connects");

    let events: Vec<OutboxEvent> = (1..=2)
        .map(|n| {
            OutboxEvent::new("order", "1", "OrderLine", &n)
                .unwrap()
                .with_header("tenant", "acme")
        })
        .collect();
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("INSERT INTO shop.orders VALUES (1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    append_events_sqlx(&mut tx, &table, &events).await.unwrap();
    tx.commit().await.unwrap();

    let mut tx = conn.begin().await.unwrap();
    sqlx::query("INSERT INTO shop.orders VALUES (2)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let rolled_back = OutboxEvent::new("order", "2", "OrderCreated", &2).unwrap();
    append_events_sqlx(&mut tx, &table, std::slice::from_ref(&rolled_back))
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let rows: Vec<(String, String, Option<String>)> = sqlx::query_as(
        "SELECT event_id, CAST(payload AS CHAR), tenant FROM shop.outbox ORDER BY event_id",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let expected: Vec<(String, String, Option<String>)> = events
        .iter()
        .map(|e| {
            (
                e.event_id().to_string(),
                e.payload_json().to_owned(),
                Some("acme".to_owned()),
            )
        })
        .collect();
    assert_eq!(rows, expected);
    let orders: Vec<(i64,)> = sqlx::query_as("SELECT id FROM shop.orders")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    assert_eq!(orders, [(1,)]);

    // A repeated id: a definite database error; a header without a column: refused up front.
    let mut tx = conn.begin().await.unwrap();
    let error = append_events_sqlx(&mut tx, &table, &events[..1])
        .await
        .unwrap_err();
    assert!(
        matches!(error, WriterError::Sqlx { .. }) && !error.is_transient(),
        "{error}"
    );
    tx.rollback().await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    let stray = OutboxEvent::new("order", "3", "E", &3)
        .unwrap()
        .with_header("region", "eu");
    assert!(matches!(
        append_events_sqlx(&mut tx, &table, &[stray]).await,
        Err(WriterError::UnknownHeaderColumn { .. })
    ));
    tx.rollback().await.unwrap();
}
