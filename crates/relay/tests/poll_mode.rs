//! Poll mode (`[source] mode = "poll"`, issue 27) on the real MariaDB and Kafka: the outbox
//! table is the source; rows are claimed, published and marked SENT by the relay binary.

mod common;

use std::time::{Duration, Instant};

use common::*;
use mysql_async::prelude::Queryable;
use outbox_poll::{poll_mode_ddl, PollColumns};
use outbox_testkit::consume::{read_all, ReadStop};
use outbox_testkit::kafka::KafkaBroker;
use outbox_testkit::ScratchMariadb;
use outbox_writer::{ColumnPreset, OutboxTable};

/// Adds the poll-mode columns to `shop.outbox`.
async fn add_poll_columns(db: &ScratchMariadb) {
    let table = OutboxTable::new("outbox", ColumnPreset::Seeds)
        .and_then(|table| table.in_database("shop"))
        .expect("table");
    let statements = poll_mode_ddl(&table, &PollColumns::default());
    let statements: Vec<&str> = statements.iter().map(String::as_str).collect();
    db.exec(&statements)
        .await
        .expect("the poll-mode DDL applies");
}

/// A scratch database with the poll-mode `shop.outbox`, the shared broker, and a poll-mode
/// relay setup with `lines` in `[source.poll]`.
async fn poll_world(lines: &[&str]) -> (ScratchMariadb, &'static KafkaBroker, RelaySetup) {
    let (db, broker) = start_shop_database_and_broker().await;
    add_poll_columns(&db).await;
    let setup = poll_setup(&db, &broker.bootstrap(), lines);
    (db, broker, setup)
}

/// A relay setup in poll mode with `lines` in `[source.poll]`.
fn poll_setup(db: &ScratchMariadb, brokers: &str, lines: &[&str]) -> RelaySetup {
    let mut setup = RelaySetup::new(db, brokers);
    setup.poll = Some(lines.iter().map(|line| line.to_string()).collect());
    setup
}

/// `(status, count)` of the outbox rows.
async fn statuses(conn: &mut mysql_async::Conn) -> Vec<(String, u64)> {
    conn.query("SELECT poll_status, COUNT(*) FROM shop.outbox GROUP BY poll_status ORDER BY 1")
        .await
        .expect("count statuses")
}

