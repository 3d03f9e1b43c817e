//! Poll mode (`[source] mode = "poll"`, issue 27) on the real MariaDB and Kafka: the outbox
//! table is the source; rows are claimed, published and marked SENT by the relay binary.

mod common;

use std::time::{Duration, Instant};

use common::*;
use mysql_async::prelude::Queryable;
use outbox_poll::{poll_mode_ddl, PollColumns};
use outbox_testkit::ScratchMariadb;
use outbox_writer::{ColumnPreset, OutboxTable};

/// Adds the poll-mode columns to `shop.outbox`.
async fn add_poll_columns(db: &ScratchMariadb) {
    let table = OutboxTable::new("outbox", ColumnPreset::Seeds)
        .and_then(|table| table.in_database("shop"))
        .expect("table");
    let statements = poll_mode_ddl(&table, &PollColumns::default());
    let statements: Vec<&str> = statements.iter().map(String::as_str).collect();
    db.exec(&statements)
        .await
        .expect("the poll-mode DDL applies");
}

/// A relay setup in poll mode with `lines` in `[source.poll]`.
fn poll_setup(db: &ScratchMariadb, brokers: &str, lines: &[&str]) -> RelaySetup {
    let mut setup = RelaySetup::new(db, brokers);
    setup.poll = Some(lines.iter().map(|line| line.to_string()).collect());
    setup
}

/// `(status, count)` of the outbox rows.
async fn statuses(conn: &mut mysql_async::Conn) -> Vec<(String, u64)> {
    conn.query("SELECT poll_status, COUNT(*) FROM shop.outbox GROUP BY poll_status ORDER BY 1")
        .await
        .expect("count statuses")
}

/// Waits until every outbox row is SENT; panics with the counts and the log after `limit`.
async fn wait_all_sent(
    conn: &mut mysql_async::Conn,
    relay: &Relay,
    expected: usize,
    limit: Duration,
) {
    let started = Instant::now();
    loop {
        let counts = statuses(conn).await;
        if counts == [("SENT".to_owned(), expected as u64)] {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "not every row SENT after {limit:?}: {counts:?}\n{}",
            relay.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Contract test 1: the business row and the outbox row commit or roll back together; a
/// rolled-back outbox row is never published; every committed one is, once marked SENT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_rows_are_published_and_marked_sent_rolled_back_ones_never() {
    let (db, broker) = start_shop_database_and_broker().await;
    add_poll_columns(&db).await;
    let setup = poll_setup(
        &db,
        &broker.bootstrap(),
        &["interval_ms = 50", "lease_ms = 5000"],
    );
    let mut relay = Relay::prepare(&setup);
    relay.start();
    let mut writer = ShopWriter::connect(&db, "poll").await;
    for index in 0..40 {
        writer
            .alternating_transaction(
                index,
                1 + (index % 3) as usize,
                index % 5 != 4,
                index % 7 == 0,
            )
            .await;
    }
    let topics = vec![topic_for(&db, "order"), topic_for(&db, "customer")];
    let records = read_until_ids_then_settled(
        &broker.bootstrap(),
        &topics,
        &writer.committed,
        Duration::from_secs(60),
    )
    .await;
    let summary = assert_writer_delivery("poll mode", &writer, &records, &relay);
    assert_eq!(summary.duplicates, 0, "no relay died: no duplicate");
    let console = assert_console_consumer_agrees(&broker.bootstrap(), &records).await;
    assert_writer_delivery(
        "poll mode (kafka-console-consumer)",
        &writer,
        &console,
        &relay,
    );

    let mut conn = db.conn().await.expect("connect");
    // Rolled-back rows are not in the table at all; every committed one ends SENT.
    wait_all_sent(
        &mut conn,
        &relay,
        writer.committed.len(),
        Duration::from_secs(20),
    )
    .await;
    let never_sent: u64 = conn
        .query_first("SELECT COUNT(*) FROM shop.outbox WHERE poll_sent_at IS NULL OR poll_claim_token IS NULL OR poll_attempts <> 1")
        .await
        .expect("count")
        .expect("a row");
    assert_eq!(
        never_sent, 0,
        "every row SENT on its first attempt under a claim token"
    );
    relay.stop_gracefully("end of test").await;
}

/// The highest `poll_attempts` among rows in `status`, and how many rows are DEAD.
async fn attempts_and_dead(conn: &mut mysql_async::Conn) -> (u64, u64) {
    conn.query_first(
        "SELECT COALESCE(MAX(IF(poll_status = 'PENDING', poll_attempts, 0)), 0), \
         COALESCE(SUM(poll_status = 'DEAD'), 0) FROM shop.outbox",
    )
    .await
    .expect("query")
    .expect("a row")
}

/// Contract test 4: the broker is down for 30 s. Rows the sink cannot deliver go back to
/// PENDING with a backoff (attempts counted, the reason kept), none is DEAD before
/// `max_attempts`, and every one is delivered and SENT once the broker is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_down_30_s_puts_rows_back_to_pending_and_delivers_them_after() {
    let (db, mut broker) = start_shop_database_and_private_broker().await;
    add_poll_columns(&db).await;
    let mut setup = poll_setup(
        &db,
        &broker.bootstrap(),
        &[
            "interval_ms = 50",
            "lease_ms = 5000",
            "max_attempts = 100",
            "retry_initial_backoff_ms = 500",
            "retry_max_backoff_ms = 2000",
        ],
    );
    setup.kafka_extra = vec!["stall_timeout_ms = 3000".into()];
    let mut relay = Relay::prepare(&setup);
    relay.start();
    let mut writer = ShopWriter::connect(&db, "outage").await;
    for index in 0..10 {
        writer.alternating_transaction(index, 1, true, false).await;
    }
    let mut conn = db.conn().await.expect("connect");
    wait_all_sent(
        &mut conn,
        &relay,
        writer.committed.len(),
        Duration::from_secs(30),
    )
    .await;

    broker.stop().expect("the broker stops");
    let down_since = Instant::now();
    for index in 10..30 {
        writer.alternating_transaction(index, 1, true, false).await;
    }
    let mut most_attempts = 0;
    while down_since.elapsed() < Duration::from_secs(30) {
        let (attempts, dead) = attempts_and_dead(&mut conn).await;
        assert_eq!(
            dead,
            0,
            "no row may die before max_attempts\n{}",
            relay.log_tail(30)
        );
        most_attempts = most_attempts.max(attempts);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        most_attempts >= 2,
        "rows went back to PENDING and were claimed again (attempts seen: {most_attempts})\n{}",
        relay.log_tail(40)
    );
    let reason: Option<String> = conn
        .query_first(
            "SELECT poll_last_error FROM shop.outbox WHERE poll_last_error IS NOT NULL LIMIT 1",
        )
        .await
        .expect("query");
    assert!(
        reason
            .as_deref()
            .is_some_and(|reason| reason.contains("no ack")),
        "the reason is kept: {reason:?}"
    );
    relay.assert_running("through the outage");

    broker.restart().await.expect("the broker restarts");
    wait_all_sent(
        &mut conn,
        &relay,
        writer.committed.len(),
        Duration::from_secs(60),
    )
    .await;
    let topics = vec![topic_for(&db, "order"), topic_for(&db, "customer")];
    let records = read_until_ids_then_settled(
        &broker.bootstrap(),
        &topics,
        &writer.committed,
        Duration::from_secs(30),
    )
    .await;
    assert_writer_delivery("broker down 30 s", &writer, &records, &relay);
    assert_eq!(attempts_and_dead(&mut conn).await.1, 0);
    relay.stop_gracefully("end of test").await;
}
