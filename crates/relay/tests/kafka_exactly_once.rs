//! Exactly-once mode (`kafka.delivery = "exactly_once"`, checkpoint in Kafka) against the
//! real Apache Kafka broker: 30 `kill -9`s of the relay and a broker restart while a writer
//! streams transactions (some rolled back); Kafka's own console consumer with
//! `--isolation-level read_committed` must then see every committed outbox event exactly
//! once, none from rolled-back transactions, in per-key order. And a second relay with the
//! same connector name fences the first: nothing the fenced one sends becomes visible.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use outbox_testkit::consume::{console_consume_isolated, ConsumedRecord};

/// Turns the test config into exactly-once with the Kafka checkpoint store.
fn make_exactly_once(relay: &Relay, connector: &str) {
    let text = std::fs::read_to_string(&relay.config_path).expect("read config");
    let mut out = String::new();
    let mut in_checkpoint = false;
    for line in text.lines() {
        if line.starts_with('[') {
            in_checkpoint = line.trim() == "[checkpoint]";
            out.push_str(line);
            out.push('\n');
            if in_checkpoint {
                out.push_str(&format!("store = \"kafka\"\nconnector = \"{connector}\"\n"));
            }
            if line.trim() == "[kafka]" {
                out.push_str("delivery = \"exactly_once\"\ntransaction_timeout_ms = 20000\n");
            }
            continue;
        }
        if in_checkpoint {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    std::fs::write(&relay.config_path, out).expect("write config");
}

/// Everything committed on `topics`, read by Kafka's console consumer with
/// `--isolation-level read_committed`, until nothing new came for `quiet`.
async fn read_committed(
    bootstrap: &str,
    topics: &[String],
    quiet: Duration,
) -> Vec<ConsumedRecord> {
    let mut records = Vec::new();
    for topic in topics {
        records.extend(
            console_consume_isolated(bootstrap, topic, 1_000_000, quiet, "read_committed")
                .await
                .expect("kafka-console-consumer runs"),
        );
    }
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_kill_nine_restarts_and_a_broker_restart_deliver_each_event_exactly_once() {
    let started = Instant::now();
    let (db, mut broker) = start_shop_database_and_private_broker().await;
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup.topic_partitions = 3;
    let mut relay = Relay::prepare(&setup);
    make_exactly_once(&relay, "eos-soak");
    let writer = ShopWriter::connect(&db, "eos").await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer_task = tokio::spawn(stream_random_transactions(writer, Arc::clone(&stop), false));

    let mut lifetimes_ms = Vec::new();
    for kill in 0..30 {
        relay.start();
        let lifetime = 300 + rand::random::<u64>() % 1200;
        lifetimes_ms.push(lifetime);
        tokio::time::sleep(Duration::from_millis(lifetime)).await;
        relay.assert_running(&format!("before kill #{kill}"));
        relay.kill9();
        if kill == 15 {
            // The broker dies too (kill -9) and comes back with its data: open
            // transactions of the killed relay are aborted by the next producer's init.
            broker.kill();
            tokio::time::sleep(Duration::from_millis(500)).await;
            broker
                .restart()
                .await
                .expect("broker restarts with its data");
        }
    }
    relay.start();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::Relaxed);
    let writer = writer_task.await.expect("writer task");
    let topics = vec![topic_for(&db, "order"), topic_for(&db, "customer")];
    // Wait until read_committed shows every committed event (or give up after a minute).
    let deadline = Instant::now() + Duration::from_secs(90);
    let records = loop {
        let records = read_committed(&broker.bootstrap(), &topics, Duration::from_secs(5)).await;
        let (problems, _) = check_delivery(&writer.committed, &writer.must_not_arrive(), &records);
        if problems.is_empty() || Instant::now() > deadline {
            break records;
        }
        relay.assert_running("while catching up");
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    let summary = assert_writer_delivery("exactly-once, 30 x kill -9", &writer, &records, &relay);
    assert_eq!(
        summary.duplicates,
        0,
        "read_committed saw {} duplicates in exactly-once mode: {summary:?}\nrelay log tail:\n{}",
        summary.duplicates,
        relay.log_tail(40)
    );
    assert!(
        summary.distinct >= 100,
        "too few events to mean anything: {summary:?}"
    );
    relay.stop_gracefully("final graceful stop").await;
    eprintln!(
        "exactly-once soak: {} committed events ({} rolled back), {summary:?} over 30 kills \
         (lifetimes {lifetimes_ms:?} ms) and a broker restart, wall time {:?}",
        writer.committed.len(),
        writer.rolled_back.len(),
        started.elapsed()
    );
    writer.close().await;
}

/// Two relays with the same connector name: the second one's transactional producer fences
/// the first (a zombie, e.g. paused by SIGSTOP): when the first one wakes, none of what it
/// sends becomes visible to read_committed consumers, it stops publishing, and every event
/// still arrives exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_relay_is_fenced_by_its_successor_and_nothing_it_sends_becomes_visible() {
    let (db, broker) = start_shop_database_and_broker().await;
    let setup = RelaySetup::new(&db, &broker.bootstrap());
    let mut zombie = Relay::prepare(&setup);
    make_exactly_once(&zombie, "eos-zombie");
    let mut successor = Relay::prepare(&setup);
    make_exactly_once(&successor, "eos-zombie");
    // A replica id of its own: the server would otherwise cut the zombie's stream.
    successor.edit_config(&[("server_id = 4242", "server_id = 4243")]);
    let mut writer = ShopWriter::connect(&db, "zombie").await;
    for n in 0..20 {
        writer
            .transaction("order", &format!("order-{}", n % 4), 1, true, false)
            .await;
    }
    zombie.start();
    let topics = vec![topic_for(&db, "order")];
    let deadline = Instant::now() + Duration::from_secs(60);
    while read_committed(&broker.bootstrap(), &topics, Duration::from_secs(3))
        .await
        .len()
        < 20
    {
        assert!(
            Instant::now() < deadline,
            "the first relay never published:\n{}",
            zombie.log_tail(30)
        );
    }
    zombie.send_signal("STOP");
    // Written while the zombie sleeps: the successor must deliver them.
    for n in 20..40 {
        writer
            .transaction("order", &format!("order-{}", n % 4), 1, true, false)
            .await;
    }
    successor.start();
    let deadline = Instant::now() + Duration::from_secs(60);
    while read_committed(&broker.bootstrap(), &topics, Duration::from_secs(3))
        .await
        .len()
        < 40
    {
        assert!(
            Instant::now() < deadline,
            "the successor never published:\n{}",
            successor.log_tail(30)
        );
    }
    // The zombie wakes up with everything it had read still to send.
    for n in 40..50 {
        writer
            .transaction("order", &format!("order-{}", n % 4), 1, true, false)
            .await;
    }
    zombie.send_signal("CONT");
    let status = zombie.wait_for_exit(Duration::from_secs(60)).await;
    assert!(
        !status.success(),
        "the fenced relay must stop with an error"
    );
    assert!(
        zombie.log().contains("fenced"),
        "the zombie's log names the fencing:\n{}",
        zombie.log_tail(20)
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let records = loop {
        let records = read_committed(&broker.bootstrap(), &topics, Duration::from_secs(5)).await;
        if records.len() >= 50 || Instant::now() > deadline {
            break records;
        }
    };
    let summary = assert_writer_delivery("zombie fenced", &writer, &records, &successor);
    assert_eq!(summary.duplicates, 0, "{summary:?}");
    successor.stop_gracefully("final stop").await;
    writer.close().await;
}

/// A record the broker rejects for good (the topic's `max.message.bytes` is below it) in
/// exactly-once mode: each rejection aborts the Kafka transaction and the pipeline restarts
/// from the checkpoint; after `dead_letter.max_attempts` its dead letter is committed in its
/// place, and read_committed consumers see the events around it exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_record_is_dead_lettered_inside_the_transaction_that_passes_it() {
    let (db, broker) = start_shop_database_and_broker().await;
    broker
        .create_topic_with_config(
            &topic_for(&db, "order"),
            1,
            &[("max.message.bytes", "4096")],
        )
        .await
        .expect("topic with a small record limit");
    let mut relay = Relay::prepare(&RelaySetup::new(&db, &broker.bootstrap()));
    make_exactly_once(&relay, "eos-dead-letter");
    let mut conn = db.conn().await.expect("connect");
    let big_payload = format!("{{\"blob\":\"{}\"}}", "y".repeat(20_000));
    for (event_id, payload) in [
        ("small-1", "{\"n\":1}".to_string()),
        ("broker-rejects-2", big_payload),
        ("small-3", "{\"n\":3}".to_string()),
    ] {
        mysql_async::prelude::Queryable::exec_drop(
            &mut conn,
            "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES (?, 'order', 'order-1', 'order_created', ?)",
            (event_id, payload),
        )
        .await
        .unwrap();
    }
    conn.disconnect().await.unwrap();
    relay.start();
    let deadline = Instant::now() + Duration::from_secs(90);
    let letters = loop {
        let letters = read_committed(
            &broker.bootstrap(),
            &[dlq_topic(&db)],
            Duration::from_secs(3),
        )
        .await;
        if !letters.is_empty() || Instant::now() > deadline {
            break letters;
        }
        relay.assert_running("while dead-lettering");
    };
    let letter_ids: Vec<String> = letters.iter().filter_map(|r| r.header_str("id")).collect();
    assert_eq!(
        letter_ids,
        ["broker-rejects-2"],
        "one committed dead letter; relay log:\n{}",
        relay.log_tail(40)
    );
    assert_eq!(
        letters[0].header_str("dlq.error_class").as_deref(),
        Some("message_too_large")
    );
    let delivered = read_committed(
        &broker.bootstrap(),
        &[topic_for(&db, "order")],
        Duration::from_secs(5),
    )
    .await;
    let ids: Vec<String> = delivered
        .iter()
        .filter_map(|r| r.header_str("id"))
        .collect();
    assert_eq!(
        ids,
        ["small-1", "small-3"],
        "each once, although the aborted attempts sent small-1 too"
    );
    assert!(
        relay.log().matches("aborted").count() >= 3,
        "every rejection aborted a transaction:\n{}",
        relay.log_tail(40)
    );
    relay.stop_gracefully("after the dead letter").await;
}
