//! Watched tables resolve at startup under the exact name the binlog gives them (a missing
//! one is a definite error naming the closest existing table); while reading, a DDL that
//! makes a watched table vanish is counted and reading goes on, and the rename swap is not.

mod live_support;

use live_support::*;
use outbox_binlog::{BinlogError, StartPosition, StreamItem};

fn vanished_counter() -> f64 {
    let registry = prometheus::Registry::new();
    outbox_binlog::register_metrics(&registry).unwrap();
    registry
        .gather()
        .iter()
        .find(|family| family.name() == "outbox_binlog_watched_table_vanished_total")
        .map(|family| family.get_metric()[0].get_counter().get_value())
        .expect("registered")
}

#[tokio::test]
async fn a_watched_table_named_unlike_the_binlog_is_refused_at_startup_naming_the_closest() {
    let server = server_with_app_outbox().await;
    for (configured, expected) in [
        ("app.Outbox", "table = \"app.outbox\""),
        ("app.outbx", "did you mean table = \"app.outbox\""),
        (
            "crm.customers",
            "create it, or fix the [[outbox]] table name",
        ),
    ] {
        let mut reader = connect_reader(&server, StartPosition::Latest, &[configured]).await;
        let error = reader
            .verify_watched_tables()
            .await
            .expect_err("a table the binlog never names is refused");
        assert!(!error.is_transient(), "{error}");
        let BinlogError::WatchedTableMissing { tables, .. } = &error else {
            panic!("{configured}: {error:?}");
        };
        assert_eq!(tables[0].to_string(), configured);
        let text = error.to_string();
        assert!(text.contains(&format!("`{configured}`")), "{text}");
        assert!(text.contains(expected), "{configured}: {text}");
    }
    let mut reader = connect_reader(&server, StartPosition::Latest, &["app.outbox"]).await;
    reader.verify_watched_tables().await.expect("resolves");
}

#[tokio::test]
async fn a_vanished_watched_table_is_counted_and_the_rename_swap_keeps_reading() {
    let server = server_with_app_outbox().await;
    sql(
        &server,
        &["CREATE TABLE app.outbox_new (id INT PRIMARY KEY) ENGINE=InnoDB"],
    )
    .await;
    let mut reader = connect_reader(&server, StartPosition::Latest, &["app.outbox"]).await;
    reader.verify_watched_tables().await.expect("resolves");
    let before = vanished_counter();
    sql(
        &server,
        &[
            "RENAME TABLE app.outbox TO app.outbox_old, app.outbox_new TO app.outbox",
            "INSERT INTO app.outbox VALUES (1)",
        ],
    )
    .await;
    assert_eq!(ids(&next_transaction_with_rows(&mut reader).await), vec![1]);
    assert_eq!(vanished_counter(), before, "the swap keeps the table");
    sql(
        &server,
        &[
            "DROP TABLE app.outbox",
            "CREATE TABLE app.outbox (id INT PRIMARY KEY) ENGINE=InnoDB",
            "INSERT INTO app.outbox VALUES (2)",
        ],
    )
    .await;
    // Reading goes on past the drop.
    let mut saw_rows = Vec::new();
    while !saw_rows.contains(&2) {
        if let StreamItem::Row(row) = next_data_item(&mut reader).await {
            saw_rows.push(int(after(&row, "id")));
        }
    }
    assert_eq!(vanished_counter(), before + 1.0, "the drop is counted");
}
