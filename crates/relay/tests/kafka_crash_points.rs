//! The seeds' failure tests 1 and 2, against the real MariaDB and broker: the relay process
//! aborts at an exact step of the delivery protocol (`OUTBOX_RELAY_CRASH_AT`, see
//! `outbox_relay::crash_points`), then a normal run must make good on at-least-once.
//! Each test prints its evidence: the outbox row, the broker's delivery count, the
//! checkpoint before and after.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use common::*;
use mysql_async::prelude::Queryable;
use outbox_relay::crash_points::CRASH_AT_VARIABLE;
use outbox_testkit::consume::ConsumedRecord;
use outbox_testkit::ScratchMariadb;

/// Waits for the relay to abort at its crash point; panics (with the log) if it exits
/// otherwise or keeps running.
async fn wait_for_abort(relay: &mut Relay, point: &str) {
    let started = Instant::now();
    let status = loop {
        if let Some(status) = relay.exited() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the relay did not reach crash point {point}; log:\n{}",
            relay.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        status.signal(),
        Some(6),
        "expected an abort (SIGABRT) at {point}, got {status}; log:\n{}",
        relay.log_tail(30)
    );
    assert_eq!(
        log_count(relay, &format!("crash point `{point}` reached")),
        1,
        "log:\n{}",
        relay.log_tail(30)
    );
}

/// The stored outbox row of `event` as `event_id|aggregate_id|payload` (evidence that the
/// source row exists and what it holds).
async fn outbox_row(db: &ScratchMariadb, event: &Event) -> String {
    let mut conn = db.conn().await.expect("connect");
    let row: Option<(String, String, String)> = conn
        .exec_first(
            "SELECT event_id, aggregate_id, payload FROM shop.outbox WHERE event_id = ?",
            (&event.id,),
        )
        .await
        .expect("select the outbox row");
    let (id, aggregate_id, payload) = row.expect("the outbox row exists");
    assert_eq!(payload, event.payload);
    format!("{id}|{aggregate_id}|{payload}")
}

/// The records carrying header `id` = `event.id`, each checked to be the event exactly.
fn deliveries_of<'a>(records: &'a [ConsumedRecord], event: &Event) -> Vec<&'a ConsumedRecord> {
    let found: Vec<&ConsumedRecord> = records
        .iter()
        .filter(|record| record.header_str("id").as_deref() == Some(event.id.as_str()))
        .collect();
    for record in &found {
        assert_eq!(record.topic, event.topic());
        assert_eq!(
            record.key_str().as_deref(),
            Some(event.aggregate_id.as_str())
        );
        assert_eq!(record.value.as_deref(), Some(event.payload.as_bytes()));
    }
    found
}

/// `checkpoint show` output on one line.
fn compact(raw: &str) -> String {
    serde_json::from_str::<serde_json::Value>(raw)
        .map(|json| json.to_string())
        .unwrap_or_else(|_| raw.trim().to_string())
}

/// The checkpoint must not cover the event's transaction (it ends after `before`).
fn assert_checkpoint_not_past(view: &CheckpointView, before: &BinlogPoint, context: &str) {
    assert!(
        view.position
            .as_ref()
            .is_none_or(|position| position <= before),
        "{context}: the checkpoint passed an event Kafka never acknowledged or whose ack was \
         not committed: {} (the event's transaction starts at {before})",
        view.raw
    );
}

/// What a run that crashed at a crash point and was restarted delivered.
struct CrashOutcome {
    /// Deliveries of the event before the restart (`None`: not read).
    first_run: Option<usize>,
    /// Deliveries of the event in all (each checked to be the event exactly).
    total: usize,
}

/// Writes one event, runs the relay with `point` armed until it aborts there (the
/// checkpoint must stay behind the event), optionally reads what the broker got so far,
/// restarts the relay normally until the checkpoint passes the event, stops it, and counts
/// the deliveries; prints the evidence.
async fn crash_at_then_restart(point: &str, read_first_run: bool) -> CrashOutcome {
    let (db, broker) = start_shop_database_and_broker().await;
    let mut relay = Relay::prepare(&RelaySetup::new(&db, &broker.bootstrap()));
    let mut writer = ShopWriter::connect(&db, point).await;
    let before = writer.master_position().await;
    let event = writer
        .transaction("order", "order-7", 1, true, false)
        .await
        .remove(0);
    let end = writer.master_position().await;

    relay.start_with_env(&[(CRASH_AT_VARIABLE, point)]);
    wait_for_abort(&mut relay, point).await;
    let after_crash = relay.checkpoint();
    assert_checkpoint_not_past(&after_crash, &before, point);
    let delivered_so_far = || async {
        let records = read_until_ids_then_settled(
            &broker.bootstrap(),
            &[event.topic()],
            std::slice::from_ref(&event),
            Duration::from_secs(30),
        )
        .await;
        deliveries_of(&records, &event).len()
    };
    let first_run = if read_first_run {
        Some(delivered_so_far().await)
    } else {
        None
    };

    relay.start();
    let after_restart = wait_for_checkpoint(&relay, &end, Duration::from_secs(30)).await;
    relay.stop_gracefully("stop after the restart").await;
    let total = delivered_so_far().await;
    eprintln!(
        "evidence ({point}): outbox row {}; deliveries {total} (before the restart: \
         {first_run:?}); checkpoint after the crash {}; after the restart {}",
        outbox_row(&db, &event).await,
        compact(&after_crash.raw),
        compact(&after_restart.raw)
    );
    writer.close().await;
    CrashOutcome { first_run, total }
}

/// Failure test 1: the relay crashes after routing the event, before handing it to the
/// producer. Nothing was published and the checkpoint stayed behind the event, so the next
/// run delivers it exactly once and then moves the checkpoint past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_publishing_delivers_the_event_after_the_restart() {
    let outcome = crash_at_then_restart("before-publish", false).await;
    assert_eq!(
        outcome.total, 1,
        "the event never reached the producer before the crash, so exactly one delivery"
    );
}

/// Failure test 2: Kafka acknowledged the event, then the relay crashes before storing the
/// checkpoint that covers it. The next run delivers it again with the same `id`, key and
/// payload (at-least-once: an idempotent consumer applies it once), and then the checkpoint
/// moves past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_checkpoint_commit_delivers_twice_with_the_same_id() {
    let outcome = crash_at_then_restart("before-checkpoint-commit", true).await;
    assert_eq!(
        outcome.first_run,
        Some(1),
        "the broker acknowledged the event before the crash"
    );
    assert_eq!(
        outcome.total, 2,
        "delivered before the crash and again after the restart, with the same id"
    );
}
