//! End-to-end relay throughput in one process: scratch MariaDB binlog -> router -> sink ->
//! rdkafka mock cluster -> checkpoint file. Writes the outbox rows first, then measures the
//! time from relay start (`start = "earliest"`) until the stored checkpoint covers the last
//! transaction.
//!
//! `cargo bench -p outbox-relay --bench pipeline_throughput`
//! (env: BENCH_TRANSACTIONS default 500, BENCH_ROWS_PER_TRANSACTION default 100).

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use outbox_relay::demo::{demo_config_text, DEMO_SCHEMA, DEMO_TOPIC};
use outbox_relay::{open_checkpoint_store, run_relay, RelayConfig, RelayHandles};
use rdkafka::mocking::MockCluster;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let transactions = env_or("BENCH_TRANSACTIONS", 500);
    let rows_per_transaction = env_or("BENCH_ROWS_PER_TRANSACTION", 100);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let server = outbox_testkit::ScratchMariadb::start().await.expect("mariadb");
        server.exec(DEMO_SCHEMA).await.expect("schema");
        let mut conn = server.conn().await.expect("conn");
        let payload = format!("{{\"data\":\"{}\"}}", "x".repeat(250));
        let write_started = Instant::now();
        for t in 0..transactions {
            let mut sql = String::from(
                "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ",
            );
            for r in 0..rows_per_transaction {
                if r > 0 {
                    sql.push(',');
                }
                let n = t * rows_per_transaction + r;
                sql.push_str(&format!(
                    "('e-{n}', 'order', 'a-{}', 'order_created', '{payload}')",
                    n % 1000
                ));
            }
            conn.query_drop(sql).await.expect("insert");
        }
        let (end_file, end_position): (String, u64) = {
            let row: mysql_async::Row = conn
                .query_first("SHOW MASTER STATUS")
                .await
                .expect("status")
                .expect("row");
            (row.get(0).expect("file"), row.get(1).expect("position"))
        };
        conn.disconnect().await.expect("disconnect");
        let events = transactions * rows_per_transaction;
        println!(
            "wrote {events} outbox rows in {transactions} transactions in {:.2} s",
            write_started.elapsed().as_secs_f64()
        );

        let cluster = MockCluster::new(1).expect("mock cluster");
        cluster.create_topic(DEMO_TOPIC, 6, 1).expect("topic");
        let dir = tempfile::tempdir().expect("tempdir");
        let text = demo_config_text(
            &server.url(),
            &cluster.bootstrap_servers(),
            &dir.path().join("checkpoint.json").display().to_string(),
        )
        .replace("max_in_flight = 1000", "max_in_flight = 10000");
        let config = RelayConfig::parse(&text).expect("config");
        let store = open_checkpoint_store(&config.checkpoint, &config.kafka).await.expect("store");
        let handles = RelayHandles::default();
        let started = Instant::now();
        let relay = tokio::spawn(run_relay(config, handles.clone()));
        loop {
            if let Ok(Some(checkpoint)) = store.load().await {
                if checkpoint.position.binlog.file == end_file
                    && checkpoint.position.binlog.position >= end_position
                {
                    break;
                }
            }
            assert!(started.elapsed() < Duration::from_secs(600), "relay too slow");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let elapsed = started.elapsed();
        handles.shutdown.trigger();
        let summary = relay.await.expect("join").expect("relay ok");
        assert!(summary.delivered >= events);
        println!(
            "pipeline_throughput: {events} events ({rows_per_transaction}/transaction, ~300 B) relayed and checkpointed in {:.2} s = {:.0} events/s",
            elapsed.as_secs_f64(),
            events as f64 / elapsed.as_secs_f64()
        );
    });
}
