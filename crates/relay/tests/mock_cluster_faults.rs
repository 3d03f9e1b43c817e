//! Fault injection with librdkafka's mock cluster: the cluster lives in this test process and
//! listens on loopback TCP; the relay runs as its own process against it. Injected retriable
//! produce errors, a long round-trip time, and a broker down/up: no loss, and the checkpoint
//! held back while acknowledgements cannot arrive.

mod common;

use std::time::{Duration, Instant};

use common::*;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

struct MockSetup {
    db: outbox_testkit::ScratchMariadb,
    cluster: MockCluster<'static, DefaultProducerContext>,
    relay: Relay,
    writer: ShopWriter,
    topics: Vec<String>,
}

/// MariaDB + mock cluster (topics pre-created: the mock has no CreateTopics) + running relay,
/// warmed up: a first batch delivered and covered by the checkpoint.
async fn mock_setup(prefix: &str) -> (MockSetup, CheckpointView) {
    let db = start_shop_database().await;
    let cluster = MockCluster::new(1).expect("mock cluster");
    let topics: Vec<String> = ALTERNATING_AGGREGATE_TYPES
        .iter()
        .map(|kind| topic_for(&db, kind))
        .collect();
    for topic in &topics {
        cluster.create_topic(topic, 1, 1).expect("mock topic");
    }
    let mut setup = RelaySetup::new(&db, &cluster.bootstrap_servers());
    setup.create_topics = false;
    // The mock cluster checks produce sequence numbers only for transactional producers
    // (librdkafka's rdkafka_mock.c skips the check without a TransactionalId), so with
    // several requests in flight it accepts a batch sent after one that failed, which a
    // real broker rejects with OUT_OF_ORDER_SEQUENCE_NUMBER. One request in flight keeps
    // the mock honest, so the per-key order check below tests the relay, not the mock.
    setup.kafka_properties.extend([
        ("retry.backoff.ms".into(), "100".into()),
        ("retry.backoff.max.ms".into(), "200".into()),
        ("max.in.flight.requests.per.connection".into(), "1".into()),
    ]);
    let mut relay = Relay::prepare(&setup);
    let mut writer = ShopWriter::connect(&db, prefix).await;
    relay.start();
    for index in 0..10u32 {
        writer
            .alternating_transaction(index, 1 + (index % 2) as usize, index != 4, index == 2)
            .await;
    }
    let end = writer.master_position().await;
    let warm = wait_for_checkpoint(&relay, &end, Duration::from_secs(30)).await;
    let delivered = read_until_ids(
        &cluster.bootstrap_servers(),
        &topics,
        &writer.committed,
        Duration::from_secs(20),
    )
    .await;
    assert_writer_delivery("mock warm-up", &writer, &delivered, &relay);
    (
        MockSetup {
            db,
            cluster,
            relay,
            writer,
            topics,
        },
        warm,
    )
}

/// A batch of transactions while the fault is active; returns the binlog end position.
async fn write_batch(writer: &mut ShopWriter, transactions: u32) -> BinlogPoint {
    for index in 0..transactions {
        writer
            .alternating_transaction(
                index,
                1 + (index % 3) as usize,
                index % 5 != 3,
                index % 4 == 0,
            )
            .await;
    }
    writer.master_position().await
}

/// After the fault cleared: checkpoint reaches the end, every committed event arrived, in
/// per-key order, nothing forbidden.
async fn assert_recovered(
    setup: &mut MockSetup,
    end: &BinlogPoint,
    context: &str,
) -> DeliverySummary {
    setup.relay.assert_running(context);
    wait_for_checkpoint(&setup.relay, end, Duration::from_secs(60)).await;
    let records = read_until_ids(
        &setup.cluster.bootstrap_servers(),
        &setup.topics,
        &setup.writer.committed,
        Duration::from_secs(30),
    )
    .await;
    let summary = assert_writer_delivery(context, &setup.writer, &records, &setup.relay);
    let status = setup.relay.terminate(Duration::from_secs(30)).await;
    assert!(
        status.success(),
        "{context}: graceful stop exit status {status}"
    );
    summary
}

