//! Issue 31 item 11: a start that fails before the sink reached Kafka sent nothing, so its
//! checkpoint records no `sent_through`, and the next start neither warns of a crash nor
//! counts replays; it delivers every event.

mod common;

use std::time::Duration;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_with_kafka_unreachable_records_nothing_as_sent() {
    let (db, broker) = start_shop_database_and_broker().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.to_string())
        .expect("a free port");
    let mut relay = Relay::prepare(&RelaySetup::new(&db, &closed));
    relay.edit_config(&[(
        "create_topics = true",
        "create_topics = true\nstartup_attempts = 1\nadmin_timeout_ms = 1000",
    )]);
    let mut writer = ShopWriter::connect(&db, "failed-start").await;
    for index in 0..3 {
        writer
            .transaction("order", &format!("failed-start-{index}"), 2, true, false)
            .await;
    }

    // 1. Kafka unreachable: the relay routes the events (into the channel to the sink),
    // then stops; nothing was sent.
    relay.start();
    let status = relay.wait_for_exit(Duration::from_secs(60)).await;
    assert_eq!(status.code(), Some(1), "{}", relay.log_tail(20));
    assert!(
        relay.log().contains("cannot reach the Kafka cluster"),
        "{}",
        relay.log_tail(20)
    );
    let stored = relay.checkpoint();
    assert!(
        !stored.raw.contains("sent_through"),
        "a failed start recorded records as sent:\n{}",
        stored.raw
    );

    // 2. Kafka reachable: every event arrives, and no replay of a crash is reported.
    relay.edit_config(&[(closed.as_str(), broker.bootstrap().as_str())]);
    relay.start();
    assert_all_arrive(
        &relay,
        &broker.bootstrap(),
        &[topic_for(&db, "order")],
        &writer.committed,
        Duration::from_secs(60),
    )
    .await;
    let end = writer.master_position().await;
    wait_for_checkpoint(&relay, &end, Duration::from_secs(30)).await;
    let status = relay.terminate(Duration::from_secs(20)).await;
    assert!(status.success(), "{status:?}: {}", relay.log_tail(30));
    assert_eq!(
        log_count(&relay, "replayed records the previous run had already sent"),
        0,
        "the second start took the failed one for a crash:\n{}",
        relay.log_tail(30)
    );
    // Issue 31 item 9: the scratch server offers no TLS and tls.mode is `preferred` (the
    // default): each run says once that its connections to the server are plaintext.
    assert_eq!(
        log_count(&relay, "offers no TLS: connections to it are plaintext"),
        2,
        "one plaintext warning per run:\n{}",
        relay.log()
    );
}
