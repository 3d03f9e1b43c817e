//! Issue 25 part 1: a dependency that is down when the relay starts is waited out, under
//! `startup_attempts`, in every mode and with every checkpoint store: the relay stays up,
//! says what it waits for, and once the dependency is back delivers every event.
//!
//! (At-least-once with the file store and the broker down is `kafka_outage.rs`' and
//! `bad_inputs.rs`' ground; these are the cases that used to exit.)

mod common;

use std::time::Duration;

use common::*;

/// How long the dependency stays down after the relay started (the 30 s: several
/// Kafka metadata timeouts and backoff rounds).
const OUTAGE: Duration = Duration::from_secs(30);

/// While a dependency is down at start, `/readyz` answers 503 with `"ready":false`.
async fn assert_not_ready(readyz: &str, relay: &Relay, context: &str) {
    let (status, body) = get_readyz(readyz)
        .await
        .unwrap_or_else(|e| panic!("{context}: GET /readyz: {e}\n{}", relay.log_tail(20)));
    assert!(
        status == 503 && body.contains("\"ready\":false"),
        "{context}: /readyz answered {status} {body} while waiting"
    );
}

/// Once the relay delivers, `/readyz` answers 200 (retried: readiness follows the first
/// acknowledgements and checkpoint).
async fn assert_ready_soon(readyz: &str, relay: &Relay, context: &str) {
    let started = std::time::Instant::now();
    loop {
        let answer = get_readyz(readyz).await;
        if matches!(&answer, Ok((200, _))) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{context}: /readyz still {answer:?}\n{}",
            relay.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Exactly-once mode with the Kafka checkpoint store, the broker down at start: the store's
/// `claim_writer` and load are retried (they used to stop the relay after 10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_with_the_kafka_store_waits_out_a_broker_down_at_start() {
    let (db, mut broker) = start_shop_database_and_private_broker().await;
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    let readyz = free_loopback_address();
    setup.metrics_listen = Some(readyz.clone());
    setup.kafka_checkpoint_topic = Some(format!("{}.checkpoints", db.tag()));
    let mut relay = Relay::prepare(&setup);
    relay.edit_config(&[(
        "[kafka]\n",
        "[kafka]\ndelivery = \"exactly_once\"\ntransaction_timeout_ms = 20000\n\
         admin_timeout_ms = 2000\nretry_max_backoff_ms = 1000\n",
    )]);
    waits_out_a_broker_down_at_start(
        &db,
        &mut broker,
        &mut relay,
        &readyz,
        "eos-start",
        "checkpoint store unavailable at startup; retrying",
    )
    .await;
}

/// At-least-once with the file store and with the MySQL checkpoint store on the source
/// server, the server down at start: the source's connection (and opening and loading the
/// MySQL store) are retried under `source.startup_attempts`; every event arrives once the
/// server is back, and the checkpoint reaches its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_waits_out_the_source_down_at_start() {
    let (mut db, broker) = start_shop_database_and_broker().await;
    // The store creates its table, not the database (an operator's decision).
    db.exec(&["CREATE DATABASE outbox_relay"]).await.unwrap();
    for (store, waiting) in [
        ("file", "binlog source unavailable; retrying"),
        ("mysql", "checkpoint store unavailable at startup; retrying"),
    ] {
        let mut setup = RelaySetup::new(&db, &broker.bootstrap());
        let readyz = free_loopback_address();
        setup.metrics_listen = Some(readyz.clone());
        if store == "mysql" {
            setup.mysql_checkpoint_url = Some(db.url());
        }
        let mut relay = Relay::prepare(&setup);
        relay.edit_config(&[(
            "server_id = 4242",
            "server_id = 4242\nreconnect_max_backoff_ms = 1000\nstartup_attempts = 0",
        )]);
        let prefix = format!("source-down-{store}");
        let (end, committed) = {
            let mut writer = ShopWriter::connect(&db, &prefix).await;
            for index in 0..3 {
                writer
                    .transaction("order", &format!("{prefix}-{index}"), 2, true, false)
                    .await;
            }
            (writer.master_position().await, writer.committed.clone())
        };

        waits_out_the_source_down_at_start(
            &mut db,
            &broker.bootstrap(),
            &mut relay,
            &readyz,
            &format!("{store} store"),
            waiting,
            &committed,
        )
        .await;
        wait_for_checkpoint(&relay, &end, Duration::from_secs(30)).await;
        let status = relay.terminate(Duration::from_secs(30)).await;
        assert!(status.success(), "{status:?}: {}", relay.log_tail(30));
    }
}

/// `[ha]` with the Kafka checkpoint store, the broker down at start: joining the lease group
/// is retried under `kafka.startup_attempts` like the store, then the relay leads and
/// delivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_waits_out_a_broker_down_at_start_then_leads() {
    let (db, mut broker) = start_shop_database_and_private_broker().await;
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    let readyz = free_loopback_address();
    setup.metrics_listen = Some(readyz.clone());
    setup.kafka_checkpoint_topic = Some(format!("{}.checkpoints", db.tag()));
    let mut relay = Relay::prepare(&setup);
    relay.edit_config(&[
        (
            "[kafka]\n",
            "[kafka]\nadmin_timeout_ms = 2000\nretry_max_backoff_ms = 1000\nstartup_attempts = 0\n",
        ),
        (
            "[pipeline]",
            &format!(
                "[ha]\nenabled = true\nlease_topic = \"{}.lease\"\nsession_timeout_ms = 6000\n\n[pipeline]",
                db.tag()
            ),
        ),
    ]);
    waits_out_a_broker_down_at_start(
        &db,
        &mut broker,
        &mut relay,
        &readyz,
        "ha-start",
        "cannot join the [ha] lease group at startup; retrying",
    )
    .await;
}

