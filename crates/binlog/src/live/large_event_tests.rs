//! [`BinlogReader::next_item_or_large_event`] against a scratch MariaDB: a large rows event
//! of a watched table is announced with its raw size before anything of it is decoded, and
//! decoded by the next call; small events, and large rows of unwatched tables, are not
//! announced; the items are exactly those `next_item` yields.

use std::time::Duration;

use outbox_testkit::ScratchMariadb;

use super::{BinlogReader, NextItem, ReaderConfig, StartPosition};
use crate::{StreamItem, TableFilter, TableName, Value};

/// The announcement limit of the test: 1 MiB.
const LIMIT: usize = 1 << 20;

/// Bytes of each large payload: above [`LIMIT`], below MariaDB's default
/// `max_allowed_packet` (16 MiB).
const LARGE: usize = 2 << 20;

fn config(server: &ScratchMariadb, start: StartPosition) -> ReaderConfig {
    let mut config = ReaderConfig::new(
        server.url(),
        4000 + std::process::id() % 1000,
        start,
        TableFilter::tables([TableName::new("app", "outbox")]),
    );
    config.heartbeat_interval = Duration::from_secs(1);
    config.idle_timeout = Duration::from_secs(20);
    config.connect_timeout = Duration::from_secs(20);
    config
}

/// What the reader said, heartbeats left out: an announcement's size, or an item.
#[derive(Debug)]
enum Seen {
    /// `NextItem::LargeRowsEvent`.
    Announced(usize),
    /// A row: its `id` and the length of its `payload`.
    Row(i64, usize),
    /// A commit.
    Commit,
}

fn seen_item(item: StreamItem) -> Option<Seen> {
    match item {
        StreamItem::Row(row) => {
            let values = &row
                .after
                .as_ref()
                .expect("an insert has an after image")
                .values;
            let id = match values.first() {
                Some(Value::Int(id)) => *id,
                other => panic!("id column: {other:?}"),
            };
            let payload = match values.get(1) {
                Some(Value::Bytes(bytes)) => bytes.len(),
                other => panic!("payload column: {other:?}"),
            };
            Some(Seen::Row(id, payload))
        }
        StreamItem::Commit(_) => Some(Seen::Commit),
        StreamItem::Heartbeat(_) => None,
    }
}

#[tokio::test]
async fn a_large_rows_event_is_announced_before_it_is_decoded() {
    let server = ScratchMariadb::start().await.expect("scratch MariaDB");
    server
        .exec(&[
            "CREATE DATABASE app",
            "CREATE TABLE app.outbox (id INT PRIMARY KEY, payload LONGBLOB) ENGINE=InnoDB",
            "CREATE TABLE app.other (id INT PRIMARY KEY, payload LONGBLOB) ENGINE=InnoDB",
        ])
        .await
        .expect("schema");
    let mut reader = BinlogReader::connect(config(&server, StartPosition::Latest))
        .await
        .expect("reader connects");
    let start = reader.resume_point();
    let large = format!("REPEAT('x', {LARGE})");
    server
        .exec(&[
            "START TRANSACTION",
            "INSERT INTO app.outbox VALUES (1, 'small')",
            // Large, but of a table the reader does not watch: never announced.
            &format!("INSERT INTO app.other VALUES (1, {large})"),
            &format!("INSERT INTO app.outbox VALUES (2, {large})"),
            "INSERT INTO app.outbox VALUES (3, 'small')",
            "COMMIT",
        ])
        .await
        .expect("the transaction");

    let mut seen = Vec::new();
    while !matches!(seen.last(), Some(Seen::Commit)) {
        let next = tokio::time::timeout(
            Duration::from_secs(60),
            reader.next_item_or_large_event(LIMIT),
        )
        .await
        .expect("an item within a minute")
        .expect("no stream error");
        match next {
            NextItem::LargeRowsEvent { bytes } => {
                // Announced, not decoded: nothing of the event was handed out, so the
                // resume point is still the start.
                assert_eq!(reader.resume_point(), start);
                seen.push(Seen::Announced(bytes));
            }
            NextItem::Item(item) => seen.extend(seen_item(item)),
        }
    }
    let summary = format!("{seen:?}");
    match seen.as_slice() {
        [Seen::Row(1, 5), Seen::Announced(bytes), Seen::Row(2, LARGE), Seen::Row(3, 5), Seen::Commit] =>
        {
            // The raw event: the payload, its length prefix, the headers and the row's
            // other column; not much more.
            assert!(
                (LARGE..LARGE + 1024).contains(bytes),
                "announced size {bytes}: {summary}"
            );
        }
        _ => panic!("unexpected sequence: {summary}"),
    }

    // `next_item` from the same start yields the same items, announcing nothing.
    let mut plain = BinlogReader::connect(config(&server, start))
        .await
        .expect("second reader connects");
    let mut items = Vec::new();
    while !matches!(items.last(), Some(Seen::Commit)) {
        let item = tokio::time::timeout(Duration::from_secs(60), plain.next_item())
            .await
            .expect("an item within a minute")
            .expect("no stream error");
        items.extend(seen_item(item));
    }
    assert_eq!(
        format!("{items:?}"),
        "[Row(1, 5), Row(2, 2097152), Row(3, 5), Commit]"
    );
}
