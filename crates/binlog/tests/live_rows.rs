//! Live stream of a scratch MariaDB: row changes of watched tables arrive with their
//! commits, rolled-back work never appears, other tables are skipped, text and big values
//! survive byte for byte.

mod live_support;

use live_support::*;
use outbox_binlog::{Flavor, RowOperation, StartPosition, Value};
use outbox_testkit::ScratchMariadb;

#[tokio::test]
async fn inserts_updates_deletes_of_watched_tables_arrive_with_their_commits() {
    let server = ScratchMariadb::start().await.unwrap();
    sql(
        &server,
        &[
            "CREATE DATABASE shop",
            "CREATE TABLE shop.outbox (id INT PRIMARY KEY, payload VARCHAR(200)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
            "CREATE TABLE shop.second_outbox (id INT PRIMARY KEY, payload VARCHAR(200)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
            "CREATE TABLE shop.other (id INT PRIMARY KEY, note VARCHAR(50)) ENGINE=InnoDB",
            "CREATE TABLE shop.third (id INT PRIMARY KEY) ENGINE=InnoDB",
        ],
    )
    .await;
    let mut reader = connect_reader(
        &server,
        StartPosition::Latest,
        &["shop.outbox", "shop.second_outbox"],
    )
    .await;
    assert_eq!(reader.flavor(), Flavor::Mariadb);
    assert_eq!(reader.server().server_id, 1);
    assert!(reader.server().version.contains("MariaDB"));

    // A single insert.
    sql(&server, &["INSERT INTO shop.outbox VALUES (1, 'one')"]).await;
    let single = next_transaction(&mut reader).await;
    assert_eq!(ids(&single), vec![1]);
    assert_eq!(single.rows[0].operation, RowOperation::Insert);
    assert_eq!(single.rows[0].table.to_string(), "shop.outbox");
    assert_eq!(text(after(&single.rows[0], "payload")), "one");
    assert!(single.rows[0].before.is_none());
    assert_eq!(single.commit.row_count, 1);
    assert!(
        single.commit.gtid.is_some(),
        "MariaDB GTIDs arrive as GTIDs"
    );
    assert_eq!(
        reader.resume_point(),
        StartPosition::Position(single.commit.position.clone())
    );

    // A multi-row insert: one statement, three rows, one commit.
    sql(
        &server,
        &["INSERT INTO shop.outbox VALUES (2, 'two'), (3, 'three'), (4, 'four')"],
    )
    .await;
    let multi = next_transaction(&mut reader).await;
    assert_eq!(ids(&multi), vec![2, 3, 4]);
    assert_eq!(multi.commit.row_count, 3);
    assert!(multi.commit.position > single.commit.position);

    // Update and delete carry before/after images.
    sql(
        &server,
        &[
            "UPDATE shop.outbox SET payload = 'TWO' WHERE id = 2",
            "DELETE FROM shop.outbox WHERE id = 3",
        ],
    )
    .await;
    let update = next_transaction(&mut reader).await;
    assert_eq!(update.rows.len(), 1);
    assert_eq!(update.rows[0].operation, RowOperation::Update);
    assert_eq!(text(before(&update.rows[0], "payload")), "two");
    assert_eq!(text(after(&update.rows[0], "payload")), "TWO");
    let delete = next_transaction(&mut reader).await;
    assert_eq!(delete.rows[0].operation, RowOperation::Delete);
    assert_eq!(int(before(&delete.rows[0], "id")), 3);
    assert!(delete.rows[0].after.is_none());

    // A rolled-back transaction never appears; the next committed one does.
    let mut conn = server.conn().await.unwrap();
    {
        use mysql_async::prelude::Queryable;
        conn.query_drop("BEGIN").await.unwrap();
        conn.query_drop("INSERT INTO shop.outbox VALUES (100, 'rolled back')")
            .await
            .unwrap();
        conn.query_drop("INSERT INTO shop.other VALUES (100, 'rolled back')")
            .await
            .unwrap();
        conn.query_drop("ROLLBACK").await.unwrap();
    }
    // A transaction over four tables: only the watched tables' rows, counted right.
    sql(
        &server,
        &[
            "BEGIN",
            "INSERT INTO shop.other VALUES (1, 'x')",
            "INSERT INTO shop.outbox VALUES (5, 'five')",
            "INSERT INTO shop.other VALUES (2, 'y')",
            "INSERT INTO shop.second_outbox VALUES (50, 'fifty'), (51, 'fifty-one')",
            "UPDATE shop.other SET note = 'z'",
            "INSERT INTO shop.third VALUES (7)",
            "COMMIT",
        ],
    )
    .await;
    let mixed = next_transaction(&mut reader).await;
    assert_eq!(
        ids(&mixed),
        vec![5, 50, 51],
        "rolled back id 100 must not appear"
    );
    assert_eq!(mixed.commit.row_count, 3);
    let tables: Vec<String> = mixed.rows.iter().map(|r| r.table.to_string()).collect();
    assert_eq!(
        tables,
        vec!["shop.outbox", "shop.second_outbox", "shop.second_outbox"]
    );

    // A transaction touching only unwatched tables still commits (row_count 0).
    sql(
        &server,
        &["INSERT INTO shop.other VALUES (3, 'only other')"],
    )
    .await;
    let other_only = next_transaction(&mut reader).await;
    assert!(other_only.rows.is_empty());
    assert_eq!(other_only.commit.row_count, 0);

    // Unicode: accents, CJK, and 4-byte UTF-8 (emoji, supplementary CJK).
    let unicode = "Grüße, 你好, 🎉🚀, 𠜎𠜱, Ω≈ç√";
    {
        use mysql_async::prelude::Queryable;
        conn.exec_drop(
            "INSERT INTO shop.outbox VALUES (6, ?)",
            (unicode.to_owned(),),
        )
        .await
        .unwrap();
    }
    let text_transaction = next_transaction(&mut reader).await;
    assert_eq!(text(after(&text_transaction.rows[0], "payload")), unicode);
    conn.disconnect().await.unwrap();
}

