//! binlog_row_metadata=MINIMAL: column names come from information_schema as the table is
//! *now*. A DDL the reader has not reached yet must never let those names mis-map the
//! values of an older event: the reader stops with a definite error naming the table and
//! `binlog_row_metadata=FULL` (ARCHITECTURE.md, invariant 4b).

mod live_support;

use live_support::*;
use outbox_binlog::{BinlogError, StartPosition, StreamItem};
use outbox_testkit::{ScratchMariadb, ScratchOptions};

async fn minimal_server() -> ScratchMariadb {
    start_server(
        ScratchOptions {
            binlog_row_metadata: "MINIMAL",
            ..ScratchOptions::default()
        },
        &[
            "CREATE DATABASE app",
            "CREATE TABLE app.outbox (id INT PRIMARY KEY, a VARCHAR(20), b VARCHAR(20)) \
             ENGINE=InnoDB",
        ],
    )
    .await
}

/// The reader reads the rows only after the DDL, so information_schema already shows the new
/// order; the error must come before any row.
async fn assert_stops_before_rows_written_before(ddl: &str) {
    let server = minimal_server().await;
    let mut reader = connect_reader(&server, StartPosition::Latest, &["app.outbox"]).await;
    sql(
        &server,
        &[
            "INSERT INTO app.outbox VALUES (1, 'value-of-a', 'value-of-b')",
            ddl,
            "INSERT INTO app.outbox VALUES (2, 'second-b', 'second-a')",
        ],
    )
    .await;
    // The first row or the error: a row handed out here carries names that are not its own.
    let error = loop {
        match tokio::time::timeout(ITEM_TIMEOUT, reader.next_item())
            .await
            .expect("an item or an error within the timeout")
        {
            Ok(StreamItem::Row(row)) => {
                panic!("{ddl}: a row was handed out with the table's current names: {row:?}")
            }
            Ok(_) => {}
            Err(error) => break error,
        }
    };
    assert!(!error.is_transient(), "{ddl}: definite: {error}");
    let text = error.to_string();
    assert!(
        matches!(&error, BinlogError::FromServer { source, .. }
            if matches!(**source, BinlogError::RowImageMismatch { .. })),
        "{ddl}: {error:?}"
    );
    assert!(
        text.contains("app.outbox"),
        "{ddl}: names the table: {text}"
    );
    assert!(
        text.contains("binlog_row_metadata=FULL"),
        "{ddl}: names the fix: {text}"
    );
}

#[tokio::test]
async fn two_swapped_varchar_columns_behind_the_reader_stop_it_instead_of_mis_mapping() {
    // Same types, same count: only knowing that a DDL lies ahead can tell.
    assert_stops_before_rows_written_before("ALTER TABLE app.outbox MODIFY a VARCHAR(20) AFTER b")
        .await;
}

#[tokio::test]
async fn a_ddl_in_an_executable_comment_behind_the_reader_stops_it_too() {
    assert_stops_before_rows_written_before(
        "/*!40000 ALTER TABLE app.outbox MODIFY a VARCHAR(20) AFTER b */",
    )
    .await;
}

#[tokio::test]
async fn a_ddl_in_an_executable_comment_after_the_names_were_cached_makes_the_reader_ask_again() {
    let server = minimal_server().await;
    let mut reader = connect_reader(&server, StartPosition::Latest, &["app.outbox"]).await;
    sql(&server, &["INSERT INTO app.outbox VALUES (1, 'a1', 'b1')"]).await;
    let first = next_transaction_with_rows(&mut reader).await;
    assert_eq!(text(after(&first.rows[0], "a")), "a1");
    // Caught up, names cached. A DDL hidden in an executable comment reorders the columns.
    sql(
        &server,
        &[
            "/*!40000 ALTER TABLE app.outbox MODIFY a VARCHAR(20) AFTER b */",
            "INSERT INTO app.outbox VALUES (2, 'b2', 'a2')",
        ],
    )
    .await;
    let second = next_transaction_with_rows(&mut reader).await;
    let columns = &second.rows[0].after.as_ref().unwrap().columns;
    assert_eq!(
        columns.to_vec(),
        vec!["id".to_owned(), "b".to_owned(), "a".to_owned()]
    );
    assert_eq!(text(after(&second.rows[0], "a")), "a2");
    assert_eq!(text(after(&second.rows[0], "b")), "b2");
}
