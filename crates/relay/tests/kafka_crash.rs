//! `kill -9` the relay at random moments while a writer streams transactions (some rolled
//! back), 20 times in a row, restarting each time: at-least-once delivery with stable ids,
//! per-aggregate order, nothing from rolled-back transactions, a checkpoint that is always
//! readable and never goes backwards.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_kill_nine_restarts_lose_nothing() {
    let started = Instant::now();
    let (db, broker) = start_shop_database_and_broker().await;
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    // Several partitions per topic: per-key order has to hold per partition under retries.
    setup.topic_partitions = 3;
    let mut relay = Relay::prepare(&setup);
    let writer = ShopWriter::connect(&db, "crash").await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer_task = tokio::spawn(stream_random_transactions(writer, Arc::clone(&stop), true));

    let mut checkpoints: Vec<CheckpointView> = Vec::new();
    let mut lifetimes_ms = Vec::new();
    for kill in 0..20 {
        relay.start();
        let lifetime = 150 + rand::random::<u64>() % 1200;
        lifetimes_ms.push(lifetime);
        tokio::time::sleep(Duration::from_millis(lifetime)).await;
        relay.assert_running(&format!("before kill #{kill}"));
        relay.kill9();
        let view = relay.checkpoint();
        if let Some(previous) = checkpoints.last() {
            assert!(
                view.position >= previous.position,
                "checkpoint went backwards after kill #{kill}: {} -> {}",
                previous.raw,
                view.raw
            );
        }
        checkpoints.push(view);
    }

    // Final run: let it catch up after the writer stops.
    relay.start();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut writer = writer_task.await.expect("writer task");
    let end = writer.master_position().await;
    let caught_up = wait_for_checkpoint(&relay, &end, Duration::from_secs(40)).await;

    let topics = vec![topic_for(&db, "order"), topic_for(&db, "customer")];
    // Anything still in flight lands now; the verdict reads everything.
    let records = read_until_ids_then_settled(
        &broker.bootstrap(),
        &topics,
        &writer.committed,
        Duration::from_secs(30),
    )
    .await;
    let summary = assert_writer_delivery("20 x kill -9", &writer, &records, &relay);
    // The same verdict from Kafka's own console consumer.
    let console = assert_console_consumer_agrees(&broker.bootstrap(), &records).await;
    assert_writer_delivery(
        "20 x kill -9 (kafka-console-consumer)",
        &writer,
        &console,
        &relay,
    );
    let partitions_used: std::collections::BTreeSet<(String, i32)> = records
        .iter()
        .map(|record| (record.topic.clone(), record.partition))
        .collect();
    assert!(
        partitions_used.len() > topics.len(),
        "topic_partitions = 3 but records only came from {partitions_used:?}"
    );
    let distinct_checkpoints = checkpoints
        .iter()
        .map(|view| view.position.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    assert!(
        distinct_checkpoints > 3,
        "the checkpoint barely moved across 20 runs (is it committed while running?): {:?}",
        checkpoints.iter().map(|v| &v.position).collect::<Vec<_>>()
    );
    relay.stop_gracefully("final graceful stop").await;
    eprintln!(
        "crash test: {} committed events ({} rolled back), {summary:?}, \
         {distinct_checkpoints} distinct checkpoints over 20 kills (lifetimes {lifetimes_ms:?} ms), \
         final checkpoint {}, wall time {:?}",
        writer.committed.len(),
        writer.rolled_back.len(),
        caught_up.raw.trim(),
        started.elapsed()
    );
    writer.close().await;
}
