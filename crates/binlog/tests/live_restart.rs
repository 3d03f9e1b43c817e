//! A server restart in the middle of a stream: the reader fails with a transient error, and a
//! new reader started at `resume_point` continues with nothing lost and nothing repeated.

mod live_support;

use std::collections::BTreeSet;

use live_support::*;
use mysql_async::prelude::Queryable;
use outbox_binlog::{StartPosition, StreamItem};
use outbox_testkit::ScratchMariadb;

async fn insert_range(server: &ScratchMariadb, ids: std::ops::RangeInclusive<i64>) {
    let mut conn = server.conn().await.unwrap();
    for id in ids {
        conn.query_drop(format!("INSERT INTO app.outbox VALUES ({id})"))
            .await
            .unwrap();
    }
    conn.disconnect().await.unwrap();
}

#[tokio::test]
async fn restart_mid_stream_is_transient_and_resume_point_loses_and_repeats_nothing() {
    let mut server = server_with_app_outbox().await;
    // (start by GTID, crash with SIGKILL instead of a clean SIGTERM restart)
    for (round, (start_by_gtid, crash)) in [(false, false), (true, false), (false, true)]
        .into_iter()
        .enumerate()
    {
        let offset = round as i64 * 1000;
        let start = if start_by_gtid {
            let pos = gtid_binlog_pos(&server).await;
            StartPosition::Gtid(
                outbox_binlog::GtidSet::parse(outbox_binlog::Flavor::Mariadb, &pos).unwrap(),
            )
        } else {
            StartPosition::Latest
        };
        let mut reader = connect_reader(&server, start, &["app.outbox"]).await;
        insert_range(&server, offset + 1..=offset + 40).await;

        // Hand out part of the stream, then restart the server under the reader.
        let mut delivered: Vec<i64> = Vec::new();
        while delivered.len() < 15 {
            delivered.extend(ids(&next_transaction(&mut reader).await));
        }
        if crash {
            server.kill();
        }
        server.restart().await.unwrap();

        // The reader may still hand out what it had received; then it fails transiently.
        // Rows after the last Commit handed out are not "delivered": the resume point is
        // the last commit, so they come again from the new reader (at-least-once within an
        // unfinished transaction, exactly-once across commits).
        let mut pending_rows: Vec<i64> = Vec::new();
        let (buffered, error) = items_until_error(&mut reader).await;
        for item in buffered {
            match item {
                StreamItem::Row(row) => pending_rows.push(int(after(&row, "id"))),
                StreamItem::Commit(_) => delivered.append(&mut pending_rows),
                StreamItem::Heartbeat(_) => unreachable!("left out by items_until_error"),
            }
        }
        eprintln!("restart (crash: {crash}) surfaced as: {error}");
        assert!(error.is_transient(), "restart must be transient: {error:?}");
        assert!(
            error
                .to_string()
                .contains(&format!("127.0.0.1:{}", server.port())),
            "{error}"
        );

        let resume = reader.resume_point();
        assert_eq!(
            matches!(resume, StartPosition::Gtid(_)),
            start_by_gtid,
            "{resume}"
        );
        let mut resumed = connect_reader(&server, resume, &["app.outbox"]).await;
        insert_range(&server, offset + 41..=offset + 50).await;
        delivered.extend(ids_until(&mut resumed, offset + 50).await);
        let expected: Vec<i64> = (offset + 1..=offset + 50).collect();
        assert_eq!(
            delivered, expected,
            "exactly once, in order (by gtid: {start_by_gtid}, crash: {crash})"
        );
        let unique: BTreeSet<i64> = delivered.iter().copied().collect();
        assert_eq!(unique.len(), delivered.len());
    }
}
