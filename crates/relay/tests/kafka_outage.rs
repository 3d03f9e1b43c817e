//! Broker outages against a real Apache Kafka process: a frozen broker (SIGSTOP for 10 s
//! mid-stream), a broker killed (-9) and restarted with its data, and a broker killed and
//! restarted empty on the same port.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use tokio::sync::Mutex;

/// Commits a transaction every few milliseconds into a shared writer until `stop` is set.
async fn stream_into(writer: Arc<Mutex<ShopWriter>>, stop: Arc<AtomicBool>) {
    let mut index = 0u32;
    while !stop.load(Ordering::Relaxed) {
        index += 1;
        let kind = if matches!(index % 3, 0) {
            "customer"
        } else {
            "order"
        };
        let aggregate = format!("{kind}-{}", index % 6);
        writer
            .lock()
            .await
            .transaction(
                kind,
                &aggregate,
                1 + (index % 2) as usize,
                index % 9 != 4,
                matches!(index % 10, 0),
            )
            .await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// SIGSTOP the broker for 10 s mid-stream: the checkpoint must not move while it is frozen
/// (nothing new can be acknowledged), and after SIGCONT every committed event arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_broker_holds_the_checkpoint_and_loses_nothing() {
    let (db, mut broker) = start_shop_database_and_private_broker().await;
    let mut relay = Relay::prepare(&RelaySetup::new(&db, &broker.bootstrap()));
    let writer = Arc::new(Mutex::new(ShopWriter::connect(&db, "freeze").await));
    // Warm up: a first event delivered proves the relay and topics are in place.
    let first = writer
        .lock()
        .await
        .transaction("order", "order-0", 1, true, false)
        .await;
    writer
        .lock()
        .await
        .transaction("customer", "customer-0", 1, true, false)
        .await;
    relay.start();
    let warmup = read_until_ids(
        &broker.bootstrap(),
        &[topic_for(&db, "order")],
        &first,
        Duration::from_secs(30),
    )
    .await;
    assert!(
        !warmup.is_empty(),
        "warm-up event never arrived; relay log:\n{}",
        relay.log_tail(30)
    );

    let stop = Arc::new(AtomicBool::new(false));
    let streaming = tokio::spawn(stream_into(Arc::clone(&writer), Arc::clone(&stop)));
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let before_freeze = relay.checkpoint();
    let mut probe = db.conn().await.unwrap();
    let frozen_at = Instant::now();
    broker.freeze().unwrap();
    // Nothing committed after this point can be acknowledged while the broker is frozen.
    let binlog_at_freeze = master_position(&mut probe).await;
    drop(probe);
    // Acks that were already on their way settle into the checkpoint within the commit
    // interval; after that nothing may move.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let committed_before = writer.lock().await.committed.len();
    let held = relay.checkpoint();
    tokio::time::sleep(
        Duration::from_secs(10).saturating_sub(frozen_at.elapsed() + Duration::from_millis(500)),
    )
    .await;
    let near_end = relay.checkpoint();
    let committed_during = writer.lock().await.committed.len() - committed_before;
    broker.thaw().unwrap();
    let frozen_for = frozen_at.elapsed();
    relay.assert_running("after the freeze");
    assert!(
        committed_during > 20,
        "the writer should have committed events during the freeze, got {committed_during}"
    );
    assert!(
        held.position.is_some(),
        "no checkpoint before the freeze: {}",
        held.raw
    );
    assert!(
        before_freeze.position <= held.position,
        "checkpoint went backwards: {} -> {}",
        before_freeze.raw,
        held.raw
    );
    assert!(
        near_end.position.as_ref() <= Some(&binlog_at_freeze),
        "checkpoint passed the binlog position at the moment of the freeze ({binlog_at_freeze}): \
         events written during the freeze cannot have been acknowledged: {}",
        near_end.raw
    );
    assert_eq!(
        held.position, near_end.position,
        "checkpoint advanced while the broker was frozen ({frozen_for:?}, {committed_during} events \
         committed meanwhile): {} -> {}",
        held.raw, near_end.raw
    );

    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::Relaxed);
    streaming.await.unwrap();
    let mut writer = Arc::try_unwrap(writer)
        .unwrap_or_else(|_| panic!("writer still shared"))
        .into_inner();
    let end = writer.master_position().await;
    let caught_up = wait_for_checkpoint(&relay, &end, Duration::from_secs(60)).await;
    assert!(caught_up.position > held.position);

    let topics = vec![topic_for(&db, "order"), topic_for(&db, "customer")];
    let records = read_until_ids(
        &broker.bootstrap(),
        &topics,
        &writer.committed,
        Duration::from_secs(30),
    )
    .await;
    let summary = assert_writer_delivery("broker frozen 10 s", &writer, &records, &relay);
    eprintln!(
        "freeze test: {} committed ({committed_during} during the {frozen_for:?} freeze), {summary:?}; \
         checkpoint held at {:?}, caught up to {:?}",
        writer.committed.len(),
        held.position,
        caught_up.position
    );
    relay
        .stop_gracefully("graceful stop after the outage")
        .await;
    writer.close().await;
}

