//! The outbox table as the proof, on the real MariaDB and Kafka (issue 28).
//!
//! `outbox-relay audit`: records deleted from a topic are found missing and `--fill`
//! publishes them again with the same id, key and payload (read back by Kafka's own console
//! consumer); a row updated after publish is reported as differing and a row deleted after
//! publish as a record without a row, and neither is refilled.
//!
//! `[source] on_purged = "fill_from_table"`: a purged binlog gap is published from the
//! table and the relay streams on.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use mysql_async::prelude::Queryable;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::{Offset, TopicPartitionList};

/// One run of `outbox-relay audit ARGS`: exit code, its JSON lines, stderr.
fn audit(
    config: &str,
    window: &(String, String),
    extra: &[&str],
) -> (i32, Vec<serde_json::Value>, String) {
    let mut args = vec![
        "audit",
        "--config",
        config,
        "--since",
        window.0.as_str(),
        "--until",
        window.1.as_str(),
    ];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = run_relay_command(&args);
    let lines = stdout
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|error| {
                panic!("not a JSON line ({error}): {line}\nstderr: {stderr}")
            })
        })
        .collect();
    (code, lines, stderr)
}

/// An audit window from 10 minutes ago to `ahead_minutes` from now, in the digits the rows'
/// DATETIME column is written in (the server's zone).
async fn window_around_now(conn: &mut mysql_async::Conn, ahead_minutes: u32) -> (String, String) {
    conn.exec_first(
        "SELECT DATE_FORMAT(NOW(6) - INTERVAL 10 MINUTE, '%Y-%m-%d %H:%i:%s'), \
                DATE_FORMAT(NOW(6) + INTERVAL ? MINUTE, '%Y-%m-%d %H:%i:%s')",
        (ahead_minutes,),
    )
    .await
    .expect("window")
    .expect("a row")
}

/// The `id`s of the findings of kind `kind`, in report order.
fn ids_of(lines: &[serde_json::Value], kind: &str) -> Vec<String> {
    lines
        .iter()
        .filter(|line| line["finding"] == kind)
        .map(|line| line["id"].as_str().expect("a finding's id").to_owned())
        .collect()
}

fn summary(lines: &[serde_json::Value]) -> &serde_json::Value {
    let last = lines.last().expect("a summary line");
    assert!(
        last.get("summary").is_some(),
        "the last line is the summary: {last}"
    );
    last
}