/// Retriable produce errors (not leader, timeouts, not enough replicas, dropped connections)
/// are retried: the checkpoint stays put while they last, then everything arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retriable_produce_errors_hold_the_checkpoint_and_lose_nothing() {
    let (mut setup, warm) = mock_setup("mockerr").await;
    let mut errors = Vec::new();
    for _ in 0..8 {
        errors.extend([
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
        ]);
    }
    errors.push(RDKafkaRespErr::RD_KAFKA_RESP_ERR__TRANSPORT);
    setup
        .cluster
        .request_errors(RDKafkaApiKey::Produce, &errors);
    let injected_at = Instant::now();
    let end = write_batch(&mut setup.writer, 12).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let during = setup.relay.checkpoint();
    assert_eq!(
        during.position, warm.position,
        "checkpoint moved while {} produce errors were being injected ({:?} after injection): {} -> {}",
        errors.len(),
        injected_at.elapsed(),
        warm.raw,
        during.raw
    );
    let summary = assert_recovered(&mut setup, &end, "retriable produce errors").await;
    eprintln!(
        "mock produce errors: {} injected, recovered after {:?}; {summary:?}",
        errors.len(),
        injected_at.elapsed()
    );
    drop(setup.db);
}

/// A 1.5 s broker round-trip time: acks arrive late, the checkpoint does not run ahead of
/// them, and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_round_trips_never_let_the_checkpoint_run_ahead() {
    let (mut setup, warm) = mock_setup("mockrtt").await;
    setup
        .cluster
        .broker_round_trip_time(1, Duration::from_millis(1500))
        .expect("set rtt");
    let end = write_batch(&mut setup.writer, 12).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let during = setup.relay.checkpoint();
    assert!(
        during.position < Some(end.clone()),
        "checkpoint reached the end {end} only 700 ms after the commits, under a 1500 ms round trip: {}",
        during.raw
    );
    assert!(
        during.position >= warm.position,
        "checkpoint went back: {}",
        during.raw
    );
    let started = Instant::now();
    // Acks still arrive under the slow round trip: the checkpoint catches up on its own.
    wait_for_checkpoint(&setup.relay, &end, Duration::from_secs(30)).await;
    let caught_up_after = started.elapsed();
    // Reading back under a 1.5 s round trip per fetch would only slow the test down.
    setup
        .cluster
        .broker_round_trip_time(1, Duration::ZERO)
        .expect("reset rtt");
    let summary = assert_recovered(&mut setup, &end, "1.5 s round-trip time").await;
    eprintln!("mock rtt: checkpoint caught up {caught_up_after:?} after the sample; {summary:?}");
}

/// The only broker goes down for 4 s: the checkpoint stays put, the relay keeps running,
/// and once the broker is up again everything arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_down_then_up_holds_the_checkpoint_and_loses_nothing() {
    let (mut setup, warm) = mock_setup("mockdown").await;
    setup.cluster.broker_down(1).expect("broker down");
    let down_at = Instant::now();
    let end = write_batch(&mut setup.writer, 12).await;
    tokio::time::sleep(Duration::from_millis(4000).saturating_sub(down_at.elapsed())).await;
    let during = setup.relay.checkpoint();
    setup.relay.assert_running("while the broker was down");
    assert_eq!(
        during.position, warm.position,
        "checkpoint moved while the only broker was down: {} -> {}",
        warm.raw, during.raw
    );
    setup.cluster.broker_up(1).expect("broker up");
    let up_at = Instant::now();
    let summary = assert_recovered(&mut setup, &end, "broker down/up").await;
    eprintln!(
        "mock broker down {:?}: caught up {:?} after broker_up; {summary:?}",
        up_at.duration_since(down_at),
        up_at.elapsed()
    );
}
