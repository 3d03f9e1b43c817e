//! `[heartbeat]` against the reference: Debezium 3.6.1's MySQL connector (in a Kafka Connect
//! worker) and outbox-relay on the same MariaDB and Kafka broker, both with heartbeats on,
//! once per converter setup (StringConverter, JsonConverter without and with schemas). The
//! relay's heartbeat key bytes must be Debezium's exactly, its value the same bytes but for
//! the `ts_ms` number (a recent epoch-ms integer on both sides), both on partition 0 and
//! without headers. Debezium's side is read by Kafka's own console consumer.
//!
//! What Debezium does, seen here (and printed): one heartbeat when it starts streaming, then
//! at most one per `heartbeat.interval.ms` as binlog events arrive (while idle, the server's
//! replication heartbeat every ~48 s); no `__debezium.context.*` headers on heartbeats; its
//! default topic is `__debezium-heartbeat.<topic.prefix>`.
//!
//! [`a_heartbeat_topic_that_cannot_be_written_is_counted_and_never_stops_the_relay`]: a
//! heartbeat failure is logged and counted, the outbox records and the checkpoint go on,
//! and heartbeats resume once the topic exists.
//! [`under_ha_only_the_leader_sends_heartbeats`]: two relays with `[ha]`; the standby sends
//! none until the leader is killed and it takes over.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use mysql_async::prelude::Queryable;
use outbox_testkit::connect::{Converter, DebeziumConnect, DebeziumOptions};
use outbox_testkit::consume::{console_consume, read_all, ConsumedRecord, ReadStop};
use outbox_testkit::kafka::KafkaBroker;

/// Partitions of both sides' heartbeat topics: more than one, so "partition 0" is a choice
/// both make, not the only place a record can go.
const PARTITIONS: i32 = 3;

/// The heartbeat interval of both sides.
const INTERVAL_MS: u64 = 500;

/// One converter setup: Debezium's worker converters and the relay's formats for them.
struct Setup {
    /// For the log and the topic names.
    label: &'static str,
    /// Debezium's `key.converter` and `value.converter`.
    converter: Converter,
    /// The relay's `key_format` and `value_format`.
    format: &'static str,
}

const SETUPS: [Setup; 3] = [
    Setup {
        label: "string",
        converter: Converter::String,
        format: "raw",
    },
    Setup {
        label: "json",
        converter: Converter::Json { schemas: false },
        format: "json",
    },
    Setup {
        label: "json-schema",
        converter: Converter::Json { schemas: true },
        format: "json_with_schema",
    },
];

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}

/// The value with its one run of digits after `ts_ms` replaced by `N`, and that number.
fn value_shape(value: &[u8]) -> Option<(String, i64)> {
    let text = std::str::from_utf8(value).ok()?;
    let field = text.rfind("ts_ms")? + "ts_ms".len();
    let start = field + text[field..].find(|c: char| c.is_ascii_digit())?;
    let end = start
        + text[start..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len() - start);
    let number = text[start..end].parse().ok()?;
    Some((format!("{}N{}", &text[..start], &text[end..]), number))
}

fn describe(record: &ConsumedRecord) -> String {
    format!(
        "p{}@{} key={} value={} headers={:?}",
        record.partition,
        record.offset,
        String::from_utf8_lossy(record.key.as_deref().unwrap_or(b"<null>")),
        String::from_utf8_lossy(record.value.as_deref().unwrap_or(b"<null>")),
        record
            .headers
            .iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>()
    )
}

/// Appends `[heartbeat]` to a prepared relay's config; returns the whole config.
fn add_heartbeat_section(relay: &Relay, prefix: &str, topic: &str) -> String {
    let mut config = std::fs::read_to_string(&relay.config_path).expect("read config");
    config.push_str(&format!(
        "\n[heartbeat]\ninterval_ms = {INTERVAL_MS}\ntopic_prefix = \"{prefix}\"\ntopic = \"{topic}\"\n"
    ));
    std::fs::write(&relay.config_path, &config).expect("write config");
    config
}

/// The relay's `outbox_relay_heartbeats_total{outcome}` now (0 when not exported).
async fn heartbeats(address: &str, outcome: &str) -> f64 {
    scrape_metrics(address)
        .await
        .ok()
        .and_then(|samples| {
            samples
                .get(&format!(
                    "outbox_relay_heartbeats_total{{outcome=\"{outcome}\"}}"
                ))
                .copied()
        })
        .unwrap_or(0.0)
}