/// Deletes the records of `topic`'s partition 0 below `before` (Kafka's DeleteRecords).
async fn delete_records(bootstrap: &str, topic: &str, before: i64) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let mut offsets = TopicPartitionList::new();
    offsets
        .add_partition_offset(topic, 0, Offset::Offset(before))
        .expect("offset");
    let deleted = admin
        .delete_records(&offsets, &AdminOptions::new())
        .await
        .expect("DeleteRecords");
    for element in deleted.elements() {
        assert!(
            element.error().is_ok(),
            "DeleteRecords {topic}: {:?}",
            element.error()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_finds_missing_records_and_fill_repairs_them_but_not_rows_changed_after_publish() {
    let (db, broker) = start_shop_database_and_broker().await;
    let bootstrap = broker.bootstrap();
    let mut relay = Relay::prepare(&RelaySetup::new(&db, &bootstrap));
    let config = relay.config_path.to_str().expect("utf-8 path").to_string();
    let mut writer = ShopWriter::connect(&db, "audit").await;
    let mut conn = db.conn().await.expect("connect");
    let window = window_around_now(&mut conn, 10).await;

    relay.start();
    let orders = writer.transaction("order", "order-1", 3, true, false).await;
    let customers = writer
        .transaction("customer", "customer-1", 2, true, false)
        .await;
    writer.transaction("order", "order-2", 2, true, false).await;
    let end = writer.master_position().await;
    wait_for_checkpoint(&relay, &end, Duration::from_secs(60)).await;
    relay.stop_gracefully("every event published").await;
    let committed = writer.committed.clone();
    read_until_ids(
        &bootstrap,
        &topics_of(&committed),
        &committed,
        Duration::from_secs(30),
    )
    .await;

    // Nothing is missing yet.
    let (code, lines, stderr) = audit(&config, &window, &[]);
    assert_eq!(code, 0, "{lines:?}\n{stderr}");
    assert_eq!(summary(&lines)["summary"]["rows"], 7, "{lines:?}");
    assert_eq!(summary(&lines)["summary"]["missing"], 0, "{lines:?}");

    // Two records lost from the broker; one row changed and one deleted after publish.
    delete_records(&bootstrap, &topic_for(&db, "order"), 2).await;
    conn.exec_drop(
        "UPDATE shop.outbox SET payload = '{\"changed\": true}' WHERE event_id = ?",
        (&customers[0].id,),
    )
    .await
    .expect("update a published row");
    conn.exec_drop(
        "DELETE FROM shop.outbox WHERE event_id = ?",
        (&customers[1].id,),
    )
    .await
    .expect("delete a published row");

    let metrics_file = relay.dir.path().join("audit.prom");
    let metrics_path = metrics_file.to_str().expect("utf-8 path");
    let (code, lines, stderr) = audit(&config, &window, &["--metrics-file", metrics_path]);
    assert_eq!(code, 1, "missing rows fail the audit: {lines:?}\n{stderr}");
    // The same counts for a textfile collector, labelled with the connector.
    let samples =
        parse_metrics_text(&std::fs::read_to_string(&metrics_file).expect("metrics file"));
    let sample = |name: &str| {
        samples
            .iter()
            .find(|(sample, _)| {
                sample.starts_with(&format!("outbox_relay_audit_{name}{{connector="))
            })
            .map(|(_, value)| *value)
    };
    assert_eq!(sample("missing_events"), Some(2.0), "{samples:?}");
    assert_eq!(sample("rows"), Some(6.0), "{samples:?}");
    assert_eq!(sample("filled_events"), Some(0.0), "{samples:?}");
    assert_eq!(sample("differing_records"), Some(1.0), "{samples:?}");
    assert_eq!(sample("rowless_records"), Some(1.0), "{samples:?}");
    assert!(sample("last_success_timestamp_seconds").is_some_and(|at| at > 1.7e9));
    let lost = vec![orders[0].id.clone(), orders[1].id.clone()];
    assert_eq!(ids_of(&lines, "missing"), lost, "{lines:?}");
    assert_eq!(
        ids_of(&lines, "differs"),
        vec![customers[0].id.clone()],
        "{lines:?}"
    );
    let differs = lines
        .iter()
        .find(|line| line["finding"] == "differs")
        .expect("differs");
    assert_eq!(
        differs["parts"],
        serde_json::json!(["payload"]),
        "{differs}"
    );
    assert_eq!(
        ids_of(&lines, "no_row"),
        vec![customers[1].id.clone()],
        "{lines:?}"
    );
    let counts = &summary(&lines)["summary"];
    assert_eq!(counts["rows"], 6, "{counts}");
    assert_eq!(counts["missing"], 2, "{counts}");
    assert_eq!(counts["differs"], 1, "{counts}");
    assert_eq!(counts["no_row"], 1, "{counts}");

    // --fill publishes exactly the missing rows and waits for their acks.
    let (code, lines, stderr) = audit(&config, &window, &["--fill"]);
    assert_eq!(code, 0, "{lines:?}\n{stderr}");
    assert_eq!(ids_of(&lines, "missing"), lost, "{lines:?}");
    assert_eq!(summary(&lines)["filled"], 2, "{lines:?}");

    // The refilled records, read by Kafka's own console consumer: same id, key and payload.
    let records = read_until_ids(
        &bootstrap,
        &[topic_for(&db, "order")],
        &orders[..2],
        Duration::from_secs(30),
    )
    .await;
    let records = assert_console_consumer_agrees(&bootstrap, &records).await;
    for event in &orders[..2] {
        let copies: Vec<_> = records
            .iter()
            .filter(|record| record.header_str("id").as_deref() == Some(event.id.as_str()))
            .collect();
        assert_eq!(copies.len(), 1, "{}: {copies:?}", event.id);
        assert_eq!(
            copies[0].key.as_deref(),
            Some(event.aggregate_id.as_bytes())
        );
        assert_eq!(copies[0].value.as_deref(), Some(event.payload.as_bytes()));
    }

    // A second audit finds nothing missing; the changed and deleted rows are still reported,
    // never refilled.
    let (code, lines, stderr) = audit(&config, &window, &["--fill"]);
    assert_eq!(code, 0, "{lines:?}\n{stderr}");
    assert!(ids_of(&lines, "missing").is_empty(), "{lines:?}");
    assert_eq!(summary(&lines)["filled"], 0, "{lines:?}");
    assert_eq!(ids_of(&lines, "differs"), vec![customers[0].id.clone()]);
    assert_eq!(ids_of(&lines, "no_row"), vec![customers[1].id.clone()]);
    let seen: BTreeSet<String> = read_until_quiet(
        &bootstrap,
        &topics_of(&committed),
        Duration::from_millis(800),
        Duration::from_secs(20),
    )
    .await
    .iter()
    .filter_map(|record| record.header_str("id"))
    .collect();
    assert!(
        seen.len() == committed.len(),
        "every committed id is in Kafka: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_refuses_a_table_without_its_timestamp_column_or_its_index() {
    let (db, broker) = start_shop_database_and_broker().await;
    let mut relay = Relay::prepare(&RelaySetup::new(&db, &broker.bootstrap()));
    relay.edit_config(&[(
        "preset = \"seeds\"",
        "preset = \"seeds\"\ncolumns = { timestamp = \"written_at\" }",
    )]);
    let config = relay.config_path.to_str().expect("utf-8 path").to_string();
    let (code, stdout, stderr) = run_relay_command(&["audit", "--config", &config]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("`written_at`") && stderr.contains("columns.timestamp"),
        "{stderr}"
    );
    // A timestamp column without an index: every page would scan the table.
    relay.edit_config(&[("timestamp = \"written_at\"", "timestamp = \"created_at\"")]);
    db.exec(&["ALTER TABLE shop.outbox DROP KEY outbox_created_at_idx"])
        .await
        .expect("drop the index");
    let (code, stdout, stderr) = run_relay_command(&["audit", "--config", &config]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(
        stderr
            .contains("ALTER TABLE `shop`.`outbox` ADD KEY `outbox_created_at_idx` (`created_at`)"),
        "{stderr}"
    );
    // A relay that would fill a purged gap from this table learns it at start, not at the
    // purge: `check` fails its gap fill line and `run` refuses.
    relay.edit_config(&[(
        "server_id = 4242",
        "server_id = 4242\non_purged = \"fill_from_table\"",
    )]);
    let (code, stdout, stderr) = run_relay_command(&["check", "--config", &config]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    let gap_line = stdout
        .lines()
        .find(|line| line.contains("gap fill"))
        .unwrap_or_else(|| panic!("no gap fill line:\n{stdout}"));
    assert!(
        gap_line.starts_with("FAIL") && gap_line.contains("ADD KEY `outbox_created_at_idx`"),
        "{gap_line}"
    );
    let refused = run_is_refused(
        &mut relay,
        &["could not fill from the outbox tables", "ADD KEY"],
    )
    .await;
    assert!(refused.contains("shop"), "{refused}");
}

/// The binlog behind a stopped relay is purged; with `on_purged = "fill_from_table"` the
/// relay publishes the outbox rows written since its checkpoint from the table, then
/// streams on: every committed event arrives (read by Kafka's console consumer too). Twice:
/// first with nothing older than the fill's window left in the table (the fill cannot
/// prove that no row was deleted: said and counted), then with an old row as the proof.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purged_gap_is_filled_from_the_outbox_table_and_the_relay_streams_on() {
    let (db, broker) = start_shop_database_and_broker().await;
    let bootstrap = broker.bootstrap();
    let mut setup = RelaySetup::new(&db, &bootstrap);
    let metrics = free_loopback_address();
    setup.metrics_listen = Some(metrics.clone());
    let mut relay = Relay::prepare(&setup);
    relay.edit_config(&[(
        "server_id = 4242",
        "server_id = 4242\non_purged = \"fill_from_table\"",
    )]);
    let mut writer = ShopWriter::connect(&db, "gapfill").await;
    relay.start();

    for round in ["unproven", "proven"] {
        if round == "proven" {
            // A row older than the window (checkpoint time less fill_margin_s, 1800 s):
            // what the writer's cleanup keeps when its margin is the longer one.
            let mut conn = db.conn().await.expect("connect");
            conn.query_drop(
                "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload, created_at) \
                 VALUES ('gapfill-old', 'archive', 'old-1', 'Old', '{}', NOW(6) - INTERVAL 2 HOUR)",
            )
            .await
            .expect("an old row");
        }
        writer.transaction("order", "order-1", 2, true, false).await;
        let end = writer.master_position().await;
        wait_for_checkpoint(&relay, &end, Duration::from_secs(60)).await;
        relay.stop_gracefully("before the gap").await;
        let stored = relay.checkpoint().position.expect("a stored checkpoint");

        // The gap: written while the relay is stopped, then purged from the server.
        let gap_start = writer.committed.len();
        writer.transaction("order", "order-2", 2, true, false).await;
        writer
            .transaction("customer", "customer-1", 1, true, false)
            .await;
        writer
            .transaction("order", "order-2", 1, false, false)
            .await;
        purge_binlogs_until_gone(&db, &stored.file).await;
        let gap: Vec<Event> = writer.committed[gap_start..].to_vec();

        relay.start();
        // After the fill, the stream: a transaction the binlog carries.
        let after_gap = writer
            .transaction("customer", "customer-2", 2, true, false)
            .await;
        let end = writer.master_position().await;
        wait_for_checkpoint(&relay, &end, Duration::from_secs(60)).await;
        relay.assert_running(round);
        let scraped = scrape_metrics(&metrics).await.expect("scrape /metrics");
        let filled = scraped.get("outbox_relay_gap_filled_total").copied();
        let unrecoverable = scraped.get("outbox_relay_gap_unrecoverable_total").copied();
        // Every row written since the checkpoint's time less the margin: this test's rows
        // so far (all written within seconds), less the rolled-back one.
        assert!(
            filled.is_some_and(|rows| rows >= gap.len() as f64),
            "{round}: gap_filled_total {filled:?} for a gap of {}\n{}",
            gap.len(),
            relay.log_tail(20)
        );
        let expected_unrecoverable = if round == "unproven" { 1.0 } else { 0.0 };
        assert_eq!(
            unrecoverable,
            Some(expected_unrecoverable),
            "{round}\n{}",
            relay.log_tail(20)
        );
        // The log spans both runs: said once, in the first.
        assert_eq!(
            log_count(&relay, "may have lost events"),
            1,
            "{round}\n{}",
            relay.log_tail(20)
        );
        let mut expected = gap.clone();
        expected.extend(after_gap);
        let records = read_until_ids_then_settled(
            &bootstrap,
            &topics_of(&writer.committed),
            &expected,
            Duration::from_secs(30),
        )
        .await;
        let records = assert_console_consumer_agrees(&bootstrap, &records).await;
        assert_writer_delivery(round, &writer, &records, &relay);
    }
    relay.stop_gracefully("done").await;
}

/// An audit of a million rows (and their million records) stays under 256 MiB: it keeps
/// hashes per row, reads rows in pages and records in batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_of_a_million_rows_stays_under_256_mib() {
    const ROWS: u64 = 1_000_000;
    const MIB: u64 = 1024 * 1024;
    let (db, broker) = start_shop_database_and_broker().await;
    let bootstrap = broker.bootstrap();
    let mut relay = Relay::prepare(&RelaySetup::new(&db, &bootstrap));
    let config = relay.config_path.to_str().expect("utf-8 path").to_string();
    let mut conn = db.conn().await.expect("connect");
    let window = window_around_now(&mut conn, 60).await;
    // Ten transactions of 100 000 rows, on 1 000 aggregates of one type.
    for chunk in 0..10 {
        conn.query_drop(format!(
            "INSERT INTO shop.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
             SELECT CONCAT('million-', LPAD(seq, 7, '0')), 'order', CONCAT('order-', seq % 1000), \
                    'OrderCreated', CONCAT('{{\"n\": ', seq, ', \"note\": \"a row of the million\"}}') \
             FROM shop.seq_{}_to_{}",
            chunk * 100_000 + 1,
            (chunk + 1) * 100_000
        ))
        .await
        .expect("insert 100 000 rows");
    }
    let end = master_position(&mut conn).await;
    relay.start();
    wait_for_checkpoint(&relay, &end, Duration::from_secs(600)).await;
    relay.stop_gracefully("the million published").await;

    let mut child = std::process::Command::new(RELAY_BIN)
        .args([
            "audit",
            "--config",
            config.as_str(),
            "--since",
            window.0.as_str(),
            "--until",
            window.1.as_str(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run outbox-relay audit");
    let pid = child.id();
    let mut peak = 0;
    let started = Instant::now();
    while child.try_wait().expect("audit status").is_none() {
        if let Some(now) = try_peak_rss(pid) {
            peak = peak.max(now);
        }
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "the audit takes too long"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let output = child.wait_with_output().expect("audit output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(stdout.lines().last().expect("a summary line")).expect("JSON");
    assert_eq!(summary["summary"]["rows"], ROWS, "{summary}");
    assert_eq!(summary["summary"]["missing"], 0, "{summary}");
    assert!(
        summary["summary"]["records_read"]
            .as_u64()
            .is_some_and(|read| read >= ROWS),
        "{summary}"
    );
    eprintln!(
        "audit of {ROWS} rows: peak RSS {} MiB, {:.1} s",
        peak / MIB,
        started.elapsed().as_secs_f64()
    );
    assert!(peak > 0, "the audit's memory was sampled");
    assert!(peak < 256 * MIB, "audit peak RSS {} MiB", peak / MIB);
}
