//! The poller's protocol on a real scratch MariaDB 10.11: per-aggregate order, SKIP LOCKED
//! between concurrent claimers, lease expiry and the fencing token, rolled-back rows never
//! claimed, and the claim served by its index.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::TxOpts;
use outbox_poll::{check_server, poll_mode_ddl, Claim, PollColumns, Poller};
use outbox_testkit::ScratchMariadb;
use outbox_writer::{create_table_sql, ColumnPreset, OutboxTable};

const LEASE: Duration = Duration::from_secs(30);

/// A scratch server with `shop.outbox` in poll mode, and its poller.
async fn poll_table() -> (ScratchMariadb, Poller) {
    let db = ScratchMariadb::start().await.expect("scratch MariaDB");
    let table = OutboxTable::new("outbox", ColumnPreset::Seeds)
        .and_then(|table| table.in_database("shop"))
        .expect("table");
    let columns = PollColumns::default();
    let mut statements = vec!["CREATE DATABASE shop".to_owned(), create_table_sql(&table)];
    statements.extend(poll_mode_ddl(&table, &columns));
    let statements: Vec<&str> = statements.iter().map(String::as_str).collect();
    db.exec(&statements)
        .await
        .expect("the poll-mode DDL applies");
    (db, Poller::new(&table, &columns))
}

/// Inserts one event of `aggregate` in its own transaction; returns its id.
async fn insert(conn: &mut mysql_async::Conn, aggregate: &str, name: &str) -> String {
    conn.exec_drop(
        "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
         VALUES (?, 'order', ?, 'created', '{}')",
        (name, aggregate),
    )
    .await
    .expect("insert");
    name.to_owned()
}

fn ids(claim: &Claim) -> Vec<&str> {
    claim.rows.iter().map(|row| row.event_id.as_str()).collect()
}

