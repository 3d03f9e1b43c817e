//! The poller's protocol on a real scratch MariaDB 10.11: per-aggregate order, SKIP LOCKED
//! between concurrent claimers, lease expiry and the fencing token, rolled-back rows never
//! claimed, and the claim served by its index.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::TxOpts;
use outbox_poll::{
    check_server, poll_mode_ddl, Claim, Failure, FailureOutcome, PollColumns, Poller,
    ReplaySelection,
};
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
async fn a_claim_takes_each_aggregates_unsent_rows_in_order_and_blocks_them_meanwhile() {
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
        let claim = poller.claim(&mut conn, 4, LEASE).await.expect("claim");
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
    // Oldest first, several rows of one aggregate in one claim; the rows past the LIMIT
    // wait for the next claim, since an older row of theirs is out.
    assert_eq!(rounds, ["a1,b1,a2,c1", "b2,a3"]);
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
    // a1 is skipped (locked), and a2 is not claimable while a1 is unsent and not in this
    // claim.
    assert_eq!(ids(&claim), ["b1", "c1"]);
    held.rollback().await.unwrap();
    let next = poller.claim(&mut conn, 100, LEASE).await.expect("claim");
    assert_eq!(ids(&next), ["a1", "a2"]);
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
        poller
            .claim_query()
            .replacen("<= ?", "<= 200", 1)
            .replace("LIMIT ?", "LIMIT 100")
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
    // Every row is PENDING here: the claim index and the poll_seq index read the same
    // rows in the same order; either serves, never a sort.
    let outer = plan.first().expect("a plan row");
    assert!(
        (outer.contains("outbox_poll_claim_idx") || outer.contains("outbox_poll_seq_uq"))
            && !outer.contains("filesort"),
        "the claim does not read an index in order: {plan:#?}"
    );
    assert!(
        plan.iter()
            .any(|line| line.contains("outbox_poll_aggregate_idx")),
        "the per-aggregate check does not use its index: {plan:#?}"
    );

    // A windowed claim on a table whose history is mostly SENT reads the PENDING range of
    // the claim index, not every row below the window's end.
    for index in 200..2_000 {
        insert(
            &mut conn,
            &format!("agg-{}", index % 50),
            &format!("e{index}"),
        )
        .await;
    }
    conn.query_drop("UPDATE shop.outbox SET poll_status = 'SENT' WHERE poll_seq <= 1900")
        .await
        .unwrap();
    conn.query_drop("ANALYZE TABLE shop.outbox").await.unwrap();
    let explain = format!(
        "EXPLAIN {}",
        poller
            .claim_query()
            .replacen("<= ?", "<= 2000", 1)
            .replace("LIMIT ?", "LIMIT 100")
    );
    let rows: Vec<mysql_async::Row> = conn.query(explain).await.expect("explain");
    let outer: Option<String> = rows.first().and_then(|row| row.get("key")).flatten();
    assert_eq!(outer.as_deref(), Some("outbox_poll_claim_idx"));
}

fn transient(error: &str, max_attempts: u32, delay: Duration) -> Failure<'_> {
    Failure {
        error,
        permanent: false,
        max_attempts,
        delay,
    }
}