/// Writes three transactions, stops `broker`, starts `relay` and checks that it is still up
/// after [`OUTAGE`] and said what it waits for (`waiting`, a log line); then starts the
/// broker again: every event must arrive, and the relay stop cleanly.
async fn waits_out_a_broker_down_at_start(
    db: &outbox_testkit::ScratchMariadb,
    broker: &mut outbox_testkit::kafka::KafkaBroker,
    relay: &mut Relay,
    readyz: &str,
    prefix: &str,
    waiting: &str,
) {
    let mut writer = ShopWriter::connect(db, prefix).await;
    for index in 0..3 {
        writer
            .transaction("order", &format!("{prefix}-{index}"), 2, true, false)
            .await;
    }
    broker.stop().expect("the broker stops");
    relay.start();
    tokio::time::sleep(OUTAGE).await;
    relay.assert_running("the broker is down at start");
    assert!(
        log_count(relay, waiting) >= 1,
        "the wait is not said (`{waiting}`):\n{}",
        relay.log_tail(20)
    );
    assert_not_ready(readyz, relay, prefix).await;
    broker.restart().await.expect("the broker starts again");
    assert_all_arrive(
        relay,
        &broker.bootstrap(),
        &[topic_for(db, "order")],
        &writer.committed,
        Duration::from_secs(120),
    )
    .await;
    assert_ready_soon(readyz, relay, prefix).await;
    let status = relay.terminate(Duration::from_secs(30)).await;
    assert!(status.success(), "{status:?}: {}", relay.log_tail(30));
}

/// Stops the source server, starts `relay` and checks that it is still up after
/// [`OUTAGE`], said what it waits for (`waiting`, a log line) and is not ready; then starts
/// the server again: every one of `committed` must arrive.
async fn waits_out_the_source_down_at_start(
    db: &mut outbox_testkit::ScratchMariadb,
    bootstrap: &str,
    relay: &mut Relay,
    readyz: &str,
    context: &str,
    waiting: &str,
    committed: &[Event],
) {
    db.stop();
    relay.start();
    tokio::time::sleep(OUTAGE).await;
    relay.assert_running(&format!("{context}: the source is down at start"));
    assert_not_ready(readyz, relay, context).await;
    assert!(
        log_count(relay, waiting) >= 1,
        "{context}: the wait is not said (`{waiting}`):\n{}",
        relay.log_tail(20)
    );
    db.restart().await.expect("the server starts again");
    assert_all_arrive(
        relay,
        bootstrap,
        &[topic_for(db, "order")],
        committed,
        Duration::from_secs(90),
    )
    .await;
}

/// Exactly-once mode with the Kafka checkpoint store, the source down at start: the source's
/// connection is retried under `source.startup_attempts` (the store answers meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_waits_out_the_source_down_at_start() {
    let (mut db, broker) = start_shop_database_and_broker().await;
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    let readyz = free_loopback_address();
    setup.metrics_listen = Some(readyz.clone());
    setup.kafka_checkpoint_topic = Some(format!("{}.checkpoints", db.tag()));
    let mut relay = Relay::prepare(&setup);
    relay.edit_config(&[
        (
            "[kafka]\n",
            "[kafka]\ndelivery = \"exactly_once\"\ntransaction_timeout_ms = 20000\n",
        ),
        (
            "server_id = 4242",
            "server_id = 4242\nreconnect_max_backoff_ms = 1000\nstartup_attempts = 0",
        ),
    ]);
    let committed = {
        let mut writer = ShopWriter::connect(&db, "eos-source").await;
        for index in 0..3 {
            writer
                .transaction("order", &format!("eos-source-{index}"), 2, true, false)
                .await;
        }
        writer.committed.clone()
    };

    waits_out_the_source_down_at_start(
        &mut db,
        &broker.bootstrap(),
        &mut relay,
        &readyz,
        "eos-source",
        "binlog source unavailable; retrying",
        &committed,
    )
    .await;
    let status = relay.terminate(Duration::from_secs(30)).await;
    assert!(status.success(), "{status:?}: {}", relay.log_tail(30));
}

/// At-least-once with each checkpoint store kind, the broker down at start: the Kafka store
/// waits under the startup rule, the file and MySQL stores answer and the sink waits for the
/// cluster; in each case every event arrives once the broker is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_with_each_store_waits_out_a_broker_down_at_start() {
    let (db, mut broker) = start_shop_database_and_private_broker().await;
    db.exec(&["CREATE DATABASE outbox_relay"]).await.unwrap();
    for (store, waiting) in [
        (
            "file",
            "cannot reach the Kafka cluster at startup; retrying",
        ),
        (
            "mysql",
            "cannot reach the Kafka cluster at startup; retrying",
        ),
        ("kafka", "checkpoint store unavailable at startup; retrying"),
    ] {
        let mut setup = RelaySetup::new(&db, &broker.bootstrap());
        let readyz = free_loopback_address();
        setup.metrics_listen = Some(readyz.clone());
        match store {
            "mysql" => setup.mysql_checkpoint_url = Some(db.url()),
            "kafka" => setup.kafka_checkpoint_topic = Some(format!("{}.checkpoints", db.tag())),
            _ => {}
        }
        let mut relay = Relay::prepare(&setup);
        relay.edit_config(&[(
            "[kafka]\n",
            "[kafka]\nadmin_timeout_ms = 2000\nretry_max_backoff_ms = 1000\nstartup_attempts = 0\n",
        )]);
        waits_out_a_broker_down_at_start(
            &db,
            &mut broker,
            &mut relay,
            &readyz,
            &format!("alo-{store}"),
            waiting,
        )
        .await;
    }
}
