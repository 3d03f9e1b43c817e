//! Helpers shared by the `live_*` integration tests: reader configs for a scratch MariaDB and
//! small readers of the item stream that fail loudly instead of hanging.

#![allow(dead_code)] // each test file uses a different subset

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use outbox_binlog::{
    BinlogError, BinlogReader, Commit, ReaderConfig, RowChange, StartPosition, StreamItem,
    TableFilter, TableName, Value,
};
use outbox_testkit::{ScratchMariadb, ScratchOptions};

/// How long a test waits for one item before failing (generous: the machine is shared).
pub const ITEM_TIMEOUT: Duration = Duration::from_secs(60);

/// A replica server_id unique within this test process.
pub fn unique_server_id() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    1000 + (std::process::id() % 1000) * 1000 + NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A reader config for `server` watching `tables` (`db.table`), heartbeats every second.
pub fn config(server: &ScratchMariadb, start: StartPosition, tables: &[&str]) -> ReaderConfig {
    ReaderConfig {
        url: server.url(),
        server_id: unique_server_id(),
        start,
        filter: TableFilter::tables(
            tables
                .iter()
                .map(|name| name.parse::<TableName>().expect("db.table")),
        ),
        heartbeat_interval: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(20),
        connect_timeout: Duration::from_secs(20),
        tls: outbox_binlog::TlsOptions::default(),
    }
}

/// The schema most live tests watch: `app.outbox (id INT PRIMARY KEY)`.
pub const APP_OUTBOX_SCHEMA: &[&str] = &[
    "CREATE DATABASE app",
    "CREATE TABLE app.outbox (id INT PRIMARY KEY) ENGINE=InnoDB",
];

/// Starts a scratch MariaDB with `options` and runs the `setup` statements on it.
pub async fn start_server(options: ScratchOptions, setup: &[&str]) -> ScratchMariadb {
    let server = ScratchMariadb::start_with(options)
        .await
        .expect("scratch MariaDB starts");
    sql(&server, setup).await;
    server
}

/// A scratch MariaDB with default options and [`APP_OUTBOX_SCHEMA`].
pub async fn server_with_app_outbox() -> ScratchMariadb {
    start_server(ScratchOptions::default(), APP_OUTBOX_SCHEMA).await
}

/// A reader of `server` from `start` watching `tables` ([`config`]), panicking if it
/// cannot connect.
pub async fn connect_reader(
    server: &ScratchMariadb,
    start: StartPosition,
    tables: &[&str],
) -> BinlogReader {
    BinlogReader::connect(config(server, start, tables))
        .await
        .unwrap_or_else(|error| panic!("reader connects: {error}"))
}

/// The server's `@@gtid_binlog_pos` (MariaDB's GTID state), on its own connection.
pub async fn gtid_binlog_pos(server: &ScratchMariadb) -> String {
    let mut conn = server.conn().await.expect("connect");
    let pos: String = conn
        .query_first("SELECT @@gtid_binlog_pos")
        .await
        .expect("query @@gtid_binlog_pos")
        .expect("one row");
    conn.disconnect().await.expect("disconnect");
    pos
}

/// Reads transactions until one holds `last_id`, returning the ids of every watched row seen.
pub async fn ids_until(reader: &mut BinlogReader, last_id: i64) -> Vec<i64> {
    let mut seen = Vec::new();
    while !seen.contains(&last_id) {
        seen.extend(ids(&next_transaction(reader).await));
    }
    seen
}

/// Reads until `next_item` fails (each call within [`ITEM_TIMEOUT`]), returning the items
/// that came before the error (heartbeats left out) and the error.
pub async fn items_until_error(reader: &mut BinlogReader) -> (Vec<StreamItem>, BinlogError) {
    let mut items = Vec::new();
    loop {
        match tokio::time::timeout(ITEM_TIMEOUT, reader.next_item())
            .await
            .expect("an item or an error within the timeout")
        {
            Ok(StreamItem::Heartbeat(_)) => {}
            Ok(item) => items.push(item),
            Err(error) => return (items, error),
        }
    }
}

/// The next item that is not a heartbeat.
pub async fn next_data_item(reader: &mut BinlogReader) -> StreamItem {
    loop {
        let item = tokio::time::timeout(ITEM_TIMEOUT, reader.next_item())
            .await
            .expect("an item within the timeout")
            .expect("next_item succeeds");
        if !matches!(item, StreamItem::Heartbeat(_)) {
            return item;
        }
    }
}

/// One committed transaction as the reader yielded it.
#[derive(Debug, Clone)]
pub struct Transaction {
    /// Its watched rows, in order.
    pub rows: Vec<RowChange>,
    /// Its commit.
    pub commit: Commit,
}

/// Reads the next transaction (rows up to and including the commit), skipping heartbeats.
pub async fn next_transaction(reader: &mut BinlogReader) -> Transaction {
    let mut rows = Vec::new();
    loop {
        match next_data_item(reader).await {
            StreamItem::Row(row) => rows.push(row),
            StreamItem::Commit(commit) => return Transaction { rows, commit },
            StreamItem::Heartbeat(_) => unreachable!("skipped by next_data_item"),
        }
    }
}

/// Reads transactions until one with at least one watched row, returning it and the number
/// of row-less transactions (DDL, other tables) skipped on the way.
pub async fn next_transaction_with_rows(reader: &mut BinlogReader) -> Transaction {
    loop {
        let transaction = next_transaction(reader).await;
        if !transaction.rows.is_empty() {
            return transaction;
        }
    }
}

/// The `after` image's value of `column`.
pub fn after<'a>(row: &'a RowChange, column: &str) -> &'a Value {
    row.after
        .as_ref()
        .expect("an after image")
        .get(column)
        .unwrap_or_else(|| panic!("column {column} in {row:?}"))
}

/// The `before` image's value of `column`.
pub fn before<'a>(row: &'a RowChange, column: &str) -> &'a Value {
    row.before
        .as_ref()
        .expect("a before image")
        .get(column)
        .unwrap_or_else(|| panic!("column {column} in {row:?}"))
}

/// `Value::Int` of an integer column.
pub fn int(value: &Value) -> i64 {
    match value {
        Value::Int(n) => *n,
        Value::UInt(n) => i64::try_from(*n).expect("fits"),
        other => panic!("not an integer: {other:?}"),
    }
}

/// Text of a text column.
pub fn text(value: &Value) -> &str {
    match value {
        Value::Text(text) => text,
        other => panic!("not text: {other:?}"),
    }
}

/// The ids (`id` column of the after image, or before image for deletes) of a transaction.
pub fn ids(transaction: &Transaction) -> Vec<i64> {
    transaction
        .rows
        .iter()
        .map(|row| match (&row.after, &row.before) {
            (Some(_), _) => int(after(row, "id")),
            (None, Some(_)) => int(before(row, "id")),
            (None, None) => panic!("row without images"),
        })
        .collect()
}

/// Runs one statement on the server, panicking with the statement on failure.
pub async fn sql(server: &ScratchMariadb, statements: &[&str]) {
    server
        .exec(statements)
        .await
        .unwrap_or_else(|error| panic!("{statements:?}: {error}"));
}