/// Waits until every outbox row is SENT; panics with the counts and the log after `limit`.
async fn wait_all_sent(
    conn: &mut mysql_async::Conn,
    relay: &Relay,
    expected: usize,
    limit: Duration,
) {
    let started = Instant::now();
    loop {
        let counts = statuses(conn).await;
        if counts == [("SENT".to_owned(), expected as u64)] {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "not every row SENT after {limit:?}: {counts:?}\n{}",
            relay.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Contract test 1: the business row and the outbox row commit or roll back together; a
/// rolled-back outbox row is never published; every committed one is, once marked SENT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_rows_are_published_and_marked_sent_rolled_back_ones_never() {
    let (db, broker, mut setup) = poll_world(&["interval_ms = 50", "lease_ms = 5000"]).await;
    let listen = free_loopback_address();
    setup.metrics_listen = Some(listen.clone());
    let mut relay = Relay::prepare(&setup);
    relay.start();
    let mut writer = ShopWriter::connect(&db, "poll").await;
    for index in 0..40 {
        writer
            .alternating_transaction(
                index,
                1 + (index % 3) as usize,
                index % 5 != 4,
                index % 7 == 0,
            )
            .await;
    }
    let topics = vec![topic_for(&db, "order"), topic_for(&db, "customer")];
    let records = read_until_ids_then_settled(
        &broker.bootstrap(),
        &topics,
        &writer.committed,
        Duration::from_secs(60),
    )
    .await;
    let summary = assert_writer_delivery("poll mode", &writer, &records, &relay);
    assert_eq!(summary.duplicates, 0, "no relay died: no duplicate");
    let console = assert_console_consumer_agrees(&broker.bootstrap(), &records).await;
    assert_writer_delivery(
        "poll mode (kafka-console-consumer)",
        &writer,
        &console,
        &relay,
    );

    let mut conn = db.conn().await.expect("connect");
    // Rolled-back rows are not in the table at all; every committed one ends SENT.
    wait_all_sent(
        &mut conn,
        &relay,
        writer.committed.len(),
        Duration::from_secs(20),
    )
    .await;
    let never_sent: u64 = conn
        .query_first("SELECT COUNT(*) FROM shop.outbox WHERE poll_sent_at IS NULL OR poll_claim_token = '' OR poll_attempts <> 1")
        .await
        .expect("count")
        .expect("a row");
    assert_eq!(
        never_sent, 0,
        "every row SENT on its first attempt under a claim token"
    );

    // The poll metrics count what the table shows, and the relay is ready.
    let committed = writer.committed.len() as f64;
    let table = "table=\"shop.outbox\"";
    let sent_series = format!("outbox_poll_rows_settled_total{{outcome=\"sent\",{table}}}");
    let started = Instant::now();
    let metrics = loop {
        let metrics = scrape_metrics(&listen).await.expect("scrape");
        if metrics.get(&sent_series) == Some(&committed)
            || started.elapsed() > Duration::from_secs(20)
        {
            break metrics;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let value = |series: &str| metrics.get(series).copied();
    assert_eq!(
        value(&format!("outbox_poll_claimed_rows_total{{{table}}}")),
        Some(committed)
    );
    assert_eq!(value(&sent_series), Some(committed));
    assert_eq!(value("outbox_poll_attempts_count"), Some(committed));
    assert_eq!(
        value("outbox_poll_attempts_bucket{le=\"1\"}"),
        Some(committed),
        "one attempt each"
    );
    let (code, body) = get_readyz(&listen).await.expect("readyz");
    assert_eq!(code, 200, "{body}");

    // `status` shows the table's backlog; the checkpoint commands refuse: there is none.
    let config = relay.config_path.to_string_lossy().into_owned();
    let (code, stdout, stderr) = run_relay_command(&["status", "--json", "--config", &config]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let status: serde_json::Value = serde_json::from_str(stdout.trim()).expect("status JSON");
    let table = &status["poll"]["tables"]["shop.outbox"];
    assert_eq!(
        (table["pending"].as_u64(), table["dead"].as_u64()),
        (Some(0), Some(0)),
        "{status}"
    );
    assert_eq!(
        status["relay"]["ready"],
        serde_json::Value::Bool(true),
        "{status}"
    );
    let (code, _, stderr) = run_relay_command(&["checkpoint", "show", "--config", &config]);
    assert!(
        code != 0 && stderr.contains("stores no checkpoint"),
        "{stderr}"
    );
    relay.stop_gracefully("end of test").await;
}

/// The highest `poll_attempts` among rows in `status`, and how many rows are DEAD.
async fn attempts_and_dead(conn: &mut mysql_async::Conn) -> (u64, u64) {
    conn.query_first(
        "SELECT COALESCE(MAX(IF(poll_status = 'PENDING', poll_attempts, 0)), 0), \
         COALESCE(SUM(poll_status = 'DEAD'), 0) FROM shop.outbox",
    )
    .await
    .expect("query")
    .expect("a row")
}

/// Contract test 4: the broker is down for 30 s. Rows the sink cannot deliver go back to
/// PENDING with a backoff (attempts counted, the reason kept), none is DEAD before
/// `max_attempts`, and every one is delivered and SENT once the broker is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_down_30_s_puts_rows_back_to_pending_and_delivers_them_after() {
    let (db, mut broker) = start_shop_database_and_private_broker().await;
    add_poll_columns(&db).await;
    let mut setup = poll_setup(
        &db,
        &broker.bootstrap(),
        &[
            "interval_ms = 50",
            "lease_ms = 5000",
            "max_attempts = 100",
            "retry_initial_backoff_ms = 500",
            "retry_max_backoff_ms = 2000",
        ],
    );
    setup.kafka_extra = vec!["stall_timeout_ms = 3000".into()];
    let mut relay = Relay::prepare(&setup);
    relay.start();
    let mut writer = ShopWriter::connect(&db, "outage").await;
    for index in 0..10 {
        writer.alternating_transaction(index, 1, true, false).await;
    }
    let mut conn = db.conn().await.expect("connect");
    wait_all_sent(
        &mut conn,
        &relay,
        writer.committed.len(),
        Duration::from_secs(30),
    )
    .await;

    broker.stop().expect("the broker stops");
    let down_since = Instant::now();
    for index in 10..30 {
        writer.alternating_transaction(index, 1, true, false).await;
    }
    let mut most_attempts = 0;
    while down_since.elapsed() < Duration::from_secs(30) {
        let (attempts, dead) = attempts_and_dead(&mut conn).await;
        assert_eq!(
            dead,
            0,
            "no row may die before max_attempts\n{}",
            relay.log_tail(30)
        );
        most_attempts = most_attempts.max(attempts);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        most_attempts >= 2,
        "rows went back to PENDING and were claimed again (attempts seen: {most_attempts})\n{}",
        relay.log_tail(40)
    );
    let reason: Option<String> = conn
        .query_first(
            "SELECT poll_last_error FROM shop.outbox WHERE poll_last_error IS NOT NULL LIMIT 1",
        )
        .await
        .expect("query");
    assert!(
        reason
            .as_deref()
            .is_some_and(|reason| reason.contains("no ack")),
        "the reason is kept: {reason:?}"
    );
    relay.assert_running("through the outage");

    broker.restart().await.expect("the broker restarts");
    wait_all_sent(
        &mut conn,
        &relay,
        writer.committed.len(),
        Duration::from_secs(60),
    )
    .await;
    let topics = vec![topic_for(&db, "order"), topic_for(&db, "customer")];
    let records = read_until_ids_then_settled(
        &broker.bootstrap(),
        &topics,
        &writer.committed,
        Duration::from_secs(30),
    )
    .await;
    assert_writer_delivery("broker down 30 s", &writer, &records, &relay);
    assert_eq!(attempts_and_dead(&mut conn).await.1, 0);
    relay.stop_gracefully("end of test").await;
}

/// `(status, last error)` of the row with `id`.
async fn row_state(conn: &mut mysql_async::Conn, id: &str) -> (String, Option<String>) {
    conn.exec_first(
        "SELECT poll_status, poll_last_error FROM shop.outbox WHERE event_id = ?",
        (id,),
    )
    .await
    .expect("query")
    .expect("the row exists")
}

/// Contract test 5: a poison row (the broker rejects it for good) is DEAD with its reason
/// and in the dead-letter topic; the rows after it in its aggregate flow; after the fix,
/// `poll replay --id` delivers it once more with the same id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_row_dies_into_the_dlq_and_replays_with_its_id_after_the_fix() {
    let (db, broker) = start_shop_database_and_broker().await;
    add_poll_columns(&db).await;
    broker
        .create_topic_with_config(
            &topic_for(&db, "order"),
            1,
            &[("max.message.bytes", "4096")],
        )
        .await
        .expect("topic with a small record limit");
    let setup = poll_setup(&db, &broker.bootstrap(), &["interval_ms = 50"]);
    let mut relay = Relay::prepare(&setup);
    let mut conn = db.conn().await.expect("connect");
    let big = format!("{{\"blob\":\"{}\"}}", "y".repeat(20_000));
    for (id, payload) in [
        ("small-1", "{\"n\":1}".to_owned()),
        ("poison-2", big),
        ("small-3", "{\"n\":3}".to_owned()),
    ] {
        conn.exec_drop(
            "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES (?, 'order', 'order-1', 'created', ?)",
            (id, payload),
        )
        .await
        .expect("insert");
    }
    relay.start();
    let letters = read_all(
        &broker.bootstrap(),
        &[&dlq_topic(&db)],
        ReadStop::Count(1),
        Duration::from_secs(60),
    )
    .await
    .expect("read the dead-letter topic");
    assert_eq!(
        letters[0].header_str("id").as_deref(),
        Some("poison-2"),
        "{}",
        relay.log_tail(30)
    );
    let topic = topic_for(&db, "order");
    let delivered = read_all(
        &broker.bootstrap(),
        &[&topic],
        ReadStop::Count(2),
        Duration::from_secs(30),
    )
    .await
    .expect("read");
    let ids: Vec<String> = delivered
        .iter()
        .filter_map(|r| r.header_str("id"))
        .collect();
    assert_eq!(
        ids,
        ["small-1", "small-3"],
        "a DEAD row does not block its aggregate"
    );
    let started = Instant::now();
    let (status, reason) = loop {
        let state = row_state(&mut conn, "poison-2").await;
        if state.0 == "DEAD" || started.elapsed() > Duration::from_secs(20) {
            break state;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status, "DEAD");
    assert!(
        reason
            .as_deref()
            .is_some_and(|reason| reason.to_lowercase().contains("too large")),
        "the broker's reason is kept: {reason:?}"
    );
    let config = relay.config_path.to_string_lossy().into_owned();
    let (code, stdout, stderr) = run_relay_command(&["poll", "status", "--config", &config]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("\"dead\":1"), "{stdout}");

    // The fix: the payload is cut to what the topic takes. Replay keeps the id.
    conn.query_drop(
        "UPDATE shop.outbox SET payload = '{\"blob\":\"trimmed\"}' WHERE event_id = 'poison-2'",
    )
    .await
    .expect("fix the row");
    let (code, stdout, stderr) =
        run_relay_command(&["poll", "replay", "--id", "poison-2", "--config", &config]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("\"replayed\":1"), "{stdout}");
    let delivered = read_all(
        &broker.bootstrap(),
        &[&topic],
        ReadStop::Count(3),
        Duration::from_secs(30),
    )
    .await
    .expect("read");
    let replayed = &delivered[2];
    assert_eq!(replayed.header_str("id").as_deref(), Some("poison-2"));
    assert_eq!(
        replayed.value.as_deref(),
        Some(&b"{\"blob\":\"trimmed\"}"[..])
    );
    let mut sent = String::new();
    for _ in 0..100 {
        sent = row_state(&mut conn, "poison-2").await.0;
        if sent == "SENT" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(sent, "SENT");
    let letters = read_all(
        &broker.bootstrap(),
        &[&dlq_topic(&db)],
        ReadStop::Count(2),
        Duration::from_secs(3),
    )
    .await
    .expect("read");
    assert_eq!(letters.len(), 1, "one dead letter: the replay delivered");
    relay.stop_gracefully("end of test").await;
}

/// Inserts `count` events of distinct aggregates in one transaction; returns their ids.
async fn insert_events(conn: &mut mysql_async::Conn, prefix: &str, count: usize) -> Vec<String> {
    let ids: Vec<String> = (0..count).map(|n| format!("{prefix}-{n}")).collect();
    let mut tx = conn
        .start_transaction(mysql_async::TxOpts::default())
        .await
        .expect("begin");
    for (n, id) in ids.iter().enumerate() {
        tx.exec_drop(
            "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES (?, 'order', ?, 'created', '{}')",
            (id, format!("{prefix}-order-{n}")),
        )
        .await
        .expect("insert");
    }
    tx.commit().await.expect("commit");
    ids
}

/// How many records carry each of `ids` on the order topic (read until every id came
/// `copies` times, or the limit).
async fn copies_of(broker: &str, db: &ScratchMariadb, ids: &[String], copies: usize) -> Vec<usize> {
    let wanted = ids.len() * copies;
    let records = read_all(
        broker,
        &[&topic_for(db, "order")],
        ReadStop::Count(wanted),
        Duration::from_secs(30),
    )
    .await
    .expect("read");
    ids.iter()
        .map(|id| {
            records
                .iter()
                .filter(|r| r.header_str("id").as_deref() == Some(id))
                .count()
        })
        .collect()
}

/// Waits until `relay`'s log contains `needle`.
async fn wait_for_log(relay: &Relay, needle: &str, limit: Duration) {
    let started = Instant::now();
    while !relay.log().contains(needle) {
        assert!(
            started.elapsed() < limit,
            "no `{needle}` in the log after {limit:?}:\n{}",
            relay.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Contract test 3: a relay killed after Kafka acked its records and before it marked the
/// rows: after the lease ends they are published again with the same ids (nothing lost),
/// then marked SENT on their second attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_killed_between_publish_and_mark_publishes_again_with_the_same_ids() {
    let (db, broker, setup) = poll_world(&["interval_ms = 50", "lease_ms = 2000"]).await;
    let mut relay = Relay::prepare(&setup);
    let mut conn = db.conn().await.expect("connect");
    let ids = insert_events(&mut conn, "crash", 5).await;
    relay.start_with_env(&[("OUTBOX_RELAY_CRASH_AT", "before-poll-mark")]);
    let status = relay.wait_for_exit(Duration::from_secs(30)).await;
    assert!(!status.success(), "the crash point aborts the relay");
    assert_eq!(
        copies_of(&broker.bootstrap(), &db, &ids, 1).await,
        vec![1; 5],
        "published before the crash"
    );
    assert_eq!(
        statuses(&mut conn).await,
        [("PROCESSING".to_owned(), 5)],
        "not marked"
    );

    relay.start();
    wait_all_sent(&mut conn, &relay, 5, Duration::from_secs(30)).await;
    assert_eq!(
        copies_of(&broker.bootstrap(), &db, &ids, 2).await,
        vec![2; 5],
        "published again, same ids"
    );
    let attempts: Vec<u32> = conn
        .query("SELECT poll_attempts FROM shop.outbox ORDER BY poll_seq")
        .await
        .expect("query");
    assert_eq!(attempts, vec![2; 5]);
    relay.stop_gracefully("end of test").await;
}

/// Contract test 2: a relay stalls (SIGSTOP) past its lease with a claim acked but not
/// marked; another relay reclaims the rows, publishes and marks them; the stalled relay's
/// mark is refused by the fencing token, and its publish was a duplicate with the same ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_relays_mark_is_fenced_after_another_relay_reclaimed_its_rows() {
    let (db, broker, setup) = poll_world(&["interval_ms = 50", "lease_ms = 2000"]).await;
    let mut stalled = Relay::prepare(&setup);
    let mut other = Relay::prepare(&setup);
    let mut conn = db.conn().await.expect("connect");
    let ids = insert_events(&mut conn, "fence", 3).await;
    stalled.start_with_env(&[("OUTBOX_RELAY_PAUSE_AT", "before-poll-mark:8000")]);
    wait_for_log(&stalled, "pause point reached", Duration::from_secs(30)).await;
    stalled.send_signal("STOP");
    other.start();
    wait_all_sent(&mut conn, &other, 3, Duration::from_secs(30)).await;
    stalled.send_signal("CONT");
    wait_for_log(
        &stalled,
        "reclaimed after its lease ended",
        Duration::from_secs(30),
    )
    .await;
    assert!(
        stalled.log().contains("fenced=3"),
        "{}",
        stalled.log_tail(20)
    );
    assert_eq!(
        copies_of(&broker.bootstrap(), &db, &ids, 2).await,
        vec![2; 3],
        "the stalled publish is a duplicate, same ids"
    );
    assert_eq!(statuses(&mut conn).await, [("SENT".to_owned(), 3)]);
    stalled.stop_gracefully("end of test").await;
    other.stop_gracefully("end of test").await;
}

/// Contract test 6: three relays poll the same table while a writer streams transactions
/// (some rolled back) and a random relay is killed (-9) and restarted, round after round
/// (`OUTBOX_RELAY_POLL_KILL_ROUNDS`, default 12). Then every committed row is SENT, none is
/// left PROCESSING once the leases ended, every id reached Kafka at least once, per-key
/// order held, and nothing rolled back arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_relays_under_kill_nine_loops_deliver_every_row_in_key_order() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let rounds: usize = std::env::var("OUTBOX_RELAY_POLL_KILL_ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(12);
    let (db, broker, mut setup) =
        poll_world(&["interval_ms = 20", "lease_ms = 2000", "batch_size = 50"]).await;
    setup.topic_partitions = 3;
    let mut relays: Vec<Relay> = (0..3).map(|_| Relay::prepare(&setup)).collect();
    for relay in &mut relays {
        relay.start();
    }
    let writer = ShopWriter::connect(&db, "three").await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer_task = tokio::spawn(stream_random_transactions(writer, Arc::clone(&stop), true));
    for round in 0..rounds {
        tokio::time::sleep(Duration::from_millis(200 + rand::random::<u64>() % 600)).await;
        let victim = rand::random::<usize>() % relays.len();
        relays[victim].assert_running(&format!("before kill round {round}"));
        relays[victim].kill9();
        tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 400)).await;
        relays[victim].start();
    }
    stop.store(true, Ordering::Relaxed);
    let writer = writer_task.await.expect("writer task");
    let mut conn = db.conn().await.expect("connect");
    wait_all_sent(
        &mut conn,
        &relays[0],
        writer.committed.len(),
        Duration::from_secs(60),
    )
    .await;
    let topics = vec![topic_for(&db, "order"), topic_for(&db, "customer")];
    let records = read_until_ids_then_settled(
        &broker.bootstrap(),
        &topics,
        &writer.committed,
        Duration::from_secs(60),
    )
    .await;
    let summary = assert_writer_delivery("3 relays, kill -9 loop", &writer, &records, &relays[0]);
    let console = assert_console_consumer_agrees(&broker.bootstrap(), &records).await;
    assert_writer_delivery(
        "3 relays, kill -9 loop (kafka-console-consumer)",
        &writer,
        &console,
        &relays[0],
    );
    eprintln!(
        "{rounds} kills: {} committed events, {} records, {} duplicates",
        writer.committed.len(),
        summary.records,
        summary.duplicates
    );
    assert!(
        writer.committed.len() > 100,
        "the writer kept writing: {}",
        writer.committed.len()
    );
    for relay in &mut relays {
        relay.stop_gracefully("end of test").await;
    }
}

/// `outbox-relay check --config FILE` in a test relay's directory: (passed, output).
fn check(relay: &Relay) -> (bool, String) {
    let (code, stdout, stderr) =
        run_relay_command(&["check", "--config", &relay.config_path.to_string_lossy()]);
    (code == 0, format!("{stdout}{stderr}"))
}

/// A table without the poll-mode columns, then a user without the UPDATE and DELETE grants:
/// `run` refuses to start and `check` fails, each naming the fix; with both fixed, `check`
/// passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_poll_columns_or_grants_are_refused_at_start_naming_the_fix() {
    let (db, broker) = start_shop_database_and_broker().await;
    let setup = poll_setup(&db, &broker.bootstrap(), &["interval_ms = 50"]);
    let mut relay = Relay::prepare(&setup);
    let (passed, output) = check(&relay);
    assert!(
        !passed && output.contains("FAIL poll source") && output.contains("outbox-relay poll ddl"),
        "{output}"
    );
    run_is_refused(
        &mut relay,
        &["shop.outbox", "poll-mode columns", "poll_status"],
    )
    .await;

    // The fix the message names: `poll ddl` prints the statements; they apply as printed
    // (columns and the claim's indexes: `check` passes below).
    let (code, ddl, stderr) = run_relay_command(&[
        "poll",
        "ddl",
        "--config",
        &relay.config_path.to_string_lossy(),
    ]);
    assert!(
        code == 0 && ddl.starts_with("ALTER TABLE `shop`.`outbox`"),
        "{ddl}{stderr}"
    );
    let statements: Vec<&str> = ddl.split(";\n").filter(|s| !s.trim().is_empty()).collect();
    db.exec(&statements).await.expect("the printed DDL applies");
    db.exec(&[
        "CREATE USER 'poller'@'%' IDENTIFIED BY 'poller-password'",
        "GRANT SELECT ON shop.outbox TO 'poller'@'%'",
    ])
    .await
    .expect("a user that may only read");
    let mut limited = setup.clone();
    limited.mysql_url = format!("mysql://poller:poller-password@127.0.0.1:{}", db.port());
    let mut relay = Relay::prepare(&limited);
    let (passed, output) = check(&relay);
    assert!(
        !passed && output.contains("GRANT SELECT, UPDATE, DELETE ON shop.outbox"),
        "{output}"
    );
    assert!(
        !output.contains("poller-password"),
        "the password is masked: {output}"
    );
    run_is_refused(&mut relay, &["GRANT SELECT, UPDATE, DELETE ON shop.outbox"]).await;

    db.exec(&["GRANT UPDATE, DELETE ON shop.outbox TO 'poller'@'%'"])
        .await
        .expect("grant");
    let (passed, output) = check(&relay);
    assert!(passed, "{output}");
    assert!(
        output.contains("ok   poll source") && output.contains("SKIP LOCKED"),
        "{output}"
    );
}

/// A stop while the database is gone, with a claim acked by Kafka but not marked: the
/// relay cannot write the mark; it exits within its shutdown timeout all the same, and the
/// rows, still PROCESSING, are published again (same ids) by the next relay once their lease
/// ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_while_the_database_is_gone_exits_within_the_shutdown_timeout() {
    let (mut db, broker, mut setup) = poll_world(&["interval_ms = 50", "lease_ms = 2000"]).await;
    setup.shutdown_timeout_ms = Some(3_000);
    let mut relay = Relay::prepare(&setup);
    let mut conn = db.conn().await.expect("connect");
    let ids = insert_events(&mut conn, "owed", 3).await;
    drop(conn);
    relay.start_with_env(&[("OUTBOX_RELAY_PAUSE_AT", "before-poll-mark:4000")]);
    wait_for_log(&relay, "pause point reached", Duration::from_secs(30)).await;
    db.stop();
    let stopping = Instant::now();
    relay.send_signal("TERM");
    let status = relay.wait_for_exit(Duration::from_secs(60)).await;
    let took = stopping.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "the relay took {took:?} to stop ({status}):\n{}",
        relay.log_tail(20)
    );
    assert!(
        relay.log().contains("claims not marked"),
        "{}",
        relay.log_tail(20)
    );
    db.restart().await.expect("the database comes back");
    let mut conn = db.conn().await.expect("connect");
    assert_eq!(statuses(&mut conn).await, [("PROCESSING".to_owned(), 3)]);
    relay.start();
    wait_all_sent(&mut conn, &relay, 3, Duration::from_secs(30)).await;
    assert_eq!(
        copies_of(&broker.bootstrap(), &db, &ids, 2).await,
        vec![2; 3],
        "published again, same ids"
    );
    relay.stop_gracefully("end of test").await;
}

