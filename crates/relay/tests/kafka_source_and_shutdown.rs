//! The source server crashing under the relay, and a graceful stop while the broker cannot
//! acknowledge anything.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// MariaDB is killed (SIGKILL) under a running relay and started again on the same port:
/// the relay reconnects by itself and delivers everything, before and after the crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_server_crash_and_restart_loses_nothing() {
    let (mut db, broker) = start_shop_database_and_broker().await;
    let mut relay = Relay::prepare(&RelaySetup::new(&db, &broker.bootstrap()));
    relay.start();

    let mut before = ShopWriter::connect(&db, "src-before").await;
    for index in 0..40u32 {
        let kind = if matches!(index % 3, 0) {
            "customer"
        } else {
            "order"
        };
        before
            .transaction(
                kind,
                &format!("{kind}-{}", index % 5),
                1 + (index % 2) as usize,
                index % 7 != 3,
                matches!(index % 6, 0),
            )
            .await;
    }
    db.kill();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    relay.assert_running("while the source server was down");
    let restarted_at = Instant::now();
    db.restart().await.expect("MariaDB restarts");

    let mut after = ShopWriter::connect(&db, "src-after").await;
    for index in 0..40u32 {
        let kind = if matches!(index % 3, 1) {
            "customer"
        } else {
            "order"
        };
        after
            .transaction(
                kind,
                &format!("{kind}-{}", index % 5),
                1,
                index % 8 != 5,
                false,
            )
            .await;
    }
    let end = after.master_position().await;
    let caught_up = wait_for_checkpoint(&relay, &end, Duration::from_secs(60)).await;
    let recovered_after = restarted_at.elapsed();

    // The writer that committed before the crash knows those events; MariaDB kept them.
    let mut committed = before.committed.clone();
    committed.extend(after.committed.iter().cloned());
    let mut forbidden = before.must_not_arrive();
    forbidden.extend(after.rolled_back.iter().cloned());
    let topics = [topic_for(&db, "order"), topic_for(&db, "customer")];
    let records = read_until_ids(
        &broker.bootstrap(),
        &topics,
        &committed,
        Duration::from_secs(30),
    )
    .await;
    let summary = assert_delivery(
        "source crash and restart",
        &committed,
        &forbidden,
        &records,
        &relay,
    );
    eprintln!(
        "source crash: {} events, {summary:?}, checkpoint caught up {recovered_after:?} after the \
         server restart (at {:?})",
        committed.len(),
        caught_up.position
    );
    relay.stop_gracefully("graceful stop").await;
    after.close().await;
}

/// SIGTERM while the broker is frozen: the relay still exits (bounded by
/// `shutdown_timeout_ms`) and does not store a checkpoint past what Kafka acknowledged; after
/// the broker thaws, a new relay process delivers everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_frozen_broker_keeps_the_checkpoint_honest() {
    let (db, mut broker) = start_shop_database_and_private_broker().await;
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup.shutdown_timeout_ms = Some(2000);
    let mut relay = Relay::prepare(&setup);
    let mut writer = ShopWriter::connect(&db, "stopfrozen").await;
    relay.start();
    // Both topics exist before the freeze, so the records written during it are really in
    // flight to the frozen broker when the stop comes.
    for index in 0..20u32 {
        let kind = if matches!(index % 2, 0) {
            "order"
        } else {
            "customer"
        };
        writer
            .transaction(kind, &format!("{kind}-{}", index % 4), 1, true, false)
            .await;
    }
    let end_before = writer.master_position().await;
    let acked = wait_for_checkpoint(&relay, &end_before, Duration::from_secs(30)).await;

    broker.freeze().unwrap();
    for index in 0..20u32 {
        writer
            .transaction(
                "customer",
                &format!("customer-{}", index % 4),
                2,
                index % 5 != 1,
                false,
            )
            .await;
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let stop_requested = Instant::now();
    let status = relay.terminate(Duration::from_secs(20)).await;
    let stop_took = stop_requested.elapsed();
    let after_stop = relay.checkpoint();
    assert!(
        stop_took < Duration::from_millis(2000 + 5000),
        "SIGTERM during a frozen broker took {stop_took:?} to exit (exit {status}) although \
         shutdown_timeout_ms = 2000: the shutdown deadline does not bound the exit.\nrelay log:\n{}",
        relay.log_tail(12)
    );
    assert_eq!(
        after_stop.position,
        acked.position,
        "stopping during the freeze stored a checkpoint past what Kafka acknowledged \
         (exit {status}, stop took {stop_took:?}): {} -> {}\nrelay log:\n{}",
        acked.raw,
        after_stop.raw,
        relay.log_tail(30)
    );

    broker.thaw().unwrap();
    relay.start();
    let end = writer.master_position().await;
    wait_for_checkpoint(&relay, &end, Duration::from_secs(60)).await;
    let topics = [topic_for(&db, "order"), topic_for(&db, "customer")];
    // Whatever the frozen broker had already received before the stop may come twice; give
    // late records a moment so the verdict sees them.
    let records = read_until_ids_then_settled(
        &broker.bootstrap(),
        &topics,
        &writer.committed,
        Duration::from_secs(30),
    )
    .await;
    let summary = assert_delivery(
        "SIGTERM during a frozen broker",
        &writer.committed,
        &writer.rolled_back,
        &records,
        &relay,
    );
    eprintln!(
        "stop during freeze: exit {status} after {stop_took:?} (shutdown_timeout_ms 2000), \
         checkpoint kept at {:?}; after restart {summary:?}",
        acked.position
    );
    relay.stop_gracefully("final graceful stop").await;
    writer.close().await;
}