async fn last_error_of(conn: &mut mysql_async::Conn, id: &str) -> Option<String> {
    conn.exec_first(
        "SELECT poll_last_error FROM shop.outbox WHERE event_id = ?",
        (id,),
    )
    .await
    .expect("select")
    .expect("the row exists")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_row_backs_off_dies_after_max_attempts_and_replays_with_its_id() {
    let (db, poller) = poll_table().await;
    let mut conn = db.conn().await.unwrap();
    insert(&mut conn, "a", "a1").await;
    let max_attempts = 2;

    // Attempt 1 fails (transient): PENDING again, not due for 10 s.
    let claim = poller.claim(&mut conn, 10, LEASE).await.unwrap();
    let outcome = poller
        .record_failure(
            &mut conn,
            &claim,
            &claim.rows[0],
            &transient("broker down", max_attempts, Duration::from_secs(10)),
        )
        .await
        .unwrap();
    assert_eq!(outcome, FailureOutcome::Retrying);
    assert_eq!(status_of(&mut conn, "a1").await, "PENDING");
    assert!(
        poller
            .claim(&mut conn, 10, LEASE)
            .await
            .unwrap()
            .rows
            .is_empty(),
        "claimed before it was due"
    );
    conn.query_drop("UPDATE shop.outbox SET poll_next_attempt_at = NOW(6)")
        .await
        .unwrap();

    // Attempt 2 fails: attempts reached max_attempts, so DEAD with the error.
    let claim = poller.claim(&mut conn, 10, LEASE).await.unwrap();
    assert_eq!(claim.rows[0].attempts, 2);
    let outcome = poller
        .record_failure(
            &mut conn,
            &claim,
            &claim.rows[0],
            &transient("still down", max_attempts, Duration::ZERO),
        )
        .await
        .unwrap();
    assert_eq!(outcome, FailureOutcome::Dead);
    assert_eq!(status_of(&mut conn, "a1").await, "DEAD");
    assert_eq!(
        last_error_of(&mut conn, "a1").await.as_deref(),
        Some("still down")
    );
    assert!(poller
        .claim(&mut conn, 10, LEASE)
        .await
        .unwrap()
        .rows
        .is_empty());

    // A stale claim cannot record anything.
    let fenced = poller
        .record_failure(
            &mut conn,
            &claim,
            &claim.rows[0],
            &transient("late", max_attempts, Duration::ZERO),
        )
        .await
        .unwrap();
    assert_eq!(fenced, FailureOutcome::Fenced);

    // Replay: the same id, attempts from zero.
    assert_eq!(
        poller
            .replay(&mut conn, &ReplaySelection::Id("nope".into()))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        poller
            .replay(&mut conn, &ReplaySelection::Id("a1".into()))
            .await
            .unwrap(),
        1
    );
    let replayed = poller.claim(&mut conn, 10, LEASE).await.unwrap();
    assert_eq!(ids(&replayed), ["a1"]);
    assert_eq!(replayed.rows[0].attempts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_row_does_not_block_its_aggregate_and_replay_all_revives_every_dead_row() {
    let (db, poller) = poll_table().await;
    let mut conn = db.conn().await.unwrap();
    for (aggregate, name) in [("a", "a1"), ("a", "a2"), ("b", "b1")] {
        insert(&mut conn, aggregate, name).await;
    }
    let dies = |error| Failure {
        error,
        permanent: true,
        max_attempts: 10,
        delay: Duration::ZERO,
    };
    let claim = poller.claim(&mut conn, 1, LEASE).await.unwrap();
    assert_eq!(ids(&claim), ["a1"]);
    let outcome = poller
        .record_failure(
            &mut conn,
            &claim,
            &claim.rows[0],
            &dies("rejected for good"),
        )
        .await
        .unwrap();
    assert_eq!(outcome, FailureOutcome::Dead);
    let next = poller.claim(&mut conn, 10, LEASE).await.unwrap();
    assert_eq!(ids(&next), ["a2", "b1"], "a dead a1 must not hold a2 back");
    let outcome = poller
        .record_failure(&mut conn, &next, &next.rows[1], &dies("rejected for good"))
        .await
        .unwrap();
    assert_eq!(outcome, FailureOutcome::Dead);
    assert_eq!(
        poller
            .replay(&mut conn, &ReplaySelection::All)
            .await
            .unwrap(),
        2
    );
    assert_eq!(status_of(&mut conn, "b1").await, "PENDING");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_deletes_only_sent_rows_past_the_retention_in_batches() {
    let (db, poller) = poll_table().await;
    let mut conn = db.conn().await.unwrap();
    for index in 0..5 {
        insert(&mut conn, &format!("agg-{index}"), &format!("e{index}")).await;
    }
    let claim = poller.claim(&mut conn, 3, LEASE).await.unwrap();
    poller.mark_sent(&mut conn, &claim).await.unwrap();
    assert_eq!(
        poller
            .delete_sent(&mut conn, Duration::from_secs(3600), 2)
            .await
            .unwrap(),
        0,
        "inside the retention"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        poller
            .delete_sent(&mut conn, Duration::from_millis(1), 2)
            .await
            .unwrap(),
        3
    );
    let left: u64 = conn
        .query_first("SELECT COUNT(*) FROM shop.outbox")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(left, 2, "the unsent rows stay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claimed_rows_come_with_typed_images_and_settle_as_sent_or_dead() {
    let (db, poller) = poll_table().await;
    let mut conn = db.conn().await.unwrap();
    for &statement in outbox_poll::SESSION_SETUP {
        conn.query_drop(statement).await.expect("session setup");
    }
    // Columns of the types an outbox table carries, beside the preset's.
    conn.query_drop(
        "ALTER TABLE shop.outbox ADD COLUMN tenant INT UNSIGNED NULL, \
         ADD COLUMN digest VARBINARY(4) NULL, ADD COLUMN noted_at TIMESTAMP(3) NULL, \
         ADD COLUMN price DECIMAL(8,2) NULL",
    )
    .await
    .expect("alter");
    // A writer in another time zone stores the TIMESTAMP: the image is UTC all the same.
    let mut writer = db.conn().await.unwrap();
    writer
        .query_drop("SET time_zone = '+05:00'")
        .await
        .expect("writer's zone");
    writer.query_drop(
        "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload, \
         created_at, tenant, digest, noted_at, price) VALUES \
         ('e1', 'order', 'a', 'created', '{\"n\":1}', '2026-01-02 03:04:05.123456', 7, \
          X'00ff', '2026-01-02 08:04:05.250', 12.50), \
         ('e2', 'order', 'b', 'created', '{}', NOW(6), NULL, NULL, NULL, NULL)",
    )
    .await
    .expect("insert");
    let (claim, images) = poller
        .claim_rows(&mut conn, 10, LEASE, Some(100))
        .await
        .expect("claim");
    assert_eq!(ids(&claim), ["e1", "e2"]);
    let first = &images[0];
    use outbox_binlog::{DateTime, Value};
    assert_eq!(first.get("event_id"), Some(&Value::Text("e1".into())));
    assert_eq!(first.get("payload"), Some(&Value::Text("{\"n\":1}".into())));
    assert_eq!(first.get("tenant"), Some(&Value::UInt(7)));
    assert_eq!(first.get("digest"), Some(&Value::Bytes(vec![0, 0xff])));
    assert_eq!(first.get("price"), Some(&Value::Decimal("12.50".into())));
    assert_eq!(
        first.get("created_at"),
        Some(&Value::DateTime(DateTime {
            year: 2026,
            month: 1,
            day: 2,
            hour: 3,
            minute: 4,
            second: 5,
            micros: 123_456,
        }))
    );
    // 2026-01-02T03:04:05.250Z
    assert_eq!(
        first.get("noted_at"),
        Some(&Value::Timestamp {
            unix_seconds: 1_767_323_045,
            micros: 250_000,
        })
    );
    assert_eq!(images[1].get("tenant"), Some(&Value::Null));
    // The columns' types as the server describes them, in the binlog's terms.
    use outbox_binlog::{ColumnType, SqlType};
    let type_of = |name: &str| {
        let index = first.columns.iter().position(|column| column == name)?;
        first.column_type(index)
    };
    let column = |sql_type, nullable| Some(ColumnType { sql_type, nullable });
    assert_eq!(type_of("event_id"), column(SqlType::Text, false));
    assert_eq!(
        type_of("created_at"),
        column(SqlType::DateTime { fsp: 6 }, false)
    );
    assert_eq!(
        type_of("tenant"),
        column(
            SqlType::Integer {
                bytes: 4,
                unsigned: true
            },
            true
        )
    );
    assert_eq!(type_of("digest"), column(SqlType::Binary, true));
    assert_eq!(
        type_of("noted_at"),
        column(SqlType::Timestamp { fsp: 3 }, true)
    );
    assert_eq!(
        type_of("price"),
        column(
            SqlType::Decimal {
                precision: 8,
                scale: 2
            },
            true
        )
    );
    assert_eq!(
        first.types.as_ref().map(|types| types.len()),
        Some(first.columns.len())
    );

    // The lease of a live claim is renewed; a token that holds nothing renews nothing.
    let renewed = poller
        .renew_leases(&mut conn, &[claim.token.as_str(), "gone"], LEASE * 2)
        .await
        .expect("renew");
    assert_eq!(renewed, 2);

    let mut ledger = outbox_poll::ClaimLedger::new();
    let tickets = ledger.open(0, claim);
    use outbox_poll::RowOutcome;
    assert!(ledger
        .settle(
            tickets[0],
            RowOutcome::DeadLettered("rejected: too large".into())
        )
        .is_none());
    let settled = ledger
        .settle(tickets[1], RowOutcome::Delivered)
        .expect("settled");
    let retry = outbox_poll::RetryPolicy {
        max_attempts: 5,
        initial: Duration::from_secs(60),
        max: Duration::from_secs(60),
    };
    let outcome = poller
        .settle(&mut conn, &settled, &retry)
        .await
        .expect("settle");
    assert_eq!(
        (
            outcome.marked,
            outcome.dead,
            outcome.retrying,
            outcome.fenced
        ),
        (1, 1, 0, 0)
    );
    assert_eq!(status_of(&mut conn, "e1").await, "DEAD");
    assert_eq!(
        last_error_of(&mut conn, "e1").await.as_deref(),
        Some("rejected: too large")
    );
    assert_eq!(status_of(&mut conn, "e2").await, "SENT");

    // A publish the sink gave up on: PENDING again, not due before its backoff.
    conn.query_drop(
        "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
         VALUES ('e3', 'order', 'c', 'created', '{}')",
    )
    .await
    .expect("insert");
    let claim = poller.claim(&mut conn, 10, LEASE).await.expect("claim");
    let tickets = ledger.open(0, claim);
    let settled = ledger
        .settle(tickets[0], RowOutcome::Failed("no ack for 30s".into()))
        .expect("settled");
    let outcome = poller
        .settle(&mut conn, &settled, &retry)
        .await
        .expect("settle");
    assert_eq!(
        (
            outcome.marked,
            outcome.dead,
            outcome.retrying,
            outcome.fenced
        ),
        (0, 0, 1, 0)
    );
    assert_eq!(status_of(&mut conn, "e3").await, "PENDING");
    assert_eq!(
        last_error_of(&mut conn, "e3").await.as_deref(),
        Some("no ack for 30s")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_backing_off_holds_its_aggregates_younger_rows_back() {
    let (db, poller) = poll_table().await;
    let mut conn = db.conn().await.unwrap();
    for (aggregate, name) in [("a", "a1"), ("a", "a2"), ("b", "b1")] {
        insert(&mut conn, aggregate, name).await;
    }
    let claim = poller.claim(&mut conn, 1, LEASE).await.unwrap();
    assert_eq!(ids(&claim), ["a1"]);
    let outcome = poller
        .record_failure(
            &mut conn,
            &claim,
            &claim.rows[0],
            &transient("no ack", 10, Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_eq!(outcome, FailureOutcome::Retrying);
    let next = poller.claim(&mut conn, 10, LEASE).await.unwrap();
    assert_eq!(ids(&next), ["b1"], "a2 waits for a1's retry");
}

/// The claim forces its indexes by name; a table without them is refused up front, naming
/// the index and its columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_without_the_claims_indexes_is_refused_naming_them() {
    let (db, poller) = poll_table().await;
    let mut conn = db.conn().await.unwrap();
    poller
        .check_indexes(&mut conn)
        .await
        .expect("the DDL's indexes serve");
    conn.query_drop(
        "ALTER TABLE shop.outbox DROP INDEX outbox_poll_aggregate_idx, \
         ADD INDEX outbox_poll_aggregate_idx (aggregate_id)",
    )
    .await
    .unwrap();
    let wrong_columns = poller
        .check_indexes(&mut conn)
        .await
        .expect_err("an index on other columns")
        .to_string();
    assert!(
        wrong_columns.contains(
            "needs the index `outbox_poll_aggregate_idx` on (aggregate_id, aggregate_type, poll_status, poll_seq), and the table's index of that name is on (aggregate_id)"
        ),
        "{wrong_columns}"
    );
    conn.query_drop("ALTER TABLE shop.outbox DROP INDEX outbox_poll_claim_idx")
        .await
        .unwrap();
    let missing = poller
        .check_indexes(&mut conn)
        .await
        .expect_err("a missing index")
        .to_string();
    assert!(
        missing.starts_with("shop.outbox: poll mode needs the index `outbox_poll_claim_idx` on (poll_status, poll_seq); add it"),
        "{missing}"
    );
}

/// An admission that refuses a row ends the claim there: the rows before it are claimed
/// with their permits, it and every later row stay PENDING for the next claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_admission_ends_the_claim_at_that_row() {
    let (db, poller) = poll_table().await;
    let mut conn = db.conn().await.unwrap();
    for (aggregate, name) in [("a", "a1"), ("b", "b1"), ("a", "a2"), ("c", "c1")] {
        insert(&mut conn, aggregate, name).await;
    }
    let mut admitted = 0;
    let claimed = poller
        .claim_rows_admitting(&mut conn, 100, LEASE, None, |image| {
            admitted += 1;
            (admitted <= 2).then_some(image.values.len())
        })
        .await
        .expect("claim");
    assert!(claimed.refused);
    assert_eq!(ids(&claimed.claim), ["a1", "b1"]);
    assert_eq!(claimed.images.len(), 2);
    assert!(claimed
        .images
        .iter()
        .all(|(image, permit)| image.values.len() == *permit));
    for (id, status) in [
        ("a1", "PROCESSING"),
        ("b1", "PROCESSING"),
        ("a2", "PENDING"),
        ("c1", "PENDING"),
    ] {
        assert_eq!(status_of(&mut conn, id).await, status, "{id}");
    }
    // a2 waits behind a1, in flight; c1 was refused, not blocked.
    let next = poller.claim(&mut conn, 100, LEASE).await.expect("claim");
    assert_eq!(ids(&next), ["c1"]);
}

/// A database and a table whose names hold dots: the DDL names the indexes after the
/// table's own name, and the claim looks them up and forces them in the same table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dotted_table_name_gets_the_indexes_its_claim_forces() {
    let db = ScratchMariadb::start().await.expect("scratch MariaDB");
    let table = OutboxTable::new("my.outbox", ColumnPreset::Seeds)
        .and_then(|table| table.in_database("sh.op"))
        .expect("table");
    let columns = PollColumns::default();
    let mut statements = vec![
        "CREATE DATABASE `sh.op`".to_owned(),
        create_table_sql(&table),
    ];
    statements.extend(poll_mode_ddl(&table, &columns));
    let statements: Vec<&str> = statements.iter().map(String::as_str).collect();
    db.exec(&statements)
        .await
        .expect("the poll-mode DDL applies");
    let poller = Poller::new(&table, &columns);
    let mut conn = db.conn().await.unwrap();
    poller
        .check_indexes(&mut conn)
        .await
        .expect("the DDL's indexes are the claim's");
    conn.query_drop(
        "INSERT INTO `sh.op`.`my.outbox` (event_id, aggregate_type, aggregate_id, event_type, payload) \
         VALUES ('d1', 'order', 'a', 'created', '{}')",
    )
    .await
    .unwrap();
    let claim = poller.claim(&mut conn, 10, LEASE).await.expect("claim");
    assert_eq!(ids(&claim), ["d1"]);
}