/// The broker is killed (all data gone) and later restarted empty on the same port with its
/// topics recreated: the relay reconnects and delivers everything committed after its last
/// checkpoint, including what was committed while the broker was down.
///
/// The new broker does not know the idempotent producer id the relay got from the old one
/// (every produce answers UNKNOWN_PRODUCER_ID), so the relay only recovers if it recreates its
/// producer when deliveries stall (`kafka.stall_timeout_ms`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_restarted_empty_gets_everything_after_the_checkpoint() {
    let (db, mut broker) = start_shop_database_and_private_broker().await;
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    // librdkafka's idempotence state changes in the relay log: evidence if the relay gets stuck.
    setup.kafka_properties.push(("debug".into(), "eos".into()));
    setup.log_filter = "info,librdkafka=debug".into();
    let mut relay = Relay::prepare(&setup);
    // The stall watchdog rebuilds the producer sooner, so the test does not wait the default
    // 30 s.
    relay.edit_config(&[(
        "create_topics = true",
        "create_topics = true\nstall_timeout_ms = 5000",
    )]);
    let mut writer = ShopWriter::connect(&db, "lost").await;
    let topics = vec![topic_for(&db, "order"), topic_for(&db, "customer")];

    relay.start();
    for index in 0..30u32 {
        let kind = if matches!(index % 3, 0) {
            "customer"
        } else {
            "order"
        };
        writer
            .transaction(
                kind,
                &format!("{kind}-{}", index % 4),
                2,
                index % 8 != 5,
                false,
            )
            .await;
    }
    let before_outage = writer.committed.len();
    let end_of_first_batch = writer.master_position().await;
    let settled = wait_for_checkpoint(&relay, &end_of_first_batch, Duration::from_secs(30)).await;

    broker.kill();
    for index in 0..30u32 {
        writer
            .transaction(
                "order",
                &format!("order-{}", index % 4),
                1,
                index % 6 != 1,
                index % 5 == 0,
            )
            .await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    relay.assert_running("while the broker was down");
    let during_outage = relay.checkpoint();
    assert_eq!(
        during_outage.position, settled.position,
        "checkpoint moved while the broker was dead: {} -> {}",
        settled.raw, during_outage.raw
    );

    broker.restart_empty().await.expect("broker restarts");
    let restarted_at = Instant::now();
    for topic in &topics {
        broker.create_topic(topic, 1).await.expect("recreate topic");
    }
    for index in 0..20u32 {
        writer
            .transaction(
                "customer",
                &format!("customer-{}", index % 4),
                1,
                true,
                false,
            )
            .await;
    }
    let end = writer.master_position().await;
    let caught_up = try_wait_for_checkpoint(&relay, &end, Duration::from_secs(70)).await;
    let recovered_after = restarted_at.elapsed();
    if let Err(stuck) = caught_up {
        panic!(
            "after the broker restarted empty (topics recreated), the checkpoint never reached {end} \
             in 70 s: {} events committed after the last checkpoint were not acknowledged. \
             Checkpoint: {}. The relay log has {} producer stalls (stall watchdog) and {} \
             'unknown producer id' lines: a new empty broker does not know the producer id the \
             relay's producer got from the old one, so resending through the same producer never \
             succeeds (see outbox_testkit::kafka docs); the relay has to recreate its producer. \
             Relay log tail:\n{}",
            writer.committed.len() - before_outage,
            stuck.raw,
            log_count(&relay, "within kafka.stall_timeout_ms; purging"),
            log_count(&relay, "unknown producer id"),
            relay.log_tail(25)
        );
    }

    let after_checkpoint = &writer.committed[before_outage..];
    let records = read_until_ids_then_settled(
        &broker.bootstrap(),
        &topics,
        after_checkpoint,
        Duration::from_secs(30),
    )
    .await;
    // Events delivered to the old broker (before the checkpoint) may be re-sent but need not;
    // everything after the checkpoint must be on the new broker.
    let forbidden = writer.must_not_arrive();
    let (problems, summary) = check_delivery(&writer.committed, &forbidden, &records);
    let missing_after: Vec<&str> = after_checkpoint
        .iter()
        .map(|event| event.id.as_str())
        .filter(|id| {
            !records
                .iter()
                .any(|r| r.header_str("id").as_deref() == Some(*id))
        })
        .collect();
    let unexpected: Vec<&String> = problems
        .iter()
        .filter(|problem| !problem.contains("committed events missing"))
        .collect();
    assert!(
        missing_after.is_empty() && unexpected.is_empty(),
        "after the empty restart: {} of {} events committed after the checkpoint missing (first {:?}); \
         other problems {unexpected:?}; {summary:?}; checkpoint {}; relay log:\n{}",
        missing_after.len(),
        after_checkpoint.len(),
        &missing_after[..missing_after.len().min(10)],
        relay.checkpoint().raw,
        relay.log_tail(40)
    );
    eprintln!(
        "restart-empty test: {} events after the checkpoint all on the new broker ({summary:?}), \
         checkpoint caught up {:?} after the restart, {} producer stalls in the relay log",
        after_checkpoint.len(),
        recovered_after,
        log_count(&relay, "within kafka.stall_timeout_ms; purging")
    );
    relay.stop_gracefully("graceful stop").await;
    writer.close().await;
}