/// SIGTERM while the relay is blocked creating a new topic on a frozen broker: the exit is
/// still bounded by `shutdown_timeout_ms` (plus a margin), and nothing is checkpointed past
/// the unacknowledged event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_a_topic_is_being_created_on_a_frozen_broker_exits_in_time() {
    let (db, mut broker) = start_shop_database_and_private_broker().await;
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup.shutdown_timeout_ms = Some(2000);
    let mut relay = Relay::prepare(&setup);
    let mut writer = ShopWriter::connect(&db, "stopcreate").await;
    relay.start();
    writer.transaction("order", "order-1", 1, true, false).await;
    let end_before = writer.master_position().await;
    let acked = wait_for_checkpoint(&relay, &end_before, Duration::from_secs(30)).await;

    broker.freeze().unwrap();
    // A new aggregate type: the relay has to create `outbox.event.invoice` first.
    writer
        .transaction("invoice", "invoice-1", 1, true, false)
        .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let stop_requested = Instant::now();
    let status = relay.terminate(Duration::from_secs(30)).await;
    let stop_took = stop_requested.elapsed();
    let after_stop = relay.checkpoint();
    broker.thaw().unwrap();
    assert_eq!(
        after_stop.position, acked.position,
        "checkpoint moved past the unacknowledged invoice event: {} -> {}",
        acked.raw, after_stop.raw
    );
    assert!(
        stop_took < Duration::from_millis(2000 + 5000),
        "SIGTERM while creating a topic on a frozen broker took {stop_took:?} to exit (exit \
         {status}) although shutdown_timeout_ms = 2000: the shutdown deadline does not bound the \
         exit (a blocking admin call keeps the process alive).\nrelay log:\n{}",
        relay.log_tail(12)
    );
    writer.close().await;
}

/// A second SIGTERM while the first one is still draining records to a frozen broker exits
/// at once with status 130, and the checkpoint stays at what Kafka acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_exits_at_once_without_passing_unacked_events() {
    let (db, mut broker) = start_shop_database_and_private_broker().await;
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup.shutdown_timeout_ms = Some(60_000);
    let mut relay = Relay::prepare(&setup);
    let mut writer = ShopWriter::connect(&db, "twosignals").await;
    relay.start();
    writer.transaction("order", "order-1", 1, true, false).await;
    let end_before = writer.master_position().await;
    let acked = wait_for_checkpoint(&relay, &end_before, Duration::from_secs(30)).await;

    broker.freeze().unwrap();
    writer.transaction("order", "order-1", 2, true, false).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    relay.send_signal("TERM");
    // The first signal drains (up to 60 s against a frozen broker)...
    tokio::time::sleep(Duration::from_millis(1000)).await;
    relay.assert_running("draining after the first SIGTERM");
    // ...the second one ends it now.
    let second = Instant::now();
    let status = relay.terminate(Duration::from_secs(10)).await;
    let took = second.elapsed();
    broker.thaw().unwrap();
    assert_eq!(status.code(), Some(130), "log:\n{}", relay.log_tail(12));
    assert!(
        took < Duration::from_secs(5),
        "the second SIGTERM took {took:?}"
    );
    assert_eq!(log_count(&relay, "second signal: exiting at once"), 1);
    let after = relay.checkpoint();
    assert_eq!(
        after.position, acked.position,
        "the checkpoint moved past unacknowledged events: {} -> {}",
        acked.raw, after.raw
    );
    writer.close().await;
}
