//! What the replication connection set-up makes the server send, checked on the raw event
//! stream: CRC32 checksums on every event (so the decoder can verify them) and MariaDB GTID
//! events instead of `BEGIN` queries (`@mariadb_slave_capability=4`).

mod live_support;

use futures_util::StreamExt;
use live_support::*;
use mysql_async::binlog::EventType;
use mysql_async::prelude::Queryable;
use mysql_async::BinlogStreamRequest;
use outbox_binlog::StartPosition;
use outbox_testkit::ScratchMariadb;

#[tokio::test]
async fn events_arrive_with_crc32_and_as_gtid_events() {
    let server = ScratchMariadb::start().await.unwrap();
    sql(
        &server,
        &[
            "CREATE DATABASE app",
            "CREATE TABLE app.outbox (id INT PRIMARY KEY) ENGINE=InnoDB",
            "INSERT INTO app.outbox VALUES (1)",
        ],
    )
    .await;
    let mut conn = server.conn().await.unwrap();
    let checksum: String = conn
        .query_first("SELECT @@global.binlog_checksum")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(checksum, "CRC32");
    // The same session set-up as the reader's (see live.rs, `open_stream`).
    conn.query_drop("SET @mariadb_slave_capability=4")
        .await
        .unwrap();
    let mut stream = conn
        .get_binlog_stream(
            BinlogStreamRequest::new(unique_server_id())
                .with_filename(b"binlog.000001")
                .with_pos(4_u64)
                .with_non_blocking(),
        )
        .await
        .unwrap();
    let mut saw_gtid_event = false;
    let mut saw_rows_with_checksum = false;
    while let Some(event) = stream.next().await {
        let event = event.unwrap();
        let event_type = event.header().event_type_raw();
        if event.header().log_pos() == 0 {
            continue; // the artificial rotate sent before anything else
        }
        assert!(
            event.checksum().is_some(),
            "event type {event_type} at {} arrived without a checksum",
            event.header().log_pos()
        );
        // MariaDB GTID_EVENT is type 162.
        saw_gtid_event |= event_type == 162;
        saw_rows_with_checksum |= event_type == EventType::WRITE_ROWS_EVENT as u8
            || event_type == EventType::WRITE_ROWS_EVENT_V1 as u8;
    }
    assert!(saw_gtid_event, "GTID events, not BEGIN queries");
    assert!(saw_rows_with_checksum);

    // And the reader, which verifies them, streams the same binlog.
    let mut reader = connect_reader(&server, StartPosition::Earliest, &["app.outbox"]).await;
    assert_eq!(ids(&next_transaction_with_rows(&mut reader).await), vec![1]);
}