#[tokio::test]
async fn a_32_mib_payload_arrives_byte_exact() {
    let server = ScratchMariadb::start().await.unwrap();
    sql(
        &server,
        &[
            "CREATE DATABASE big",
            "CREATE TABLE big.outbox (id INT PRIMARY KEY, payload LONGBLOB) ENGINE=InnoDB",
        ],
    )
    .await;
    let mut reader = connect_reader(&server, StartPosition::Latest, &["big.outbox"]).await;
    let payload: Vec<u8> = (0..32 * 1024 * 1024_u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    {
        use mysql_async::prelude::Queryable;
        let mut conn = server.conn().await.unwrap();
        conn.exec_drop("INSERT INTO big.outbox VALUES (1, ?)", (payload.clone(),))
            .await
            .unwrap();
        conn.disconnect().await.unwrap();
    }
    let transaction = next_transaction(&mut reader).await;
    assert_eq!(transaction.rows.len(), 1);
    match after(&transaction.rows[0], "payload") {
        Value::Bytes(bytes) => {
            assert_eq!(bytes.len(), payload.len());
            assert!(bytes == &payload, "payload differs");
        }
        other => panic!("expected bytes, got {:?}", std::mem::discriminant(other)),
    }
}

#[tokio::test]
async fn a_server_without_binlog_checksums_streams_too() {
    let server = start_server(
        outbox_testkit::ScratchOptions {
            extra_args: vec!["--binlog-checksum=NONE".into()],
            ..outbox_testkit::ScratchOptions::default()
        },
        APP_OUTBOX_SCHEMA,
    )
    .await;
    let mut reader = connect_reader(&server, StartPosition::Earliest, &["app.outbox"]).await;
    sql(
        &server,
        &[
            "INSERT INTO app.outbox VALUES (1)",
            "INSERT INTO app.outbox VALUES (2)",
        ],
    )
    .await;
    assert_eq!(ids(&next_transaction_with_rows(&mut reader).await), vec![1]);
    assert_eq!(ids(&next_transaction_with_rows(&mut reader).await), vec![2]);
}
