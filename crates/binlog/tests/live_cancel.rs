//! `BinlogReader::next_item` is cancel-safe: dropped again and again mid-read (as
//! `tokio::select!` with a shutdown signal does), it still yields every transaction exactly
//! once and in order, including while it waits for column names (MINIMAL metadata). Both
//! ways of reading events are checked: inline (`read_ahead_events` 0) and the read-ahead
//! task.

mod live_support;

use std::time::Duration;

use live_support::*;
use mysql_async::prelude::Queryable;
use outbox_binlog::{BinlogReader, StartPosition, StreamItem};
use outbox_testkit::ScratchOptions;

const TRANSACTIONS: i64 = 300;

/// The competing branch of the `select!`: every other time it fires as soon as
/// `next_item` has to wait at all (cancelling it at its first `.await` that is not ready),
/// otherwise after 2 ms (so multi-round-trip work like a column-name lookup can finish).
async fn cancel_signal(iteration: u64) {
    if iteration & 1 == 0 {
        tokio::task::yield_now().await;
    } else {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn next_item_dropped_mid_read_loses_and_repeats_nothing_inline() {
    next_item_dropped_mid_read_loses_and_repeats_nothing(0).await;
}

#[tokio::test]
async fn next_item_dropped_mid_read_loses_and_repeats_nothing_with_read_ahead_task() {
    next_item_dropped_mid_read_loses_and_repeats_nothing(4096).await;
}

async fn next_item_dropped_mid_read_loses_and_repeats_nothing(read_ahead_events: usize) {
    let server = start_server(
        ScratchOptions {
            binlog_row_metadata: "MINIMAL",
            ..ScratchOptions::default()
        },
        APP_OUTBOX_SCHEMA,
    )
    .await;
    let mut reader = BinlogReader::connect_with_read_ahead(
        config(&server, StartPosition::Latest, &["app.outbox"]),
        read_ahead_events,
    )
    .await
    .unwrap();
    let url = server.url();
    let writer = tokio::spawn(async move {
        let mut conn = mysql_async::Conn::from_url(url).await.unwrap();
        for id in 1..=TRANSACTIONS {
            if id % 60 == 0 {
                // DDL makes the reader look the column names up again.
                conn.query_drop(format!(
                    "ALTER TABLE app.outbox ADD COLUMN extra_{id} INT DEFAULT {id}"
                ))
                .await
                .unwrap();
            }
            conn.query_drop(format!("INSERT INTO app.outbox (id) VALUES ({id})"))
                .await
                .unwrap();
            // Paced, so the reader often waits for the next event (and is cancelled there)
            // instead of finding everything buffered already.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        conn.disconnect().await.unwrap();
    });

    let mut delivered: Vec<i64> = Vec::new();
    let mut rows_in_open_transaction: Vec<i64> = Vec::new();
    let mut cancellations = 0_u64;
    let mut iteration = 0_u64;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while delivered.len() < TRANSACTIONS as usize {
        assert!(
            tokio::time::Instant::now() < deadline,
            "stalled at {delivered:?}"
        );
        tokio::select! {
            result = reader.next_item() => match result.unwrap() {
                StreamItem::Row(row) => {
                    let columns = row.after.as_ref().unwrap().columns.len();
                    let id = int(after(&row, "id"));
                    let alters_before = id / 60;
                    assert_eq!(columns as i64, 1 + alters_before, "names follow ALTER TABLE for id {id}");
                    rows_in_open_transaction.push(id);
                }
                StreamItem::Commit(_) => delivered.append(&mut rows_in_open_transaction),
                StreamItem::Heartbeat(_) => {}
            },
            _ = cancel_signal(iteration) => cancellations += 1,
        }
        iteration += 1;
    }
    writer.await.unwrap();
    let expected: Vec<i64> = (1..=TRANSACTIONS).collect();
    assert_eq!(delivered, expected);
    assert!(
        cancellations > 10,
        "only {cancellations} cancellations: the test proved little"
    );
    eprintln!(
        "cancel-safety (read_ahead_events {read_ahead_events}): {cancellations} cancelled \
         next_item calls"
    );
}
