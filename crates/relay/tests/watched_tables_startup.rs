//! `run` refuses to start when an `[[outbox]]` table does not exist as the binlog names it
//! (a typo, a case that `lower_case_table_names` changes): otherwise it would start, deliver
//! nothing and let the checkpoint pass every outbox insert.

mod common;

use std::time::Duration;

use common::*;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_table_the_binlog_names_differently_stops_run_at_startup() {
    let db = start_shop_database().await;
    let cluster: MockCluster<'static, DefaultProducerContext> =
        MockCluster::new(1).expect("mock cluster");
    let mut setup = RelaySetup::new(&db, &cluster.bootstrap_servers());
    setup.create_topics = false;
    let mut relay = Relay::prepare(&setup);
    relay.edit_config(&[("table = \"shop.outbox\"", "table = \"shop.Outbox\"")]);
    relay.start();
    let status = relay.wait_for_exit(Duration::from_secs(60)).await;
    let log = relay.log();
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("watched table `shop.Outbox` does not exist as the binlog names it"),
        "{log}"
    );
    assert!(
        log.contains("table = \\\"shop.outbox\\\"") || log.contains("table = \"shop.outbox\""),
        "{log}"
    );
    assert!(!relay.checkpoint_path.exists(), "no checkpoint was written");
}
