//! Two-phase XA through the whole pipeline (real scratch MariaDB, mock cluster): the outbox
//! rows of a prepared XA transaction are held, the checkpoint stays before its XA PREPARE, a
//! restart reads it again, and its outcome decides: XA ROLLBACK publishes nothing, XA COMMIT
//! publishes it once. See [`crate::xa_hold`].

use std::time::Duration;

use mysql_async::prelude::Queryable;

use super::{fixture, stop};
use crate::demo::DEMO_TOPIC;

/// `XA START`, order `n` with its outbox row, `XA END`, `XA PREPARE` as `xid` on `conn`.
async fn prepare_xa_order(conn: &mut mysql_async::Conn, n: u32, xid: &str) {
    conn.query_drop(format!("XA START '{xid}'")).await.unwrap();
    conn.exec_drop(
        "INSERT INTO shop.orders (id, customer, total) VALUES (?, 'xa', 1.00)",
        (n,),
    )
    .await
    .unwrap();
    conn.exec_drop(
        "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, 'order', ?, 'order_created', '{}')",
        (format!("00000000-0000-4000-8000-{n:012}"), n.to_string()),
    )
    .await
    .unwrap();
    conn.query_drop(format!("XA END '{xid}'")).await.unwrap();
    conn.query_drop(format!("XA PREPARE '{xid}'"))
        .await
        .unwrap();
}

/// Runs the scenario: order 1 in an XA transaction prepared while the relay runs, order 2
/// committed after it, a relay restart, then `outcome` (`COMMIT`/`ROLLBACK`) and order 3.
/// Returns the keys published, sorted.
async fn prepare_restart_then(outcome: &str) -> Vec<String> {
    let fixture = fixture("").await;
    let (handles, task) = fixture.start_relay();
    fixture
        .wait_for_checkpoint("0-1-3", Duration::from_secs(30))
        .await;
    let mut xa_conn = fixture.server.conn().await.unwrap();
    prepare_xa_order(&mut xa_conn, 1, "order-1").await; // 0-1-4
    fixture.write_orders(2..=2).await; // 0-1-5
    let first = fixture.consume(DEMO_TOPIC, 1).await;
    assert_eq!(
        first[0].key.as_deref(),
        Some("2"),
        "the prepared order is held"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        fixture.stored_gtid_set().await,
        "0-1-3",
        "the checkpoint stays before the XA PREPARE while its outcome is unknown"
    );
    assert_eq!(handles.metrics.xa_prepared_held.get(), 1);
    assert!(handles.metrics.xa_oldest_prepared_age_seconds.get() >= 0);
    let summary = stop(handles, task).await.unwrap();
    assert_eq!(summary.delivered, 1);

    let (handles, task) = fixture.start_relay();
    xa_conn
        .query_drop(format!("XA {outcome} 'order-1'"))
        .await
        .unwrap(); // 0-1-6
    fixture.write_orders(3..=3).await; // 0-1-7
    fixture
        .wait_for_checkpoint("0-1-7", Duration::from_secs(30))
        .await;
    assert_eq!(handles.metrics.xa_prepared_held.get(), 0);
    stop(handles, task).await.unwrap();
    xa_conn.disconnect().await.unwrap();
    // Order 2 is read twice (the restart resumed before the XA PREPARE): at-least-once.
    let expected = if outcome == "COMMIT" { 4 } else { 3 };
    let records = fixture.consume(DEMO_TOPIC, expected).await;
    let more = crate::demo::consume_records(
        &fixture.cluster.bootstrap_servers(),
        DEMO_TOPIC,
        expected + 1,
        Duration::from_secs(3),
    )
    .await;
    assert!(more.is_err(), "more records than expected: {more:?}");
    let mut keys: Vec<String> = records.iter().filter_map(|r| r.key.clone()).collect();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_xa_transaction_rolled_back_after_a_restart_publishes_nothing() {
    assert_eq!(prepare_restart_then("ROLLBACK").await, vec!["2", "2", "3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_xa_transaction_committed_after_a_restart_is_published_once() {
    assert_eq!(
        prepare_restart_then("COMMIT").await,
        vec!["1", "2", "2", "3"]
    );
}

/// Held XA records may take half of `pipeline.max_in_flight_bytes`: beyond that the relay
/// stops with an error naming the setting, instead of waiting for budget forever (the
/// outcome that would free it could then never be read), and the checkpoint stays before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xa_records_beyond_their_share_of_the_budget_stop_the_relay_naming_the_fix() {
    let mut fixture = fixture("").await;
    fixture.config.pipeline.max_in_flight_bytes = 1024 * 1024;
    let (_handles, task) = fixture.start_relay();
    fixture
        .wait_for_checkpoint("0-1-3", Duration::from_secs(30))
        .await;
    let mut conn = fixture.server.conn().await.unwrap();
    conn.query_drop("XA START 'big'").await.unwrap();
    for n in 1..=2u32 {
        let payload = format!(r#"{{"blob":"{}"}}"#, "x".repeat(300 * 1024));
        conn.exec_drop(
            "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, 'order', ?, 'order_created', ?)",
            (format!("00000000-0000-4000-8000-{n:012}"), n.to_string(), payload),
        )
        .await
        .unwrap();
    }
    conn.query_drop("XA END 'big'").await.unwrap();
    conn.query_drop("XA PREPARE 'big'").await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the relay stops by itself")
        .unwrap();
    let error = result.expect_err("too many held XA bytes stop the relay");
    let message = error.to_string();
    assert!(
        matches!(error, super::RelayError::XaHoldTooLarge(_))
            && message.contains("pipeline.max_in_flight_bytes"),
        "{message}"
    );
    assert_eq!(fixture.stored_gtid_set().await, "0-1-3");
    conn.query_drop("XA ROLLBACK 'big'").await.unwrap();
    conn.disconnect().await.unwrap();
}