async fn status_of(conn: &mut mysql_async::Conn, id: &str) -> String {
    conn.exec_first(
        "SELECT poll_status FROM shop.outbox WHERE event_id = ?",
        (id,),
    )
    .await
    .expect("select")
    .expect("the row exists")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_take_the_oldest_unsent_row_of_each_aggregate_in_order() {
    let (db, poller) = poll_table().await;
    let mut conn = db.conn().await.unwrap();
    check_server(&mut conn)
        .await
        .expect("MariaDB 10.11 has SKIP LOCKED");
    for (aggregate, name) in [
        ("a", "a1"),
        ("b", "b1"),
        ("a", "a2"),
        ("c", "c1"),
        ("b", "b2"),
        ("a", "a3"),
    ] {
        insert(&mut conn, aggregate, name).await;
    }
    let mut other = db.conn().await.unwrap();
    let mut rounds = Vec::new();
    loop {
        let claim = poller.claim(&mut conn, 100, LEASE).await.expect("claim");
        if claim.rows.is_empty() {
            break;
        }
        // While the claim is out, nothing more of its aggregates is claimable.
        let meanwhile = poller.claim(&mut other, 100, LEASE).await.expect("claim");
        assert!(meanwhile.rows.is_empty(), "{meanwhile:?} while {claim:?}");
        assert!(claim.rows.iter().all(|row| row.attempts == 1));
        rounds.push(ids(&claim).join(","));
        let outcome = poller.mark_sent(&mut conn, &claim).await.expect("mark");
        assert_eq!(
            (outcome.marked, outcome.fenced),
            (claim.rows.len() as u64, 0)
        );
    }
    assert_eq!(rounds, ["a1,b1,c1", "a2,b2", "a3"]);
    for id in ["a1", "a2", "a3", "b1", "b2", "c1"] {
        assert_eq!(status_of(&mut conn, id).await, "SENT", "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimer_skips_rows_another_transaction_holds_and_keeps_their_aggregate_waiting() {
    let (db, poller) = poll_table().await;
    let mut conn = db.conn().await.unwrap();
    for (aggregate, name) in [("a", "a1"), ("a", "a2"), ("b", "b1"), ("c", "c1")] {
        insert(&mut conn, aggregate, name).await;
    }
    // Another worker's claim transaction holds a1's row lock.
    let mut holder = db.conn().await.unwrap();
    let mut held = holder.start_transaction(TxOpts::default()).await.unwrap();
    let _: Option<String> = held
        .query_first("SELECT event_id FROM shop.outbox WHERE event_id = 'a1' FOR UPDATE")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let claim = poller.claim(&mut conn, 100, LEASE).await.expect("claim");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the claim waited for the lock instead of skipping"
    );
    // a1 is skipped (locked), and a2 is not claimable while a1 is unsent.
    assert_eq!(ids(&claim), ["b1", "c1"]);
    held.rollback().await.unwrap();
    let next = poller.claim(&mut conn, 100, LEASE).await.expect("claim");
    assert_eq!(ids(&next), ["a1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_reclaimed_and_the_old_claim_cannot_mark() {
    let (db, poller) = poll_table().await;
    let mut conn = db.conn().await.unwrap();
    for (aggregate, name) in [("a", "a1"), ("b", "b1")] {
        insert(&mut conn, aggregate, name).await;
    }
    let stale = poller
        .claim(&mut conn, 100, Duration::from_millis(200))
        .await
        .expect("claim");
    assert_eq!(ids(&stale), ["a1", "b1"]);
    assert_eq!(
        poller.expire_leases(&mut conn).await.expect("expire"),
        0,
        "the lease still runs"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(poller.expire_leases(&mut conn).await.expect("expire"), 2);
    let mut other = db.conn().await.unwrap();
    let fresh = poller.claim(&mut other, 100, LEASE).await.expect("reclaim");
    assert_eq!(ids(&fresh), ["a1", "b1"]);
    assert_ne!(fresh.token, stale.token);
    assert!(fresh.rows.iter().all(|row| row.attempts == 2), "{fresh:?}");
    // The stale worker published late (a duplicate with the same ids); its mark is refused.
    let refused = poller.mark_sent(&mut conn, &stale).await.expect("mark");
    assert_eq!((refused.marked, refused.fenced), (0, 2));
    assert_eq!(status_of(&mut conn, "a1").await, "PROCESSING");
    let accepted = poller.mark_sent(&mut other, &fresh).await.expect("mark");
    assert_eq!((accepted.marked, accepted.fenced), (2, 0));
    assert_eq!(status_of(&mut conn, "b1").await, "SENT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_outbox_row_is_never_claimed() {
    let (db, poller) = poll_table().await;
    let mut conn = db.conn().await.unwrap();
    {
        let mut tx = conn.start_transaction(TxOpts::default()).await.unwrap();
        tx.exec_drop(
            "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES ('gone', 'order', 'a', 'created', '{}')",
            (),
        )
        .await
        .unwrap();
        tx.rollback().await.unwrap();
    }
    insert(&mut conn, "a", "kept").await;
    let claim = poller.claim(&mut conn, 100, LEASE).await.expect("claim");
    assert_eq!(ids(&claim), ["kept"]);
}

/// The claim reads the (status, sequence) index in order: no sort of the backlog
/// (../shared/notes/poll-claim-index.md: a factor of 16 at 50,000 rows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_is_served_by_its_index_without_a_sort() {
    let (db, poller) = poll_table().await;
    let mut conn = db.conn().await.unwrap();
    for index in 0..200 {
        insert(
            &mut conn,
            &format!("agg-{}", index % 50),
            &format!("e{index}"),
        )
        .await;
    }
    conn.query_drop("ANALYZE TABLE shop.outbox").await.unwrap();
    let explain = format!(
        "EXPLAIN {}",
        poller.claim_query().replace("LIMIT ?", "LIMIT 100")
    );
    let rows: Vec<mysql_async::Row> = conn.query(explain).await.expect("explain");
    let plan: Vec<String> = rows
        .into_iter()
        .map(|row| {
            let table: Option<String> = row.get("table").flatten();
            let key: Option<String> = row.get("key").flatten();
            let extra: Option<String> = row.get("Extra").flatten();
            format!("{table:?} key={key:?} extra={extra:?}")
        })
        .collect();
    let outer = plan.first().expect("a plan row");
    assert!(
        outer.contains("outbox_poll_claim_idx") && !outer.contains("filesort"),
        "the claim does not read its index in order: {plan:#?}"
    );
    assert!(
        plan.iter()
            .any(|line| line.contains("outbox_poll_aggregate_idx")),
        "the per-aggregate check does not use its index: {plan:#?}"
    );
}