/// A poll source that is not up at start is waited for under the startup rule
/// (`source.startup_attempts`, each retry logged), then refused naming the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_poll_source_is_retried_at_start_then_refused_naming_it() {
    let (db, broker) = start_shop_database_and_broker().await;
    let setup = poll_setup(&db, &broker.bootstrap(), &["interval_ms = 50"]);
    let mut relay = Relay::prepare(&setup);
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port");
    let config = std::fs::read_to_string(&relay.config_path).expect("the config");
    let port = format!("127.0.0.1:{}", db.port());
    assert!(
        config.contains(&port) && config.contains("[source]\n"),
        "{config}"
    );
    let config = config
        .replace(&port, &format!("127.0.0.1:{closed}"))
        .replacen(
            "[source]\n",
            "[source]\nstartup_attempts = 3\nreconnect_initial_backoff_ms = 100\n",
            1,
        );
    std::fs::write(&relay.config_path, config).expect("write the config");
    run_is_refused(
        &mut relay,
        &[
            &format!("cannot reach the source server mysql://root@127.0.0.1:{closed}"),
            "3 attempts",
        ],
    )
    .await;
    assert_eq!(
        log_count(&relay, "poll source: the server is not reachable yet"),
        2,
        "{}",
        relay.log()
    );
}

/// Big rows are claimed only as far as `pipeline.max_in_flight_bytes` reaches: behind a
/// frozen broker (nothing acked) sixteen 4 MiB rows with a 16 MiB budget leave at most three
/// claimed (each row's share is a little over 4 MiB), the rest PENDING; after the thaw every
/// row is delivered byte-exact and SENT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_rows_are_claimed_only_as_far_as_the_byte_budget_reaches() {
    const ROWS: usize = 16;
    const PAYLOAD_BYTES: usize = 4 * 1024 * 1024;
    let (db, mut broker) = start_shop_database_and_private_broker().await;
    add_poll_columns(&db).await;
    let mut setup = poll_setup(&db, &broker.bootstrap(), &["interval_ms = 50"]);
    setup.allow_big_records();
    let mut relay = Relay::prepare(&setup);
    relay.limit_in_flight_bytes(16777216);
    let mut conn = db.conn().await.expect("connect");
    let insert =
        "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
                  VALUES (?, 'order', ?, 'Big', ?)";
    conn.exec_drop(insert, ("small", "order-small", "{}"))
        .await
        .expect("insert");
    relay.start();
    wait_all_sent(&mut conn, &relay, 1, Duration::from_secs(60)).await;

    broker.freeze().expect("freeze the broker");
    let mut expected = Vec::new();
    for n in 0..ROWS {
        let payload = format!(
            "{{\"n\":{n},\"blob\":\"{}\"}}",
            char::from(b'a' + n as u8)
                .to_string()
                .repeat(PAYLOAD_BYTES - 20)
        );
        let id = format!("big-{n}");
        conn.exec_drop(insert, (&id, format!("order-{n}"), &payload))
            .await
            .expect("insert a 4 MiB payload");
        expected.push((id, payload));
    }
    // The relay claims what fits, then waits for acks that do not come.
    let mut counts = Vec::new();
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        counts = statuses(&mut conn).await;
    }
    let count = |status: &str| {
        counts
            .iter()
            .find(|(name, _)| name == status)
            .map_or(0, |(_, count)| *count)
    };
    assert!(
        (1..=3).contains(&count("PROCESSING")) && count("PENDING") >= 13,
        "claimed past the byte budget: {counts:?}\n{}",
        relay.log_tail(30)
    );
    relay.assert_running("while the broker is frozen");

    broker.thaw().expect("thaw the broker");
    wait_all_sent(&mut conn, &relay, ROWS + 1, Duration::from_secs(180)).await;
    let delivered = read_all(
        &broker.bootstrap(),
        &[&topic_for(&db, "order")],
        ReadStop::Count(ROWS + 1),
        Duration::from_secs(120),
    )
    .await
    .expect("read the big records");
    relay.stop_gracefully("end of test").await;
    for (id, payload) in &expected {
        let record = delivered
            .iter()
            .find(|record| record.header_str("id").as_deref() == Some(id.as_str()))
            .unwrap_or_else(|| panic!("{id} was not delivered"));
        assert!(
            record.value.as_deref() == Some(payload.as_bytes()),
            "{id} arrived changed"
        );
    }
}

