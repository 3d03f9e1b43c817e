//! A 200 000-row transaction (~200 MiB of row images) streams row by row: the first row is
//! handed out while the rest is still on the server, and this process's peak memory grows by
//! far less than the transaction's size.
//!
//! Alone in its own test binary, because it measures the process's peak RSS (VmHWM).

mod live_support;

use std::time::{Duration, Instant};

use live_support::*;
use mysql_async::prelude::Queryable;
use outbox_binlog::{BinlogReader, StartPosition, StreamItem, Value};
use outbox_testkit::ScratchMariadb;

const ROWS: i64 = 200_000;
const PAYLOAD_BYTES: usize = 1000;

/// A `/proc/self/status` field in KiB (`VmHWM`: peak resident set; `VmRSS`: current).
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with(field))
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_200k_row_transaction_streams_with_bounded_memory() {
    let server = ScratchMariadb::start().await.unwrap();
    sql(
        &server,
        &[
            "CREATE DATABASE big",
            "CREATE TABLE big.outbox (id INT PRIMARY KEY, payload VARBINARY(1000)) ENGINE=InnoDB",
        ],
    )
    .await;
    // With the read-ahead task (4096 events), whose bounded channel is what could grow;
    // inline reading holds one batch (at most 1 MiB plus one event).
    let mut reader = BinlogReader::connect_with_read_ahead(
        config(&server, StartPosition::Latest, &["big.outbox"]),
        4096,
    )
    .await
    .unwrap();
    let transaction_bytes = ROWS as u64 * PAYLOAD_BYTES as u64;

    let url = server.url_with_db("big");
    let insert = tokio::spawn(async move {
        let mut conn = mysql_async::Conn::from_url(url).await.unwrap();
        conn.query_drop(format!(
            "INSERT INTO big.outbox SELECT seq, REPEAT(CHAR(65 + seq % 26), {PAYLOAD_BYTES}) \
             FROM big.seq_1_to_{ROWS}"
        ))
        .await
        .unwrap();
        conn.disconnect().await.unwrap();
    });
    // Let the reader's memory settle, then take the baseline.
    let baseline_peak_kib = status_kib("VmHWM:");

    let first_row = loop {
        match tokio::time::timeout(Duration::from_secs(120), reader.next_item())
            .await
            .expect("the first row within 2 minutes")
            .unwrap()
        {
            StreamItem::Row(row) => break row,
            StreamItem::Heartbeat(_) => continue,
            StreamItem::Commit(commit) => panic!("commit before any row: {commit:?}"),
        }
    };
    let first_row_at = Instant::now();
    assert_eq!(int(after(&first_row, "id")), 1);
    insert.await.unwrap();

    // The server has the whole transaction ready; the reader must not pull it in ahead of
    // the consumer beyond its bounded read-ahead (4096 events in batches of at most
    // 1 MiB: 16 batches in the channel, one being filled, one being decoded, about 18 MiB).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let peak_after_first_kib = status_kib("VmHWM:");
    let growth_after_first_mib = (peak_after_first_kib - baseline_peak_kib) / 1024;

    let mut expected_id = 2;
    let commit = loop {
        match tokio::time::timeout(ITEM_TIMEOUT, reader.next_item())
            .await
            .expect("items keep coming")
            .unwrap()
        {
            StreamItem::Row(row) => {
                assert_eq!(int(after(&row, "id")), expected_id);
                if expected_id % 50_000 == 0 {
                    let Value::Bytes(payload) = after(&row, "payload") else {
                        panic!("binary payload");
                    };
                    assert_eq!(payload.len(), PAYLOAD_BYTES);
                    assert_eq!(payload[0], b'A' + (expected_id % 26) as u8);
                }
                expected_id += 1;
            }
            StreamItem::Commit(commit) => break commit,
            StreamItem::Heartbeat(heartbeat) => {
                panic!("heartbeat inside a transaction: {heartbeat:?}")
            }
        }
    };
    let streamed_in = first_row_at.elapsed();
    assert_eq!(expected_id, ROWS + 1, "every row, in order");
    assert_eq!(commit.row_count, ROWS as u64);
    let total_growth_mib = (status_kib("VmHWM:") - baseline_peak_kib) / 1024;
    eprintln!(
        "big transaction: {ROWS} rows, {} MiB of payload; baseline peak RSS {} MiB; peak RSS growth {growth_after_first_mib} MiB \
         after the first row, {total_growth_mib} MiB at the commit; rows after the first streamed in {:.1?}",
        transaction_bytes / (1024 * 1024),
        baseline_peak_kib / 1024,
        streamed_in
    );
    assert!(
        growth_after_first_mib < 32,
        "the reader buffered ahead: peak grew {growth_after_first_mib} MiB after one row"
    );
    assert!(
        total_growth_mib < 64,
        "peak grew {total_growth_mib} MiB for a {} MiB transaction",
        transaction_bytes / (1024 * 1024)
    );

    // The probe itself works: holding a third of the transaction in memory shows up.
    let third: Vec<u8> = vec![1; (transaction_bytes / 3) as usize];
    let probe_growth_mib = (status_kib("VmHWM:") - baseline_peak_kib) / 1024;
    assert!(
        probe_growth_mib >= transaction_bytes / 3 / (1024 * 1024) - 8,
        "VmHWM did not see a {} MiB allocation ({probe_growth_mib} MiB)",
        third.len() / (1024 * 1024)
    );
}
