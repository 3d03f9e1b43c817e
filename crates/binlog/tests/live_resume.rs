//! Positions of a live stream: rotation moves them to the new file, and a reader started at
//! a handed-out position or GTID set yields exactly the transactions after it.

mod live_support;

use live_support::*;
use mysql_async::prelude::Queryable;
use outbox_binlog::{Flavor, GtidSet, StartPosition};

#[tokio::test]
async fn rotation_moves_positions_to_the_new_file_and_positions_resume_exactly() {
    let server = server_with_app_outbox().await;
    let mut reader = connect_reader(&server, StartPosition::Latest, &["app.outbox"]).await;
    sql(
        &server,
        &[
            "INSERT INTO app.outbox VALUES (1)",
            "INSERT INTO app.outbox VALUES (2)",
        ],
    )
    .await;
    let first = next_transaction_with_rows(&mut reader).await;
    let second = next_transaction_with_rows(&mut reader).await;
    assert_eq!((ids(&first), ids(&second)), (vec![1], vec![2]));
    let old_file = second.commit.position.file.clone();

    sql(
        &server,
        &["FLUSH BINARY LOGS", "INSERT INTO app.outbox VALUES (3)"],
    )
    .await;
    let third = next_transaction_with_rows(&mut reader).await;
    assert_eq!(ids(&third), vec![3]);
    assert_ne!(
        third.commit.position.file, old_file,
        "rotation to a new file"
    );
    assert!(third.commit.position.file > old_file);
    assert_eq!(
        reader.resume_point(),
        StartPosition::Position(third.commit.position.clone())
    );
    sql(&server, &["INSERT INTO app.outbox VALUES (4)"]).await;
    assert_eq!(ids(&next_transaction_with_rows(&mut reader).await), vec![4]);

    // Resume after the first transaction: 2, 3, 4 exactly, across the rotation.
    let mut after_first = connect_reader(
        &server,
        StartPosition::Position(first.commit.position.clone()),
        &["app.outbox"],
    )
    .await;
    assert_eq!(ids_until(&mut after_first, 4).await, vec![2, 3, 4]);

    // Resume after the third (in the new file): only 4.
    let mut after_third = connect_reader(
        &server,
        StartPosition::Position(third.commit.position.clone()),
        &["app.outbox"],
    )
    .await;
    assert_eq!(ids_until(&mut after_third, 4).await, vec![4]);

    // From the oldest file: everything.
    let mut earliest = connect_reader(&server, StartPosition::Earliest, &["app.outbox"]).await;
    assert_eq!(ids_until(&mut earliest, 4).await, vec![1, 2, 3, 4]);
}

#[tokio::test]
async fn a_gtid_set_resumes_exactly_after_its_transactions() {
    let server = server_with_app_outbox().await;
    let gtid_pos = gtid_binlog_pos(&server).await;
    let mut conn = server.conn().await.unwrap();
    let start = GtidSet::parse(Flavor::Mariadb, &gtid_pos).unwrap();
    let mut reader =
        connect_reader(&server, StartPosition::Gtid(start.clone()), &["app.outbox"]).await;
    assert_eq!(reader.resume_point(), StartPosition::Gtid(start));
    for id in 1..=3 {
        conn.query_drop(format!("INSERT INTO app.outbox VALUES ({id})"))
            .await
            .unwrap();
    }
    let first = next_transaction_with_rows(&mut reader).await;
    assert_eq!(ids(&first), vec![1]);
    let after_first = reader.resume_point();
    let StartPosition::Gtid(after_first_set) = &after_first else {
        panic!("a GTID stream resumes by GTID, got {after_first}");
    };
    let first_gtid = first.commit.gtid.clone().expect("a GTID");
    assert!(after_first_set.contains(&first_gtid));
    assert_eq!(ids(&next_transaction_with_rows(&mut reader).await), vec![2]);
    assert_eq!(ids(&next_transaction_with_rows(&mut reader).await), vec![3]);

    let mut resumed = connect_reader(&server, after_first, &["app.outbox"]).await;
    assert_eq!(ids_until(&mut resumed, 3).await, vec![2, 3]);

    // The set taken before the inserts yields all three again.
    let mut resumed_at_end = connect_reader(
        &server,
        StartPosition::Gtid(GtidSet::parse(Flavor::Mariadb, &gtid_pos).unwrap()),
        &["app.outbox"],
    )
    .await;
    assert_eq!(ids_until(&mut resumed_at_end, 3).await, vec![1, 2, 3]);

    // The empty set starts at the beginning of the binlog.
    let mut from_nothing = connect_reader(
        &server,
        StartPosition::Gtid(GtidSet::Empty),
        &["app.outbox"],
    )
    .await;
    assert_eq!(ids_until(&mut from_nothing, 3).await, vec![1, 2, 3]);
    let StartPosition::Gtid(everything) = from_nothing.resume_point() else {
        panic!("GTID stream resumes by GTID");
    };
    let mut server_state = gtid_binlog_pos(&server).await;
    server_state.retain(|c| !c.is_whitespace());
    assert_eq!(everything.to_string(), server_state);
    conn.disconnect().await.unwrap();
}