/// `[ha]` in poll mode: of two relays sharing a connector only the leader claims (the
/// standby's claim counter stays absent or zero); after the leader is killed (-9) the
/// standby leads, reclaims what the dead leader held once its leases end, and every row
/// is SENT and in Kafka.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_ha_only_the_leader_polls_and_a_standby_takes_over_after_a_kill() {
    let (db, broker, setup) = poll_world(&["interval_ms = 50", "lease_ms = 3000"]).await;
    let tag = db.tag().to_string();
    let mut group: Vec<(Relay, String)> = (0..2)
        .map(|_| {
            let mut setup = setup.clone();
            let metrics = free_loopback_address();
            setup.metrics_listen = Some(metrics.clone());
            setup.shutdown_timeout_ms = Some(2000);
            let relay = Relay::prepare(&setup);
            relay.edit_config(&[(
                "[pipeline]",
                &format!(
                    "[checkpoint]\nconnector = \"{tag}\"\n\n[ha]\nenabled = true\n\
                     lease_topic = \"{tag}.lease\"\nsession_timeout_ms = 6000\n\n[pipeline]"
                ),
            )]);
            (relay, metrics)
        })
        .collect();
    for (relay, _) in &mut group {
        relay.start();
    }
    let leader = async |group: &[(Relay, String)], skip: Option<usize>| -> usize {
        let started = Instant::now();
        loop {
            let mut leaders = Vec::new();
            for (index, (_, metrics)) in group.iter().enumerate() {
                let leads = Some(index) != skip
                    && scrape_metrics(metrics)
                        .await
                        .ok()
                        .and_then(|samples| samples.get("outbox_relay_leader").copied())
                        == Some(1.0);
                if leads {
                    leaders.push(index);
                }
            }
            if leaders.len() == 1 {
                return leaders[0];
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "no single leader: {leaders:?}\n{}\n{}",
                group[0].0.log_tail(20),
                group[1].0.log_tail(20)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let first = leader(&group, None).await;
    let standby = 1 - first;
    let mut conn = db.conn().await.expect("connect");
    let insert =
        "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
                  VALUES (?, 'order', ?, 'Placed', '{}')";
    for n in 0..20 {
        conn.exec_drop(insert, (format!("ha-{n}"), format!("order-{}", n % 5)))
            .await
            .expect("insert");
    }
    wait_all_sent(&mut conn, &group[first].0, 20, Duration::from_secs(60)).await;
    let standby_claims = scrape_metrics(&group[standby].1)
        .await
        .expect("the standby's metrics")
        .iter()
        .filter(|(name, _)| name.starts_with("outbox_poll_claimed_rows_total"))
        .map(|(_, value)| *value)
        .sum::<f64>();
    assert_eq!(standby_claims, 0.0, "the standby claimed rows");

    group[first].0.kill9();
    for n in 20..40 {
        conn.exec_drop(insert, (format!("ha-{n}"), format!("order-{}", n % 5)))
            .await
            .expect("insert");
    }
    assert_eq!(leader(&group, Some(first)).await, standby);
    wait_all_sent(&mut conn, &group[standby].0, 40, Duration::from_secs(90)).await;
    let delivered = read_all(
        &broker.bootstrap(),
        &[&topic_for(&db, "order")],
        ReadStop::Count(40),
        Duration::from_secs(60),
    )
    .await
    .expect("read");
    let ids: std::collections::BTreeSet<String> = delivered
        .iter()
        .filter_map(|record| record.header_str("id"))
        .collect();
    for n in 0..40 {
        assert!(ids.contains(&format!("ha-{n}")), "ha-{n} was not delivered");
    }
    group[standby].0.stop_gracefully("end of test").await;
}
