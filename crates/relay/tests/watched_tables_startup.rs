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

/// `check` on the relay's config: exit 1 and a FAIL line holding every one of `needles`.
fn check_fails_naming(relay: &Relay, needles: &[&str]) {
    let config = relay.config_path.to_str().expect("utf-8 path");
    let (code, stdout, stderr) = run_relay_command(&["check", "--config", config]);
    assert_eq!(code, 1, "check must fail:\n{stdout}\n{stderr}");
    assert!(
        stdout
            .lines()
            .any(|line| line.starts_with("FAIL") && needles.iter().all(|n| line.contains(n))),
        "no FAIL line naming {needles:?}:\n{stdout}"
    );
}

/// `run` stops at once (exit 1, nothing stored) with an error holding every one of `needles`.
async fn run_stops_naming(relay: &mut Relay, needles: &[&str]) {
    run_is_refused(relay, needles).await;
    assert!(!relay.checkpoint_path.exists(), "no checkpoint was written");
}

/// Issue 31 items 7 and 8: an outbox table without the columns its route reads (every row
/// would be dead-lettered), and a table the relay's user may not read (the server hides it,
/// so it looked missing): `check` fails and `run` refuses to start, naming the columns, or
/// the grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_table_without_the_route_columns_or_not_readable_stops_check_and_run() {
    let db = start_shop_database().await;
    db.exec(&[
        "CREATE TABLE shop.events (id BIGINT NOT NULL PRIMARY KEY, body TEXT) ENGINE=InnoDB",
        "CREATE USER limited@'%' IDENTIFIED BY 'pw'",
        "GRANT REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR ON *.* TO limited@'%'",
        "GRANT SELECT ON shop.orders TO limited@'%'",
    ])
    .await
    .expect("the events table and the limited user");
    let cluster: MockCluster<'static, DefaultProducerContext> =
        MockCluster::new(1).expect("mock cluster");
    let mut setup = RelaySetup::new(&db, &cluster.bootstrap_servers());
    setup.create_topics = false;

    // Item 7: none of the preset's columns.
    let mut relay = Relay::prepare(&setup);
    relay.edit_config(&[("table = \"shop.outbox\"", "table = \"shop.events\"")]);
    let needles = [
        "outbox table `shop.events` has no column `event_id` (columns.event_id)",
        "`payload` (columns.payload)",
        "its columns are `id`, `body`",
    ];
    check_fails_naming(&relay, &needles);
    run_stops_naming(&mut relay, &needles).await;

    // Item 8: the relay's user has no privilege on the outbox table.
    let mut relay = Relay::prepare(&setup);
    relay.edit_config(&[(
        &format!("root@127.0.0.1:{}", db.port()),
        &format!("limited:pw@127.0.0.1:{}", db.port()),
    )]);
    let needles = [
        "may not read watched table `shop.outbox`",
        "GRANT SELECT ON shop.outbox TO 'limited'@'%'",
    ];
    check_fails_naming(&relay, &needles);
    run_stops_naming(&mut relay, &needles).await;
    assert!(
        !relay.log().contains("does not exist"),
        "a table hidden by privileges is not called missing:\n{}",
        relay.log()
    );
}

/// Issue 26: a configured `column_type` the server's definition contradicts
/// (`created_at` is DATETIME(6): epoch microseconds to Debezium, not DATETIME(3)'s
/// milliseconds) fails `check` naming both, and `run` warns of it at start and goes on
/// with the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_type_the_server_contradicts_fails_check_and_is_warned_of_by_run() {
    let db = start_shop_database().await;
    let cluster: MockCluster<'static, DefaultProducerContext> =
        MockCluster::new(1).expect("mock cluster");
    let mut setup = RelaySetup::new(&db, &cluster.bootstrap_servers());
    setup.create_topics = false;
    setup.route_extra = vec![
        "additional_headers = [{ column = \"created_at\", column_type = \"datetime(3)\" }]".into(),
    ];
    let mut relay = Relay::prepare(&setup);
    let needle = "outbox table `shop.outbox` column `created_at`: additional_headers' column_type is \"datetime(3)\", but the server defines the column as `datetime(6)`";
    check_fails_naming(&relay, &[needle]);
    relay.start();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !relay.log().contains("binlog source connected") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the relay did not connect:\n{}",
            relay.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = relay.log();
    assert!(
        log.lines()
            .any(|line| line.contains("WARN") && line.contains(needle)),
        "no warning naming the clash:\n{log}"
    );
    relay.stop_gracefully("after the warning").await;
}
