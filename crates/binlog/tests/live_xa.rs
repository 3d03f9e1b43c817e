//! Two-phase XA as the reader yields it from MariaDB 10.11: the rows of an XA transaction
//! say so, its `XA PREPARE` is a commit marked `XaBoundary::Prepare`, and the later
//! `XA COMMIT` / `XA ROLLBACK` is a group of its own marked with the same XID; a one-phase
//! XA commit is an ordinary transaction.

mod live_support;

use live_support::*;
use mysql_async::prelude::Queryable;
use outbox_binlog::{StartPosition, XaBoundary};

#[tokio::test]
async fn xa_prepare_and_its_outcome_are_marked_with_one_xid() {
    let server = server_with_app_outbox().await;
    let mut reader = connect_reader(&server, StartPosition::Latest, &["app.outbox"]).await;
    let mut conn = server.conn().await.expect("connect");
    for statement in [
        "XA START 'x1'",
        "INSERT INTO app.outbox (id) VALUES (1)",
        "XA END 'x1'",
        "XA PREPARE 'x1'",
        "XA COMMIT 'x1'",
        "XA START 'x2'",
        "INSERT INTO app.outbox (id) VALUES (2)",
        "XA END 'x2'",
        "XA PREPARE 'x2'",
        "XA ROLLBACK 'x2'",
        "XA START 'x3'",
        "INSERT INTO app.outbox (id) VALUES (3)",
        "XA END 'x3'",
        "XA COMMIT 'x3' ONE PHASE",
        "INSERT INTO app.outbox (id) VALUES (4)",
    ] {
        conn.query_drop(statement)
            .await
            .unwrap_or_else(|error| panic!("{statement}: {error}"));
    }
    conn.disconnect().await.expect("disconnect");
    let x1 = "X'7831',X'',1".to_owned();
    let x2 = "X'7832',X'',1".to_owned();

    let prepared = next_transaction(&mut reader).await;
    assert_eq!(ids(&prepared), vec![1]);
    assert!(prepared.rows[0].in_xa_transaction);
    assert_eq!(
        prepared.commit.xa,
        Some(XaBoundary::Prepare { xid: x1.clone() })
    );
    let committed = next_transaction(&mut reader).await;
    assert!(committed.rows.is_empty());
    assert_eq!(committed.commit.xa, Some(XaBoundary::Commit { xid: x1 }));

    let prepared = next_transaction(&mut reader).await;
    assert_eq!(ids(&prepared), vec![2]);
    assert_eq!(
        prepared.commit.xa,
        Some(XaBoundary::Prepare { xid: x2.clone() })
    );
    let rolled_back = next_transaction(&mut reader).await;
    assert!(rolled_back.rows.is_empty());
    assert_eq!(
        rolled_back.commit.xa,
        Some(XaBoundary::Rollback { xid: x2 })
    );

    for id in [3, 4] {
        let ordinary = next_transaction(&mut reader).await;
        assert_eq!(ids(&ordinary), vec![id]);
        assert!(!ordinary.rows[0].in_xa_transaction, "row {id}");
        assert_eq!(ordinary.commit.xa, None, "transaction of row {id}");
    }
}