/// `create_topics = false` and the topic does not exist: the relay reports an error naming
/// the topic, never checkpoints past the event, and once an operator creates the topic the
/// event is delivered (by the same process if it kept running, else after a restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_topic_without_create_topics_is_named_and_nothing_is_skipped() {
    let (db, broker) = start_shop_database_and_broker().await;
    broker
        .create_topic(&topic_for(&db, "order"), 1)
        .await
        .unwrap();
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup.create_topics = false;
    let mut relay = Relay::prepare(&setup);
    let mut writer = ShopWriter::connect(&db, "notopic").await;
    relay.start();
    writer.transaction("order", "order-1", 1, true, false).await;
    let end_ok = writer.master_position().await;
    let delivered = wait_for_checkpoint(&relay, &end_ok, Duration::from_secs(30)).await;

    let missing_topic = topic_for(&db, "refund");
    writer
        .transaction("refund", "refund-1", 1, true, false)
        .await;
    writer.transaction("order", "order-1", 1, true, false).await;
    let started = Instant::now();
    while log_count(&relay, &missing_topic) == 0 && started.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        log_count(&relay, &missing_topic) > 0,
        "no log line names the missing topic {missing_topic} after 20 s; log:\n{}",
        relay.log_tail(20)
    );
    let held = relay.checkpoint();
    assert_eq!(
        held.position, delivered.position,
        "checkpoint moved past the event for the missing topic: {} -> {}",
        delivered.raw, held.raw
    );

    broker.create_topic(&missing_topic, 1).await.unwrap();
    if let Some(status) = relay.exited() {
        eprintln!("missing topic: the relay exited with {status}; restarting it");
        relay.start();
    }
    let end = writer.master_position().await;
    wait_for_checkpoint(&relay, &end, Duration::from_secs(60)).await;
    let records = read_until_ids(
        &broker.bootstrap(),
        &[topic_for(&db, "order"), missing_topic.clone()],
        &writer.committed,
        Duration::from_secs(30),
    )
    .await;
    assert_delivery(
        "missing topic created by an operator",
        &writer.committed,
        &[],
        &records,
        &relay,
    );
    relay.stop_gracefully("graceful stop").await;
    writer.close().await;
}

/// The broker crashes (kill -9) mid-stream and comes back with its data on the same port,
/// as a real broker restart does: the relay waits out the outage and delivers everything,
/// with per-key order kept and nothing from rolled-back transactions; the checkpoint does not
/// move while the broker is down and catches up after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_killed_and_restarted_with_its_data_loses_nothing() {
    let (db, mut broker) = start_shop_database_and_private_broker().await;
    let mut relay = Relay::prepare(&RelaySetup::new(&db, &broker.bootstrap()));
    let writer = Arc::new(Mutex::new(ShopWriter::connect(&db, "crashed").await));
    relay.start();
    let stop = Arc::new(AtomicBool::new(false));
    let streaming = tokio::spawn(stream_into(writer.clone(), stop.clone()));
    tokio::time::sleep(Duration::from_secs(2)).await;

    broker.kill();
    // Acks that arrived before the kill may still be committed within a commit interval;
    // after that, nothing can move the checkpoint until the broker is back.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_kill = relay.checkpoint();
    tokio::time::sleep(Duration::from_secs(2)).await;
    relay.assert_running("while the broker was down");
    let during = relay.checkpoint();
    assert_eq!(
        during.position, after_kill.position,
        "the checkpoint moved while the broker was dead: {} -> {}",
        after_kill.raw, during.raw
    );
    broker
        .restart()
        .await
        .expect("the broker restarts with its data");
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    streaming.await.expect("writer task");

    let mut writer = writer.lock().await;
    let end = writer.master_position().await;
    wait_for_checkpoint(&relay, &end, Duration::from_secs(90)).await;
    let topics = vec![topic_for(&db, "order"), topic_for(&db, "customer")];
    let records = read_until_ids_then_settled(
        &broker.bootstrap(),
        &topics,
        &writer.committed,
        Duration::from_secs(30),
    )
    .await;
    let summary = assert_writer_delivery("broker kill -9 and restart", &writer, &records, &relay);
    eprintln!(
        "broker restart test: {} committed events ({} rolled back), {summary:?}",
        writer.committed.len(),
        writer.rolled_back.len()
    );
    relay.stop_gracefully("graceful stop").await;
}