/// Polls the relay's heartbeat counter until it reaches `want` (or `limit` passed); returns
/// the last value.
async fn wait_for_heartbeats(address: &str, outcome: &str, want: f64, limit: Duration) -> f64 {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let value = heartbeats(address, outcome).await;
        if value >= want || std::time::Instant::now() > deadline {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Checks one side's heartbeats; returns the problems found.
fn check_side(
    side: &str,
    records: &[ConsumedRecord],
    expected_key: &[u8],
    started_ms: i64,
) -> (Vec<String>, Option<String>) {
    let mut problems = Vec::new();
    let mut shape = None;
    for record in records {
        if record.key.as_deref() != Some(expected_key) {
            problems.push(format!("{side}: key {}", describe(record)));
        }
        if record.partition != 0 {
            problems.push(format!("{side}: not on partition 0: {}", describe(record)));
        }
        if !record.headers.is_empty() {
            problems.push(format!("{side}: headers: {}", describe(record)));
        }
        match record.value.as_deref().and_then(value_shape) {
            Some((this_shape, ts_ms)) => {
                // Recent: after the test started (less a clock-granularity minute), not
                // in the future.
                if ts_ms < started_ms - 60_000 || ts_ms > now_ms() + 60_000 {
                    problems.push(format!("{side}: ts_ms {ts_ms} is not recent"));
                }
                match &shape {
                    None => shape = Some(this_shape),
                    Some(seen) if *seen != this_shape => {
                        problems.push(format!("{side}: two value shapes {seen} / {this_shape}"))
                    }
                    Some(_) => {}
                }
            }
            None => problems.push(format!("{side}: no ts_ms number: {}", describe(record))),
        }
    }
    (problems, shape)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_heartbeats_match_debeziums_for_each_converter() {
    let started_ms = now_ms();
    let (db, broker) = tokio::join!(start_database_for_debezium(), KafkaBroker::shared());
    let broker = broker.expect("the shared Kafka broker starts");
    let tag = db.tag().to_string();
    let mut failures = Vec::new();

    for (index, setup) in SETUPS.iter().enumerate() {
        // Debezium's topic.prefix (its connector name), which the relay is given too.
        let prefix = format!("{tag}-hb-{}", setup.label);
        let mut options = DebeziumOptions::outbox(&prefix, "shop.outbox_debezium");
        options.key_converter = setup.converter;
        options.value_converter = setup.converter;
        options.server_id = 54_321 + index as u32;
        options
            .extra
            .push(("heartbeat.interval.ms".into(), INTERVAL_MS.to_string()));
        options.extra.push((
            "topic.creation.default.partitions".into(),
            PARTITIONS.to_string(),
        ));
        let mut debezium = DebeziumConnect::start(&db, broker, options)
            .await
            .expect("Debezium streams");

        // The relay writes to its own topic (so both sides can be told apart), with the
        // same topic prefix; its default topic is checked against Debezium's below.
        let relay_topic = format!("{tag}.relay-heartbeat.{}", setup.label);
        let address = free_loopback_address();
        let mut relay_setup = RelaySetup::new(&db, &broker.bootstrap());
        relay_setup.topic_partitions = PARTITIONS;
        relay_setup.start = "latest".into();
        relay_setup.metrics_listen = Some(address.clone());
        relay_setup.route_extra = vec![
            format!("key_format = \"{}\"", setup.format),
            format!("value_format = \"{}\"", setup.format),
        ];
        let mut relay = Relay::prepare(&relay_setup);
        let config = add_heartbeat_section(&relay, &prefix, &relay_topic);
        relay.start();

        // Binlog events make Debezium beat (at most once per interval).
        let mut conn = db.conn().await.expect("connect");
        for row in 0..3 {
            conn.exec_drop(
                "INSERT INTO shop.outbox_debezium (id, aggregatetype, aggregateid, type, payload) \
                 VALUES (?, 'order', 'order-1', 'OrderCreated', '{}')",
                (format!("{}-{row}", setup.label),),
            )
            .await
            .expect("insert");
            tokio::time::sleep(Duration::from_millis(INTERVAL_MS * 2)).await;
        }
        conn.disconnect().await.expect("disconnect");

        let debezium_topic = format!("__debezium-heartbeat.{prefix}");
        let theirs = console_consume(
            &broker.bootstrap(),
            &debezium_topic,
            2,
            Duration::from_secs(60),
        )
        .await
        .expect("read Debezium's heartbeats");
        let ours = read_all(
            &broker.bootstrap(),
            &[relay_topic.as_str()],
            ReadStop::Count(3),
            Duration::from_secs(60),
        )
        .await
        .expect("read the relay's heartbeats");
        let samples = scrape_metrics(&address).await;
        relay.stop_gracefully("heartbeat test").await;
        debezium.stop();

        println!("== {}: Debezium ({debezium_topic})", setup.label);
        for record in &theirs {
            println!("  {}", describe(record));
        }
        println!("== {}: outbox-relay ({relay_topic})", setup.label);
        for record in &ours {
            println!("  {}", describe(record));
        }
        if theirs.len() < 2 || ours.len() < 3 {
            failures.push(format!(
                "{}: {} Debezium heartbeats, {} relay heartbeats (want 2 and 3); relay log:\n{}",
                setup.label,
                theirs.len(),
                ours.len(),
                relay.log_tail(30)
            ));
            continue;
        }
        // The key bytes are Debezium's, record for record.
        let Some(reference_key) = theirs[0].key.clone() else {
            failures.push(format!("{}: Debezium wrote a null key", setup.label));
            continue;
        };
        let (mut problems, their_shape) =
            check_side("debezium", &theirs, &reference_key, started_ms);
        let (our_problems, our_shape) = check_side("relay", &ours, &reference_key, started_ms);
        problems.extend(our_problems);
        if their_shape != our_shape {
            problems.push(format!(
                "value shapes differ: debezium {their_shape:?}, relay {our_shape:?}"
            ));
        }
        // The relay's default topic is Debezium's.
        let relay_config = outbox_relay::RelayConfig::parse(
            &config.replace(&format!("topic = \"{relay_topic}\"\n"), ""),
        )
        .expect("the config without heartbeat.topic loads");
        if relay_config
            .heartbeat
            .effective_topic(&relay_config.route)
            .as_deref()
            != Some(debezium_topic.as_str())
        {
            problems.push(format!(
                "the relay's default topic {:?} is not Debezium's {debezium_topic}",
                relay_config.heartbeat.effective_topic(&relay_config.route)
            ));
        }
        // Every heartbeat read was counted as sent.
        match samples {
            Ok(samples) => {
                let sent = samples
                    .get("outbox_relay_heartbeats_total{outcome=\"sent\"}")
                    .copied()
                    .unwrap_or(0.0);
                if sent < ours.len() as f64 {
                    problems.push(format!(
                        "outbox_relay_heartbeats_total{{outcome=\"sent\"}} = {sent}, but {} were read",
                        ours.len()
                    ));
                }
            }
            Err(error) => problems.push(format!("scraping /metrics: {error}")),
        }
        for problem in problems {
            failures.push(format!("{}: {problem}", setup.label));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The heartbeat topic is missing and the relay may not create it (`create_topics =
/// false`; the harness broker never auto-creates): each heartbeat fails after its delivery
/// timeout and is counted as `failed`, while the outbox records are delivered and the
/// checkpoint moves as before. Once the topic is created, heartbeats are sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_topic_that_cannot_be_written_is_counted_and_never_stops_the_relay() {
    let (db, broker) = start_shop_database_and_broker().await;
    broker
        .create_topic(&topic_for(&db, "order"), 1)
        .await
        .expect("create the outbox topic");
    let address = free_loopback_address();
    let mut setup = RelaySetup::new(&db, &broker.bootstrap());
    setup.create_topics = false;
    setup.metrics_listen = Some(address.clone());
    let mut relay = Relay::prepare(&setup);
    let heartbeat_topic = format!("{}.missing-heartbeat", db.tag());
    add_heartbeat_section(&relay, "shop", &heartbeat_topic);
    let mut writer = ShopWriter::connect(&db, "hbfail").await;
    relay.start();

    writer.transaction("order", "order-1", 2, true, false).await;
    let first = writer.master_position().await;
    wait_for_checkpoint(&relay, &first, Duration::from_secs(30)).await;
    let failed = wait_for_heartbeats(&address, "failed", 1.0, Duration::from_secs(60)).await;
    assert!(
        failed >= 1.0,
        "no failed heartbeat counted; relay log:\n{}",
        relay.log_tail(30)
    );
    assert_eq!(
        heartbeats(&address, "sent").await,
        0.0,
        "sent to a missing topic?"
    );
    assert!(
        log_count(&relay, "heartbeat not sent") >= 1,
        "the failure is not logged:\n{}",
        relay.log_tail(30)
    );

    // The relay goes on after the failures: more events, a later checkpoint.
    relay.assert_running("after failed heartbeats");
    writer.transaction("order", "order-2", 2, true, false).await;
    let second = writer.master_position().await;
    wait_for_checkpoint(&relay, &second, Duration::from_secs(30)).await;
    let records = read_until_ids(
        &broker.bootstrap(),
        &topics_of(&writer.committed),
        &writer.committed,
        Duration::from_secs(30),
    )
    .await;
    let seen: std::collections::BTreeSet<String> =
        records.iter().filter_map(|r| r.header_str("id")).collect();
    for event in &writer.committed {
        assert!(seen.contains(&event.id), "event {} not delivered", event.id);
    }

    // With the topic in place, heartbeats are sent again.
    broker
        .create_topic(&heartbeat_topic, 1)
        .await
        .expect("create the heartbeat topic");
    let sent = wait_for_heartbeats(&address, "sent", 1.0, Duration::from_secs(60)).await;
    assert!(
        sent >= 1.0,
        "no heartbeat sent after the topic was created; relay log:\n{}",
        relay.log_tail(30)
    );
    let delivered = read_all(
        &broker.bootstrap(),
        &[heartbeat_topic.as_str()],
        ReadStop::Count(1),
        Duration::from_secs(30),
    )
    .await
    .expect("read the heartbeats");
    assert!(
        delivered
            .iter()
            .all(|record| record.key.as_deref() == Some(b"Struct{serverName=shop}".as_slice())),
        "{delivered:?}"
    );
    assert!(!delivered.is_empty(), "no heartbeat on the topic");
    relay.stop_gracefully("heartbeat failure test").await;
    writer.close().await;
}

/// The leader of `relays` by `outbox_relay_leader` (exactly one answers 1), waiting up to
/// 60 s; `None` if there was never exactly one.
async fn single_leader(addresses: &[String], skip: Option<usize>) -> Option<usize> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        let mut leaders = Vec::new();
        for (index, address) in addresses.iter().enumerate() {
            if Some(index) == skip {
                continue;
            }
            let leads = scrape_metrics(address)
                .await
                .ok()
                .and_then(|samples| samples.get("outbox_relay_leader").copied());
            if leads == Some(1.0) {
                leaders.push(index);
            }
        }
        if leaders.len() == 1 {
            return Some(leaders[0]);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// `[ha]`: heartbeats start with a leadership term (`run_relay`), so the standby of two
/// relays sends none while the other leads, and starts when it takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_ha_only_the_leader_sends_heartbeats() {
    let (db, broker) = start_shop_database_and_broker().await;
    db.exec(&["CREATE DATABASE outbox_relay"])
        .await
        .expect("checkpoint database");
    let heartbeat_topic = format!("{}.ha-heartbeat", db.tag());
    let mut relays = Vec::new();
    let mut addresses = Vec::new();
    for _ in 0..2 {
        let mut setup = RelaySetup::new(&db, &broker.bootstrap());
        setup.mysql_checkpoint_url = Some(db.url());
        let address = free_loopback_address();
        setup.metrics_listen = Some(address.clone());
        setup.shutdown_timeout_ms = Some(2000);
        let relay = Relay::prepare(&setup);
        relay.edit_config(&[
            ("connector = \"test\"", &format!("connector = \"{}\"", db.tag())),
            (
                "[pipeline]",
                &format!(
                    "[ha]\nenabled = true\nlease_topic = \"{}.lease\"\nsession_timeout_ms = 6000\n\n[pipeline]",
                    db.tag()
                ),
            ),
        ]);
        add_heartbeat_section(&relay, "shop", &heartbeat_topic);
        relays.push(relay);
        addresses.push(address);
    }
    for relay in &mut relays {
        relay.start();
    }
    let logs = |relays: &[Relay]| {
        relays
            .iter()
            .map(|relay| relay.log_tail(25))
            .collect::<Vec<_>>()
            .join("\n-----\n")
    };
    let Some(leader) = single_leader(&addresses, None).await else {
        panic!("no single leader; logs:\n{}", logs(&relays));
    };
    let standby = 1 - leader;
    let sent = wait_for_heartbeats(&addresses[leader], "sent", 3.0, Duration::from_secs(60)).await;
    assert!(
        sent >= 3.0,
        "the leader sent {sent} heartbeats; logs:\n{}",
        logs(&relays)
    );
    assert_eq!(
        heartbeats(&addresses[standby], "sent").await,
        0.0,
        "the standby sent heartbeats; logs:\n{}",
        logs(&relays)
    );
    let before = read_all(
        &broker.bootstrap(),
        &[heartbeat_topic.as_str()],
        ReadStop::Quiet(Duration::from_secs(2)),
        Duration::from_secs(30),
    )
    .await
    .expect("read the heartbeats");
    assert!(
        before.len() >= 3,
        "{} heartbeats on the topic",
        before.len()
    );

    relays[leader].kill9();
    let Some(new_leader) = single_leader(&addresses, Some(leader)).await else {
        panic!("the standby did not take over; logs:\n{}", logs(&relays));
    };
    assert_eq!(new_leader, standby);
    let sent = wait_for_heartbeats(&addresses[standby], "sent", 1.0, Duration::from_secs(60)).await;
    assert!(
        sent >= 1.0,
        "the new leader sent no heartbeat; logs:\n{}",
        logs(&relays)
    );
    let after = read_all(
        &broker.bootstrap(),
        &[heartbeat_topic.as_str()],
        ReadStop::Count(before.len() + 1),
        Duration::from_secs(30),
    )
    .await
    .expect("read the heartbeats");
    assert!(
        after.len() > before.len(),
        "no heartbeat on the topic after the takeover ({} before, {} after)",
        before.len(),
        after.len()
    );
    relays[standby].stop_gracefully("ha heartbeat test").await;
}
