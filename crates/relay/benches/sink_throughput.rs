//! Kafka sink throughput against rdkafka's in-process mock cluster (no network, no disk):
//! how many records per second the sink task sends and gets acked, with many in flight.
//!
//! `cargo bench -p outbox-relay --bench sink_throughput` (env: BENCH_RECORDS, default 200000).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_relay::{
    run_kafka_sink, KafkaSinkSettings, Metrics, OutboundRecord, ShutdownController, SinkItem,
};
use rdkafka::mocking::MockCluster;

fn main() {
    let records: u64 = std::env::var("BENCH_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let cluster = MockCluster::new(1).expect("mock cluster");
        cluster.create_topic("bench.sink", 6, 1).expect("topic");
        // The first round warms up (connections, producer id, metadata) and is not reported.
        for (round, (max_in_flight, linger)) in [
            (10_000usize, "5"),
            (10_000, "5"),
            (1_000, "5"),
            (100, "0"),
        ]
        .into_iter()
        .enumerate()
        {
            let settings = KafkaSinkSettings {
                startup_attempts: 0,
                client_properties: vec![
                    ("bootstrap.servers".into(), cluster.bootstrap_servers()),
                    ("enable.idempotence".into(), "true".into()),
                    ("acks".into(), "all".into()),
                    ("linger.ms".into(), linger.into()),
                    ("batch.num.messages".into(), "10000".into()),
                ],
                create_topics: false,
                topic_partitions: 1,
                topic_replication_factor: 1,
                topic_config: Default::default(),
                admin_timeout: Duration::from_secs(10),
                retry_initial_backoff: Duration::from_millis(100),
                retry_max_backoff: Duration::from_secs(5),
                max_in_flight,
                drain_timeout: Duration::from_secs(30),
                dead_letter: Default::default(),
                stall_timeout: Duration::from_secs(30),
                give_up_on_rebuild: false,
            };
            let (tx, rx) = tokio::sync::mpsc::channel(1024);
            let acked = Arc::new(AtomicU64::new(0));
            let counter = acked.clone();
            let controller = ShutdownController::new();
            let started = Instant::now();
            let sink = tokio::spawn(run_kafka_sink(
                settings,
                rx,
                move |_ticket: u64| {
                    counter.fetch_add(1, Ordering::Relaxed);
                },
                Metrics::new(),
                controller.subscribe(),
            ));
            let payload = vec![b'x'; 300];
            for n in 0..records {
                let record = OutboundRecord {
                    topic: "bench.sink".into(),
                    key: Some(format!("aggregate-{}", n % 1000).into_bytes()),
                    payload: Some(payload.clone()),
                    headers: vec![("id".into(), format!("event-{n}").into_bytes())],
                    null_headers: Vec::new(),
                    timestamp_ms: None,
                    partition: None,
                };
                tx.send(vec![SinkItem { record, ticket: n, origin: Default::default() }]).await.expect("sink alive");
            }
            drop(tx);
            let summary = sink.await.expect("join").expect("sink ok");
            let elapsed = started.elapsed();
            assert_eq!(summary.delivered, records);
            assert_eq!(acked.load(Ordering::Relaxed), records);
            if round == 0 {
                continue;
            }
            println!(
                "sink_throughput max_in_flight={max_in_flight} linger.ms={linger}: {records} records (300 B) in {:.2} s = {:.0} records/s",
                elapsed.as_secs_f64(),
                records as f64 / elapsed.as_secs_f64()
            );
        }
    });
}
